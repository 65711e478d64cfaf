//! Fan-out of a backend session's state to the guards it vouches for.
//!
//! Session-based backends (an etcd lease, a ZooKeeper session) keep every
//! lock of a client alive with one keep-alive. [`SessionHub`] is the one place
//! that turns that session's news into [`LeaseEvent`]s for each guard:
//! confirmations (with the validity the session vouches for), suspension
//! while contact is lost, resumption, and the end of the session. A backend
//! registers each lease it grants ([`SessionHub::register`]) and hands the
//! returned [`SessionEvents`] to [`crate::backend::Lease::with_events`].
//!
//! A lease's events are read from the session's one state, not queued per
//! lease: a lease keeps what it has seen of it and a waker, and works out
//! its events when it looks (a session with 10,000 guards holds 10,000
//! wakers, not 10,000 queues). A lease that looks late gets the events of
//! what it missed, in order and folded: a suspension that began and ended
//! meanwhile is one `Suspended`, `Confirmed`, `Resumed`.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::Stream;
use tokio::time::Instant;

use crate::backend::{validity, LeaseEvent};
use crate::clock::{self, SuspendMark};
use crate::state::LossCause;

/// When a keep-alive request was sent, on the monotonic clock, together with
/// the machine's suspended time then: the start from which the validity its
/// reply grants is measured. Take it with [`Sent::now`] right before sending.
#[derive(Clone, Copy, Debug)]
pub struct Sent {
    at: Instant,
    mark: SuspendMark,
}

impl Sent {
    /// Now.
    pub fn now() -> Self {
        Self {
            at: Instant::now(),
            mark: SuspendMark::now(),
        }
    }

    /// The instant it was taken.
    pub fn at(&self) -> Instant {
        self.at
    }

    /// The end of validity of a lease of `ttl` granted by a request sent
    /// then ([`crate::backend::validity`]), moved earlier by any time the machine
    /// has spent suspended since.
    pub fn validity(&self, ttl: Duration) -> Instant {
        clock::corrected(validity(self.at, ttl), self.mark)
    }
}

/// Where a session stands.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionStatus {
    /// Confirmed by the server (or not yet known to be in trouble).
    Live,
    /// Contact with the server is lost for now; the session may still be alive.
    Suspended {
        /// Why, in words.
        reason: String,
    },
    /// The session is gone for good (expired, revoked, closed): so are its locks.
    Ended {
        /// Why.
        cause: LossCause,
    },
}

/// One session's guards and state; see the [module docs](self).
#[derive(Debug)]
pub struct SessionHub {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    next_id: u64,
    /// Each registered lease's waker, once it has waited.
    guards: HashMap<u64, Option<Waker>>,
    status: SessionStatus,
    /// The last confirmation: until when, and the suspended time then.
    vouched: Option<(Instant, SuspendMark)>,
    /// Bumped by every confirmation, suspension and end: a lease that saw
    /// an older one has news.
    version: u64,
    /// The suspensions so far, and the reason of the last one: a lease that
    /// saw fewer missed one.
    suspensions: u64,
    last_reason: String,
}

impl Inner {
    /// News for every registered lease.
    fn publish(&mut self) {
        self.version += 1;
        for waker in self.guards.values().flatten() {
            waker.wake_by_ref();
        }
    }
}

impl Default for SessionHub {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner {
                next_id: 0,
                guards: HashMap::new(),
                status: SessionStatus::Live,
                vouched: None,
                version: 0,
                suspensions: 0,
                last_reason: String::new(),
            }),
        }
    }
}

