//! `redis+sentinel://` (and `rediss+sentinel://`): the primary of a
//! Sentinel-managed Redis deployment, followed across failovers (feature
//! `redis`).

use super::redis::REDIS_OPTIONS;
use super::{Credentials, Descriptor, Servers};
use crate::scheme::Scheme;
use crate::url::LockUrl;

/// `redis+sentinel://[[user]:password@]s1[:port],s2,...,/MASTER_NAME[/db][?options]`.
pub(crate) const REDIS_SENTINEL: Descriptor = Descriptor {
    scheme: Scheme::RedisSentinel,
    names: &["redis+sentinel"],
    tls_names: &["rediss+sentinel"],
    feature: Some("redis"),
    enabled: cfg!(feature = "redis"),
    default_port: Some(26379),
    servers: Servers::Many,
    credentials: Credentials::Any,
    options: REDIS_OPTIONS,
    check: check_master_path,
    connect,
};

/// The path of a Sentinel URL is the monitored primary's name, then the
/// database number if any (`/mymaster/2`).
fn check_master_path(url: &LockUrl) -> Result<(), String> {
    let path = url.path().trim_start_matches('/');
    let mut fields = path.split('/');
    let master = fields.next().unwrap_or_default();
    let db = fields.next();
    let ok = !master.is_empty()
        && !master.contains(char::is_whitespace)
        && db.is_none_or(|db| db.is_empty() || db.parse::<u32>().is_ok())
        && fields.next().is_none();
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the path of a {}:// URL is the name the sentinels monitor the primary under, \
             then the database number if any (e.g. /mymaster/0), not {:?}",
            url.scheme(),
            url.path()
        ))
    }
}

impl LockUrl {
    /// The [`lock_redis::RedisLockConfig`] of a `redis+sentinel://` URL:
    /// the options of `redis://` URLs.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn redis_sentinel_config(
        &self,
    ) -> Result<lock_redis::RedisLockConfig, lock_core::LockError> {
        self.expect(Scheme::RedisSentinel)?;
        let sentinels: Vec<String> = self.endpoints().iter().map(|e| e.to_string()).collect();
        let scheme = if self.tls().is_some() {
            "rediss+sentinel"
        } else {
            "redis+sentinel"
        };
        let path = self.path().trim_start_matches('/');
        let (master, db) = path.split_once('/').unwrap_or((path, ""));
        let url = format!(
            "{scheme}://{}{}/{}/{}",
            self.redis_userinfo(),
            sentinels.join(","),
            master,
            db.parse::<u32>().unwrap_or(0)
        );
        self.redis_options(lock_redis::RedisLockConfig::new(url))
    }
}

#[cfg(feature = "redis")]
fn connect(url: &LockUrl) -> super::Connecting<'_> {
    Box::pin(async move {
        let config = url.redis_sentinel_config()?;
        let limit = config.connect_timeout;
        super::bounded(url, limit, lock_redis::RedisLock::connect(config)).await
    })
}

#[cfg(not(feature = "redis"))]
use super::disabled as connect;
