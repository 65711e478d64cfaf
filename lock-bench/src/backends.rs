//! Our backends, each connected the way a user connects: a lock service URL
//! given to `distlock`, with the backend's defaults and no other option than
//! the session length of the keep-alive runs; one client per "process",
//! used through `Arc<dyn LockService>`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock::redis::{RedisLock, RenewBatching};
use distlock::redlock::RedlockLock;
use distlock::{LockError, LockService, LockUrl, MemoryLock, Scheme};

use crate::subject::{BenchResult, Connector, DistLocker, DistOptions, Locker};

/// Where a backend's servers are.
#[derive(Clone)]
pub enum Target {
    /// In process: every "client" shares this one service.
    Memory(MemoryLock),
    /// The Redis server, `host:port`.
    Redis(String),
    /// The primary of a Sentinel-managed deployment: its `redis+sentinel://`
    /// URL, with `sync_replicas` replicas confirming each acquisition.
    RedisSentinel {
        /// `redis+sentinel://s1,s2,s3/MASTER_NAME`.
        url: String,
        /// The URL option `sync_replicas` (0: none).
        sync_replicas: u32,
    },
    /// A Redis Cluster: its `redis+cluster://` URL (the seeds).
    RedisCluster(String),
    /// The Redlock nodes, `host:port` each.
    Redlock(Vec<String>),
    /// The etcd members, `host:port` each.
    Etcd(Vec<String>),
    /// The ZooKeeper servers, `host:port,...`.
    Zk(String),
}

/// Connects new clients of one of our backends.
pub struct Ours {
    target: Target,
    opts: DistOptions,
    /// ZooKeeper's servers, dealt to the clients in turn.
    zk_servers: Option<crate::placement::Deal>,
}

impl Ours {
    /// A connector for `target` whose acquires use `opts`.
    pub fn new(target: Target, opts: DistOptions) -> Self {
        let zk_servers = match &target {
            Target::Zk(connect) => Some(crate::placement::Deal::new(connect)),
            _ => None,
        };
        Self {
            target,
            opts,
            zk_servers,
        }
    }

    /// The URL the next client connects with: the servers, and on etcd and
    /// ZooKeeper the session length when the run sets one. A ZooKeeper
    /// client names one server, dealt in turn like the other subjects'
    /// clients.
    fn url(&self) -> String {
        let session = |option: &str| {
            self.opts
                .session_ttl
                .map(|ttl| format!("?{option}={}ms", ttl.as_millis()))
                .unwrap_or_default()
        };
        match &self.target {
            Target::Memory(_) => "memory://".into(),
            Target::Redis(server) => format!("redis://{server}"),
            Target::RedisSentinel { url, sync_replicas } => match sync_replicas {
                0 => url.clone(),
                n => format!("{url}?sync_replicas={n}"),
            },
            Target::RedisCluster(url) => url.clone(),
            Target::Redlock(nodes) => format!("redlock://{}", nodes.join(",")),
            Target::Etcd(members) => {
                format!("etcd://{}{}", members.join(","), session("lease_ttl"))
            }
            Target::Zk(connect) => {
                let server = self
                    .zk_servers
                    .as_ref()
                    .map_or_else(|| connect.clone(), |d| d.next());
                format!("zk://{server}{}", session("session_timeout"))
            }
        }
    }

    async fn client(&self) -> BenchResult<Arc<dyn LockService>> {
        // In process, every client shares the one service, as the clients
        // of a server do (each connection to `memory://` would be a service
        // of its own).
        if let Target::Memory(m) = &self.target {
            return Ok(Arc::new(m.clone()));
        }
        let url = self.url();
        let connected = match LockUrl::parse(&url) {
            Ok(parsed) if self.opts.batch_renewals => parsed.connect().await,
            Ok(parsed) => connect_unbatched(&parsed).await,
            Err(e) => Err(e),
        };
        connected.map_err(|e| format!("connect {url}: {e}"))
    }
}