impl SessionHub {
    /// A hub for a new, live session with no guards.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers one lease: its events, until the returned stream is
    /// dropped. Fails with the cause if the session has already ended.
    pub fn register(self: &Arc<Self>) -> Result<SessionEvents, LossCause> {
        let mut inner = self.inner();
        if let SessionStatus::Ended { cause } = &inner.status {
            return Err(cause.clone());
        }
        inner.next_id += 1;
        let id = inner.next_id;
        inner.guards.insert(id, None);
        // A lease granted while the session is suspended starts suspended.
        let suspended = matches!(inner.status, SessionStatus::Suspended { .. });
        Ok(SessionEvents {
            hub: Arc::downgrade(self),
            id,
            seen: inner.version,
            suspensions: inner.suspensions,
            suspended: false,
            due: Due {
                suspended,
                ..Due::default()
            },
            ended: false,
        })
    }

    /// The server confirmed the session with a request sent at `sent`, for
    /// `ttl`: every guard is held until then (and resumed if it was
    /// suspended). A confirmation that arrives after a newer one (a late
    /// answer on another connection) never moves the bound back.
    pub fn confirm(&self, sent: Sent, ttl: Duration) {
        let mut inner = self.inner();
        if matches!(inner.status, SessionStatus::Ended { .. }) {
            return;
        }
        let earlier = inner
            .vouched
            .map(|(until, mark)| clock::corrected(until, mark));
        let valid_until = earlier.map_or(sent.validity(ttl), |e| e.max(sent.validity(ttl)));
        inner.status = SessionStatus::Live;
        inner.vouched = Some((valid_until, SuspendMark::now()));
        inner.publish();
    }

    /// Contact is lost for now: every guard is suspended (once per episode).
    pub fn suspend(&self, reason: &str) {
        let mut inner = self.inner();
        if !matches!(inner.status, SessionStatus::Live) {
            return;
        }
        inner.status = SessionStatus::Suspended {
            reason: reason.to_string(),
        };
        inner.suspensions += 1;
        inner.last_reason = reason.to_string();
        inner.publish();
    }

    /// The session is gone: every guard is lost with `cause`, and later
    /// registrations fail. Only the first call counts.
    pub fn end(&self, cause: LossCause) {
        let mut inner = self.inner();
        if matches!(inner.status, SessionStatus::Ended { .. }) {
            return;
        }
        inner.status = SessionStatus::Ended {
            cause: cause.clone(),
        };
        inner.vouched = None;
        inner.publish();
        inner.guards.clear();
    }

    /// Until when the last confirmation vouches for the session (earlier by
    /// any time the machine spent suspended since), or `None` if none came
    /// yet or the session ended.
    pub fn vouched_until(&self) -> Option<Instant> {
        let inner = self.inner();
        inner
            .vouched
            .map(|(until, mark)| clock::corrected(until, mark))
    }

    /// The session's status now.
    pub fn status(&self) -> SessionStatus {
        self.inner().status.clone()
    }

    /// Whether the session has ended.
    pub fn is_ended(&self) -> bool {
        matches!(self.inner().status, SessionStatus::Ended { .. })
    }

    /// The number of registered leases.
    pub fn guards(&self) -> usize {
        self.inner().guards.len()
    }

    fn unregister(&self, id: u64) {
        self.inner().guards.remove(&id);
    }
}

/// One lease's events from a [`SessionHub`]; unregisters when dropped.
#[derive(Debug)]
pub struct SessionEvents {
    hub: Weak<SessionHub>,
    id: u64,
    /// The hub's version when this lease last looked.
    seen: u64,
    /// The hub's suspensions when this lease last looked.
    suspensions: u64,
    /// Whether this lease was last told the session is suspended.
    suspended: bool,
    /// The events worked out and not yet handed out.
    due: Due,
    /// The session ended and `Lost` was handed out: nothing more comes.
    ended: bool,
}

/// Events due to a lease, handed out in this order: `Suspended`,
/// `Confirmed`, `Resumed` (a session that ended hands out `Lost` instead).
#[derive(Clone, Copy, Debug, Default)]
struct Due {
    suspended: bool,
    confirmed: bool,
    resumed: bool,
}

