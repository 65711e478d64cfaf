//! [`Deletion`]: the one thing the watch of a held key tells its lock,
//! whether the key is gone, kept as a flag of a few bytes rather than a
//! queue of events (a client may hold many locks, each with its watch).

use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};

use futures::task::AtomicWaker;

use crate::event::WatchEvent;

/// The key is watched and there.
const WATCHED: u8 = 0;
/// The key was deleted, or its watch lost track of it: the lock is lost.
const GONE: u8 = 1;
/// The watch ended (cancelled, or the client is gone) with the key there.
const ENDED: u8 = 2;

/// Whether a held key, created at a known revision, is gone; set by its
/// watch, read by the lock (never waits) and awaited by its guard.
#[derive(Debug)]
pub(crate) struct Deletion {
    /// The key's create revision: a deletion at or before it was of an
    /// older key of the same name.
    created: i64,
    state: AtomicU8,
    waker: AtomicWaker,
}

impl Deletion {
    /// A key created at revision `created`, there for now.
    pub(crate) fn new(created: i64) -> Self {
        Self {
            created,
            state: AtomicU8::new(WATCHED),
            waker: AtomicWaker::new(),
        }
    }

    /// Takes in one event of the key's watch (`key` names it in the logs):
    /// the key is gone on its deletion after its creation, or when the
    /// watch is lost (its history was compacted: whether the key was
    /// deleted meanwhile is unknown, and the lock must not count on it).
    pub(crate) fn note(&self, key: &[u8], event: &WatchEvent) {
        let gone = match event {
            WatchEvent::Deleted { revision, .. } => *revision > self.created,
            WatchEvent::Lost { .. } => true,
            WatchEvent::Created { .. } | WatchEvent::Put { .. } => false,
        };
        if !gone || !self.settle(GONE) {
            return;
        }
        let key = String::from_utf8_lossy(key);
        match event {
            WatchEvent::Lost { reason } => {
                tracing::warn!(%key, %reason, "distlock etcd: the watch on our key is lost")
            }
            _ => tracing::debug!(%key, "distlock etcd: our key was deleted; lock lost"),
        }
    }

    /// The key may not be ours as we held it any more (a change of it
    /// whose outcome is unknown): the lock must not count on it.
    pub(crate) fn doubted(&self, key: &[u8]) {
        if self.settle(GONE) {
            let key = String::from_utf8_lossy(key);
            tracing::warn!(%key, "distlock etcd: a change of our key has an unknown outcome; lock lost");
        }
    }

    /// The watch ended: nothing more will be known about the key.
    pub(crate) fn end(&self) {
        self.settle(ENDED);
    }

    /// Whether the key is known to be gone.
    pub(crate) fn is_gone(&self) -> bool {
        self.state.load(Ordering::SeqCst) == GONE
    }

    /// `Ready(true)` once the key is gone, `Ready(false)` once its watch
    /// ended with the key there. One waiter only (the guard's events).
    pub(crate) fn poll_gone(&self, cx: &mut Context<'_>) -> Poll<bool> {
        if let Some(gone) = self.settled() {
            return Poll::Ready(gone);
        }
        self.waker.register(cx.waker());
        // Settled between the first look and the registration.
        match self.settled() {
            Some(gone) => Poll::Ready(gone),
            None => Poll::Pending,
        }
    }

    fn settled(&self) -> Option<bool> {
        match self.state.load(Ordering::SeqCst) {
            WATCHED => None,
            state => Some(state == GONE),
        }
    }

    /// Moves from watched to `state` (only the first outcome counts) and
    /// wakes the waiter; whether this call did it.
    fn settle(&self, state: u8) -> bool {
        let moved = self
            .state
            .compare_exchange(WATCHED, state, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if moved {
            self.waker.wake();
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::task::noop_waker;

    fn deleted(revision: i64) -> WatchEvent {
        WatchEvent::Deleted {
            key: b"k".to_vec(),
            revision,
        }
    }

    #[test]
    fn only_a_later_deletion_or_a_lost_watch_is_the_key_gone() {
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        let d = Deletion::new(10);
        d.note(b"k", &deleted(10));
        d.note(b"k", &WatchEvent::Created { revision: 11 });
        assert!(!d.is_gone());
        assert_eq!(d.poll_gone(&mut cx), Poll::Pending);
        d.note(b"k", &deleted(11));
        assert!(d.is_gone());
        assert_eq!(d.poll_gone(&mut cx), Poll::Ready(true));
        d.end();
        assert_eq!(d.poll_gone(&mut cx), Poll::Ready(true), "the loss stays");

        let lost = Deletion::new(10);
        lost.note(
            b"k",
            &WatchEvent::Lost {
                reason: "compacted".into(),
            },
        );
        assert!(lost.is_gone());

        let ended = Deletion::new(10);
        ended.end();
        ended.note(b"k", &deleted(12));
        assert!(!ended.is_gone(), "nothing counts after the watch ended");
        assert_eq!(ended.poll_gone(&mut cx), Poll::Ready(false));
    }
}
