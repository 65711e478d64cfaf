//! A guard's state as its keeper task publishes it and its views read or
//! await it ([`GuardStates`]).
//!
//! This is what tokio's `watch` channel does, kept small on purpose: a
//! `watch` channel allocates nine wait lists (about 400 bytes) and every
//! guard has one, where a process may hold ten thousand guards; this one
//! keeps a single wait list (about 100 bytes).

use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::state::GuardState;

struct Shared {
    /// The state, its version (bumped on every change) and when it was
    /// published. Read-locked by readers, as a `watch` channel does, so
    /// that two borrows on one thread do not block each other.
    cell: RwLock<Cell>,
    /// The publisher is gone (the keeper task ended).
    closed: AtomicBool,
    /// Wakes every waiter on a change or on closing.
    changes: Notify,
    /// The suspended time (a [`crate::clock::SuspendMark`] in nanoseconds)
    /// when the published validity was computed: the views correct the
    /// validity by the suspended time since.
    mark: AtomicU64,
}

impl Shared {
    fn read(&self) -> RwLockReadGuard<'_, Cell> {
        self.cell.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Cell> {
        self.cell.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// The keeper's side: changes the state and wakes the waiters. Dropping it
/// closes the states ([`GuardStates::changed`] then fails once every change
/// was seen).
pub(crate) struct Publisher {
    shared: Arc<Shared>,
}

impl Publisher {
    /// A publisher of `initial`, computed at suspend mark `mark`, and the
    /// first reader (which has seen it).
    pub(crate) fn new(initial: GuardState, mark: u64) -> (Self, GuardStates) {
        let shared = Arc::new(Shared {
            cell: RwLock::new((initial, 0, Instant::now())),
            closed: AtomicBool::new(false),
            changes: Notify::new(),
            mark: AtomicU64::new(mark),
        });
        (
            Self {
                shared: shared.clone(),
            },
            GuardStates { shared, seen: 0 },
        )
    }

    /// The state now.
    pub(crate) fn borrow(&self) -> GuardStateRef<'_> {
        GuardStateRef(self.shared.read())
    }

    /// Lets `change` edit the state; publishes it if `change` says it changed.
    pub(crate) fn send_if_modified(&self, change: impl FnOnce(&mut GuardState) -> bool) -> bool {
        let changed = {
            let mut cell = self.shared.write();
            let changed = change(&mut cell.0);
            if changed {
                cell.1 += 1;
                cell.2 = Instant::now();
            }
            changed
        };
        if changed {
            self.shared.changes.notify_waiters();
        }
        changed
    }

    /// Lets `change` edit the state and publishes it.
    pub(crate) fn send_modify(&self, change: impl FnOnce(&mut GuardState)) {
        self.send_if_modified(|st| {
            change(st);
            true
        });
    }

    /// Publishes `state`.
    pub(crate) fn send_replace(&self, state: GuardState) {
        self.send_modify(|st| *st = state);
    }

    /// The suspend mark of the published validity.
    pub(crate) fn mark(&self) -> u64 {
        self.shared.mark.load(Ordering::Acquire)
    }

    /// Sets the suspend mark of the published validity.
    pub(crate) fn set_mark(&self, mark: u64) {
        self.shared.mark.store(mark, Ordering::Release);
    }
}

impl Publisher {
    /// No change comes any more: [`GuardStates::changed`] fails once every
    /// change was seen. Also done when the publisher is dropped.
    pub(crate) fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.changes.notify_waiters();
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.close();
    }
}

/// Every state one guard goes through, for a caller that wants each
/// transition ([`crate::LockGuard::subscribe`]): read the state now, or
/// await the next change. Cheap to clone; each clone keeps its own record
/// of what it has seen.
#[derive(Clone)]
pub struct GuardStates {
    shared: Arc<Shared>,
    /// The version this reader has seen.
    seen: u64,
}

impl fmt::Debug for GuardStates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardStates")
            .field("state", &*self.borrow())
            .finish()
    }
}

/// The guard's state, borrowed: hold it briefly (the keeper waits for it to
/// publish a change, and it cannot be held across an `.await` in a task
/// that must be `Send`), as a `watch` channel's borrow.
pub struct GuardStateRef<'a>(RwLockReadGuard<'a, Cell>);

/// The published state, its version and when it was published.
type Cell = (GuardState, u64, Instant);

impl GuardStateRef<'_> {
    /// When the guard's keeper published this state: the moment the guard
    /// began to say it, which a reader that wakes late (a busy runtime)
    /// would otherwise take for its own waking time.
    pub fn published_at(&self) -> Instant {
        self.0 .2
    }
}

