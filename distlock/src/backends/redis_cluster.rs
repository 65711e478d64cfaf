//! `redis+cluster://` (and `rediss+cluster://`): a Redis Cluster, its
//! slots and failovers followed (feature `redis`).

use super::redis::REDIS_OPTIONS;
use super::{Credentials, Descriptor, Servers};
use crate::scheme::Scheme;
use crate::url::LockUrl;

/// `redis+cluster://[[user]:password@]n1[:port],n2,...[/0][?options]`.
pub(crate) const REDIS_CLUSTER: Descriptor = Descriptor {
    scheme: Scheme::RedisCluster,
    names: &["redis+cluster"],
    tls_names: &["rediss+cluster"],
    feature: Some("redis"),
    enabled: cfg!(feature = "redis"),
    default_port: Some(6379),
    servers: Servers::Many,
    credentials: Credentials::Any,
    options: REDIS_OPTIONS,
    check: check_db_zero,
    connect,
};

/// A Redis Cluster has database 0 only: the path is `/0` or nothing.
fn check_db_zero(url: &LockUrl) -> Result<(), String> {
    match url.path() {
        "" | "/" | "/0" => Ok(()),
        path => Err(format!(
            "a Redis Cluster has database 0 only: the path of a {}:// URL is /0 or nothing, not {path:?}",
            url.scheme()
        )),
    }
}

impl LockUrl {
    /// The [`lock_redis::RedisLockConfig`] of a `redis+cluster://` URL: the
    /// nodes given are the seeds the client learns the cluster from; the
    /// options of `redis://` URLs.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn redis_cluster_config(
        &self,
    ) -> Result<lock_redis::RedisLockConfig, lock_core::LockError> {
        self.expect(Scheme::RedisCluster)?;
        let seeds: Vec<String> = self.endpoints().iter().map(|e| e.to_string()).collect();
        let scheme = if self.tls().is_some() {
            "rediss+cluster"
        } else {
            "redis+cluster"
        };
        let url = format!("{scheme}://{}{}", self.redis_userinfo(), seeds.join(","));
        self.redis_options(lock_redis::RedisLockConfig::new(url))
    }
}

#[cfg(feature = "redis")]
fn connect(url: &LockUrl) -> super::Connecting<'_> {
    Box::pin(async move {
        let config = url.redis_cluster_config()?;
        let limit = config.connect_timeout;
        super::bounded(url, limit, lock_redis::RedisLock::connect(config)).await
    })
}

#[cfg(not(feature = "redis"))]
use super::disabled as connect;
