//! The raw-protocol limit: the bare round trips a lock needs, sent with the
//! same client crates the backends use. No waiting (a raw acquire that finds
//! the lock taken is an error: it is only run uncontended), no keep-alive, no
//! fencing counter (except in [`RawRedis`] with `fenced`, which shows what a
//! fencing counter alone costs).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use futures::future::join_all;
use redis::aio::MultiplexedConnection;
use zookeeper_client as zk;

use crate::subject::{BenchResult, Connector, Held, Locker};

/// Lease TTL of the raw protocols: long enough that no renewal is needed
/// during a run (the raw limit has no keep-alive).
pub const RAW_TTL: Duration = Duration::from_secs(30);

const COMPARE_AND_DELETE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

static TOKENS: AtomicU64 = AtomicU64::new(1);

fn token() -> String {
    format!(
        "raw-{}-{}",
        std::process::id(),
        TOKENS.fetch_add(1, Ordering::Relaxed)
    )
}

/// Redis on one node (`SET NX PX` + `EVALSHA` compare-and-delete) or on N nodes
/// in parallel with a majority (the Redlock round trips without retries).
pub struct RawRedis {
    /// Node URLs.
    pub urls: Vec<String>,
    /// Also count a fencing token in the same atomic step as the `SET NX PX`
    /// (`MULTI`, `SET NX PX`, `INCR {name} fencing`, `EXEC`): the least any
    /// fenced lock adds to the bare protocol, with no queue of waiters, no
    /// floor under the counter and no wake-up on release. The compare-and-
    /// delete is unchanged.
    pub fenced: bool,
}

#[async_trait]
impl Connector for RawRedis {
    async fn connect(&self) -> BenchResult<Arc<dyn Locker>> {
        let mut conns = Vec::new();
        for url in &self.urls {
            let client =
                redis::Client::open(url.as_str()).map_err(|e| format!("redis {url}: {e}"))?;
            let conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| format!("redis {url}: {e}"))?;
            conns.push(conn);
        }
        Ok(Arc::new(RawRedisClient {
            conns,
            script: Arc::new(lock_redis::kit::call::Lua::new(COMPARE_AND_DELETE)),
            fenced: self.fenced,
        }))
    }
}

struct RawRedisClient {
    conns: Vec<MultiplexedConnection>,
    script: Arc<lock_redis::kit::call::Lua>,
    fenced: bool,
}

async fn raw_set(
    mut conn: MultiplexedConnection,
    key: String,
    token: String,
    ttl_ms: u64,
    fenced: bool,
) -> redis::RedisResult<bool> {
    let mut set = redis::cmd("SET");
    set.arg(&key).arg(&token).arg("NX").arg("PX").arg(ttl_ms);
    if !fenced {
        let reply: Option<String> = set.query_async(&mut conn).await?;
        return Ok(reply.is_some());
    }
    let (reply, fence): (Option<String>, u64) = redis::pipe()
        .atomic()
        .add_command(set)
        .cmd("INCR")
        .arg(format!("{{{key}}} fencing"))
        .query_async(&mut conn)
        .await?;
    Ok(reply.is_some() && fence > 0)
}

async fn raw_del(
    mut conn: MultiplexedConnection,
    script: Arc<lock_redis::kit::call::Lua>,
    key: String,
    token: String,
) -> redis::RedisResult<i64> {
    // Written into the command as the backends write their scripts' calls.
    lock_redis::kit::call::ScriptCall::new(&script, &[&key])
        .arg(&token)
        .invoke_async(&mut conn)
        .await
}

#[async_trait]
impl Locker for RawRedisClient {
    async fn acquire(&self, name: &str, _wait: Duration) -> BenchResult<Option<Box<dyn Held>>> {
        let token = token();
        let ttl_ms = RAW_TTL.as_millis() as u64;
        let results = join_all(self.conns.iter().map(|c| {
            raw_set(
                c.clone(),
                name.to_string(),
                token.clone(),
                ttl_ms,
                self.fenced,
            )
        }))
        .await;
        let won = results.iter().filter(|r| matches!(r, Ok(true))).count();
        let held: Box<dyn Held> = Box::new(RawRedisHeld {
            conns: self.conns.clone(),
            script: self.script.clone(),
            key: name.to_string(),
            token,
        });
        if won > self.conns.len() / 2 {
            Ok(Some(held))
        } else {
            let errors: Vec<String> = results
                .into_iter()
                .filter_map(|r| r.err().map(|e| e.to_string()))
                .collect();
            // Give back whatever was won before reporting.
            held.release().await.ok();
            Err(format!(
                "raw SET NX on {name}: {won} of {} nodes granted (raw runs are uncontended){}",
                self.conns.len(),
                if errors.is_empty() {
                    String::new()
                } else {
                    format!("; errors: {}", errors.join("; "))
                }
            ))
        }
    }
}

struct RawRedisHeld {
    conns: Vec<MultiplexedConnection>,
    script: Arc<lock_redis::kit::call::Lua>,
    key: String,
    token: String,
}

#[async_trait]
impl Held for RawRedisHeld {
    async fn release(self: Box<Self>) -> BenchResult<()> {
        let results = join_all(self.conns.iter().map(|c| {
            raw_del(
                c.clone(),
                self.script.clone(),
                self.key.clone(),
                self.token.clone(),
            )
        }))
        .await;
        for r in results {
            r.map_err(|e| format!("raw compare-and-delete of {}: {e}", self.key))?;
        }
        Ok(())
    }
}

