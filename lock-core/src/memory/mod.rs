//! `MemoryLock`: the in-process backend with the full semantics.
//!
//! TTL expiry on the monotonic clock, fencing tokens, FIFO waiting without
//! polling (each waiter has its own wake-up; waiters also wake at the
//! earliest expiry of a holder that blocks them), a loss event when a lock
//! is removed behind its holder, and every primitive: the mutex, the
//! read-write lock (writer preference, downgrade), the semaphore and the
//! leader election (`election.rs`: followers' view, lock-delay). It is
//! the embedded default for single-process use, the backend for users' unit
//! tests, and the proof that the conformance suite is right.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::line;
use crate::backend::mailbox::{Mailbox, MailboxStream};
use crate::backend::{
    add_saturating, LeaderStream, Lease, LeaseEvent, LeaseHandle, LeaseRequest, LockBackend,
    Renewal,
};
use crate::capabilities::{Capabilities, Fencing};
use crate::election::LeaderInfo;
use crate::error::{LockError, LockErrorKind, Result};
use crate::fencing::FencingToken;
use crate::holder::Holder as Description;
use crate::mode::LockMode;
use crate::name::LockName;
use crate::state::LossCause;
use crate::status::{ForceReleased, LockStatus};

/// An in-process lock service. Cloning shares the same locks.
///
/// ```
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// use lock_core::{AcquireOptions, DistributedLock, LockName, MemoryLock};
/// let locks = MemoryLock::new();
/// let name = LockName::new("cache-refresh")?;
/// let a = locks.acquire(&name, &AcquireOptions::new()).await?;
/// a.release().await?;
/// let b = locks.acquire(&name, &AcquireOptions::new()).await?;
/// assert!(b.fencing_token() > None);
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
#[derive(Clone, Default)]
pub struct MemoryLock {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
}

mod election;

/// The kinds of lock a name can be; each keeps its own state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Mutex,
    ReadWrite,
    Semaphore,
    Leader,
}

impl Kind {
    /// Every kind.
    const ALL: [Kind; 4] = [Kind::Mutex, Kind::ReadWrite, Kind::Semaphore, Kind::Leader];

    fn of(mode: LockMode) -> Self {
        match mode {
            LockMode::Read | LockMode::Write => Self::ReadWrite,
            LockMode::Permit { .. } => Self::Semaphore,
            LockMode::Leader => Self::Leader,
            _ => Self::Mutex,
        }
    }
}

#[derive(Default)]
struct State {
    locks: HashMap<(LockName, Kind), Entry>,
    next_id: u64,
}

#[derive(Default)]
struct Entry {
    holders: BTreeMap<u64, Holder>,
    /// Fencing counter: never reset, so tokens keep increasing.
    counter: u64,
    /// FIFO queue of waiters by ticket; each has its own wake-up.
    waiters: BTreeMap<u64, Waiter>,
    /// An election's followers and lock-delay (`election.rs`).
    followers: election::Followers,
}

struct Holder {
    mode: LockMode,
    expires: Instant,
    token: u64,
    /// Its guard's events (a force release's loss), read as a
    /// [`MailboxStream`] (nothing allocated until an event is queued, where
    /// a channel allocates for every acquisition); closed when the holder
    /// leaves, which ends the guard's event stream.
    events: Arc<Mailbox<LeaseEvent>>,
    /// The holder's description, as it asked ([`LeaseRequest::holder`]).
    described: Option<Description>,
    /// A leader's term (its value, start and lock-delay).
    term: Option<election::Term>,
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.events.close();
    }
}

struct Waiter {
    mode: LockMode,
    notify: Arc<Notify>,
}

impl Entry {
    fn purge_expired(&mut self, now: Instant) {
        let before = self.holders.len();
        let followers = &mut self.followers;
        self.holders.retain(|_, h| {
            let live = h.expires > now;
            if !live {
                followers.ended_unreleased(h, h.expires);
            }
            live
        });
        if self.holders.len() != before {
            self.announce();
        }
    }

    /// Whether `mode` may be granted now to a contender behind the waiters
    /// `ahead` (FIFO, with writer preference: a reader waits behind a
    /// waiting writer), by the rule of the line ([`line::blocker`]): the
    /// holders stand ahead of every waiter (their order among themselves
    /// does not change whether one blocks).
    fn grantable(&self, mode: LockMode, ahead: &[LockMode]) -> bool {
        let writes =
            |m: &LockMode| matches!(m, LockMode::Exclusive | LockMode::Write | LockMode::Leader);
        let line = ahead
            .iter()
            .rev()
            .chain(self.holders.values().map(|h| &h.mode))
            .map(writes);
        line::blocker(mode, line).is_none()
    }

