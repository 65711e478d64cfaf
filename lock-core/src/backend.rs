//! The backend seam: the small, protocol-only interface a backend implements.
//!
//! A backend implements [`LockBackend`] and gets [`crate::DistributedLock`]
//! for free: the core does option validation, deadlines, the guard's state
//! machine, keep-alive, background release, metrics and tracing once for
//! every backend.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio::time::Instant;

use crate::capabilities::Capabilities;
use crate::error::Result;
use crate::fencing::FencingToken;
use crate::guard::LossCause;
use crate::name::LockName;
use crate::options::RetryPolicy;

/// What the core asks a backend for: one lease on `name`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseRequest {
    /// The lock name.
    pub name: LockName,
    /// The requested lease TTL (validated: 1 ms ..= [`crate::MAX_TTL`]).
    pub ttl: Duration,
    /// The retry delays to use where the backend retries.
    pub retry: RetryPolicy,
}

impl LeaseRequest {
    /// A request for `name` with `ttl` and the default retry policy.
    pub fn new(name: LockName, ttl: Duration) -> Self {
        Self {
            name,
            ttl,
            retry: RetryPolicy::default(),
        }
    }

    /// Sets the retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }
}

/// The outcome of renewing a lease.
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
    /// may answer from the session's state without a request per lease.
    async fn renew(&self, ttl: Duration) -> Result<Renewal>;

    /// Removes the lease if it is still ours; `Ok(true)` if it was, `Ok(false)`
    /// if it was already gone or taken over. Must never remove someone else's lock.
    async fn release(&self) -> Result<bool>;
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
        }
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
            .finish_non_exhaustive()
    }
}

/// What a backend can tell about a lock without taking it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// Whether someone holds it now.
    pub held: bool,
    /// The holder's fencing token where the backend can tell it; on Redis it
    /// is the last token issued, which is the holder's only while the holder
    /// is one of our clients (a foreign client such as redis-py does not
    /// advance the counter).
    pub token: Option<FencingToken>,
    /// The remaining server-side TTL, where known.
    pub ttl_remaining: Option<Duration>,
    /// The number of waiters, where known (etcd, ZooKeeper contender keys).
    pub waiters: Option<usize>,
}

impl LockStatus {
    /// A status that says only whether the lock is held.
    pub fn new(held: bool) -> Self {
        Self {
            held,
            ..Self::default()
        }
    }

    /// Sets the token.
    pub fn with_token(mut self, token: Option<FencingToken>) -> Self {
        self.token = token;
        self
    }

    /// Sets the remaining TTL.
    pub fn with_ttl_remaining(mut self, ttl: Option<Duration>) -> Self {
        self.ttl_remaining = ttl;
        self
    }

    /// Sets the number of waiters.
    pub fn with_waiters(mut self, waiters: Option<usize>) -> Self {
        self.waiters = waiters;
        self
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
}

/// The clock drift allowance for a lease of `ttl`: 1% of the TTL plus 2 ms,
/// as the Redlock specification suggests.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// End of validity for a lease of `ttl` requested at `start` (taken before the
/// request was sent): `start + ttl - drift(ttl)`.
pub fn validity(start: Instant, ttl: Duration) -> Instant {
    start + ttl.saturating_sub(drift(ttl))
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
