//! An operator's force release: the holders evicted, the waiters let in.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Capabilities, LockMode, LossCause};
use tokio::time::{sleep, timeout, Instant};

use super::helpers::{acquire_as, assert_no_leftovers, client, opts};
use crate::{unique_name, Harness};

/// How long an evicted guard may go on saying held after a force release:
/// a backend with loss events tells it at once (within the slack), the
/// others at the guard's next renewal (every third of `ttl`).
fn eviction_noticed_within(h: &dyn Harness, caps: &Capabilities, ttl: Duration) -> Duration {
    if caps.loss_events {
        h.slack()
    } else {
        ttl / 3 + h.slack()
    }
}

/// Waits until `guard` is lost, within `bound`; its cause is the removal
/// (never an expiry), and it no longer says held.
async fn assert_evicted(guard: &lock_core::LockGuard, bound: Duration, who: &str) {
    let cause = timeout(bound, guard.lost())
        .await
        .unwrap_or_else(|_| panic!("{who}: still not lost {bound:?} after the force release"));
    assert_ne!(
        cause,
        LossCause::Expired,
        "{who}: a force release is a removal, not an expiry"
    );
    assert!(!guard.is_held(), "{who}: lost, yet says held");
}

/// An operator's force release removes the mutex's holder on another
/// client and hands the lock to the client waiting, with a larger fencing
/// token, through the backend's wake-up (the holder's TTL is far longer
/// than the bound); the evicted guard becomes lost and its release frees
/// nothing; a second force release, of a free name, removes nothing.
pub(super) async fn force_release_hands_the_mutex_to_the_waiter(h: Arc<dyn Harness>) {
    let name = unique_name("force");
    let (a, b, op) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let caps = op.capabilities();
    let long = opts(&*h).ttl(h.ttl() * 20).wait(h.ttl() * 20);
    let held = a.acquire(&name, &long).await.unwrap();
    let waiter = {
        let (b, name, o) = (b.clone(), name.clone(), long.clone());
        tokio::spawn(async move { b.acquire(&name, &o).await.map(|g| (Instant::now(), g)) })
    };
    sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    let forced = Instant::now();
    let removed = op.force_release(&name).await.expect("force release");
    assert_eq!(removed.mutex, 1, "{removed:?}");
    assert_eq!(removed.total(), 1, "{removed:?}");
    let (granted, next) = timeout(h.slack().min(h.ttl() * 5), waiter)
        .await
        .expect("the waiter was not handed the lock after the force release")
        .unwrap()
        .expect("the waiter's acquire");
    assert!(next.is_held());
    if caps.fencing.has_tokens() {
        assert!(
            next.fencing_token() > held.fencing_token(),
            "the next holder's token {:?} is not above the evicted one's {:?}",
            next.fencing_token(),
            held.fencing_token()
        );
    }
    let bound = eviction_noticed_within(&*h, &caps, h.ttl() * 20);
    assert_evicted(&held, bound, "the evicted holder").await;
    if caps.loss_events {
        let late = Instant::now() - granted;
        assert!(
            late <= h.slack(),
            "the evicted guard said held {late:?} after the next holder was granted"
        );
    }
    assert!(
        !held.release().await.unwrap(),
        "the evicted guard's release reported success"
    );
    assert!(
        next.is_held(),
        "the evicted guard's release freed the next holder"
    );
    assert!(
        op.try_acquire(&name, &opts(&*h)).await.unwrap().is_none(),
        "the name is free while the next holder holds it"
    );
    assert!(
        forced.elapsed() < h.ttl() * 20,
        "the test outlived the evicted lease"
    );
    assert!(next.release().await.unwrap());
    let again = op
        .force_release(&name)
        .await
        .expect("force release of a free name");
    assert!(!again.removed_any(), "removed from a free name: {again:?}");
    assert_no_leftovers(&*h, &name).await;
}

/// A force release removes every holder of the name's read-write lock (two
/// readers) and every permit of its semaphore, wherever they are held, and
/// the waiting writer (and the waiting permit holder) get in with larger
/// tokens; every evicted guard becomes lost.
pub(super) async fn force_release_removes_every_reader_and_permit(h: Arc<dyn Harness>) {
    let (a, b, op) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let caps = op.capabilities();
    let long = opts(&*h).ttl(h.ttl() * 20).wait(h.ttl() * 20);
    let bound = eviction_noticed_within(&*h, &caps, h.ttl() * 20);
    let shared: Vec<(LockMode, usize)> = [
        (caps.read_write, LockMode::Read),
        (caps.semaphore, LockMode::Permit { permits: 2 }),
    ]
    .into_iter()
    .filter(|(offered, _)| *offered)
    .map(|(_, mode)| (mode, 2))
    .collect();
    for (mode, holders) in shared {
        let name = unique_name("forceshared");
        let mut held = Vec::new();
        for c in [&a, &b].into_iter().take(holders) {
            held.push(acquire_as(&**c, mode, &name, &long).await.unwrap());
        }
        let blocked = match mode {
            LockMode::Read => LockMode::Write,
            other => other,
        };
        let waiter = {
            let (c, name, o) = (client(&*h).await, name.clone(), long.clone());
            tokio::spawn(async move { acquire_as(&*c, blocked, &name, &o).await.map(|g| (c, g)) })
        };
        sleep(Duration::from_millis(300)).await;
        assert!(
            !waiter.is_finished(),
            "{blocked} got in beside {holders} holders of {mode}"
        );
        let removed = op.force_release(&name).await.expect("force release");
        let counted = match mode {
            LockMode::Read => removed.read_write,
            _ => removed.permits,
        };
        assert_eq!(counted, holders, "{mode}: {removed:?}");
        assert_eq!(removed.total(), holders, "{mode}: {removed:?}");
        let (_c, next) = timeout(h.slack().min(h.ttl() * 5), waiter)
            .await
            .unwrap_or_else(|_| panic!("{blocked} not let in after the force release"))
            .unwrap()
            .expect("the waiter's acquire");
        for (i, g) in held.iter().enumerate() {
            if caps.fencing.has_tokens() {
                assert!(
                    next.fencing_token() > g.fencing_token(),
                    "{mode}: the next token {:?} is not above evicted holder {i}'s {:?}",
                    next.fencing_token(),
                    g.fencing_token()
                );
            }
            assert_evicted(g, bound, &format!("{mode} holder {i}")).await;
        }
        for g in held {
            assert!(
                !g.release().await.unwrap(),
                "{mode}: an evicted guard released"
            );
        }
        assert!(next.is_held());
        assert!(next.release().await.unwrap());
        let again = op
            .force_release(&name)
            .await
            .expect("force release of a free name");
        assert!(
            !again.removed_any(),
            "{mode}: removed from a free name: {again:?}"
        );
        assert_no_leftovers(&*h, &name).await;
    }
}
