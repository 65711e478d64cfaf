//! The backend author's toolkit: the small, protocol-only seam a backend
//! implements, and what backends share.
//!
//! A backend implements [`LockBackend`] and gets [`crate::DistributedLock`]
//! for free: the core does option validation, deadlines, the guard's state
//! machine, keep-alive, background release, metrics and tracing once for
//! every backend. Beside the seam:
//!
//! - [`line`](mod@line): the rule of a lock's line (which contender ahead a newcomer
//!   waits for, in a mutex, a read-write lock or a semaphore), for backends
//!   that keep a queue of contenders on the server;
//! - [`session`]: one session's news (suspended, confirmed, lost) fanned out
//!   to every lease on it, for backends whose leases hang on a session;
//! - [`mailbox`]: a small unbounded queue with one waker, for event streams;
//! - [`validity`], [`drift`], [`add_saturating`]: the time arithmetic of a
//!   lease, and [`CleanupOnDrop`] for cancel-safe waits.
//!
//! Users of locks need none of this; its API follows the core's seam and
//! may change in a minor version.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio::time::Instant;

use crate::capabilities::Capabilities;
use crate::election::info::{check_value, LeaderInfo};
use crate::error::Result;
use crate::fencing::FencingToken;
use crate::holder::Holder;
use crate::mode::LockMode;
use crate::name::LockName;
use crate::options::RetryPolicy;
use crate::state::LossCause;
use crate::status::{ForceReleased, LockStatus};

pub mod line;
pub mod mailbox;
pub mod session;

/// What the core asks a backend for: one lease on `name`. Built only through
/// [`LeaseRequest::new`], which validates the TTL, so a backend can compute
/// with it without overflow.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseRequest {
    /// The lock name.
    pub name: LockName,
    /// The requested lease TTL (validated: [`crate::MIN_TTL`] ..= [`crate::MAX_TTL`]).
    pub ttl: Duration,
    /// The retry delays to use where the backend retries.
    pub retry: RetryPolicy,
    /// The kind of lease (a mutex unless set with [`LeaseRequest::with_mode`]).
    pub mode: LockMode,
    /// Who asks, to be stored with the holder's entry where the backend
    /// can ([`LockStatus::holder`]): the core sets this process's host and
    /// id and the caller's note; `None` (the default of
    /// [`LeaseRequest::new`]) stores nothing.
    pub holder: Option<Holder>,
    /// A leader's published value ([`LockMode::Leader`] only): what
    /// [`LockBackend::leader`] and [`LockBackend::observe`] show while this
    /// lease leads.
    pub value: Option<String>,
    /// A leader's lock-delay ([`LockMode::Leader`] only): if this lease ends
    /// without being released (it expired, or its session did), no new term
    /// of the election may start until this long after its end. Zero: none.
    pub lock_delay: Duration,
}

impl LeaseRequest {
    /// A mutex request for `name` with `ttl` and the default retry policy;
    /// an `InvalidArgument` error if `ttl` is outside
    /// [`crate::MIN_TTL`] ..= [`crate::MAX_TTL`].
    pub fn new(name: LockName, ttl: Duration) -> Result<Self> {
        crate::options::check_ttl(ttl)?;
        Ok(Self {
            name,
            ttl,
            retry: RetryPolicy::default(),
            mode: LockMode::Exclusive,
            holder: None,
            value: None,
            lock_delay: Duration::ZERO,
        })
    }

    /// Sets a leader's published value (see [`LeaseRequest::value`]); an
    /// `InvalidArgument` error if it is longer than [`crate::MAX_LEADER_VALUE_LEN`].
    pub fn with_value(mut self, value: impl Into<String>) -> Result<Self> {
        self.value = Some(check_value(value.into())?);
        Ok(self)
    }

    /// Sets a leader's lock-delay (see [`LeaseRequest::lock_delay`]); an
    /// `InvalidArgument` error above [`crate::MAX_TTL`].
    pub fn with_lock_delay(mut self, delay: Duration) -> Result<Self> {
        crate::options::check_duration("lock_delay", delay, Duration::ZERO, crate::MAX_TTL)?;
        self.lock_delay = delay;
        Ok(self)
    }