impl SessionEvents {
    /// Works out what this lease missed of the session since it last
    /// looked.
    fn catch_up(&mut self, inner: &Inner) {
        self.seen = inner.version;
        let missed_suspension = inner.suspensions > self.suspensions;
        self.suspensions = inner.suspensions;
        match &inner.status {
            SessionStatus::Ended { .. } => {}
            // A suspension is newer than anything still due: a
            // confirmation or resumption not yet handed out is over.
            SessionStatus::Suspended { .. } => {
                self.due = Due {
                    suspended: true,
                    ..Due::default()
                }
            }
            SessionStatus::Live => {
                self.due.confirmed = true;
                if missed_suspension && !self.suspended {
                    // A whole suspension came and went unseen.
                    self.due.suspended = true;
                }
                self.due.resumed = self.suspended || self.due.suspended;
            }
        }
    }

    /// The next due event, taken off.
    fn next_due(&mut self, inner: &Inner) -> Option<LeaseEvent> {
        if let SessionStatus::Ended { cause } = &inner.status {
            self.due = Due::default();
            self.ended = true;
            return Some(LeaseEvent::Lost(cause.clone()));
        }
        if std::mem::take(&mut self.due.suspended) {
            self.suspended = true;
            let reason = match &inner.status {
                SessionStatus::Suspended { reason } => reason.clone(),
                _ => inner.last_reason.clone(),
            };
            return Some(LeaseEvent::Suspended { reason });
        }
        if std::mem::take(&mut self.due.confirmed) {
            if let Some((until, mark)) = inner.vouched {
                return Some(LeaseEvent::Confirmed {
                    valid_until: clock::corrected(until, mark),
                });
            }
        }
        if std::mem::take(&mut self.due.resumed) {
            self.suspended = false;
            return Some(LeaseEvent::Resumed);
        }
        None
    }
}

impl Stream for SessionEvents {
    type Item = LeaseEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<LeaseEvent>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        // A hub dropped without ending: nothing more will come.
        let Some(hub) = this.hub.upgrade() else {
            this.ended = true;
            return Poll::Ready(None);
        };
        let mut inner = hub.inner();
        if inner.version != this.seen {
            this.catch_up(&inner);
        }
        if let Some(event) = this.next_due(&inner) {
            return Poll::Ready(Some(event));
        }
        if let Some(slot) = inner.guards.get_mut(&this.id) {
            if !slot.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *slot = Some(cx.waker().clone());
            }
        }
        Poll::Pending
    }
}

