//! The user-facing trait, and the bridge from the backend seam to it.

use std::future::Future;

use async_trait::async_trait;
use tracing::Instrument;

use crate::backend::{LeaseRequest, LockBackend, LockStatus};
use crate::capabilities::Capabilities;
use crate::error::{LockError, LockErrorKind, Result};
use crate::guard::{GuardView, LockGuard};
use crate::metrics as m;
use crate::name::LockName;
use crate::options::AcquireOptions;

/// A distributed lock service: one client of one backend, shared by any number
/// of tasks. Object safe: `Arc<dyn DistributedLock>` is the usual way to pass
/// it around and to swap backends.
///
/// ```
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use lock_core::{AcquireOptions, DistributedLock, LockName, MemoryLock};
///
/// let locks: Arc<dyn DistributedLock> = Arc::new(MemoryLock::new());
/// let name = LockName::new("reports/daily")?;
/// let opts = AcquireOptions::new().ttl(Duration::from_secs(5)).wait(Duration::from_secs(1));
/// let guard = locks.acquire(&name, &opts).await?;
/// assert!(locks.try_acquire(&name, &opts).await?.is_none());
/// assert!(guard.release().await?);
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
#[async_trait]
pub trait DistributedLock: Send + Sync {
    /// What this backend guarantees.
    fn capabilities(&self) -> Capabilities;

    /// One attempt, no waiting: the guard, or `None` if the lock is held.
    async fn try_acquire(
        &self,
        name: &LockName,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>>;

    /// Waits up to `opts.wait` for the lock, then fails with
    /// [`LockErrorKind::Timeout`].
    ///
    /// Cancellation safety: dropping the future gives up the wait and leaves
    /// no key, node or lease behind (removal may finish in the background).
    async fn acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<LockGuard>;

    /// What the server says about `name` now, without taking it.
    async fn inspect(&self, name: &LockName) -> Result<LockStatus>;
}

#[async_trait]
impl<B: LockBackend> DistributedLock for B {
    fn capabilities(&self) -> Capabilities {
        self.backend_capabilities()
    }

    async fn try_acquire(
        &self,
        name: &LockName,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>> {
        opts.validate()?;
        let backend = self.backend_capabilities().backend;
        let span = tracing::debug_span!("distlock.try_acquire", backend, name = %name);
        let started = tokio::time::Instant::now();
        let req = LeaseRequest::new(name.clone(), opts.ttl_value()).with_retry(opts.retry_value());
        let result = self.try_lock(&req).instrument(span).await;
        record_attempt(
            backend,
            started,
            &result.as_ref().map(|o| o.as_ref().map(|l| l.contended)),
        );
        Ok(result?.map(|lease| {
            LockGuard::start(
                lease,
                name.clone(),
                opts.ttl_value(),
                opts.keep_alive_value(),
                backend,
            )
        }))
    }

    async fn acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<LockGuard> {
        opts.validate()?;
        let backend = self.backend_capabilities().backend;
        let span = tracing::debug_span!("distlock.acquire", backend, name = %name);
        let started = tokio::time::Instant::now();
        let deadline = started + opts.wait_value();
        let req = LeaseRequest::new(name.clone(), opts.ttl_value()).with_retry(opts.retry_value());
        let result = self.lock(&req, deadline).instrument(span).await;
        record_attempt(
            backend,
            started,
            &result.as_ref().map(|o| o.as_ref().map(|l| l.contended)),
        );
        match result? {
            Some(lease) => Ok(LockGuard::start(
                lease,
                name.clone(),
                opts.ttl_value(),
                opts.keep_alive_value(),
                backend,
            )),
            None => {
                metrics::counter!(m::TIMEOUTS, "backend" => backend).increment(1);
                Err(LockError::new(
                    LockErrorKind::Timeout,
                    format!(
                        "lock {name} is held by another owner; gave up after {:?}",
                        opts.wait_value()
                    ),
                ))
            }
        }
    }

    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        LockBackend::inspect(self, name).await
    }
}

fn record_attempt(
    backend: &'static str,
    started: tokio::time::Instant,
    outcome: &std::result::Result<Option<bool>, &LockError>,
) {
    let label = match outcome {
        Ok(Some(_)) => "acquired",
        Ok(None) => "not_acquired",
        Err(_) => "error",
    };
    metrics::counter!(m::ATTEMPTS, "backend" => backend).increment(1);
    if matches!(outcome, Ok(None) | Ok(Some(true))) {
        metrics::counter!(m::CONTENDED, "backend" => backend).increment(1);
    }
    metrics::histogram!(m::ACQUISITION_TIME, "backend" => backend, "outcome" => label)
        .record(started.elapsed().as_secs_f64());
}

/// Helpers on every [`DistributedLock`], including `dyn DistributedLock`.
pub trait DistributedLockExt: DistributedLock {
    /// Acquires `name` (waiting up to `opts.wait`), runs `section`, releases.
    ///
    /// If the lock is lost before the section ends, the section's future is
    /// dropped at its next `.await` and a [`LockErrorKind::Lost`] error is
    /// returned: the section never runs on after the lock is known lost.
    /// (A lost lock is noticed at the next renewal or server event; pair it
    /// with the fencing token for writes that must never be stale.)
    ///
    /// ```
    /// # async fn demo() -> Result<(), lock_core::LockError> {
    /// use lock_core::{AcquireOptions, DistributedLockExt, LockName, MemoryLock};
    /// let locks = MemoryLock::new();
    /// let name = LockName::new("jobs/cleanup")?;
    /// let n = locks
    ///     .with_lock(&name, &AcquireOptions::new(), |guard| async move {
    ///         assert!(guard.fencing_token().is_some());
    ///         42
    ///     })
    ///     .await?;
    /// assert_eq!(n, 42);
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
    /// ```
    fn with_lock<F, Fut, T>(
        &self,
        name: &LockName,
        opts: &AcquireOptions,
        section: F,
    ) -> impl Future<Output = Result<T>> + Send
    where
        F: FnOnce(GuardView) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        async move {
            let guard = self.acquire(name, opts).await?;
            let lost = guard.lost();
            let section = section(guard.view());
            tokio::select! {
                biased;
                cause = lost => {
                    drop(guard);
                    Err(LockError::new(LockErrorKind::Lost, format!("lock {name} lost during the critical section: {cause}")))
                }
                out = section => {
                    if let Err(err) = guard.release().await {
                        tracing::warn!(name = %name, error = %err, "distlock: release after with_lock failed; the lock expires with its TTL");
                    }
                    Ok(out)
                }
            }
        }
    }
}

impl<L: DistributedLock + ?Sized> DistributedLockExt for L {}