    /// Sets the holder's description (see [`LeaseRequest::holder`]).
    pub fn with_holder(mut self, holder: Holder) -> Self {
        self.holder = Some(holder);
        self
    }

    /// The text a backend stores for [`LeaseRequest::holder`]
    /// ([`Holder::to_json`]), `None` without one.
    pub fn holder_json(&self) -> Option<String> {
        self.holder.as_ref().map(Holder::to_json)
    }

    /// Sets the retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the kind of lease; an `InvalidArgument` error for a semaphore
    /// without permits or with more than [`crate::MAX_PERMITS`].
    pub fn with_mode(mut self, mode: LockMode) -> Result<Self> {
        self.mode = mode.validate()?;
        Ok(self)
    }
}

/// The outcome of renewing a lease that the server answered.
///
/// A renewal that fails with an error has an UNKNOWN outcome: the request may
/// have reached the server and been applied, or not. The core then assumes
/// the worse of the two for the guard's validity: the earlier of its current
/// validity and what the renewal could have set (its TTL from when it was
/// sent, less the drift allowance), so an extend to a shorter TTL whose reply
/// was lost never leaves a guard looking held longer than the server keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// Still ours, now valid until this instant (monotonic, drift-adjusted,
    /// measured from before the renewal request was sent).
    Renewed {
        /// The new end of validity.
        valid_until: Instant,
    },
    /// The server says the lock is no longer ours (expired, deleted, taken over).
    Gone,
}

/// Something the backend noticed about a lease by itself, between renewals.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseEvent {
    /// Contact with the server is lost for now; the lease may still be valid.
    Suspended {
        /// What happened, in words.
        reason: String,
    },
    /// Contact is back; the core renews at once to confirm the lease.
    Resumed,
    /// The backend's session (etcd lease, ZooKeeper session) vouches for this
    /// lease until `valid_until` (monotonic, drift-adjusted). The guard's
    /// validity is the earlier of its own (acquire plus TTL, or the last
    /// renewal plus TTL) and the last session confirmation, so a guard whose TTL is
    /// longer than the session's never outlives the session, and a guard with
    /// keep-alive off still lasts its own TTL while the session is confirmed.
    /// Also marks a suspended guard held again.
    Confirmed {
        /// Until when the session vouches for the lease.
        valid_until: Instant,
    },
    /// The lease is gone for good.
    Lost(LossCause),
}

/// The operations on one granted lease. The handle owns what it needs
/// (a cloned client, the owner token, the key), so it can outlive the backend
/// value that created it.
#[async_trait]
pub trait LeaseHandle: Send + Sync + 'static {
    /// Extends the lease to `ttl` from now if it is still ours.
    ///
    /// Backends whose liveness is per session (etcd lease, ZooKeeper session)
    /// may answer from the session's state without a request per lease. An
    /// error means the outcome is unknown (see [`Renewal`]).
    async fn renew(&self, ttl: Duration) -> Result<Renewal>;

    /// Removes the lease if it is still ours; `Ok(true)` if it was, `Ok(false)`
    /// if it was already gone or taken over. Must never remove someone else's lock.
    async fn release(&self) -> Result<bool>;

    /// Removes a lease that ended without being released: its guard's
    /// validity passed, or it was lost (the clean-up after a loss, or a
    /// release that came too late). Same contract as
    /// [`release`](Self::release); a leader's lease ([`LockMode::Leader`])
    /// keeps its lock-delay ([`LeaseRequest::lock_delay`]) as if it had
    /// expired on the server. The default is [`release`](Self::release).
    async fn release_after_loss(&self) -> Result<bool> {
        self.release().await
    }

    /// Turns this write lease into a read lease of the same name with `ttl`,
    /// never leaving the name without our lease in between (take the read
    /// side first, then drop the write side, or both at once). On `Ok` the
    /// write side is gone and the returned lease is the read side. On `Err`
    /// the core calls [`release`](Self::release) on this lease, which must
    /// then remove whatever the downgrade left: the write side, or the read
    /// side where a downgrade whose answer was lost was applied after all (a
    /// backend whose read side is another key removes it itself). The
    /// guard stops saying held when the call is made. The default says the
    /// backend has no read-write locks.
    async fn downgrade(&self, ttl: Duration) -> Result<Lease> {
        let _ = ttl;
        Err(crate::LockError::new(
            crate::LockErrorKind::Unsupported,
            "this backend has no read-write locks",
        ))
    }

    /// Replaces the published value of this leader lease
    /// ([`LockMode::Leader`]) if it still leads: `Ok(true)` once the value
    /// is the leader's, `Ok(false)` if the lease is gone (nothing was
    /// written). Compares the owner like [`release`](Self::release): never
    /// writes over another leader's value. An error leaves the outcome
    /// unknown. The default says the backend has no elections.
    async fn proclaim(&self, value: &str) -> Result<bool> {
        let _ = value;
        Err(crate::LockError::new(
            crate::LockErrorKind::Unsupported,
            "this backend has no leader elections",
        ))
    }
}