    /// The modes of the waiters before `ticket` (all of them for `None`).
    fn ahead_of(&self, ticket: Option<u64>) -> Vec<LockMode> {
        self.waiters
            .range(..ticket.unwrap_or(u64::MAX))
            .map(|(_, w)| w.mode)
            .collect()
    }

    /// Wakes every waiter that could be granted now (they re-check in order).
    fn wake_eligible(&self) {
        let mut ahead = Vec::new();
        for waiter in self.waiters.values() {
            if self.grantable(waiter.mode, &ahead) {
                waiter.notify.notify_one();
            }
            ahead.push(waiter.mode);
        }
    }

    /// The earliest expiry among the holders, or the end of an election's
    /// lock-delay (after `now`) if that is sooner.
    fn next_expiry(&self, now: Instant) -> Option<Instant> {
        let expiry = self.holders.values().map(|h| h.expires).min();
        match (expiry, self.followers.delayed_until(now)) {
            (Some(e), Some(d)) => Some(e.min(d)),
            (e, d) => e.or(d),
        }
    }

    fn is_idle(&self) -> bool {
        self.holders.is_empty() && self.waiters.is_empty()
    }

    /// Whether the entry can go: nobody holds, waits or follows it, and it
    /// never granted (a counter that was used keeps tokens increasing).
    fn removable(&self) -> bool {
        self.is_idle() && self.counter == 0 && !self.followers.any()
    }
}

impl MemoryLock {
    /// An empty lock service.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The number of names with a holder or waiters now, over every kind of
    /// lock (for leak checks).
    pub fn active_names(&self) -> usize {
        let now = Instant::now();
        let mut st = self.state();
        st.locks
            .values_mut()
            .map(|e| {
                e.purge_expired(now);
                !e.is_idle()
            })
            .filter(|active| *active)
            .count()
    }

    /// Holders and waiters of `name` over every kind of lock, for leak checks.
    pub fn occupancy(&self, name: &LockName) -> (usize, usize) {
        let now = Instant::now();
        let mut st = self.state();
        let mut holders = 0;
        let mut waiters = 0;
        for kind in Kind::ALL {
            if let Some(entry) = st.locks.get_mut(&(name.clone(), kind)) {
                entry.purge_expired(now);
                holders += entry.holders.len();
                waiters += entry.waiters.len();
            }
        }
        (holders, waiters)
    }

    /// Grants `mode` on `name` if it is grantable for `ticket` (a queued
    /// waiter) or a newcomer (`None`).
    fn grab(&self, req: &LeaseRequest, ticket: Option<u64>) -> Option<Lease> {
        let now = Instant::now();
        let mut st = self.state();
        st.next_id += 1;
        let owner = st.next_id;
        let key = (req.name.clone(), Kind::of(req.mode));
        let entry = st.locks.entry(key).or_default();
        entry.purge_expired(now);
        let ahead = entry.ahead_of(ticket);
        if !entry.grantable(req.mode, &ahead) || entry.followers.delays(now) {
            return None;
        }
        if let Some(t) = ticket {
            entry.waiters.remove(&t);
        }
        let term = (req.mode == LockMode::Leader).then(|| election::Term::of(req));
        let lease = self.hold(
            entry,
            &req.name,
            (req.mode, owner),
            req.ttl,
            now,
            (req.holder.clone(), term),
        );
        // Readers and permits behind this one may be grantable too.
        entry.wake_eligible();
        entry.announce();
        Some(lease)
    }

    /// Records `owner` as a holder of `mode` (described by `described`, and
    /// a leader's `term`) and builds its lease.
    fn hold(
        &self,
        entry: &mut Entry,
        name: &LockName,
        (mode, owner): (LockMode, u64),
        ttl: Duration,
        now: Instant,
        (described, term): (Option<Description>, Option<election::Term>),
    ) -> Lease {
        entry.counter += 1;
        let token = entry.counter;
        let expires = add_saturating(now, ttl);
        let events = Arc::new(Mailbox::new());
        entry.holders.insert(
            owner,
            Holder {
                mode,
                expires,
                token,
                events: events.clone(),
                described,
                term,
            },
        );
        let handle = MemoryLease {
            lock: self.clone(),
            key: (name.clone(), Kind::of(mode)),
            owner,
        };
        Lease::new(Box::new(handle), expires)
            .with_token(Some(FencingToken::new(token)))
            .with_events(Box::pin(MailboxStream(events)))
    }
}

