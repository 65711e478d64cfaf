//! The user-facing traits, and the bridge from the backend seam to them.
//!
//! [`DistributedLock`] (mutex), [`ReadWriteLock`] and [`Semaphore`] are
//! implemented for every [`LockBackend`] by blanket impls that share one
//! acquire path ([`grant`]): validation, the capability check, the deadline,
//! metrics and tracing, and the start of the guard.

use std::future::Future;

use async_trait::async_trait;
use tracing::Instrument;

use crate::acquire::{admit, grant, granted};
use crate::backend::LockBackend;
use crate::capabilities::Capabilities;
use crate::election::LeaderElection;
use crate::error::{LockError, LockErrorKind, Result};
use crate::guard::{GuardView, LockGuard};
use crate::metrics as m;
use crate::mode::LockMode;
use crate::multi::MultiGuard;
use crate::name::LockName;
use crate::named::{IntoLockName, NamedLock};
use crate::options::AcquireOptions;
use crate::section::run_section;
use crate::status::{ForceReleased, LockStatus};

/// A distributed lock service: one client of one backend, shared by any number
/// of tasks. Object safe: `Arc<dyn DistributedLock>` is the usual way to pass
/// it around and to swap backends.
///
/// Locks are not reentrant: a task that holds a name and acquires it again
/// waits for itself (until its wait runs out).
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

    /// What the server says about the mutex `name` now, without taking it.
    async fn inspect(&self, name: &LockName) -> Result<LockStatus>;

    /// The mutexes held now whose names start with `prefix` (every one for
    /// ""), sorted by name, at most `limit`, with their status; an
    /// [`LockErrorKind::Unsupported`] error where the backend cannot list.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<(LockName, LockStatus)>>;

    /// An operator's tool: removes whoever holds `name` now (the mutex's
    /// holder, and every holder of the read-write lock and of the semaphore
    /// of that name where the backend offers them) and hands the lock to
    /// the next waiter as a normal release does. Says how many holders it
    /// removed; all zero when nobody held the name.
    ///
    /// What it means for fencing: the evicted process is not stopped. Its
    /// guard becomes lost ([`crate::LossCause::NotOwner`]) at its next
    /// renewal or server event, but until it notices it may still be in its
    /// critical section while the next holder is in its own. The next
    /// holder's fencing token is larger than the evicted one's, so a store
    /// that checks tokens (`lock-fence`) refuses the evicted process's
    /// writes once the next holder has written; without such a store, two
    /// processes may act at once.
    ///
    /// An [`LockErrorKind::Unsupported`] error where the backend cannot do
    /// it; other errors leave the outcome unknown.
    async fn force_release(&self, name: &LockName) -> Result<ForceReleased>;
}

