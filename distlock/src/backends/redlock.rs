//! `redlock://`: Redlock over independent Redis servers (feature `redlock`).

use super::options::{option, CA, CERT, CONNECT_TIMEOUT, KEY, PREFIX, REQUIRE_NOEVICTION, TLS};
use super::redis::check_db_path;
use super::{Credentials, Descriptor, OptionKind, Servers};
use crate::scheme::Scheme;
use crate::url::LockUrl;

/// `redlock://[[user]:password@]host[:port],host[:port],...[/db][?options]`.
pub(crate) const REDLOCK: Descriptor = Descriptor {
    scheme: Scheme::Redlock,
    names: &["redlock"],
    tls_names: &[],
    feature: Some("redlock"),
    enabled: cfg!(feature = "redlock"),
    default_port: Some(6379),
    servers: Servers::Many,
    credentials: Credentials::Any,
    options: &[
        CONNECT_TIMEOUT,
        option("node_timeout", OptionKind::Duration),
        option("retry_count", OptionKind::Count),
        option("retry_delay", OptionKind::Duration),
        option("retry_jitter", OptionKind::Duration),
        option("max_extensions", OptionKind::CountOrNone),
        PREFIX,
        REQUIRE_NOEVICTION,
        TLS,
        CA,
        CERT,
        KEY,
    ],
    check: check_db_path,
    connect,
};

impl LockUrl {
    /// The [`lock_redlock::RedlockConfig`] of a `redlock://` URL: options
    /// `connect_timeout`, `node_timeout`, `retry_count`, `retry_delay`,
    /// `retry_jitter`, `max_extensions`, `prefix`, `require_noeviction`.
    #[cfg(feature = "redlock")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redlock")))]
    pub fn redlock_config(&self) -> Result<lock_redlock::RedlockConfig, lock_core::LockError> {
        self.expect(Scheme::Redlock)?;
        let nodes: Vec<String> = self
            .endpoints()
            .iter()
            .map(|e| self.redis_node_url(e))
            .collect();
        let mut config = lock_redlock::RedlockConfig::new(nodes);
        if let Some(d) = self.duration("connect_timeout") {
            config = config.connect_timeout(d);
        }
        if let Some(d) = self.duration("node_timeout") {
            config = config.node_timeout(d);
        }
        if let Some(n) = self.option("retry_count").and_then(|v| v.parse().ok()) {
            config = config.retry_count(n);
        }
        let delay = self.duration("retry_delay").unwrap_or(config.retry_delay);
        let jitter = self.duration("retry_jitter").unwrap_or(config.retry_jitter);
        config = config.retry_delay(delay, jitter);
        if let Some(max) = self.option("max_extensions") {
            config = config.max_extensions(max.parse().ok());
        }
        if let Some(prefix) = self.option("prefix") {
            config = config.key_prefix(prefix);
        }
        if let Some(require) = self.option("require_noeviction") {
            config = config.require_noeviction(require == "true");
        }
        if let Some(tls) = self.tls() {
            config = config.tls(tls);
        }
        config.validate()?;
        Ok(config)
    }
}

#[cfg(feature = "redlock")]
fn connect(url: &LockUrl) -> super::Connecting<'_> {
    Box::pin(async move {
        let config = url.redlock_config()?;
        let limit = config.connect_timeout;
        super::bounded(url, limit, lock_redlock::RedlockLock::connect(config)).await
    })
}

#[cfg(not(feature = "redlock"))]
use super::disabled as connect;