/// Spends a unit of the task's cooperative budget, yielding to the runtime
/// once it is used up: an in-process lock never has to wait, and a task
/// taking and releasing in a loop would otherwise keep its worker thread
/// (the other tasks, and every guard's keeper, would not run until it
/// stopped), where a remote backend yields on its sockets.
async fn cooperate() {
    tokio::task::coop::consume_budget().await;
}

/// Removes a waiter's ticket when its acquire ends or is dropped.
struct Ticket<'a> {
    lock: &'a MemoryLock,
    key: (LockName, Kind),
    id: u64,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut st = self.lock.state();
        if let Some(entry) = st.locks.get_mut(&self.key) {
            if entry.waiters.remove(&self.id).is_some() {
                // A writer that gives up may unblock the readers behind it.
                entry.wake_eligible();
            }
            if entry.removable() {
                st.locks.remove(&self.key);
            }
        }
    }
}

#[async_trait]
impl LockBackend for MemoryLock {
    fn backend_capabilities(&self) -> Capabilities {
        Capabilities::new("memory")
            .with_fencing(Fencing::InProcess)
            .with_fifo(true)
            .with_loss_events(true)
            .with_notified_wait(true)
            .with_read_write(true)
            .with_semaphore(true)
            .with_describes_holder(true)
            .with_election(true)
            .with_fault_tolerance("not applicable: one process")
    }

    async fn try_lock(&self, req: &LeaseRequest) -> Result<Option<Lease>> {
        cooperate().await;
        Ok(self.grab(req, None))
    }

