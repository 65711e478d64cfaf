//! Fan-out of a backend session's state to the guards it vouches for.
//!
//! Session-based backends (an etcd lease, a ZooKeeper session) keep every
//! lock of a client alive with one keep-alive. [`SessionHub`] is the one place
//! that turns that session's news into [`LeaseEvent`]s for each guard:
//! confirmations (with the validity the session vouches for), suspension
//! while contact is lost, resumption, and the end of the session. A backend
//! registers each lease it grants ([`SessionHub::register`]) and hands the
//! returned [`SessionEvents`] to [`crate::Lease::with_events`].

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::time::Instant;

use crate::backend::{validity, LeaseEvent};
use crate::clock::{self, SuspendMark};
use crate::guard::LossCause;
use crate::mailbox::{Mailbox, MailboxStream};

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
    /// then ([`crate::validity`]), moved earlier by any time the machine
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
    guards: HashMap<u64, Arc<Mailbox<LeaseEvent>>>,
    status: SessionStatus,
    /// The last confirmation: until when, and the suspended time then.
    vouched: Option<(Instant, SuspendMark)>,
}

impl Default for SessionHub {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner {
                next_id: 0,
                guards: HashMap::new(),
                status: SessionStatus::Live,
                vouched: None,
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
        let mail = Arc::new(Mailbox::new());
        if let SessionStatus::Suspended { reason } = &inner.status {
            let _ = mail.post(LeaseEvent::Suspended {
                reason: reason.clone(),
            });
        }
        inner.next_id += 1;
        let id = inner.next_id;
        inner.guards.insert(id, mail.clone());
        Ok(SessionEvents {
            hub: Arc::downgrade(self),
            id,
            mail: MailboxStream(mail),
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
        let resumed = matches!(inner.status, SessionStatus::Suspended { .. });
        inner.status = SessionStatus::Live;
        inner.vouched = Some((valid_until, SuspendMark::now()));
        inner.guards.retain(|_, mail| {
            let ok = mail.post(LeaseEvent::Confirmed { valid_until }).is_ok();
            if resumed && ok {
                let _ = mail.post(LeaseEvent::Resumed);
            }
            ok
        });
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
        inner.guards.retain(|_, mail| {
            mail.post(LeaseEvent::Suspended {
                reason: reason.to_string(),
            })
            .is_ok()
        });
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
        for (_, mail) in inner.guards.drain() {
            let _ = mail.post(LeaseEvent::Lost(cause.clone()));
            mail.close();
        }
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
    mail: MailboxStream<LeaseEvent>,
}

impl Stream for SessionEvents {
    type Item = LeaseEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<LeaseEvent>> {
        Pin::new(&mut self.mail).poll_next(cx)
    }
}

impl Drop for SessionEvents {
    fn drop(&mut self) {
        self.mail.0.close_and_clear();
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
    }
}
