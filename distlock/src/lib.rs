#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backends;
mod connect;
mod duration;
mod parse;
mod scheme;
mod url;

pub use connect::connect;
pub use duration::parse_duration;
pub use url::{Endpoint, LockUrl, Scheme};

// The contract: every type a user of any backend needs.
#[doc(no_inline)]
pub use lock_core::{
    async_trait, metrics, AcquireOptions, CampaignOptions, Capabilities, DistributedLock,
    DistributedLockExt, FencedRegister, Fencing, FencingToken, ForceReleased, GuardState,
    GuardStateRef, GuardStates, GuardView, Holder, KeepAlive, LeaderElection, LeaderElectionExt,
    LeaderInfo, Leadership, LockError, LockErrorKind, LockGuard, LockMode, LockName, LockService,
    LockStatus, LossCause, MemoryLock, MultiGuard, NodeFailure, NodeFailureReason, ReadWriteLock,
    ReadWriteLockExt, Result, RetryPolicy, Semaphore, SemaphoreExt, StaleToken, StatesClosed,
    TlsConfig, TokenFence, ERROR_BACKOFF, MAX_LEADER_VALUE_LEN, MAX_NAME_LEN, MAX_NOTE_LEN,
    MAX_PERMITS, MAX_TTL, MAX_WAIT, MIN_TTL, WAIT_FOREVER,
};

/// One `use distlock::prelude::*;` brings every trait whose methods a lock
/// user calls (`acquire`, `with_lock`, `acquire_all`, `acquire_read`,
/// `acquire_permit`, `campaign`, `with_leadership`, ...), and the types
/// those calls take and return.
///
/// ```
/// # async fn demo() -> Result<(), distlock::LockError> {
/// use distlock::prelude::*;
/// let locks = distlock::connect("memory://").await?;
/// let name = LockName::new("reports/nightly")?;
/// let n = locks
///     .with_lock(&name, &AcquireOptions::new(), |view| async move {
///         assert!(view.fencing_token().is_some());
///         7
///     })
///     .await?;
/// assert_eq!(n, 7);
/// let reader = locks.acquire_read(&name, &AcquireOptions::new()).await?;
/// reader.release().await?;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
pub mod prelude {
    pub use lock_core::{
        AcquireOptions, CampaignOptions, DistributedLock, DistributedLockExt, FencingToken,
        GuardView, IntoLockName, LeaderElection, LeaderElectionExt, LeaderInfo, Leadership,
        LockError, LockErrorKind, LockGuard, LockName, LockService, MultiGuard, ReadWriteLock,
        ReadWriteLockExt, Semaphore, SemaphoreExt,
    };
}

/// The whole core crate, including the backend author's toolkit
/// ([`lock_core::backend`]: the seam [`lock_core::backend::LockBackend`],
/// [`lock_core::backend::LeaseHandle`], ...) for writing a backend of your own.
pub use lock_core;

/// The single-Redis backend ([`redis::RedisLock`], [`redis::RedisLockConfig`]).
///
/// Available on crate feature `redis` only (on by default).
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use lock_redis as redis;

/// The Redlock backend ([`redlock::RedlockLock`], [`redlock::RedlockConfig`]).
///
/// Available on crate feature `redlock` only (on by default).
#[cfg(feature = "redlock")]
#[cfg_attr(docsrs, doc(cfg(feature = "redlock")))]
pub use lock_redlock as redlock;

/// The etcd backend ([`etcd::EtcdLock`], [`etcd::EtcdConfig`]).
///
/// Available on crate feature `etcd` only (on by default).
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub use lock_etcd as etcd;

/// The ZooKeeper backend ([`zk::ZkLock`], [`zk::ZkConfig`]).
///
/// Available on crate feature `zk` only (on by default).
#[cfg(feature = "zk")]
#[cfg_attr(docsrs, doc(cfg(feature = "zk")))]
pub use lock_zk as zk;

/// The repository README's examples, compiled (and the in-memory one run) as
/// doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