    async fn lock(&self, req: &LeaseRequest, deadline: Instant) -> Result<Option<Lease>> {
        cooperate().await;
        if let Some(lease) = self.grab(req, None) {
            return Ok(Some(lease));
        }
        let key = (req.name.clone(), Kind::of(req.mode));
        let notify = Arc::new(Notify::new());
        let id = {
            let mut st = self.state();
            st.next_id += 1;
            let id = st.next_id;
            st.locks.entry(key.clone()).or_default().waiters.insert(
                id,
                Waiter {
                    mode: req.mode,
                    notify: notify.clone(),
                },
            );
            id
        };
        let _ticket = Ticket {
            lock: self,
            key: key.clone(),
            id,
        };
        loop {
            if let Some(lease) = self.grab(req, Some(id)) {
                return Ok(Some(lease.with_contended(true)));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            // Also wake when a holder's lease runs out.
            let wake = self
                .state()
                .locks
                .get(&key)
                .and_then(|e| e.next_expiry(now))
                .map_or(deadline, |exp| exp.min(deadline));
            tokio::select! {
                _ = notify.notified() => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        let now = Instant::now();
        let mut st = self.state();
        let Some(entry) = st.locks.get_mut(&(name.clone(), Kind::Mutex)) else {
            return Ok(LockStatus::new(false).with_waiters(Some(0)));
        };
        entry.purge_expired(now);
        let holder = entry.holders.values().next();
        let token = holder
            .map(|h| h.token)
            .or((entry.counter > 0).then_some(entry.counter))
            .map(FencingToken::new);
        Ok(LockStatus::new(holder.is_some())
            .with_token(token)
            .with_ttl_remaining(holder.map(|h| h.expires - now))
            .with_waiters(Some(entry.waiters.len()))
            .with_owner(
                entry
                    .holders
                    .keys()
                    .next()
                    .map(|o| format!("memory-owner-{o}")),
            )
            .with_holder(holder.and_then(|h| h.described.clone())))
    }

    /// Removes every holder of `name` (mutex, read-write lock and
    /// semaphore) at once: their guards get a loss event
    /// ([`LossCause::NotOwner`]) right away, and the waiters that can be
    /// granted now are woken in queue order.
    async fn force_release(&self, name: &LockName) -> Result<ForceReleased> {
        cooperate().await;
        let now = Instant::now();
        let mut st = self.state();
        let mut removed = [0usize; 3];
        for (i, kind) in [Kind::Mutex, Kind::ReadWrite, Kind::Semaphore]
            .into_iter()
            .enumerate()
        {
            let Some(entry) = st.locks.get_mut(&(name.clone(), kind)) else {
                continue;
            };
            entry.purge_expired(now);
            for (_, holder) in std::mem::take(&mut entry.holders) {
                let _ = holder.events.post(LeaseEvent::Lost(LossCause::NotOwner));
                removed[i] += 1;
            }
            entry.wake_eligible();
        }
        Ok(ForceReleased::none()
            .with_mutex(removed[0])
            .with_read_write(removed[1])
            .with_permits(removed[2]))
    }

    async fn leader(&self, name: &LockName) -> Result<Option<LeaderInfo>> {
        cooperate().await;
        Ok(self.leader_now(name))
    }

    async fn observe(&self, name: &LockName) -> Result<LeaderStream> {
        cooperate().await;
        Ok(self.follow(name))
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<(LockName, LockStatus)>> {
        let mut names: Vec<LockName> = {
            let now = Instant::now();
            let mut st = self.state();
            st.locks
                .iter_mut()
                .filter(|((name, kind), _)| {
                    *kind == Kind::Mutex && name.as_str().starts_with(prefix)
                })
                .filter_map(|((name, _), entry)| {
                    entry.purge_expired(now);
                    (!entry.holders.is_empty()).then(|| name.clone())
                })
                .collect()
        };
        names.sort();
        names.truncate(limit);
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let status = LockBackend::inspect(self, &name).await?;
            out.push((name, status));
        }
        Ok(out)
    }
}

struct MemoryLease {
    lock: MemoryLock,
    key: (LockName, Kind),
    owner: u64,
}

#[async_trait]
impl LeaseHandle for MemoryLease {
    async fn renew(&self, ttl: Duration) -> Result<Renewal> {
        let now = Instant::now();
        let mut st = self.lock.state();
        let Some(entry) = st.locks.get_mut(&self.key) else {
            return Ok(Renewal::Gone);
        };
        entry.purge_expired(now);
        match entry.holders.get_mut(&self.owner) {
            Some(h) => {
                h.expires = add_saturating(now, ttl);
                Ok(Renewal::Renewed {
                    valid_until: h.expires,
                })
            }
            None => Ok(Renewal::Gone),
        }
    }

    async fn release(&self) -> Result<bool> {
        cooperate().await;
        Ok(self.remove(false))
    }

    /// A release after the guard found the lease lost: a leader's
    /// lock-delay runs from the later of the loss and the lease's end.
    async fn release_after_loss(&self) -> Result<bool> {
        cooperate().await;
        Ok(self.remove(true))
    }

    async fn proclaim(&self, value: &str) -> Result<bool> {
        cooperate().await;
        let now = Instant::now();
        let mut st = self.lock.state();
        let Some(entry) = st.locks.get_mut(&self.key) else {
            return Ok(false);
        };
        entry.purge_expired(now);
        let Some(term) = entry
            .holders
            .get_mut(&self.owner)
            .and_then(|h| h.term.as_mut())
        else {
            return Ok(false);
        };
        term.value = value.to_string();
        entry.announce();
        Ok(true)
    }

    async fn downgrade(&self, ttl: Duration) -> Result<Lease> {
        let now = Instant::now();
        let mut st = self.lock.state();
        st.next_id += 1;
        let owner = st.next_id;
        let entry = st
            .locks
            .get_mut(&self.key)
            .ok_or_else(|| lost(&self.key.0))?;
        entry.purge_expired(now);
        let described = match entry.holders.get(&self.owner) {
            Some(h) if h.mode == LockMode::Write => h.described.clone(),
            Some(_) => return Err(LockError::invalid("only a write lease can be downgraded")),
            None => return Err(lost(&self.key.0)),
        };
        // Both at once: the read side is ours before the write side goes.
        entry.holders.remove(&self.owner);
        let lease = self.lock.hold(
            entry,
            &self.key.0,
            (LockMode::Read, owner),
            ttl,
            now,
            (described, None),
        );
        entry.wake_eligible();
        Ok(lease)
    }
}

impl MemoryLease {
    /// Removes this holder (`lost`: after its guard found it lost); whether
    /// it was still ours and unexpired.
    fn remove(&self, lost: bool) -> bool {
        let now = Instant::now();
        let mut st = self.lock.state();
        let Some(entry) = st.locks.get_mut(&self.key) else {
            return false;
        };
        let Some(holder) = entry.holders.remove(&self.owner) else {
            return false;
        };
        if lost {
            entry
                .followers
                .ended_unreleased(&holder, holder.expires.max(now));
        }
        entry.wake_eligible();
        entry.announce();
        holder.expires > now
    }
}

fn lost(name: &LockName) -> LockError {
    LockError::new(
        LockErrorKind::Lost,
        format!("lock {name} is no longer held"),
    )
}

impl std::fmt::Debug for MemoryLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryLock")
            .field("active_names", &self.active_names())
            .finish()
    }
}
