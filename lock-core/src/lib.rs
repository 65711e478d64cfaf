//! # lock-core: the distlock contract
//!
//! One pluggable distributed-lock abstraction, honest about what each backend
//! guarantees.
//!
//! - [`DistributedLock`]: the object-safe trait users hold as
//!   `Arc<dyn DistributedLock>`: [`try_acquire`](DistributedLock::try_acquire),
//!   [`acquire`](DistributedLock::acquire) (waits, cancellable by dropping),
//!   [`capabilities`](DistributedLock::capabilities), [`inspect`](DistributedLock::inspect).
//! - [`LockGuard`]: the proof of holding, the same for every backend: an
//!   optional [`FencingToken`], `valid_until` on the monotonic clock, a
//!   [`GuardState`] (held / suspended / lost with a [`LossCause`]), a
//!   [`lost`](LockGuard::lost) future, [`extend`](LockGuard::extend),
//!   [`release`](LockGuard::release); dropping it releases in the background.
//! - [`DistributedLockExt::with_lock`]: runs a critical section and stops it
//!   if the lock is lost; [`DistributedLockExt::acquire_all`] takes several
//!   names in one global order, all or nothing ([`MultiGuard`]).
//! - [`ReadWriteLock`] (many readers or one writer, with downgrade) and
//!   [`Semaphore`] (N permits): the same [`LockGuard`], on every backend that
//!   can keep them honest ([`Capabilities::read_write`],
//!   [`Capabilities::semaphore`]).
//! - [`LeaderElection`]: candidates [`campaign`](LeaderElection::campaign)
//!   for a name and one leads at a time; its [`Leadership`] is a term held
//!   like a guard, whose [`epoch`](Leadership::epoch) is the term's fencing
//!   token, with [`proclaim`](Leadership::proclaim) and
//!   [`resign`](Leadership::resign); followers read
//!   [`leader`](LeaderElection::leader) and
//!   [`observe`](LeaderElection::observe) every change
//!   ([`Capabilities::election`]). [`LockService`] is all of these at once.
//! - [`TokenFence`] and [`FencedRegister`]: the resource side of fencing.
//! - [`MemoryLock`]: the in-process backend.
//! - [`backend`]: the toolkit of a backend author: the small seam a backend
//!   implements ([`backend::LockBackend`], [`backend::LeaseHandle`]) and
//!   what backends share; the core does validation, deadlines, keep-alive,
//!   the guard state machine, background release, metrics ([`metrics`]) and
//!   tracing once for all.
//!
//! ## A lease is not a mutex
//! A client paused longer than its TTL (GC, swap, SIGSTOP) wakes up believing
//! it holds a lock that has since been granted to someone else. No lock
//! service can prevent that; what helps is (1) the fencing token, checked by
//! the resource ([`TokenFence`]), and (2) the guard's state and loss signal,
//! so that code stops as soon as a loss is known. All time bounds use
//! `tokio::time::Instant` (monotonic), never the wall clock; time the machine
//! spends suspended counts against every validity.
#![deny(missing_docs)]

mod acquire;
pub mod backend;
mod capabilities;
mod clock;
mod election;
mod error;
mod fencing;
mod guard;
mod guard_states;
mod holder;
mod lazy_task;
mod lock;
mod memory;
pub mod metrics;
mod mode;
mod multi;
mod name;
mod named;
mod options;
mod resume;
mod section;
mod state;
mod status;
mod tls;

pub use capabilities::{Capabilities, Fencing};
pub use election::{
    CampaignOptions, LeaderElection, LeaderElectionExt, LeaderInfo, Leadership,
    MAX_LEADER_VALUE_LEN,
};
pub use error::{LockError, LockErrorKind, NodeFailure, NodeFailureReason, Result};
pub use fencing::{FencedRegister, FencingToken, StaleToken, TokenFence};
pub use guard::{GuardView, LockGuard};
pub use guard_states::{GuardStateRef, GuardStates, StatesClosed};
pub use holder::{Holder, MAX_NOTE_LEN};
pub use lock::{
    DistributedLock, DistributedLockExt, LockService, ReadWriteLock, ReadWriteLockExt, Semaphore,
    SemaphoreExt,
};
pub use memory::MemoryLock;
pub use mode::{LockMode, MAX_PERMITS};
pub use multi::MultiGuard;
pub use name::{LockName, MAX_NAME_LEN};
pub use named::{IntoLockName, NamedLock};
pub use options::{
    check_duration, AcquireOptions, KeepAlive, RetryPolicy, ERROR_BACKOFF, MAX_TTL, MAX_WAIT,
    MIN_TTL, WAIT_FOREVER,
};
pub use state::{GuardState, LossCause};
pub use status::{ForceReleased, LockStatus};
pub use tls::{TlsConfig, TlsMaterial};

/// Re-exported so backends implement the seam with the same macro version.
pub use async_trait::async_trait;
