//! The peers, on the same servers in the same run: `rslock` (Redlock in Rust),
//! etcd's built-in Lock RPC through `etcd-client`, and `zookeeper-client`'s
//! own lock recipe. Each is used the way its documentation shows.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::LockOptions as EtcdLockOptions;
use zookeeper_client as zk;

use crate::raw::{RAW_TTL, ZK_SESSION};
use crate::subject::{BenchResult, Connector, Held, Locker};

/// `rslock::LockManager` over the Redlock nodes (its defaults: 3 attempts per
/// `lock`, random retry delay up to 200 ms; `acquire` loops on `lock`).
pub struct Rslock {
    /// Node URLs.
    pub urls: Vec<String>,
    /// Lock TTL.
    pub ttl: Duration,
}

#[async_trait]
impl Connector for Rslock {
    async fn connect(&self) -> BenchResult<Arc<dyn Locker>> {
        let mut clients = Vec::new();
        for url in &self.urls {
            clients
                .push(redis::Client::open(url.as_str()).map_err(|e| format!("redis {url}: {e}"))?);
        }
        Ok(Arc::new(RslockClient {
            manager: rslock::LockManager::from_clients(clients),
            ttl: self.ttl,
        }))
    }
}

struct RslockClient {
    manager: rslock::LockManager,
    ttl: Duration,
}

#[async_trait]
impl Locker for RslockClient {
    async fn acquire(&self, name: &str, wait: Duration) -> BenchResult<Option<Box<dyn Held>>> {
        // `acquire` retries forever (and hides node errors): the wait bounds it.
        match tokio::time::timeout(wait, self.manager.acquire(name, self.ttl)).await {
            Err(_elapsed) => Ok(None),
            Ok(Err(e)) => Err(format!("rslock acquire {name}: {e}")),
            Ok(Ok(guard)) => Ok(Some(Box::new(RslockHeld(guard)))),
        }
    }
}

struct RslockHeld(rslock::LockGuard);

#[async_trait]
impl Held for RslockHeld {
    async fn release(self: Box<Self>) -> BenchResult<()> {
        // Best effort by design: rslock reports nothing.
        self.0.release().await;
        Ok(())
    }
}

/// etcd's v3lock service (`Lock` / `Unlock` RPCs) with one lease per client,
/// as `etcdctl lock` does.
pub struct EtcdLockRpc {
    /// Client endpoints.
    pub endpoints: Vec<String>,
}

#[async_trait]
impl Connector for EtcdLockRpc {
    async fn connect(&self) -> BenchResult<Arc<dyn Locker>> {
        let mut client = etcd_client::Client::connect(&self.endpoints, None)
            .await
            .map_err(|e| format!("etcd connect {:?}: {e}", self.endpoints))?;
        let lease = client
            .lease_grant(RAW_TTL.as_secs() as i64, None)
            .await
            .map_err(|e| format!("etcd lease grant: {e}"))?
            .id();
        Ok(Arc::new(EtcdLockRpcClient { client, lease }))
    }
}

struct EtcdLockRpcClient {
    client: etcd_client::Client,
    lease: i64,
}

#[async_trait]
impl Locker for EtcdLockRpcClient {
    async fn acquire(&self, name: &str, wait: Duration) -> BenchResult<Option<Box<dyn Held>>> {
        let mut client = self.client.clone();
        let opts = EtcdLockOptions::new().with_lease(self.lease);
        match tokio::time::timeout(wait, client.lock(name, Some(opts))).await {
            Err(_elapsed) => Ok(None),
            Ok(Err(e)) => Err(format!("etcd Lock {name}: {e}")),
            Ok(Ok(resp)) => Ok(Some(Box::new(EtcdLockRpcHeld {
                client,
                key: resp.key().to_vec(),
            }))),
        }
    }
}

struct EtcdLockRpcHeld {
    client: etcd_client::Client,
    key: Vec<u8>,
}

#[async_trait]
impl Held for EtcdLockRpcHeld {
    async fn release(mut self: Box<Self>) -> BenchResult<()> {
        let key = std::mem::take(&mut self.key);
        self.client
            .unlock(key)
            .await
            .map(|_| ())
            .map_err(|e| format!("etcd Unlock: {e}"))
    }
}

/// `zookeeper_client::Client::lock` with Curator's node layout
/// (`DIR/_c_<uuid>-lock-<seq>`), parents created on demand.
pub struct ZkRecipe {
    /// The servers, dealt to its clients in turn.
    pub servers: crate::placement::Deal,
    /// The directory under which lock directories are made.
    pub root: String,
}

#[async_trait]
impl Connector for ZkRecipe {
    async fn connect(&self) -> BenchResult<Arc<dyn Locker>> {
        let server = self.servers.next();
        let client = zk::Client::connector()
            .with_session_timeout(ZK_SESSION)
            .connect(&server)
            .await
            .map_err(|e| format!("zookeeper connect {server}: {e}"))?;
        Ok(Arc::new(ZkRecipeClient {
            client: Arc::new(client),
            root: self.root.clone(),
        }))
    }
}

struct ZkRecipeClient {
    client: Arc<zk::Client>,
    root: String,
}

impl ZkRecipeClient {
    async fn lock(&self, dir: &str) -> Result<String, zk::Error> {
        let prefix = zk::LockPrefix::new_curator(dir, "lock-")?;
        let options = zk::LockOptions::new(zk::Acls::anyone_all())
            .with_ancestor_options(zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()))?;
        let guard = self.client.lock(prefix, b"", options).await?;
        let path = guard.lock_path().to_string();
        // The recipe's guard deletes its node in the background when dropped;
        // the benchmark deletes it itself (to time the release) and forgets the
        // guard, so the node is not deleted twice (a failed delete is still a
        // quorum round on the server). This leaks the guard's path string only.
        std::mem::forget(guard);
        Ok(path)
    }
}

#[async_trait]
impl Locker for ZkRecipeClient {
    async fn acquire(&self, name: &str, wait: Duration) -> BenchResult<Option<Box<dyn Held>>> {
        let dir = format!("{}/{name}", self.root);
        // Cancellation safe by its documentation: dropping the future on timeout
        // removes the contender node.
        match tokio::time::timeout(wait, self.lock(&dir)).await {
            Err(_elapsed) => Ok(None),
            Ok(Err(e)) => Err(format!("zookeeper lock {dir}: {e}")),
            Ok(Ok(path)) => Ok(Some(Box::new(ZkRecipeHeld {
                client: self.client.clone(),
                path,
            }))),
        }
    }
}

struct ZkRecipeHeld {
    client: Arc<zk::Client>,
    path: String,
}

#[async_trait]
impl Held for ZkRecipeHeld {
    async fn release(self: Box<Self>) -> BenchResult<()> {
        self.client
            .delete(&self.path, None)
            .await
            .map_err(|e| format!("zookeeper delete {}: {e}", self.path))
    }
}