/// A read-write lock service: many readers at once, or one writer alone.
///
/// Semantics, on every backend that offers it
/// ([`Capabilities::read_write`]; the others fail with
/// [`LockErrorKind::Unsupported`]):
/// - readers share the name with each other, never with a writer;
/// - a writer is alone, and a waiting writer is not starved by a stream of
///   new readers (readers that come after a waiting writer wait behind it);
/// - waiters are served in arrival order where the backend queues
///   ([`Capabilities::fifo`]);
/// - every guard carries a fencing token where the backend has them, and a
///   write guard's token is greater than the token of every read or write
///   guard granted before it on that name;
/// - [`downgrade`](ReadWriteLock::downgrade) turns a write guard into a read
///   guard without letting another writer in; there is no upgrade
///   ([`upgrade`](ReadWriteLock::upgrade) always fails with
///   [`LockErrorKind::WouldDeadlock`]: two readers upgrading at once would
///   wait for each other forever; release and acquire the write side instead).
///
/// A name is one kind of lock: the mutex, the read-write lock and the
/// semaphore of one name are kept apart on the server and do not exclude
/// each other.
#[async_trait]
pub trait ReadWriteLock: DistributedLock {
    /// One attempt at the read side, no waiting.
    async fn try_acquire_read(
        &self,
        name: &LockName,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>>;

    /// Waits up to `opts.wait` for the read side. Cancellation safe.
    async fn acquire_read(&self, name: &LockName, opts: &AcquireOptions) -> Result<LockGuard>;

    /// One attempt at the write side, no waiting.
    async fn try_acquire_write(
        &self,
        name: &LockName,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>>;

    /// Waits up to `opts.wait` for the write side. Cancellation safe.
    async fn acquire_write(&self, name: &LockName, opts: &AcquireOptions) -> Result<LockGuard>;

    /// Turns a write guard into a read guard (with a new fencing token)
    /// without any moment in which another writer could get in. On error the
    /// write guard is released (in the background) and the error returned.
    async fn downgrade(&self, guard: LockGuard) -> Result<LockGuard>;

    /// Always fails with [`LockErrorKind::WouldDeadlock`] (see the trait
    /// docs); the read guard is left as it is.
    async fn upgrade(&self, guard: &LockGuard) -> Result<LockGuard>;
}

/// A counting semaphore: at most `permits` holders of a name at once, each
/// with its own lease (TTL, keep-alive, fencing token, loss signal).
///
/// Every client of a name must use the same `permits`. Offered where the
/// backend can keep the count honest ([`Capabilities::semaphore`]); the
/// others fail with [`LockErrorKind::Unsupported`].
#[async_trait]
pub trait Semaphore: DistributedLock {
    /// One attempt at a permit of `permits`, no waiting.
    async fn try_acquire_permit(
        &self,
        name: &LockName,
        permits: u32,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>>;

    /// Waits up to `opts.wait` for a permit of `permits`. Cancellation safe.
    async fn acquire_permit(
        &self,
        name: &LockName,
        permits: u32,
        opts: &AcquireOptions,
    ) -> Result<LockGuard>;
}

/// Everything a backend client offers: the mutex, the read-write lock, the
/// semaphore and the leader election (each where the backend has it: see
/// its [`Capabilities`]). What `distlock::connect` returns, as
/// `Arc<dyn LockService>`.
pub trait LockService: ReadWriteLock + Semaphore + LeaderElection {}

impl<T: ReadWriteLock + Semaphore + LeaderElection + ?Sized> LockService for T {}

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
        grant(self, name, opts, LockMode::Exclusive, false).await
    }

    async fn acquire(&self, name: &LockName, opts: &AcquireOptions) -> Result<LockGuard> {
        granted(
            name,
            opts,
            grant(self, name, opts, LockMode::Exclusive, true).await,
        )
    }

    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        LockBackend::inspect(self, name).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<(LockName, LockStatus)>> {
        LockBackend::list(self, prefix, limit).await
    }

    async fn force_release(&self, name: &LockName) -> Result<ForceReleased> {
        let backend = self.backend_capabilities().backend;
        let span = tracing::info_span!("distlock.force_release", backend, name = %name);
        let outcome = LockBackend::force_release(self, name)
            .instrument(span)
            .await;
        match &outcome {
            Ok(removed) => {
                tracing::warn!(backend, name = %name, removed = %removed, "distlock: force release")
            }
            Err(err) => {
                metrics::counter!(m::ERRORS, "backend" => backend, "kind" => err.kind().as_str())
                    .increment(1);
            }
        }
        outcome
    }
}

#[async_trait]
impl<B: LockBackend> ReadWriteLock for B {
    async fn try_acquire_read(
        &self,
        name: &LockName,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>> {
        grant(self, name, opts, LockMode::Read, false).await
    }

    async fn acquire_read(&self, name: &LockName, opts: &AcquireOptions) -> Result<LockGuard> {
        granted(
            name,
            opts,
            grant(self, name, opts, LockMode::Read, true).await,
        )
    }

    async fn try_acquire_write(
        &self,
        name: &LockName,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>> {
        grant(self, name, opts, LockMode::Write, false).await
    }

    async fn acquire_write(&self, name: &LockName, opts: &AcquireOptions) -> Result<LockGuard> {
        granted(
            name,
            opts,
            grant(self, name, opts, LockMode::Write, true).await,
        )
    }

    async fn downgrade(&self, guard: LockGuard) -> Result<LockGuard> {
        if guard.mode() != LockMode::Write {
            return Err(LockError::invalid(format!(
                "only a write guard can be downgraded; lock {} is held as {}",
                guard.name(),
                guard.mode()
            )));
        }
        let name = guard.name().clone();
        let span = tracing::debug_span!("distlock.downgrade", backend = self.backend_capabilities().backend, name = %name);
        let (lease, grant) = guard.downgrade_lease().instrument(span).await?;
        admit(lease, grant)
    }

    async fn upgrade(&self, guard: &LockGuard) -> Result<LockGuard> {
        Err(LockError::new(
            LockErrorKind::WouldDeadlock,
            format!(
                "lock {} cannot be upgraded from {} to write: two readers upgrading at once would wait for each other forever; release the read guard, then acquire the write side",
                guard.name(),
                guard.mode()
            ),
        ))
    }
}

#[async_trait]
impl<B: LockBackend> Semaphore for B {
    async fn try_acquire_permit(
        &self,
        name: &LockName,
        permits: u32,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>> {
        grant(self, name, opts, LockMode::Permit { permits }, false).await
    }

    async fn acquire_permit(
        &self,
        name: &LockName,
        permits: u32,
        opts: &AcquireOptions,
    ) -> Result<LockGuard> {
        granted(
            name,
            opts,
            grant(self, name, opts, LockMode::Permit { permits }, true).await,
        )
    }
}

/// Helpers on every [`DistributedLock`], including `dyn DistributedLock`.
pub trait DistributedLockExt: DistributedLock {
    /// A handle on the lock `name` (a [`LockName`] or a string, validated
    /// here once): `locks.lock("jobs/nightly")?.acquire(&opts)`.
    fn lock(&self, name: impl IntoLockName) -> Result<NamedLock<'_, Self>> {
        Ok(NamedLock::new(self, name.into_lock_name()?))
    }

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
            run_section(guard, section).await
        }
    }