impl Deref for GuardStateRef<'_> {
    type Target = GuardState;

    fn deref(&self) -> &GuardState {
        &self.0 .0
    }
}

impl fmt::Debug for GuardStateRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// The guard's keeper task ended (its runtime shut down) and every state it
/// published was seen: no further change can come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatesClosed;

impl fmt::Display for StatesClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the guard's keeper task ended; its state no longer changes")
    }
}

impl std::error::Error for StatesClosed {}

impl GuardStates {
    /// The state now, as published (see [`crate::GuardView::state`] for the
    /// state with the validity rules applied), without marking it seen.
    pub fn borrow(&self) -> GuardStateRef<'_> {
        GuardStateRef(self.shared.read())
    }

    /// The suspend mark of the published validity.
    pub(crate) fn mark(&self) -> u64 {
        self.shared.mark.load(Ordering::Acquire)
    }

    /// The state now, marked seen: [`changed`](Self::changed) then waits
    /// for the next change.
    pub fn borrow_and_update(&mut self) -> GuardStateRef<'_> {
        let cell = self.shared.read();
        self.seen = cell.1;
        GuardStateRef(cell)
    }

    /// Waits until the state changes from the last one seen (at once if it
    /// already has), and marks it seen. [`StatesClosed`] once the keeper is
    /// gone and every change was seen.
    pub async fn changed(&mut self) -> Result<(), StatesClosed> {
        loop {
            // Registered before looking, so a change in between still wakes it.
            let notified = self.shared.changes.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            {
                let cell = self.shared.read();
                if cell.1 != self.seen {
                    self.seen = cell.1;
                    return Ok(());
                }
            }
            if self.shared.closed.load(Ordering::Acquire) {
                return Err(StatesClosed);
            }
            notified.await;
        }
    }

    /// Waits until the state satisfies `ready` (at once if it does now) and
    /// returns it, marked seen. [`StatesClosed`] if the keeper is gone first.
    pub async fn wait_for(
        &mut self,
        mut ready: impl FnMut(&GuardState) -> bool,
    ) -> Result<GuardStateRef<'_>, StatesClosed> {
        loop {
            if ready(&self.borrow_and_update()) {
                break;
            }
            self.changed().await?;
        }
        Ok(self.borrow_and_update())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn held() -> GuardState {
        GuardState::Held {
            valid_until: tokio::time::Instant::now() + Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn a_reader_sees_each_change_and_then_the_end() {
        let (publisher, mut states) = Publisher::new(held(), 0);
        let mut other = states.clone();
        let waiter = tokio::spawn(async move {
            other.changed().await.unwrap();
            other.borrow().clone()
        });
        tokio::task::yield_now().await;
        publisher.send_replace(GuardState::Released);
        assert_eq!(waiter.await.unwrap(), GuardState::Released);
        // A change before the wait is not missed.
        states.changed().await.unwrap();
        assert_eq!(*states.borrow(), GuardState::Released);
        // An edit that changes nothing wakes nobody.
        assert!(!publisher.send_if_modified(|_| false));
        drop(publisher);
        assert_eq!(states.changed().await, Err(StatesClosed));
    }

    #[test]
    fn two_borrows_on_one_thread_do_not_block_each_other() {
        let (publisher, states) = Publisher::new(held(), 7);
        let first = states.borrow();
        let second = states.clone();
        assert_eq!(*second.borrow(), *first);
        assert!(format!("{second:?}").contains("Held"));
        drop(first);
        publisher.send_replace(GuardState::Released);
        assert_eq!(*states.borrow(), GuardState::Released);
        assert_eq!(states.mark(), 7);
    }

    #[tokio::test]
    async fn wait_for_returns_the_matching_state() {
        let (publisher, mut states) = Publisher::new(held(), 0);
        let task = tokio::spawn(async move {
            let st = states
                .wait_for(|s| matches!(s, GuardState::Lost { .. }))
                .await
                .map(|r| r.clone());
            (st, states.wait_for(|_| false).await.map(|r| r.clone()))
        });
        publisher.send_replace(GuardState::Suspended {
            valid_until: tokio::time::Instant::now(),
            reason: "test".into(),
        });
        publisher.send_replace(GuardState::Lost {
            cause: crate::LossCause::Expired,
        });
        drop(publisher);
        let (lost, end) = task.await.unwrap();
        assert_eq!(
            lost,
            Ok(GuardState::Lost {
                cause: crate::LossCause::Expired
            })
        );
        assert_eq!(end, Err(StatesClosed));
    }
}
