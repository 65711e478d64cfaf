//! A background task that is spawned only once something wakes it.
//!
//! A guard's keeper waits from the grant on (for a command, a server event
//! or its timer), and most guards are released before any of those come:
//! spawning a task for each would cost every acquisition a task, its
//! scheduling and a wake-up of another worker thread, for a task that only
//! ever ends. [`LazyTask::start`] polls the future once in the caller's
//! task instead; if it waits, the future is parked with a waker of its own,
//! and the first wake-up spawns it onto the runtime, where it goes on as any
//! task would (its first poll there polls everything it waits for again, so
//! no wake-up is lost in the move). [`LazyTask::cancel`] drops a future that
//! was never spawned, for an owner that takes over its work.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Wake, Waker};

type Task = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Where the future is.
enum State {
    /// Not started yet.
    Idle,
    /// Its first poll is running in the caller's task.
    Polling,
    /// Woken while its first poll ran: it is spawned as soon as that ends.
    WokenWhilePolling,
    /// Waiting, not spawned: the next wake-up spawns it.
    Parked(Task),
    /// Spawned, finished or cancelled: wake-ups of the parked waker do
    /// nothing (a spawned task has wakers of its own).
    Gone,
}

/// A future run in its caller until it first waits, then parked until a
/// wake-up spawns it. Cheap to clone (one `Arc`).
#[derive(Clone)]
pub(crate) struct LazyTask {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    runtime: tokio::runtime::Handle,
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl LazyTask {
    /// A task on the current tokio runtime, not started. Panics outside a
    /// runtime, as `tokio::spawn` does (the core calls it from an acquire).
    pub(crate) fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State::Idle),
                runtime: tokio::runtime::Handle::current(),
            }),
        }
    }

    /// Polls `future` once here; when it waits, parks it until a wake-up
    /// spawns it. Starting a task twice drops the second future.
    pub(crate) fn start(&self, future: impl Future<Output = ()> + Send + 'static) {
        {
            let mut state = self.inner.state();
            if !matches!(*state, State::Idle) {
                return;
            }
            *state = State::Polling;
        }
        let mut task: Task = Box::pin(future);
        let waker = Waker::from(self.inner.clone());
        if task
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_ready()
        {
            *self.inner.state() = State::Gone;
            return;
        }
        let mut state = self.inner.state();
        match std::mem::replace(&mut *state, State::Gone) {
            State::Polling => *state = State::Parked(task),
            // Woken meanwhile (or cancelled, which leaves it gone): the
            // wake-up must not be lost.
            State::WokenWhilePolling => {
                drop(state);
                self.inner.runtime.spawn(task);
            }
            _ => {}
        }
    }

    /// Drops the future if it never left its caller (parked, not spawned);
    /// `true` when it did, and nothing will run it again. A spawned task is
    /// left to end on its own.
    pub(crate) fn cancel(&self) -> bool {
        let mut state = self.inner.state();
        match std::mem::replace(&mut *state, State::Gone) {
            State::Parked(task) => {
                drop(state);
                drop(task);
                true
            }
            State::Idle => true,
            other => {
                *state = other;
                false
            }
        }
    }
}

impl Wake for Inner {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut state = self.state();
        match std::mem::replace(&mut *state, State::Gone) {
            State::Parked(task) => {
                drop(state);
                self.runtime.spawn(task);
            }
            State::Polling | State::WokenWhilePolling => *state = State::WokenWhilePolling,
            State::Idle => *state = State::Idle,
            State::Gone => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Poll;
    use std::time::Duration;
    use tokio::sync::oneshot;

    /// A future that finishes in its first poll never becomes a task.
    #[tokio::test]
    async fn a_future_done_at_once_runs_in_the_caller() {
        let ran = Arc::new(AtomicUsize::new(0));
        let t = LazyTask::new();
        let r = ran.clone();
        t.start(async move {
            r.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert!(!t.cancel(), "nothing left to cancel");
    }

    /// A waiting future is spawned by the wake-up and runs to its end there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wake_up_spawns_the_parked_future() {
        let (tx, rx) = oneshot::channel::<u32>();
        let (done_tx, done_rx) = oneshot::channel::<u32>();
        let t = LazyTask::new();
        t.start(async move {
            let v = rx.await.unwrap_or(0);
            let _ = done_tx.send(v + 1);
        });
        tx.send(41).unwrap();
        let v = tokio::time::timeout(Duration::from_secs(10), done_rx)
            .await
            .expect("the parked future ran after its wake-up")
            .unwrap();
        assert_eq!(v, 42);
        assert!(!t.cancel(), "a spawned task is not cancelled");
    }

    /// A timer wakes a parked future too.
    #[tokio::test(start_paused = true)]
    async fn a_timer_wakes_the_parked_future() {
        let (done_tx, done_rx) = oneshot::channel::<()>();
        let t = LazyTask::new();
        t.start(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let _ = done_tx.send(());
        });
        tokio::time::timeout(Duration::from_secs(10), done_rx)
            .await
            .expect("the timer spawned the parked future")
            .unwrap();
    }

    /// Cancelling a parked future drops it without running it; a later
    /// wake-up of its old waker does nothing.
    #[tokio::test]
    async fn a_cancelled_future_is_dropped_and_never_runs() {
        struct Dropped(Arc<AtomicUsize>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let (tx, rx) = oneshot::channel::<()>();
        let (drops, ran) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let t = LazyTask::new();
        let (d, r) = (Dropped(drops.clone()), ran.clone());
        t.start(async move {
            let _d = d;
            let _ = rx.await;
            r.fetch_add(1, Ordering::SeqCst);
        });
        assert!(t.cancel());
        assert_eq!(drops.load(Ordering::SeqCst), 1, "dropped at the cancel");
        let _ = tx.send(());
        tokio::task::yield_now().await;
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }

    /// A parked future woken after its runtime shut down is dropped, not
    /// run, and nothing panics (a guard dropped after its runtime).
    #[test]
    fn a_wake_up_after_the_runtime_shut_down_drops_the_future() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        rt.block_on(async {
            LazyTask::new().start(async move {
                let _ = rx.await;
                r.fetch_add(1, Ordering::SeqCst);
            });
        });
        drop(rt);
        let _ = tx.send(());
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }

    /// A wake-up that comes while the first poll runs is not lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wake_up_during_the_first_poll_spawns_it() {
        let (done_tx, done_rx) = oneshot::channel::<()>();
        let t = LazyTask::new();
        let mut first = true;
        let mut done_tx = Some(done_tx);
        t.start(std::future::poll_fn(move |cx| {
            if first {
                first = false;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if let Some(tx) = done_tx.take() {
                let _ = tx.send(());
            }
            Poll::Ready(())
        }));
        tokio::time::timeout(Duration::from_secs(10), done_rx)
            .await
            .expect("the wake-up during the first poll spawned the future")
            .unwrap();
    }
}
