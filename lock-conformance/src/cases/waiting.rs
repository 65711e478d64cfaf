//! Waiters: FIFO order, wake-ups on release, and waits that are dropped or time
//! out leaving the line.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOptions, LockErrorKind, LockMode, LockName, LockService};
use tokio::time::{sleep, Instant};

use super::helpers::{acquire_as, assert_no_leftovers, blocking_mode, client, offered_modes, opts};
use crate::{unique_name, Harness};

/// A waiting acquire that is dropped leaves nothing on the server and does
/// not delay the next acquirer.
pub(super) async fn dropped_waiting_acquire_leaves_nothing(h: Arc<dyn Harness>) {
    let name = unique_name("cancel");
    let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let g = a.acquire(&name, &opts(&*h)).await.unwrap();
    let waiting = {
        let (b, name, o) = (
            b.clone(),
            name.clone(),
            opts(&*h).wait(Duration::from_secs(60)),
        );
        tokio::spawn(async move { b.acquire(&name, &o).await.map(|_| ()) })
    };
    sleep(Duration::from_millis(300)).await;
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    assert!(g.release().await.unwrap());
    let t = Instant::now();
    let g2 = c
        .acquire(&name, &opts(&*h).wait(h.slack()))
        .await
        .expect("a cancelled waiter blocked the next acquirer");
    assert!(
        t.elapsed() < h.slack(),
        "next acquirer delayed {:?}",
        t.elapsed()
    );
    assert!(g2.release().await.unwrap());
    let deadline = Instant::now() + h.slack();
    loop {
        let left = h.leftovers(&name).await;
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left behind on the server: {left:?}"
        );
        sleep(Duration::from_millis(50)).await;
    }
}

/// Waiters get the lock in the order they started waiting.
///
/// The holder holds while four clients connect and queue one after the
/// other, seconds on a busy machine: the locks here have a TTL of 30 s, so
/// that what is checked is the order, not whether a lease of the harness's
/// short TTL is kept alive through that load.
pub(super) async fn waiters_are_served_in_fifo_order(h: Arc<dyn Harness>) {
    const WAITERS: usize = 4;
    let name = unique_name("fifo");
    let long = opts(&*h).ttl(Duration::from_secs(30));
    let holder = client(&*h).await;
    let g = holder.acquire(&name, &long).await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let c = client(&*h).await;
        let (name, order, o) = (
            name.clone(),
            order.clone(),
            long.clone().wait(Duration::from_secs(60)),
        );
        tasks.push(tokio::spawn(async move {
            let g = c.acquire(&name, &o).await.expect("waiter");
            order.lock().unwrap().push(i);
            sleep(Duration::from_millis(20)).await;
            assert!(g.release().await.unwrap());
        }));
        // Give each waiter time to queue before the next one starts: its
        // first attempt, within the harness's slack.
        sleep(h.slack() / 2).await;
    }
    assert!(g.release().await.unwrap());
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
}

/// A holder that releases and asks for the lock again at once queues
/// behind the client that was already waiting: the waiter gets the lock
/// first, every round (a releaser must not barge ahead of waiters).
pub(super) async fn a_releaser_coming_back_queues_behind_the_waiter(h: Arc<dyn Harness>) {
    let name = unique_name("comeback");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(30));
    let mut g = a.acquire(&name, &o).await.unwrap();
    for round in 0..5 {
        let served = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let waiter = {
            let (b, name, o, served) = (b.clone(), name.clone(), o.clone(), served.clone());
            tokio::spawn(async move {
                let g = b.acquire(&name, &o).await.expect("waiter");
                served.store(true, std::sync::atomic::Ordering::SeqCst);
                sleep(Duration::from_millis(20)).await;
                assert!(g.release().await.unwrap());
            })
        };
        // Let the waiter take its place: its first attempt, within the
        // harness's slack.
        sleep(h.slack() / 2).await;
        assert!(g.release().await.unwrap());
        let again = a
            .acquire(&name, &o)
            .await
            .expect("the releaser's second acquire");
        assert!(
            served.load(std::sync::atomic::Ordering::SeqCst),
            "round {round}: the releaser took the lock back ahead of the client already waiting"
        );
        waiter.await.unwrap();
        g = again;
    }
    assert!(g.release().await.unwrap());
}

