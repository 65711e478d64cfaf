//! The election side of [`MemoryLock`]: a leader's term, what followers
//! see of it (every change, pushed to each follower's mailbox), and the
//! lock-delay after a term that ended without a resignation.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use futures::Stream;
use tokio::time::{Instant, Sleep};

use super::{Entry, Holder, Kind, MemoryLock};
use crate::backend::mailbox::Mailbox;
use crate::backend::{add_saturating, LeaderStream, LeaseRequest};
use crate::election::LeaderInfo;
use crate::error::Result;
use crate::fencing::FencingToken;
use crate::name::LockName;

/// What a leader holds besides its lease.
pub(super) struct Term {
    /// The published value.
    pub(super) value: String,
    /// When the term started (wall clock, for followers).
    since: SystemTime,
    /// The lock-delay that follows the term if it ends unreleased.
    lock_delay: Duration,
}

impl Term {
    /// The term a candidate asked for.
    pub(super) fn of(req: &LeaseRequest) -> Self {
        Self {
            value: req.value.clone().unwrap_or_default(),
            since: SystemTime::now(),
            lock_delay: req.lock_delay,
        }
    }
}

/// An election's followers, and its lock-delay.
#[derive(Default)]
pub(super) struct Followers {
    /// Each follower's mailbox (closed when it stops following).
    mailboxes: Vec<Arc<Mailbox<Option<LeaderInfo>>>>,
    /// What the followers were last told.
    announced: Option<LeaderInfo>,
    /// No new term before this instant (a lock-delay running).
    delayed_until: Option<Instant>,
}

impl Followers {
    /// A holder ended without a release at `end` (its lease expired, or
    /// its guard found it lost): a leader's lock-delay starts then.
    pub(super) fn ended_unreleased(&mut self, holder: &Holder, end: Instant) {
        let Some(term) = &holder.term else { return };
        if term.lock_delay.is_zero() {
            return;
        }
        let until = add_saturating(end, term.lock_delay);
        self.delayed_until = Some(self.delayed_until.map_or(until, |d| d.max(until)));
    }

    /// Whether a lock-delay keeps a new term from starting at `now`.
    pub(super) fn delays(&self, now: Instant) -> bool {
        self.delayed_until.is_some_and(|d| now < d)
    }

    /// The end of a lock-delay still running at `now`.
    pub(super) fn delayed_until(&self, now: Instant) -> Option<Instant> {
        self.delayed_until.filter(|d| *d > now)
    }

    /// Whether anyone follows the election.
    pub(super) fn any(&self) -> bool {
        self.mailboxes.iter().any(|m| !m.is_closed())
    }
}

impl Entry {
    /// Who leads, if this entry is an election with a leader.
    pub(super) fn leader_info(&self) -> Option<LeaderInfo> {
        self.holders.values().find_map(|h| {
            let term = h.term.as_ref()?;
            Some(
                LeaderInfo::new(term.value.clone(), Some(FencingToken::new(h.token)))
                    .with_since(term.since),
            )
        })
    }

    /// Tells the followers who leads now, if that changed since they were
    /// last told (a new term, a proclaimed value, nobody).
    pub(super) fn announce(&mut self) {
        if self.followers.mailboxes.is_empty() {
            return;
        }
        let now = self.leader_info();
        if now == self.followers.announced {
            return;
        }
        self.followers
            .mailboxes
            .retain(|m| m.post(now.clone()).is_ok());
        self.followers.announced = now;
    }
}

impl MemoryLock {
    /// Who leads the election `name` now.
    pub(super) fn leader_now(&self, name: &LockName) -> Option<LeaderInfo> {
        let now = Instant::now();
        let mut st = self.state();
        let entry = st.locks.get_mut(&(name.clone(), Kind::Leader))?;
        entry.purge_expired(now);
        entry.leader_info()
    }

    /// A follower of the election `name`: who leads now, then every change.
    pub(super) fn follow(&self, name: &LockName) -> LeaderStream {
        let key = (name.clone(), Kind::Leader);
        let mailbox = Arc::new(Mailbox::new());
        {
            let mut st = self.state();
            let entry = st.locks.entry(key.clone()).or_default();
            entry.purge_expired(Instant::now());
            entry.announce();
            let current = entry.leader_info();
            let _ = mailbox.post(current.clone());
            entry.followers.announced = current;
            entry.followers.mailboxes.push(mailbox.clone());
        }
        Box::pin(Follower {
            lock: self.clone(),
            key,
            mailbox,
            timer: Box::pin(tokio::time::sleep_until(Instant::now())),
        })
    }

    /// Ends an election's term whose lease ran out (telling the followers),
    /// and says when the current term's lease runs out.
    fn sweep(&self, key: &(LockName, Kind)) -> Option<Instant> {
        let now = Instant::now();
        let mut st = self.state();
        let entry = st.locks.get_mut(key)?;
        entry.purge_expired(now);
        entry.holders.values().map(|h| h.expires).min()
    }
}

/// The stream of one follower: its mailbox, and a timer at the leader's
/// expiry (an in-process lease ends without anyone touching it).
struct Follower {
    lock: MemoryLock,
    key: (LockName, Kind),
    mailbox: Arc<Mailbox<Option<LeaderInfo>>>,
    timer: Pin<Box<Sleep>>,
}

impl Stream for Follower {
    type Item = Result<Option<LeaderInfo>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Poll::Ready(news) = this.mailbox.poll_recv(cx) {
                return Poll::Ready(news.map(Ok));
            }
            let Some(expiry) = this.lock.sweep(&this.key) else {
                return Poll::Pending;
            };
            // The sweep may have ended a term.
            if let Some(news) = this.mailbox.try_recv() {
                return Poll::Ready(Some(Ok(news)));
            }
            this.timer.as_mut().reset(expiry);
            if this.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.mailbox.close();
        let mut st = self.lock.state();
        if let Some(entry) = st.locks.get_mut(&self.key) {
            entry.followers.mailboxes.retain(|m| !m.is_closed());
            if entry.removable() {
                st.locks.remove(&self.key);
            }
        }
    }
}
