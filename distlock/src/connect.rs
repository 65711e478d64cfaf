//! [`connect`]: from a URL to a connected `Arc<dyn LockService>`.

use std::sync::Arc;

use lock_core::{LockError, LockService};

use crate::backends::feature_disabled;
use crate::url::LockUrl;

/// Connects to the lock service named by `url` and returns it as a shared,
/// object-safe [`LockService`]: the mutex ([`lock_core::DistributedLock`]),
/// the read-write lock ([`lock_core::ReadWriteLock`]) and the semaphore
/// ([`lock_core::Semaphore`]) of that backend. A primitive the backend cannot
/// keep honest fails with [`lock_core::LockErrorKind::Unsupported`] when it is used
/// ([`lock_core::Capabilities`] tells which ones it offers).
///
/// `url` is `memory://`, `redis://...`, `redlock://...`, `etcd://...` or
/// `zk://...`, with connection options as query parameters; see the
/// [crate docs](crate#urls) for the grammar and every option. The lease TTL
/// is not a URL option: it is chosen per acquisition
/// ([`lock_core::AcquireOptions::ttl`]).
///
/// Errors:
/// - [`lock_core::LockErrorKind::InvalidArgument`]: a malformed URL, an unknown option,
///   a bad value, or a backend whose cargo feature is off (the message names
///   the feature to enable);
/// - [`lock_core::LockErrorKind::Unavailable`]: the server(s) could not be reached
///   within the connect timeout (plus two seconds at most; never longer);
/// - [`lock_core::LockErrorKind::Unauthorized`]: credentials were rejected;
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

impl LockUrl {
    /// Connects to the service this URL names; see [`connect`].
    pub async fn connect(&self) -> Result<Arc<dyn LockService>, LockError> {
        if !self.scheme().is_enabled() {
            return Err(feature_disabled(self));
        }
        (self.scheme().descriptor().connect)(self).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::LockErrorKind;

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
