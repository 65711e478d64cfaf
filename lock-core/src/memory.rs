//! `MemoryLock`: the in-process backend with the full semantics.
//!
//! TTL expiry on the monotonic clock, fencing tokens, FIFO waiting without
//! polling (each waiter has its own wake-up; the head also wakes at the
//! holder's expiry), and a loss event when a lock is removed behind its
//! holder. It is the embedded default for single-process use, the backend for
//! users' unit tests, and the proof that the conformance suite is right.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use crate::backend::{
    Lease, LeaseEvent, LeaseHandle, LeaseRequest, LockBackend, LockStatus, Renewal,
};
use crate::capabilities::{Capabilities, Fencing};
use crate::error::Result;
use crate::fencing::FencingToken;
use crate::guard::LossCause;
use crate::name::LockName;

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

#[derive(Default)]
struct State {
    locks: HashMap<LockName, Entry>,
    next_id: u64,
}

#[derive(Default)]
struct Entry {
    holder: Option<Holder>,
    /// Fencing counter: never reset, so tokens keep increasing.
    counter: u64,
    /// FIFO queue of waiters by ticket; each has its own wake-up.
    waiters: BTreeMap<u64, Arc<Notify>>,
}

struct Holder {
    owner: u64,
    expires: Instant,
    events: mpsc::UnboundedSender<LeaseEvent>,
}

impl Entry {
    fn purge_expired(&mut self, now: Instant) {
        if self.holder.as_ref().is_some_and(|h| h.expires <= now) {
            self.holder = None;
        }
    }

    fn wake_head(&self) {
        if let Some(n) = self.waiters.values().next() {
            n.notify_one();
        }
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

    /// Removes the lock `name` behind its holder's back (an operator deleting
    /// the key): the holder's guard gets a loss event at once. Returns whether
    /// it was held. For tests of loss handling.
    pub fn force_release(&self, name: &LockName) -> bool {
        let mut st = self.state();
        let Some(entry) = st.locks.get_mut(name) else {
            return false;
        };
        entry.purge_expired(Instant::now());
        match entry.holder.take() {
            Some(holder) => {
                let _ = holder.events.send(LeaseEvent::Lost(LossCause::NotOwner));
                entry.wake_head();
                true
            }
            None => false,
        }
    }

    /// The number of names with a holder or waiters now (for leak checks).
    pub fn active_names(&self) -> usize {
        let now = Instant::now();
        let mut st = self.state();
        st.locks
            .values_mut()
            .map(|e| {
                e.purge_expired(now);
                e.holder.is_some() || !e.waiters.is_empty()
            })
            .filter(|active| *active)
            .count()
    }

    /// Takes the lock if it is free and `ticket` (if any) is at the head of the queue.
    fn grab(&self, req: &LeaseRequest, ticket: Option<u64>) -> Option<Lease> {
        let now = Instant::now();
        let mut st = self.state();
        st.next_id += 1;
        let owner = st.next_id;
        let entry = st.locks.entry(req.name.clone()).or_default();
        entry.purge_expired(now);
        let head = entry.waiters.keys().next().copied();
        let our_turn = match ticket {
            Some(t) => head == Some(t),
            None => head.is_none(),
        };
        if entry.holder.is_some() || !our_turn {
            return None;
        }
        if let Some(t) = ticket {
            entry.waiters.remove(&t);
            // The next waiter recomputes its wake-up against the new holder's expiry.
            entry.wake_head();
        }
        entry.counter += 1;
        let token = FencingToken::new(entry.counter);
        let expires = now + req.ttl;
        let (tx, rx) = mpsc::unbounded_channel();
        entry.holder = Some(Holder {
            owner,
            expires,
            events: tx,
        });
        let handle = MemoryLease {
            lock: self.clone(),
            name: req.name.clone(),
            owner,
        };
        let events =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) });
        Some(
            Lease::new(Box::new(handle), expires)
                .with_token(Some(token))
                .with_events(Box::pin(events)),
        )
    }
}

/// Removes a waiter's ticket when its acquire ends or is dropped.
struct Ticket<'a> {
    lock: &'a MemoryLock,
    name: &'a LockName,
    id: u64,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut st = self.lock.state();
        if let Some(entry) = st.locks.get_mut(self.name) {
            if entry.waiters.remove(&self.id).is_some() {
                entry.wake_head();
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
            .with_fault_tolerance("not applicable: one process")
    }

    async fn try_lock(&self, req: &LeaseRequest) -> Result<Option<Lease>> {
        Ok(self.grab(req, None))
    }

    async fn lock(&self, req: &LeaseRequest, deadline: Instant) -> Result<Option<Lease>> {
        if let Some(lease) = self.grab(req, None) {
            return Ok(Some(lease));
        }
        let notify = Arc::new(Notify::new());
        let id = {
            let mut st = self.state();
            st.next_id += 1;
            let id = st.next_id;
            st.locks
                .entry(req.name.clone())
                .or_default()
                .waiters
                .insert(id, notify.clone());
            id
        };
        let _ticket = Ticket {
            lock: self,
            name: &req.name,
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
            // The head waiter also wakes when the holder's lease runs out.
            let wake = {
                let st = self.state();
                st.locks
                    .get(&req.name)
                    .and_then(|e| {
                        let is_head = e.waiters.keys().next() == Some(&id);
                        e.holder.as_ref().filter(|_| is_head).map(|h| h.expires)
                    })
                    .map_or(deadline, |exp| exp.min(deadline))
            };
            tokio::select! {
                _ = notify.notified() => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        let now = Instant::now();
        let mut st = self.state();
        let Some(entry) = st.locks.get_mut(name) else {
            return Ok(LockStatus::new(false).with_waiters(Some(0)));
        };
        entry.purge_expired(now);
        let token = (entry.counter > 0).then(|| FencingToken::new(entry.counter));
        Ok(LockStatus::new(entry.holder.is_some())
            .with_token(token)
            .with_ttl_remaining(entry.holder.as_ref().map(|h| h.expires - now))
            .with_waiters(Some(entry.waiters.len())))
    }
}

struct MemoryLease {
    lock: MemoryLock,
    name: LockName,
    owner: u64,
}

#[async_trait]
impl LeaseHandle for MemoryLease {
    async fn renew(&self, ttl: Duration) -> Result<Renewal> {
        let now = Instant::now();
        let mut st = self.lock.state();
        let Some(entry) = st.locks.get_mut(&self.name) else {
            return Ok(Renewal::Gone);
        };
        entry.purge_expired(now);
        match entry.holder.as_mut() {
            Some(h) if h.owner == self.owner => {
                h.expires = now + ttl;
                Ok(Renewal::Renewed {
                    valid_until: h.expires,
                })
            }
            _ => Ok(Renewal::Gone),
        }
    }

    async fn release(&self) -> Result<bool> {
        let now = Instant::now();
        let mut st = self.lock.state();
        let Some(entry) = st.locks.get_mut(&self.name) else {
            return Ok(false);
        };
        let ours = entry.holder.as_ref().is_some_and(|h| h.owner == self.owner);
        if !ours {
            return Ok(false);
        }
        let live = entry.holder.as_ref().is_some_and(|h| h.expires > now);
        entry.holder = None;
        entry.wake_head();
        Ok(live)
    }
}