/// A granted lease, as a backend returns it to the core.
#[non_exhaustive]
pub struct Lease {
    /// The fencing token, if the backend has them.
    pub token: Option<FencingToken>,
    /// End of validity on the monotonic clock, drift-adjusted and measured from
    /// before the request that granted it was sent (see [`validity`]).
    pub valid_until: Instant,
    /// Until when the backend's session vouches for the lease, for
    /// session-based backends (see [`LeaseEvent::Confirmed`]); `None` when the
    /// lease's own validity is all there is.
    pub session_until: Option<Instant>,
    /// Whether the lock was held by someone else when this acquisition began
    /// (feeds the contention metric).
    pub contended: bool,
    /// Renew and release.
    pub handle: Box<dyn LeaseHandle>,
    /// Events the backend sees by itself (watch of the key, session state).
    pub events: Option<BoxStream<'static, LeaseEvent>>,
    /// Where the lease lives on the server (the etcd key, the ZooKeeper node
    /// path, the Redis key), for operators and tools; `None` if not told.
    pub key: Option<Arc<str>>,
}

impl Lease {
    /// A lease valid until `valid_until`, with no token, no events, uncontended.
    pub fn new(handle: Box<dyn LeaseHandle>, valid_until: Instant) -> Self {
        Self {
            token: None,
            valid_until,
            session_until: None,
            contended: false,
            handle,
            events: None,
            key: None,
        }
    }

