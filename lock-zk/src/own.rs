//! The watch on a granted node of ours: how its guard learns that someone
//! else deleted the node.
//!
//! Every guard holds one for its whole life, so it is a small hand-written
//! stream rather than an `async` block: only the step it is at is on the
//! heap (the first moments' delay and a watch request are short-lived and
//! freed once done), not the largest of them all for as long as the guard
//! lives.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use futures::Stream;
use lock_core::backend::LeaseEvent;
use lock_core::LossCause;
use tokio::time::Sleep;
use zookeeper_client as zk;

use crate::session::Session;

/// How long after a grant the watch on our node is set (when the grant did
/// not set it already): a guard released sooner never costs a request for
/// it, and a deletion by someone else in that time is noticed when it is set.
const OWN_WATCH_AFTER: Duration = Duration::from_millis(50);

/// How long to wait before setting the watch again after a failed request.
const RETRY_AFTER: Duration = Duration::from_millis(100);

/// A guard's flags, shared by its lease and the watch on its node.
#[derive(Default)]
pub(crate) struct Flags {
    /// Released (or being released) by its owner: a deletion is ours.
    pub released: AtomicBool,
    /// The node was deleted by someone else.
    pub gone: AtomicBool,
}

impl Flags {
    /// Whether the owner released (or is releasing) the node.
    pub fn released(&self) -> bool {
        self.released.load(Ordering::SeqCst)
    }

    /// Whether someone else deleted the node.
    pub fn gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }
}

/// A future on the heap, for the steps that need one.
type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What a request for the watch came back with.
enum Set {
    /// The watch is set.
    Armed(zk::OneshotWatcher),
    /// The node is not there.
    Missing,
    /// Nothing more to watch: the session is gone.
    Stop,
    /// The request failed; the session lives: try again.
    Retry,
}

/// Where the watch is.
enum Step {
    /// Granted; the watch is set [`OWN_WATCH_AFTER`] the first poll.
    Granted,
    /// Waiting before (re)setting the watch.
    Wait(Pin<Box<Sleep>>),
    /// The request that sets the watch, in flight.
    Setting(Boxed<Set>),
    /// Set: the node's next event.
    Armed(Boxed<zk::WatchedEvent>),
    /// Nothing more to watch.
    Done,
}

/// The watch on our node `path` while the guard lives, as a stream of the
/// guard's events: `Lost(NotOwner)` once someone else deleted the node,
/// then its end; it ends without an event when there is nothing more to
/// watch (released by us, session gone: the hub reports session ends). Data
/// changes re-arm the watch.
pub(crate) struct OwnNode {
    session: Weak<Session>,
    path: Arc<str>,
    flags: Arc<Flags>,
    step: Step,
}

impl OwnNode {
    /// The watch on `path`, already set by the grant (`watcher`) or to be
    /// set [`OWN_WATCH_AFTER`] the first poll (by the guard's keeper).
    pub fn new(
        session: Weak<Session>,
        path: Arc<str>,
        flags: Arc<Flags>,
        watcher: Option<zk::OneshotWatcher>,
    ) -> Self {
        let step = match watcher {
            Some(watcher) => Step::Armed(Box::pin(watcher.changed())),
            None => Step::Granted,
        };
        Self {
            session,
            path,
            flags,
            step,
        }
    }

    /// The request that sets the watch, unless the node is ours no more.
    fn set(&self) -> Step {
        if self.flags.released() {
            return Step::Done;
        }
        let (session, path) = (self.session.clone(), self.path.clone());
        Step::Setting(Box::pin(async move {
            let Some(s) = session.upgrade() else {
                return Set::Stop;
            };
            match s.watch(&path, s.bound()).await {
                Ok(Some((_, watcher))) => Set::Armed(watcher),
                Ok(None) => Set::Missing,
                Err(_) if !s.is_live() => Set::Stop,
                Err(_) => Set::Retry,
            }
        }))
    }

    /// The node is gone: lost, unless we released it.
    fn deleted(&mut self) -> Poll<Option<LeaseEvent>> {
        self.step = Step::Done;
        if self.flags.released() {
            return Poll::Ready(None);
        }
        self.flags.gone.store(true, Ordering::SeqCst);
        tracing::warn!(path = %self.path, "lock-zk: our lock node was deleted by someone else");
        Poll::Ready(Some(LeaseEvent::Lost(LossCause::NotOwner)))
    }
}

impl Stream for OwnNode {
    type Item = LeaseEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<LeaseEvent>> {
        let this = self.get_mut();
        loop {
            this.step = match &mut this.step {
                Step::Done => return Poll::Ready(None),
                Step::Granted => Step::Wait(Box::pin(tokio::time::sleep(OWN_WATCH_AFTER))),
                Step::Wait(sleep) => {
                    ready!(sleep.as_mut().poll(cx));
                    this.set()
                }
                Step::Setting(request) => match ready!(request.as_mut().poll(cx)) {
                    Set::Armed(watcher) => Step::Armed(Box::pin(watcher.changed())),
                    Set::Missing => return this.deleted(),
                    Set::Stop => Step::Done,
                    Set::Retry => Step::Wait(Box::pin(tokio::time::sleep(RETRY_AFTER))),
                },
                Step::Armed(event) => match ready!(event.as_mut().poll(cx)).event_type {
                    zk::EventType::NodeDeleted => return this.deleted(),
                    zk::EventType::Session => Step::Done,
                    _ => this.set(),
                },
            };
        }
    }
}
