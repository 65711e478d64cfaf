//! `zk://` (or `zookeeper://`): a ZooKeeper ensemble (feature `zk`).

use super::options::{option, CA, CERT, CONNECT_TIMEOUT, KEY, REQUEST_TIMEOUT, TLS};
use super::{Credentials, Descriptor, OptionKind, Servers};
use crate::scheme::Scheme;
use crate::url::LockUrl;

/// `zk://[user:password@]host[:port][,host[:port]...][/base][?options]`.
pub(crate) const ZK: Descriptor = Descriptor {
    scheme: Scheme::Zk,
    names: &["zk", "zookeeper"],
    tls_names: &[],
    feature: Some("zk"),
    enabled: cfg!(feature = "zk"),
    default_port: Some(2181),
    servers: Servers::Many,
    credentials: Credentials::Pair,
    options: &[
        CONNECT_TIMEOUT,
        REQUEST_TIMEOUT,
        option("session_timeout", OptionKind::Duration),
        option("chroot", OptionKind::Text),
        option("election", OptionKind::Text),
        TLS,
        CA,
        CERT,
        KEY,
    ],
    check,
    connect,
};

/// The path is the base path of the locks; `?chroot=` is a path too.
fn check(url: &LockUrl) -> Result<(), String> {
    let path = url.path();
    if path.len() > 1 {
        check_zk_path("base path", path)?;
    }
    if let Some(chroot) = url.option("chroot") {
        check_zk_path("chroot", chroot)?;
    }
    match url.option("election") {
        None | Some("latch" | "selector") => Ok(()),
        Some(other) => Err(format!(
            "the ZooKeeper election recipe {other:?} is neither \"latch\" (Curator's LeaderLatch) nor \"selector\" (its LeaderSelector)"
        )),
    }
}

fn check_zk_path(what: &str, path: &str) -> Result<(), String> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err(format!("the ZooKeeper {what} {path:?} must start with '/'"));
    };
    if rest
        .split('/')
        .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Err(format!(
            "the ZooKeeper {what} {path:?} has an empty, '.' or '..' segment, or ends with '/'"
        ));
    }
    Ok(())
}

impl LockUrl {
    /// The [`lock_zk::ZkConfig`] of a `zk://` URL: the path is the base path
    /// of the locks (default `/distlock`), `user:password@` is sent as
    /// `digest` credentials; options `connect_timeout`, `request_timeout`,
    /// `session_timeout`, `chroot`, `election` (`latch`, the default: the
    /// nodes of Curator's `LeaderLatch`; `selector`: those of its
    /// `LeaderSelector`).
    #[cfg(feature = "zk")]
    #[cfg_attr(docsrs, doc(cfg(feature = "zk")))]
    pub fn zk_config(&self) -> Result<lock_zk::ZkConfig, lock_core::LockError> {
        use crate::url::Endpoint;
        self.expect(Scheme::Zk)?;
        let hosts = self
            .endpoints()
            .iter()
            .map(Endpoint::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let connect = format!("{hosts}{}", self.option("chroot").unwrap_or(""));
        let mut config = lock_zk::ZkConfig::new(connect);
        if !self.path().is_empty() {
            config = config.base_path(self.path().to_string());
        }
        if let Some(d) = self.duration("connect_timeout") {
            config = config.connect_timeout(d);
        }
        if let Some(d) = self.duration("request_timeout") {
            config = config.request_timeout(d);
        }
        if let Some(d) = self.duration("session_timeout") {
            config = config.session_timeout(d);
        }
        if self.option("election") == Some("selector") {
            config = config.election(lock_zk::ElectionRecipe::LeaderSelector);
        }
        if let (Some(user), Some(password)) = (self.user(), self.password()) {
            config = config.auth("digest", format!("{user}:{password}"));
        }
        if let Some(tls) = self.tls() {
            config = config.tls(tls);
        }
        Ok(config)
    }
}

#[cfg(feature = "zk")]
fn connect(url: &LockUrl) -> super::Connecting<'_> {
    Box::pin(async move {
        let config = url.zk_config()?;
        let limit = config.connect_timeout;
        super::bounded(url, limit, lock_zk::ZkLock::connect(config)).await
    })
}

#[cfg(not(feature = "zk"))]
use super::disabled as connect;