impl Drop for SessionEvents {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            hub.unregister(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn fans_out_and_unregisters() {
        let _shared = crate::clock::SUSPENSIONS.read().await;
        let hub = SessionHub::new();
        let mut a = hub.register().unwrap();
        let b = hub.register().unwrap();
        assert_eq!(hub.guards(), 2);
        drop(b);
        assert_eq!(hub.guards(), 1);
        hub.suspend("down");
        hub.suspend("still down");
        hub.confirm(Sent::now(), Duration::from_secs(5));
        assert!(
            matches!(a.next().await, Some(LeaseEvent::Suspended { reason }) if reason == "down")
        );
        assert!(matches!(a.next().await, Some(LeaseEvent::Confirmed { .. })));
        assert_eq!(a.next().await, Some(LeaseEvent::Resumed));
        assert!(hub.vouched_until().is_some());
        hub.end(LossCause::SessionExpired);
        assert_eq!(
            a.next().await,
            Some(LeaseEvent::Lost(LossCause::SessionExpired))
        );
        assert_eq!(hub.register().unwrap_err(), LossCause::SessionExpired);
        assert_eq!(hub.vouched_until(), None);
        assert_eq!(a.next().await, None, "nothing after the loss");
        assert_eq!(hub.guards(), 0);
    }

    /// A lease that looks after a suspension came and went gets it folded,
    /// in order; one that looks while it lasts gets it once, then the end
    /// of it.
    #[tokio::test]
    async fn a_late_look_gets_what_it_missed_in_order() {
        let _shared = crate::clock::SUSPENSIONS.read().await;
        let hub = SessionHub::new();
        hub.confirm(Sent::now(), Duration::from_secs(5));
        let mut late = hub.register().unwrap();
        let mut prompt = hub.register().unwrap();
        hub.suspend("gone");
        assert_eq!(
            prompt.next().await,
            Some(LeaseEvent::Suspended {
                reason: "gone".into()
            })
        );
        hub.confirm(Sent::now(), Duration::from_secs(5));
        let until = hub.vouched_until().unwrap();
        assert_eq!(
            prompt.next().await,
            Some(LeaseEvent::Confirmed { valid_until: until })
        );
        assert_eq!(prompt.next().await, Some(LeaseEvent::Resumed));
        assert_eq!(
            late.next().await,
            Some(LeaseEvent::Suspended {
                reason: "gone".into()
            })
        );
        assert_eq!(
            late.next().await,
            Some(LeaseEvent::Confirmed { valid_until: until })
        );
        assert_eq!(late.next().await, Some(LeaseEvent::Resumed));
        // Nothing more until the next news.
        assert!(futures::poll!(late.next()).is_pending());
    }

    /// A suspension that comes while a lease is still being handed the end
    /// of the last one replaces what was due: the lease ends suspended.
    #[tokio::test]
    async fn a_new_suspension_overtakes_a_resumption_still_due() {
        let _shared = crate::clock::SUSPENSIONS.read().await;
        let hub = SessionHub::new();
        let mut ev = hub.register().unwrap();
        hub.suspend("first");
        assert!(matches!(
            ev.next().await,
            Some(LeaseEvent::Suspended { .. })
        ));
        hub.confirm(Sent::now(), Duration::from_secs(5));
        assert!(matches!(
            ev.next().await,
            Some(LeaseEvent::Confirmed { .. })
        ));
        // `Resumed` is due now; the session is suspended again first.
        hub.suspend("second");
        assert_eq!(
            ev.next().await,
            Some(LeaseEvent::Suspended {
                reason: "second".into()
            })
        );
        assert!(futures::poll!(ev.next()).is_pending());
    }

    /// A lease granted while the session is suspended starts suspended.
    #[tokio::test]
    async fn a_lease_registered_during_a_suspension_starts_suspended() {
        let _shared = crate::clock::SUSPENSIONS.read().await;
        let hub = SessionHub::new();
        hub.suspend("away");
        let mut ev = hub.register().unwrap();
        assert_eq!(
            ev.next().await,
            Some(LeaseEvent::Suspended {
                reason: "away".into()
            })
        );
        assert!(futures::poll!(ev.next()).is_pending());
        hub.confirm(Sent::now(), Duration::from_secs(5));
        assert!(matches!(
            ev.next().await,
            Some(LeaseEvent::Confirmed { .. })
        ));
        assert_eq!(ev.next().await, Some(LeaseEvent::Resumed));
    }

    /// A lease waiting for news is woken by it, and a confirmation that
    /// comes before it looked is handed out once, with the latest bound.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_lease_is_woken_by_news() {
        let _shared = crate::clock::SUSPENSIONS.read().await;
        let hub = SessionHub::new();
        let mut ev = hub.register().unwrap();
        let waiter = tokio::spawn(async move {
            let first = ev.next().await;
            (first, ev)
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        hub.confirm(Sent::now(), Duration::from_secs(5));
        let (first, mut ev) = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
        assert!(matches!(first, Some(LeaseEvent::Confirmed { .. })));
        hub.confirm(Sent::now(), Duration::from_secs(5));
        hub.confirm(Sent::now(), Duration::from_secs(6));
        let until = hub.vouched_until().unwrap();
        assert_eq!(
            ev.next().await,
            Some(LeaseEvent::Confirmed { valid_until: until })
        );
        assert!(futures::poll!(ev.next()).is_pending());
        drop(ev);
        assert_eq!(hub.guards(), 0);
    }
}