    /// Sets where the lease lives on the server (see [`Lease::key`]).
    pub fn with_key(mut self, key: impl Into<Arc<str>>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the fencing token.
    pub fn with_token(mut self, token: Option<FencingToken>) -> Self {
        self.token = token;
        self
    }

    /// Sets the session bound (see [`LeaseEvent::Confirmed`]).
    pub fn with_session_until(mut self, until: Instant) -> Self {
        self.session_until = Some(until);
        self
    }

    /// Marks whether the acquisition met a held lock.
    pub fn with_contended(mut self, contended: bool) -> Self {
        self.contended = contended;
        self
    }

    /// Sets the event stream.
    pub fn with_events(mut self, events: BoxStream<'static, LeaseEvent>) -> Self {
        self.events = Some(events);
        self
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("token", &self.token)
            .field("valid_until", &self.valid_until)
            .field("session_until", &self.session_until)
            .field("contended", &self.contended)
            .field("events", &self.events.is_some())
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// The protocol side of a lock backend. Implement this; the core turns it into
/// a [`crate::DistributedLock`].
#[async_trait]
pub trait LockBackend: Send + Sync + 'static {
    /// What this backend guarantees.
    fn backend_capabilities(&self) -> Capabilities;

    /// One attempt, no waiting: the lease, or `None` if the lock is held.
    /// Dropping the future must leave nothing behind on the server.
    async fn try_lock(&self, req: &LeaseRequest) -> Result<Option<Lease>>;

    /// Waits until the lock is granted or `deadline` passes (`None`), in the
    /// backend's own herd-free way (notification, predecessor watch). Dropping
    /// the future is cancellation and must leave nothing behind on the server.
    ///
    /// The default retries [`LockBackend::try_lock`] with the request's
    /// jittered backoff: correct, but it polls; backends override it.
    async fn lock(&self, req: &LeaseRequest, deadline: Instant) -> Result<Option<Lease>> {
        let mut attempt = 0u32;
        loop {
            if let Some(lease) = self.try_lock(req).await? {
                return Ok(Some(lease.with_contended(attempt > 0)));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let delay = req.retry.delay(attempt).min(deadline - now);
            tokio::time::sleep(delay).await;
            attempt = attempt.saturating_add(1);
        }
    }

    /// What the server says about `name` now (for status commands and tests).
    async fn inspect(&self, name: &LockName) -> Result<LockStatus>;

    /// The mutexes held now whose names start with `prefix` (every one for
    /// ""), sorted by name, at most `limit`, each with what [`inspect`]
    /// would say of it. The default says the backend cannot list.
    ///
    /// [`inspect`]: LockBackend::inspect
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<(LockName, LockStatus)>> {
        let _ = (prefix, limit);
        Err(crate::LockError::new(
            crate::LockErrorKind::Unsupported,
            "this backend cannot list its locks",
        ))
    }

    /// Removes whoever holds `name` now, as an operator would, whatever
    /// owner holds it: the mutex's holder, every holder of the read-write
    /// lock and every permit of the semaphore of that name, where the
    /// backend offers them. Waiters are not removed: the lock goes to the
    /// next of them exactly as on a normal release (the same hand-off and
    /// notification, queue order kept). The evicted holders' guards find
    /// out at their next renewal or server event and become lost
    /// ([`LossCause::NotOwner`]); their processes may still be running
    /// their critical sections, and only a store that checks fencing
    /// tokens refuses their late writes.
    ///
    /// Bounded by the backend's request timeouts like every other call;
    /// an error leaves the outcome unknown (some holders may be removed).
    /// The default says the backend cannot do it (`Unsupported`).
    async fn force_release(&self, name: &LockName) -> Result<ForceReleased> {
        let _ = name;
        Err(crate::LockError::new(
            crate::LockErrorKind::Unsupported,
            "this backend cannot force a release",
        ))
    }

    /// The leader of the election `name` now, as the server says: its
    /// value and epoch (the fencing token of its term), or `None` when no
    /// term runs. The default says the backend has no elections.
    async fn leader(&self, name: &LockName) -> Result<Option<LeaderInfo>> {
        let _ = name;
        Err(no_elections())
    }

    /// The leaders of the election `name` as they change: first who leads
    /// now, then every change (a new term, a proclaimed value, no leader),
    /// pushed by the server (no polling). The stream ends with an error
    /// item when the backend can no longer follow the election. The
    /// default says the backend has no elections.
    async fn observe(&self, name: &LockName) -> Result<LeaderStream> {
        let _ = name;
        Err(no_elections())
    }
}

/// What [`LockBackend::observe`] yields.
pub type LeaderStream = BoxStream<'static, Result<Option<LeaderInfo>>>;

/// The [`LeaderStream`] of a follower task that sends who leads, change by
/// change, into `rx`'s channel; it ends once the task drops its sender,
/// and the task sees it gone once the stream is dropped
/// (`UnboundedSender::closed`).
pub fn leader_stream(
    rx: tokio::sync::mpsc::UnboundedReceiver<Result<Option<LeaderInfo>>>,
) -> LeaderStream {
    use futures::StreamExt;
    futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .boxed()
}

/// The error of a backend without elections.
fn no_elections() -> crate::LockError {
    crate::LockError::new(
        crate::LockErrorKind::Unsupported,
        "this backend has no leader elections",
    )
}

#[async_trait]
impl<B: LockBackend + ?Sized> LockBackend for Arc<B> {
    fn backend_capabilities(&self) -> Capabilities {
        (**self).backend_capabilities()
    }
    async fn try_lock(&self, req: &LeaseRequest) -> Result<Option<Lease>> {
        (**self).try_lock(req).await
    }
    async fn lock(&self, req: &LeaseRequest, deadline: Instant) -> Result<Option<Lease>> {
        (**self).lock(req, deadline).await
    }
    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        (**self).inspect(name).await
    }
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<(LockName, LockStatus)>> {
        (**self).list(prefix, limit).await
    }
    async fn force_release(&self, name: &LockName) -> Result<ForceReleased> {
        (**self).force_release(name).await
    }
    async fn leader(&self, name: &LockName) -> Result<Option<LeaderInfo>> {
        (**self).leader(name).await
    }
    async fn observe(&self, name: &LockName) -> Result<LeaderStream> {
        (**self).observe(name).await
    }
}

/// The clock drift allowance for a lease of `ttl`: 1% of the TTL plus 2 ms,
/// as the Redlock specification suggests.
pub fn drift(ttl: Duration) -> Duration {
    (ttl / 100).saturating_add(Duration::from_millis(2))
}

/// End of validity for a lease of `ttl` requested at `start` (taken before the
/// request was sent): `start + ttl - drift(ttl)`. Saturates instead of
/// overflowing for any `ttl` (see [`add_saturating`]).
pub fn validity(start: Instant, ttl: Duration) -> Instant {
    add_saturating(start, ttl.saturating_sub(drift(ttl)))
}

/// `at + d`, or a point about 30 years after `at` if that would overflow:
/// how the core and the backends add a configured duration to an instant
/// without a panic, whatever the configuration says.
pub fn add_saturating(at: Instant, d: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);
    // Instants count from boot in whole seconds of an i64: 30 years more
    // never overflows, and the fallback is never taken.
    at.checked_add(d.min(FAR)).unwrap_or(at)
}

/// Runs a clean-up future in the background if dropped while armed: the way a
/// backend makes a waiting acquire cancel-safe (delete the contender key or
/// node it created when the acquire future is dropped). Never blocks.
#[must_use = "dropping it at once runs the clean-up at once"]
pub struct CleanupOnDrop {
    cleanup: Option<BoxFuture<'static, ()>>,
}

impl CleanupOnDrop {
    /// Arms `cleanup`.
    pub fn new(cleanup: impl Future<Output = ()> + Send + 'static) -> Self {
        Self {
            cleanup: Some(Box::pin(cleanup)),
        }
    }

