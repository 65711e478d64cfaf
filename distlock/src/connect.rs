//! [`connect`]: from a URL to a connected `Arc<dyn LockService>`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockError, LockErrorKind, LockService, MemoryLock};

use crate::duration::format_duration;
use crate::url::{LockUrl, Scheme};

/// How much longer than its own connect timeout a backend may take before
/// [`connect`] gives up on it: a safety net, so that no URL can make
/// `connect` hang.
const CONNECT_SLACK: Duration = Duration::from_secs(2);

/// Connects to the lock service named by `url` and returns it as a shared,
/// object-safe [`LockService`]: the mutex ([`lock_core::DistributedLock`]),
/// the read-write lock ([`lock_core::ReadWriteLock`]) and the semaphore
/// ([`lock_core::Semaphore`]) of that backend. A primitive the backend cannot
/// keep honest fails with [`LockErrorKind::Unsupported`] when it is used
/// ([`lock_core::Capabilities`] tells which ones it offers).
///
/// `url` is `memory://`, `redis://...`, `redlock://...`, `etcd://...` or
/// `zk://...`, with connection options as query parameters; see the
/// [crate docs](crate#urls) for the grammar and every option. The lease TTL
/// is not a URL option: it is chosen per acquisition
/// ([`lock_core::AcquireOptions::ttl`]).
///
/// Errors:
/// - [`LockErrorKind::InvalidArgument`]: a malformed URL, an unknown option,
///   a bad value, or a backend whose cargo feature is off (the message names
///   the feature to enable);
/// - [`LockErrorKind::Unavailable`]: the server(s) could not be reached
///   within the connect timeout (plus two seconds at most; never longer);
/// - [`LockErrorKind::Unauthorized`]: credentials were rejected;
/// - other kinds as the backend reports them.
///
/// Must be called within a tokio runtime.
///
/// ```
/// # async fn demo() -> Result<(), distlock::LockError> {
/// use distlock::{AcquireOptions, LockName};
/// let locks = distlock::connect("memory://").await?;
/// let name = LockName::new("demo")?;
/// let guard = locks.acquire(&name, &AcquireOptions::new()).await?;
/// guard.release().await?;
/// // The same client offers the read-write lock and the semaphore.
/// let reader = locks.acquire_read(&name, &AcquireOptions::new()).await?;
/// let permit = locks.acquire_permit(&name, 3, &AcquireOptions::new()).await?;
/// reader.release().await?;
/// permit.release().await?;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
pub async fn connect(url: &str) -> Result<Arc<dyn LockService>, LockError> {
    LockUrl::parse(url)?.connect().await
}

/// The error for a URL whose backend is not compiled in.
pub(crate) fn feature_disabled(url: &LockUrl) -> LockError {
    let scheme = url.scheme();
    let feature = scheme.feature().unwrap_or("?");
    LockError::invalid(format!(
        "{scheme}:// URLs need the {scheme} backend, which this build of distlock does not have: \
         enable the \"{feature}\" feature of distlock"
    ))
}

impl LockUrl {
    /// Connects to the service this URL names; see [`connect`].
    pub async fn connect(&self) -> Result<Arc<dyn LockService>, LockError> {
        if !self.scheme().is_enabled() {
            return Err(feature_disabled(self));
        }
        match self.scheme() {
            Scheme::Memory => Ok(Arc::new(MemoryLock::new())),
            #[cfg(feature = "redis")]
            Scheme::Redis => {
                let config = self.redis_config()?;
                let limit = config.connect_timeout;
                let lock = bounded(self, limit, lock_redis::RedisLock::connect(config)).await?;
                Ok(Arc::new(lock))
            }
            #[cfg(feature = "redlock")]
            Scheme::Redlock => {
                let config = self.redlock_config()?;
                let limit = config.connect_timeout;
                let lock = bounded(self, limit, lock_redlock::RedlockLock::connect(config)).await?;
                Ok(Arc::new(lock))
            }
            #[cfg(feature = "etcd")]
            Scheme::Etcd => {
                let config = self.etcd_config()?;
                let limit = config.connect_timeout;
                let lock = bounded(self, limit, lock_etcd::EtcdLock::connect(config)).await?;
                Ok(Arc::new(lock))
            }
            #[cfg(feature = "zk")]
            Scheme::Zk => {
                let config = self.zk_config()?;
                let limit = config.connect_timeout;
                let lock = bounded(self, limit, lock_zk::ZkLock::connect(config)).await?;
                Ok(Arc::new(lock))
            }
            #[allow(unreachable_patterns)]
            _ => Err(feature_disabled(self)),
        }
    }
}

/// Runs a backend's connect with a hard bound of its connect timeout plus
/// [`CONNECT_SLACK`].
#[allow(dead_code)] // unused when every remote backend is disabled
async fn bounded<T>(
    url: &LockUrl,
    connect_timeout: Duration,
    fut: impl Future<Output = Result<T, LockError>>,
) -> Result<T, LockError> {
    match tokio::time::timeout(connect_timeout + CONNECT_SLACK, fut).await {
        Ok(result) => result,
        Err(_) => Err(LockError::new(
            LockErrorKind::Unavailable,
            format!(
                "could not connect to {url} within {} (connect_timeout {})",
                format_duration(connect_timeout + CONNECT_SLACK),
                format_duration(connect_timeout)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_error_names_the_feature() {
        let url = LockUrl::parse("etcd://127.0.0.1:2379").unwrap();
        let msg = feature_disabled(&url).to_string();
        assert!(
            msg.contains("enable the \"etcd\" feature of distlock"),
            "{msg}"
        );
        assert!(msg.starts_with("invalid_argument:"), "{msg}");
    }

    /// With a feature off, connecting is a clear InvalidArgument error
    /// (built only when some backend is off, e.g. `--no-default-features`).
    #[cfg(not(all(
        feature = "redis",
        feature = "redlock",
        feature = "etcd",
        feature = "zk"
    )))]
    #[tokio::test]
    async fn disabled_backends_are_reported() {
        for (url, feature) in [
            ("redis://127.0.0.1:1", "redis"),
            ("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "redlock"),
            ("etcd://127.0.0.1:1", "etcd"),
            ("zk://127.0.0.1:1", "zk"),
        ] {
            let parsed = LockUrl::parse(url).unwrap();
            if parsed.scheme().is_enabled() {
                continue;
            }
            let err = connect(url)
                .await
                .err()
                .expect("disabled backend must fail");
            assert_eq!(err.kind(), LockErrorKind::InvalidArgument);
            assert!(
                err.to_string()
                    .contains(&format!("enable the \"{feature}\" feature")),
                "{err}"
            );
        }
    }

    #[tokio::test]
    async fn memory_connects() {
        let locks = connect("memory://").await.unwrap();
        assert_eq!(locks.capabilities().backend, "memory");
        let err = connect("memory://x").await.err().unwrap();
        assert_eq!(err.kind(), LockErrorKind::InvalidArgument);
    }
}