/// Connects `url` with renewal batching off on Redis and Redlock (a zero
/// window: one request per renewal), the comparison of the keep-alive
/// runs. No URL option turns batching off, so this takes the URL's
/// configuration and changes that alone; etcd and ZooKeeper have no
/// renewal batching and connect as usual.
async fn connect_unbatched(url: &LockUrl) -> Result<Arc<dyn LockService>, LockError> {
    let off = RenewBatching::default().window(Duration::ZERO);
    match url.scheme() {
        Scheme::Redis => {
            let config = url.redis_config()?.renew_batching(off);
            Ok(Arc::new(RedisLock::connect(config).await?))
        }
        Scheme::RedisSentinel => {
            let config = url.redis_sentinel_config()?.renew_batching(off);
            Ok(Arc::new(RedisLock::connect(config).await?))
        }
        Scheme::RedisCluster => {
            let config = url.redis_cluster_config()?.renew_batching(off);
            Ok(Arc::new(RedisLock::connect(config).await?))
        }
        Scheme::Redlock => {
            let config = url.redlock_config()?.renew_batching(off);
            Ok(Arc::new(RedlockLock::connect(config).await?))
        }
        _ => url.connect().await,
    }
}

#[async_trait]
impl Connector for Ours {
    async fn connect(&self) -> BenchResult<Arc<dyn Locker>> {
        Ok(Arc::new(DistLocker::new(
            self.client().await?,
            self.opts.clone(),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock::etcd::EtcdConfig;
    use distlock::redis::RedisLockConfig;
    use distlock::redlock::RedlockConfig;
    use distlock::zk::ZkConfig;

    fn options(session_ttl: Option<Duration>) -> DistOptions {
        DistOptions {
            ttl: Duration::from_secs(3),
            keep_alive: true,
            session_ttl,
            batch_renewals: true,
        }
    }

    /// Each URL gives the backend's default configuration on the servers,
    /// with the session length of the keep-alive runs as its only option.
    #[test]
    fn the_urls_give_the_defaults_with_the_session_length() {
        let ttl = Duration::from_secs(3);
        let url = |t: &Ours| LockUrl::parse(&t.url()).unwrap();

        let redis = Ours::new(Target::Redis("127.0.0.1:7001".into()), options(Some(ttl)));
        assert_eq!(redis.url(), "redis://127.0.0.1:7001");
        assert_eq!(
            url(&redis).redis_config().unwrap(),
            RedisLockConfig::new("redis://127.0.0.1:7001/0")
        );

        let nodes = ["127.0.0.1:7002", "127.0.0.1:7003", "127.0.0.1:7004"];
        let redlock = Ours::new(
            Target::Redlock(nodes.map(String::from).to_vec()),
            options(Some(ttl)),
        );
        assert_eq!(
            redlock.url(),
            "redlock://127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004"
        );
        assert_eq!(
            url(&redlock).redlock_config().unwrap(),
            RedlockConfig::new(nodes.map(|n| format!("redis://{n}/0")))
        );

        let members = vec!["127.0.0.1:2379".to_string(), "127.0.0.1:2479".to_string()];
        let etcd = Ours::new(Target::Etcd(members.clone()), options(Some(ttl)));
        assert_eq!(
            etcd.url(),
            "etcd://127.0.0.1:2379,127.0.0.1:2479?lease_ttl=3000ms"
        );
        assert_eq!(
            url(&etcd).etcd_config().unwrap(),
            EtcdConfig::new(members.clone()).lease_ttl(ttl)
        );
        let etcd = Ours::new(Target::Etcd(members.clone()), options(None));
        assert_eq!(url(&etcd).etcd_config().unwrap(), EtcdConfig::new(members));

        // Each client names one server, in turn.
        let zk = Ours::new(
            Target::Zk("127.0.0.1:2181,127.0.0.1:2182".into()),
            options(Some(ttl)),
        );
        assert_eq!(zk.url(), "zk://127.0.0.1:2181?session_timeout=3000ms");
        assert_eq!(
            url(&zk).zk_config().unwrap(),
            ZkConfig::new("127.0.0.1:2182").session_timeout(ttl)
        );
        assert_eq!(zk.url(), "zk://127.0.0.1:2181?session_timeout=3000ms");
        let zk = Ours::new(Target::Zk("127.0.0.1:2181".into()), options(None));
        assert_eq!(
            url(&zk).zk_config().unwrap(),
            ZkConfig::new("127.0.0.1:2181")
        );
    }
}