/// etcd: a transaction "put `NAME/<lease hex>` with the client's lease if its
/// create revision is 0" (the `concurrency.Mutex` key) and a delete: a plain
/// delete, or (`compared`) a transaction that deletes the key only if its
/// create revision is still the one the put made, as a release must when a
/// late copy of it could meet the same client's next key of that name.
pub struct RawEtcd {
    /// Client endpoints.
    pub endpoints: Vec<String>,
    /// Whether the delete compares the key's create revision.
    pub compared: bool,
}

#[async_trait]
impl Connector for RawEtcd {
    async fn connect(&self) -> BenchResult<Arc<dyn Locker>> {
        let mut client = etcd_client::Client::connect(&self.endpoints, None)
            .await
            .map_err(|e| format!("etcd connect {:?}: {e}", self.endpoints))?;
        let lease = client
            .lease_grant(RAW_TTL.as_secs() as i64, None)
            .await
            .map_err(|e| format!("etcd lease grant: {e}"))?
            .id();
        Ok(Arc::new(RawEtcdClient {
            client,
            lease,
            compared: self.compared,
        }))
    }
}

struct RawEtcdClient {
    client: etcd_client::Client,
    lease: i64,
    compared: bool,
}

#[async_trait]
impl Locker for RawEtcdClient {
    async fn acquire(&self, name: &str, _wait: Duration) -> BenchResult<Option<Box<dyn Held>>> {
        let key = format!("{name}/{:x}", self.lease);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                "",
                Some(PutOptions::new().with_lease(self.lease)),
            )]);
        let mut client = self.client.clone();
        let resp = client
            .txn(txn)
            .await
            .map_err(|e| format!("etcd txn {key}: {e}"))?;
        if !resp.succeeded() {
            return Err(format!(
                "etcd txn {key}: key already exists (raw runs are uncontended)"
            ));
        }
        // The put's revision is the key's create revision.
        let revision = self
            .compared
            .then(|| resp.header().map(|h| h.revision()))
            .flatten();
        Ok(Some(Box::new(RawEtcdHeld {
            client,
            key,
            revision,
        })))
    }
}

struct RawEtcdHeld {
    client: etcd_client::Client,
    key: String,
    /// The create revision a compared delete checks.
    revision: Option<i64>,
}

#[async_trait]
impl Held for RawEtcdHeld {
    async fn release(mut self: Box<Self>) -> BenchResult<()> {
        let failed = |e: etcd_client::Error| format!("etcd delete {}: {e}", self.key);
        match self.revision {
            None => {
                self.client
                    .delete(self.key.as_str(), None)
                    .await
                    .map_err(failed)?;
            }
            Some(revision) => {
                let txn = Txn::new()
                    .when([Compare::create_revision(
                        self.key.as_str(),
                        CompareOp::Equal,
                        revision,
                    )])
                    .and_then([TxnOp::delete(self.key.as_str(), None)]);
                let resp = self.client.txn(txn).await.map_err(failed)?;
                if !resp.succeeded() {
                    return Err(format!(
                        "etcd delete {}: the key's create revision is no longer {revision}",
                        self.key
                    ));
                }
            }
        }
        Ok(())
    }
}

/// ZooKeeper session timeout asked for by the raw client and the peer.
pub const ZK_SESSION: Duration = Duration::from_secs(4);

/// ZooKeeper: create an ephemeral-sequential node under the lock's directory
/// and delete it.
pub struct RawZk {
    /// The servers, dealt to its clients in turn.
    pub servers: crate::placement::Deal,
    /// The directory under which lock directories are made.
    pub root: String,
}

#[async_trait]
impl Connector for RawZk {
    async fn connect(&self) -> BenchResult<Arc<dyn Locker>> {
        let server = self.servers.next();
        let client = zk::Client::connector()
            .with_session_timeout(ZK_SESSION)
            .connect(&server)
            .await
            .map_err(|e| format!("zookeeper connect {server}: {e}"))?;
        Ok(Arc::new(RawZkClient {
            client: Arc::new(client),
            root: self.root.clone(),
            dirs: std::sync::Mutex::new(std::collections::HashSet::new()),
        }))
    }
}

struct RawZkClient {
    client: Arc<zk::Client>,
    root: String,
    /// Directories already made by this client.
    dirs: std::sync::Mutex<std::collections::HashSet<String>>,
}

#[async_trait]
impl Locker for RawZkClient {
    async fn acquire(&self, name: &str, _wait: Duration) -> BenchResult<Option<Box<dyn Held>>> {
        let dir = format!("{}/{name}", self.root);
        let known = self.dirs.lock().map(|d| d.contains(&dir)).unwrap_or(false);
        if !known {
            // Set-up, once per name: not part of the round trips compared.
            self.client
                .mkdir(
                    &dir,
                    &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
                )
                .await
                .map_err(|e| format!("zookeeper mkdir {dir}: {e}"))?;
            if let Ok(mut d) = self.dirs.lock() {
                d.insert(dir.clone());
            }
        }
        let prefix = format!("{dir}/lock-");
        let (_stat, seq) = self
            .client
            .create(
                &prefix,
                b"",
                &zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all()),
            )
            .await
            .map_err(|e| format!("zookeeper create {prefix}: {e}"))?;
        Ok(Some(Box::new(RawZkHeld {
            client: self.client.clone(),
            path: format!("{prefix}{seq}"),
        })))
    }
}

struct RawZkHeld {
    client: Arc<zk::Client>,
    path: String,
}

#[async_trait]
impl Held for RawZkHeld {
    async fn release(self: Box<Self>) -> BenchResult<()> {
        self.client
            .delete(&self.path, None)
            .await
            .map_err(|e| format!("zookeeper delete {}: {e}", self.path))
    }
}
