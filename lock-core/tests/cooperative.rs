//! A task that takes and releases in-process locks in a loop, never having
//! to wait, still lets the other tasks of its runtime run: the in-process
//! lock spends tokio's cooperative budget, as a socket or a channel would.
//! (Each guard also has a keeper task, which must get to run and end.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockName, MemoryLock};

const CYCLES: usize = 50_000;

/// Runs `CYCLES` acquire+release cycles with `cycle` and returns the first
/// cycle after which another task of the (single-threaded) runtime had run,
/// and the most tasks alive at once.
async fn loop_with(
    cycle: impl AsyncFn(&MemoryLock, &LockName, &AcquireOptions),
) -> (Option<usize>, usize) {
    let locks = MemoryLock::new();
    let name = LockName::new("cooperative").unwrap();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(10));
    let ran = Arc::new(AtomicBool::new(false));
    let other = {
        let ran = ran.clone();
        tokio::spawn(async move { ran.store(true, Ordering::SeqCst) })
    };
    let metrics = tokio::runtime::Handle::current().metrics();
    let (mut first_seen, mut most_alive) = (None, 0);
    for i in 0..CYCLES {
        cycle(&locks, &name, &opts).await;
        if first_seen.is_none() && ran.load(Ordering::SeqCst) {
            first_seen = Some(i);
        }
        most_alive = most_alive.max(metrics.num_alive_tasks());
    }
    other.await.unwrap();
    (first_seen, most_alive)
}

fn check(what: &str, (first_seen, most_alive): (Option<usize>, usize)) {
    println!(
        "{what}: another task ran after cycle {first_seen:?}; at most {most_alive} tasks alive"
    );
    let at = first_seen
        .unwrap_or_else(|| panic!("{what}: {CYCLES} cycles in a row never let another task run"));
    assert!(
        at < 1_000,
        "{what}: another task ran only after {at} cycles"
    );
    // Bounded by what one turn of the loop starts, whatever the number of
    // cycles (keepers left waiting for a turn would pile up with them).
    assert!(
        most_alive < 500,
        "{what}: {most_alive} tasks alive at once (keepers waiting for their turn to end)"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_try_acquire_loop_lets_other_tasks_run() {
    let seen = loop_with(async |locks, name, opts| {
        let g = locks.try_acquire(name, opts).await.unwrap().unwrap();
        assert!(g.release().await.unwrap());
    })
    .await;
    check("try_acquire", seen);
}

#[tokio::test(flavor = "current_thread")]
async fn an_acquire_loop_lets_other_tasks_run() {
    let seen = loop_with(async |locks, name, opts| {
        let g = locks.acquire(name, opts).await.unwrap();
        assert!(g.release().await.unwrap());
    })
    .await;
    check("acquire", seen);
}
