//! `redis://` (and `rediss://`): one Redis server (feature `redis`).

use super::options::{
    option, CA, CERT, CONNECT_TIMEOUT, KEY, PREFIX, REQUEST_TIMEOUT, REQUIRE_NOEVICTION,
    SYNC_REPLICAS, SYNC_TIMEOUT, TLS,
};
use super::{Credentials, Descriptor, OptionKind, OptionSpec, Servers};
use crate::scheme::Scheme;
use crate::url::LockUrl;

/// `redis://[[user]:password@]host[:port][/db][?options]`.
pub(crate) const REDIS: Descriptor = Descriptor {
    scheme: Scheme::Redis,
    names: &["redis"],
    tls_names: &["rediss"],
    feature: Some("redis"),
    enabled: cfg!(feature = "redis"),
    default_port: Some(6379),
    servers: Servers::One {
        hint: "for Redlock over independent servers use redlock://",
    },
    credentials: Credentials::Any,
    options: REDIS_OPTIONS,
    check: check_db_path,
    connect,
};

/// The options of every Redis URL: one server, Sentinel and Cluster.
pub(super) const REDIS_OPTIONS: &[OptionSpec] = &[
    CONNECT_TIMEOUT,
    REQUEST_TIMEOUT,
    option("max_recheck", OptionKind::Duration),
    PREFIX,
    REQUIRE_NOEVICTION,
    SYNC_REPLICAS,
    SYNC_TIMEOUT,
    TLS,
    CA,
    CERT,
    KEY,
];

/// The path of a Redis URL is the database number (`/2`), or nothing.
pub(super) fn check_db_path(url: &LockUrl) -> Result<(), String> {
    let path = url.path();
    let db = path.trim_start_matches('/');
    if path.is_empty() || path == "/" || (path.len() == db.len() + 1 && db.parse::<u32>().is_ok()) {
        Ok(())
    } else {
        Err(format!(
            "the path of a {}:// URL is the database number (e.g. /0), not {path:?}",
            url.scheme()
        ))
    }
}

impl LockUrl {
    /// The Redis database number from the path (`/2`), if any.
    #[cfg_attr(not(any(feature = "redis", feature = "redlock")), allow(dead_code))]
    pub(crate) fn redis_db(&self) -> Option<u32> {
        self.path().trim_start_matches('/').parse().ok()
    }

    /// The `redis://` (or `rediss://`) URL handed to the `redis` crate for
    /// `endpoint`: user and password (percent-encoded again), the database
    /// from the path.
    #[cfg(any(feature = "redis", feature = "redlock"))]
    pub(crate) fn redis_node_url(&self, endpoint: &crate::url::Endpoint) -> String {
        let userinfo = self.redis_userinfo();
        let db = self.redis_db().unwrap_or(0);
        let scheme = if self.tls().is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://{userinfo}{endpoint}/{db}")
    }

    /// `user:password@` of a Redis URL, percent-encoded again (empty
    /// without credentials).
    #[cfg(any(feature = "redis", feature = "redlock"))]
    pub(crate) fn redis_userinfo(&self) -> String {
        match (self.user(), self.password()) {
            (None, None) => String::new(),
            (user, password) => format!(
                "{}{}@",
                crate::url::encode_component(user.unwrap_or("")),
                password
                    .map(|p| format!(":{}", crate::url::encode_component(p)))
                    .unwrap_or_default()
            ),
        }
    }

    /// The [`lock_redis::RedisLockConfig`] of a `redis://` URL: options
    /// `connect_timeout`, `request_timeout`, `max_recheck`, `prefix`,
    /// `require_noeviction`, `sync_replicas` (with `sync_timeout`, by
    /// default the request timeout).
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn redis_config(&self) -> Result<lock_redis::RedisLockConfig, lock_core::LockError> {
        self.expect(Scheme::Redis)?;
        let config = lock_redis::RedisLockConfig::new(self.redis_node_url(&self.endpoints()[0]));
        self.redis_options(config)
    }

    /// `config` with the options of a `redis://`, `redis+sentinel://` or
    /// `redis+cluster://` URL.
    #[cfg(feature = "redis")]
    pub(crate) fn redis_options(
        &self,
        mut config: lock_redis::RedisLockConfig,
    ) -> Result<lock_redis::RedisLockConfig, lock_core::LockError> {
        if let Some(d) = self.duration("connect_timeout") {
            config = config.connect_timeout(d);
        }
        if let Some(d) = self.duration("request_timeout") {
            config = config.request_timeout(d);
        }
        if let Some(d) = self.duration("max_recheck") {
            config = config.max_recheck(d);
        }
        if let Some(prefix) = self.option("prefix") {
            config = config.key_prefix(prefix);
        }
        if let Some(require) = self.option("require_noeviction") {
            config = config.require_noeviction(require == "true");
        }
        if let Some(n) = self.option("sync_replicas").and_then(|v| v.parse().ok()) {
            let timeout = self
                .duration("sync_timeout")
                .unwrap_or(config.request_timeout);
            config =
                config.sync_replicas((n > 0).then(|| lock_redis::SyncReplicas::new(n, timeout)));
        }
        if let Some(tls) = self.tls() {
            config = config.tls(tls);
        }
        config.validate()?;
        Ok(config)
    }
}

#[cfg(feature = "redis")]
fn connect(url: &LockUrl) -> super::Connecting<'_> {
    Box::pin(async move {
        let config = url.redis_config()?;
        let limit = config.connect_timeout;
        super::bounded(url, limit, lock_redis::RedisLock::connect(config)).await
    })
}

#[cfg(not(feature = "redis"))]
use super::disabled as connect;
