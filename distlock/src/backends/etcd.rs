//! `etcd://`: an etcd cluster (feature `etcd`).

use super::options::{option, CA, CERT, CONNECT_TIMEOUT, KEY, PREFIX, REQUEST_TIMEOUT, TLS};
use super::{Credentials, Descriptor, OptionKind, Servers};
use crate::scheme::Scheme;
use crate::url::LockUrl;

/// `etcd://[user:password@]host[:port][,host[:port]...][/prefix][?options]`.
pub(crate) const ETCD: Descriptor = Descriptor {
    scheme: Scheme::Etcd,
    names: &["etcd"],
    tls_names: &[],
    feature: Some("etcd"),
    enabled: cfg!(feature = "etcd"),
    default_port: Some(2379),
    servers: Servers::Many,
    credentials: Credentials::Pair,
    options: &[
        CONNECT_TIMEOUT,
        REQUEST_TIMEOUT,
        option("lease_ttl", OptionKind::Duration),
        PREFIX,
        TLS,
        CA,
        CERT,
        KEY,
    ],
    check,
    connect,
};

/// The path is the key prefix, unless `?prefix=` gives it.
fn check(url: &LockUrl) -> Result<(), String> {
    let path = url.path();
    if url.option("prefix").is_some() && !matches!(path, "" | "/") {
        return Err("give the key prefix either as the path or as ?prefix=, not both".into());
    }
    if path.contains("//") {
        return Err(format!("the key prefix path {path:?} has an empty segment"));
    }
    Ok(())
}

impl LockUrl {
    /// The etcd key prefix: `?prefix=` verbatim, or the path with a trailing `/`.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn etcd_prefix(&self) -> String {
        if let Some(prefix) = self.option("prefix") {
            return prefix.to_string();
        }
        let trimmed = self.path().trim_matches('/');
        if trimmed.is_empty() {
            String::new()
        } else {
            format!("{trimmed}/")
        }
    }

    /// The [`lock_etcd::EtcdConfig`] of an `etcd://` URL: the path (or
    /// `?prefix=`) is the key prefix; options `connect_timeout`,
    /// `request_timeout`, `lease_ttl`, `prefix`.
    #[cfg(feature = "etcd")]
    #[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
    pub fn etcd_config(&self) -> Result<lock_etcd::EtcdConfig, lock_core::LockError> {
        use crate::url::Endpoint;
        self.expect(Scheme::Etcd)?;
        let mut config =
            lock_etcd::EtcdConfig::new(self.endpoints().iter().map(Endpoint::to_string))
                .key_prefix(self.etcd_prefix());
        if let Some(d) = self.duration("connect_timeout") {
            config = config.connect_timeout(d);
        }
        if let Some(d) = self.duration("request_timeout") {
            config = config.request_timeout(d);
        }
        if let Some(d) = self.duration("lease_ttl") {
            config = config.lease_ttl(d);
        }
        if let (Some(user), Some(password)) = (self.user(), self.password()) {
            config = config.user(user.to_string(), password.to_string());
        }
        if let Some(tls) = self.tls() {
            config = config.tls(tls);
        }
        config.validate()?;
        Ok(config)
    }
}

#[cfg(feature = "etcd")]
fn connect(url: &LockUrl) -> super::Connecting<'_> {
    Box::pin(async move {
        let config = url.etcd_config()?;
        let limit = config.connect_timeout;
        super::bounded(url, limit, lock_etcd::EtcdLock::connect(config)).await
    })
}

#[cfg(not(feature = "etcd"))]
use super::disabled as connect;
