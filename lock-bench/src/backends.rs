//! Our backends, each connected the way a user would: default configuration,
//! one client per "process", used through `Arc<dyn LockService>`.

use std::sync::Arc;

use async_trait::async_trait;
use lock_core::{LockService, MemoryLock};

use crate::subject::{BenchResult, Connector, DistLocker, DistOptions, Locker};

/// Where a backend's server is.
#[derive(Clone)]
pub enum Target {
    /// In process: every "client" shares this one service.
    Memory(MemoryLock),
    /// One Redis URL.
    Redis(String),
    /// The Redlock node URLs.
    Redlock(Vec<String>),
    /// etcd client endpoints.
    Etcd(Vec<String>),
    /// ZooKeeper `host:port,...`.
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

    /// The default batching, or none (a zero window: one request per renewal).
    fn renew_batching(&self) -> lock_redis::RenewBatching {
        if self.opts.batch_renewals {
            lock_redis::RenewBatching::default()
        } else {
            lock_redis::RenewBatching::default().window(std::time::Duration::ZERO)
        }
    }

    async fn client(&self) -> BenchResult<Arc<dyn LockService>> {
        let lock: Arc<dyn LockService> = match &self.target {
            Target::Memory(m) => Arc::new(m.clone()),
            Target::Redis(url) => Arc::new(
                lock_redis::RedisLock::connect(
                    lock_redis::RedisLockConfig::new(url.clone())
                        .renew_batching(self.renew_batching()),
                )
                .await
                .map_err(|e| format!("lock-redis connect {url}: {e}"))?,
            ),
            Target::Redlock(urls) => Arc::new(
                lock_redlock::RedlockLock::connect(
                    lock_redlock::RedlockConfig::new(urls.iter().cloned())
                        .renew_batching(self.renew_batching()),
                )
                .await
                .map_err(|e| format!("lock-redlock connect {urls:?}: {e}"))?,
            ),
            Target::Etcd(endpoints) => {
                let mut config = lock_etcd::EtcdConfig::new(endpoints.iter().cloned());
                if let Some(ttl) = self.opts.session_ttl {
                    config = config.lease_ttl(ttl);
                }
                Arc::new(
                    lock_etcd::EtcdLock::connect(config)
                        .await
                        .map_err(|e| format!("lock-etcd connect {endpoints:?}: {e}"))?,
                )
            }
            Target::Zk(connect) => {
                let server = self
                    .zk_servers
                    .as_ref()
                    .map_or_else(|| connect.clone(), |d| d.next());
                let mut config = lock_zk::ZkConfig::new(server);
                if let Some(ttl) = self.opts.session_ttl {
                    config = config.session_timeout(ttl);
                }
                Arc::new(
                    lock_zk::ZkLock::connect(config)
                        .await
                        .map_err(|e| format!("lock-zk connect {connect}: {e}"))?,
                )
            }
        };
        Ok(lock)
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