    /// Acquires every name of `names`, all or nothing, in one global order
    /// (sorted by name, so that two tasks needing overlapping sets never wait
    /// for each other in a cycle), within one wait of `opts.wait` for the
    /// whole set. On a timeout or an error everything already taken is
    /// released (in reverse order) before the error is returned. A name
    /// taken early and lost while the call waited for a later one fails the
    /// call the same way, with a (retryable) `Lost` error: a returned set
    /// is held in full. Duplicate or no names are an `InvalidArgument` error.
    ///
    /// ```
    /// # async fn demo() -> Result<(), lock_core::LockError> {
    /// use lock_core::{AcquireOptions, DistributedLockExt, LockName, MemoryLock};
    /// let locks = MemoryLock::new();
    /// let names = [LockName::new("accounts/b")?, LockName::new("accounts/a")?];
    /// let all = locks.acquire_all(&names, &AcquireOptions::new()).await?;
    /// assert_eq!(all.names().next().map(|n| n.as_str()), Some("accounts/a"));
    /// assert!(all.release().await?);
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
    /// ```
    fn acquire_all(
        &self,
        names: &[LockName],
        opts: &AcquireOptions,
    ) -> impl Future<Output = Result<MultiGuard>> + Send {
        crate::multi::acquire_all(self, names, opts)
    }

    /// [`acquire_all`](DistributedLockExt::acquire_all), then `section`, then
    /// the release of every name; the section stops as soon as any member
    /// is lost.
    fn with_all<F, Fut, T>(
        &self,
        names: &[LockName],
        opts: &AcquireOptions,
        section: F,
    ) -> impl Future<Output = Result<T>> + Send
    where
        F: FnOnce(Vec<GuardView>) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        async move {
            let all = self.acquire_all(names, opts).await?;
            all.run(section).await
        }
    }
}

impl<L: DistributedLock + ?Sized> DistributedLockExt for L {}

/// Helpers on every [`ReadWriteLock`], including `dyn ReadWriteLock`.
pub trait ReadWriteLockExt: ReadWriteLock {
    /// [`DistributedLockExt::with_lock`] for the read side.
    fn with_read<F, Fut, T>(
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
            let guard = self.acquire_read(name, opts).await?;
            run_section(guard, section).await
        }
    }

    /// [`DistributedLockExt::with_lock`] for the write side.
    fn with_write<F, Fut, T>(
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
            let guard = self.acquire_write(name, opts).await?;
            run_section(guard, section).await
        }
    }
}

impl<L: ReadWriteLock + ?Sized> ReadWriteLockExt for L {}

/// Helpers on every [`Semaphore`], including `dyn Semaphore`.
pub trait SemaphoreExt: Semaphore {
    /// [`DistributedLockExt::with_lock`] for one permit of `permits`.
    fn with_permit<F, Fut, T>(
        &self,
        name: &LockName,
        permits: u32,
        opts: &AcquireOptions,
        section: F,
    ) -> impl Future<Output = Result<T>> + Send
    where
        F: FnOnce(GuardView) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        async move {
            let guard = self.acquire_permit(name, permits, opts).await?;
            run_section(guard, section).await
        }
    }
}

impl<L: Semaphore + ?Sized> SemaphoreExt for L {}
