//! A lock handle bound to one name, and names given as strings.

use std::future::Future;

use crate::error::Result;
use crate::guard::{GuardView, LockGuard};
use crate::lock::{DistributedLock, DistributedLockExt};
use crate::name::LockName;
use crate::options::AcquireOptions;

/// What can name a lock: a [`LockName`], or a string that is validated
/// into one (an `InvalidArgument` error if it breaks the naming rules).
pub trait IntoLockName {
    /// The validated name.
    fn into_lock_name(self) -> Result<LockName>;
}

impl IntoLockName for LockName {
    fn into_lock_name(self) -> Result<LockName> {
        Ok(self)
    }
}

impl IntoLockName for &LockName {
    fn into_lock_name(self) -> Result<LockName> {
        Ok(self.clone())
    }
}

impl IntoLockName for &str {
    fn into_lock_name(self) -> Result<LockName> {
        LockName::new(self)
    }
}

impl IntoLockName for String {
    fn into_lock_name(self) -> Result<LockName> {
        LockName::new(self)
    }
}

impl IntoLockName for &String {
    fn into_lock_name(self) -> Result<LockName> {
        LockName::new(self.as_str())
    }
}

/// One lock of a lock service, by name: the name is validated once, and the
/// calls need no name. Made by [`DistributedLockExt::lock`].
///
/// ```
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// use lock_core::{AcquireOptions, DistributedLockExt, MemoryLock};
/// let locks = MemoryLock::new();
/// let nightly = locks.lock("jobs/nightly")?;
/// let guard = nightly.acquire(&AcquireOptions::new()).await?;
/// assert!(nightly.try_acquire(&AcquireOptions::new()).await?.is_none());
/// guard.release().await?;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
pub struct NamedLock<'a, L: ?Sized> {
    locks: &'a L,
    name: LockName,
}

impl<'a, L: DistributedLock + ?Sized> NamedLock<'a, L> {
    pub(crate) fn new(locks: &'a L, name: LockName) -> Self {
        Self { locks, name }
    }

    /// The name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// [`DistributedLock::try_acquire`] of this name.
    pub async fn try_acquire(&self, opts: &AcquireOptions) -> Result<Option<LockGuard>> {
        self.locks.try_acquire(&self.name, opts).await
    }

    /// [`DistributedLock::acquire`] of this name.
    pub async fn acquire(&self, opts: &AcquireOptions) -> Result<LockGuard> {
        self.locks.acquire(&self.name, opts).await
    }

    /// [`DistributedLockExt::with_lock`] of this name.
    pub fn with_lock<F, Fut, T>(
        &self,
        opts: &AcquireOptions,
        section: F,
    ) -> impl Future<Output = Result<T>> + Send + '_
    where
        F: FnOnce(GuardView) -> Fut + Send + 'a,
        Fut: Future<Output = T> + Send + 'a,
        T: Send + 'a,
        L: Sync,
    {
        let opts = opts.clone();
        async move { self.locks.with_lock(&self.name, &opts, section).await }
    }
}

impl<L: ?Sized> std::fmt::Debug for NamedLock<'_, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamedLock")
            .field("name", &self.name)
            .finish()
    }
}