    /// Disarms it: the state it would remove now belongs to a guard.
    pub fn disarm(mut self) {
        self.cleanup = None;
    }

    /// Runs the clean-up in the caller's task until `by`, and whatever is
    /// not done by then in the background: how a waiting acquire whose
    /// deadline passed leaves the line before it returns (its caller may
    /// exit at once, as `distlock run --wait` does) while the call keeps its
    /// bound. If this future is dropped, the rest goes on in the background
    /// too.
    pub async fn finish_by(mut self, by: Instant) {
        if let Some(cleanup) = self.cleanup.as_mut() {
            if tokio::time::timeout_at(by, cleanup).await.is_ok() {
                self.cleanup = None;
            }
        }
    }

    /// Ends the clean-up of a waiting acquire by its `outcome`: disarmed if
    /// it was granted (the state is the guard's now), run until `by` if its
    /// deadline passed ([`finish_by`](Self::finish_by)), left to the
    /// background after an error (so that the error goes back at once).
    /// The outcome is looked at before the returned future runs.
    pub fn settle<T>(
        self,
        outcome: &Result<Option<T>>,
        by: Instant,
    ) -> impl Future<Output = ()> + Send + 'static {
        let timed_out = match outcome {
            Ok(Some(_)) => {
                self.disarm();
                None
            }
            Ok(None) => Some(self),
            Err(_) => {
                drop(self);
                None
            }
        };
        async move {
            if let Some(cleanup) = timed_out {
                cleanup.finish_by(by).await;
            }
        }
    }
}

impl Drop for CleanupOnDrop {
    fn drop(&mut self) {
        if let Some(cleanup) = self.cleanup.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    rt.spawn(cleanup);
                }
                Err(_) => tracing::warn!(
                    "distlock: clean-up dropped outside a tokio runtime; the server state expires with its TTL"
                ),
            }
        }
    }
}

impl std::fmt::Debug for CleanupOnDrop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CleanupOnDrop")
            .field("armed", &self.cleanup.is_some())
            .finish()
    }
}