/// A release wakes a waiter on another client at once (a notification or a
/// watch), long before the holder's TTL would have run out.
pub(super) async fn release_wakes_a_waiter_promptly(h: Arc<dyn Harness>) {
    let name = unique_name("wake");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let long = opts(&*h).ttl(h.ttl() * 20);
    for _ in 0..3 {
        let g = a.acquire(&name, &long).await.unwrap();
        let waiter = {
            let (b, name, o) = (b.clone(), name.clone(), long.clone().wait(h.ttl() * 20));
            tokio::spawn(async move {
                let g = b.acquire(&name, &o).await.expect("waiter");
                (Instant::now(), g)
            })
        };
        sleep(Duration::from_millis(300)).await;
        let released = Instant::now();
        assert!(g.release().await.unwrap());
        let (got, g2) = waiter.await.unwrap();
        let handoff = got - released;
        assert!(
            handoff < h.slack().min(h.ttl() * 5),
            "hand-off took {handoff:?}: the waiter was not woken by the release"
        );
        assert!(g2.release().await.unwrap());
    }
}

/// One attempt at `mode`, no waiting.
async fn try_as(
    c: &dyn LockService,
    mode: LockMode,
    name: &LockName,
    o: &AcquireOptions,
) -> lock_core::Result<Option<lock_core::LockGuard>> {
    match mode {
        LockMode::Read => c.try_acquire_read(name, o).await,
        LockMode::Write => c.try_acquire_write(name, o).await,
        LockMode::Permit { permits } => c.try_acquire_permit(name, permits, o).await,
        _ => c.try_acquire(name, o).await,
    }
}

/// A runtime that ran one call and is no longer driven: like a process that
/// exits as soon as the call returns, nothing the call left to background
/// tasks ever runs. Shut down on drop, off the async threads.
struct Stopped(Option<tokio::runtime::Runtime>);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            std::thread::spawn(move || drop(rt));
        }
    }
}

/// Runs `call` alone on a runtime of its own and stops that runtime when
/// the call returns.
async fn call_then_stop<T: Send + 'static>(
    call: impl std::future::Future<Output = T> + Send + 'static,
) -> (T, Stopped) {
    tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the call");
        let out = rt.block_on(call);
        (out, Stopped(Some(rt)))
    })
    .await
    .expect("the call's thread")
}

/// A wait that runs out has left the line when the call returns, in every
/// mode: a process that exits at once (`distlock run --wait` giving up)
/// blocks nobody. The waiter's runtime stops when its call returns, so
/// nothing it left to the background runs; the holder then releases and a
/// third client's single try gets the lock.
pub(super) async fn a_wait_that_times_out_has_left_the_line_when_it_returns(h: Arc<dyn Harness>) {
    let caps = client(&*h).await.capabilities();
    for mode in offered_modes(&caps) {
        let name = unique_name("gaveup");
        let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
        let held = acquire_as(&*a, blocking_mode(mode), &name, &opts(&*h))
            .await
            .unwrap();
        let wait = Duration::from_millis(300);
        let (outcome, stopped) = {
            let (b, name, o) = (b.clone(), name.clone(), opts(&*h).wait(wait));
            call_then_stop(async move { acquire_as(&*b, mode, &name, &o).await.map(|_| ()) }).await
        };
        let err = outcome.expect_err("a waiter got a held lock");
        assert_eq!(err.kind(), LockErrorKind::Timeout, "{mode:?}: {err}");
        assert!(held.release().await.unwrap());
        let next = try_as(&*c, mode, &name, &opts(&*h)).await.unwrap();
        let Some(next) = next else {
            panic!(
                "{mode:?}: the lock was not free after its holder released: \
                 the waiter that timed out was still in line when its call returned"
            );
        };
        assert!(next.release().await.unwrap());
        drop(stopped);
        assert_no_leftovers(&*h, &name).await;
    }
}
