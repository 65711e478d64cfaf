//! The mutex: exclusion, `try_acquire` and waits that time out, release,
//! dropped and abandoned guards, `with_lock`, independent names, and the
//! model-based run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{DistributedLockExt, LockErrorKind, LockName, LossCause};
use tokio::time::{sleep, timeout, Instant};

use super::helpers::{assert_no_leftovers, client, opts};
use crate::{unique_name, Harness};

/// Many tasks on two clients doing a non-atomic read-modify-write with an
/// `.await` inside the critical section: the count is exact and no two are
/// ever inside at once.
pub(super) async fn mutual_exclusion_under_contention(h: Arc<dyn Harness>) {
    const TASKS_PER_CLIENT: usize = 4;
    const ROUNDS: u64 = 8;
    let name = unique_name("mutex");
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let c = client(&*h).await;
        for _ in 0..TASKS_PER_CLIENT {
            let (c, name, counter, inside, overlaps) = (
                c.clone(),
                name.clone(),
                counter.clone(),
                inside.clone(),
                overlaps.clone(),
            );
            let o = opts(&*h).wait(Duration::from_secs(60));
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let g = c
                        .acquire(&name, &o)
                        .await
                        .expect("acquire under contention");
                    if inside.swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    let v = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    sleep(Duration::from_millis(1)).await;
                    counter.store(v + 1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    assert!(
                        g.release().await.expect("release"),
                        "lock lost during a short section"
                    );
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two holders were inside at once"
    );
    assert_eq!(
        counter.load(Ordering::SeqCst),
        2 * TASKS_PER_CLIENT as u64 * ROUNDS,
        "lost updates"
    );
}

/// `try_acquire` on a held lock returns `None` at once, from another client
/// and from the holder's own client.
pub(super) async fn try_acquire_on_held_lock_returns_none_quickly(h: Arc<dyn Harness>) {
    let name = unique_name("try");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let g = a
        .try_acquire(&name, &opts(&*h))
        .await
        .unwrap()
        .expect("free lock");
    for c in [&b, &a] {
        let t = Instant::now();
        assert!(
            c.try_acquire(&name, &opts(&*h)).await.unwrap().is_none(),
            "held lock granted twice"
        );
        assert!(
            t.elapsed() < h.slack(),
            "try_acquire took {:?}",
            t.elapsed()
        );
    }
    assert!(g.release().await.unwrap());
}

/// `acquire` on a held lock fails with `Timeout` after its wait, not much later.
pub(super) async fn acquire_times_out_when_held(h: Arc<dyn Harness>) {
    let name = unique_name("timeout");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let g = a.acquire(&name, &opts(&*h)).await.unwrap();
    let wait = Duration::from_millis(400);
    let t = Instant::now();
    let err = b
        .acquire(&name, &opts(&*h).wait(wait))
        .await
        .expect_err("held lock granted");
    let took = t.elapsed();
    assert_eq!(err.kind(), LockErrorKind::Timeout, "{err}");
    assert!(err.is_retryable());
    assert!(took >= wait, "gave up early, after {took:?}");
    assert!(took < wait + h.slack(), "gave up late, after {took:?}");
    assert!(g.release().await.unwrap());
}

/// A release frees the lock at once: the next acquirer does not wait for the TTL.
pub(super) async fn release_frees_at_once(h: Arc<dyn Harness>) {
    let name = unique_name("release");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let long = opts(&*h).ttl(h.ttl() * 20);
    let g = a.acquire(&name, &long).await.unwrap();
    assert!(
        g.release().await.unwrap(),
        "release of a held lock reports not held"
    );
    let t = Instant::now();
    let g2 = b
        .try_acquire(&name, &long)
        .await
        .unwrap()
        .expect("released lock still held");
    assert!(t.elapsed() < h.slack());
    assert!(g2.release().await.unwrap());
}

/// Dropping a guard releases its lock in the background, long before its TTL.
pub(super) async fn dropped_guard_releases_in_background(h: Arc<dyn Harness>) {
    let name = unique_name("drop");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let long = opts(&*h).ttl(h.ttl() * 20);
    let g = a.acquire(&name, &long).await.unwrap();
    let t = Instant::now();
    drop(g);
    let g2 = b
        .acquire(&name, &long.clone().wait(h.slack()))
        .await
        .expect("dropped guard kept its lock");
    assert!(t.elapsed() < h.slack(), "took {:?}", t.elapsed());
    assert!(g2.release().await.unwrap());
}

/// A guard whose lease expired reports lost; its late release returns false
/// and never frees the next holder's lock.
pub(super) async fn stale_guard_release_never_frees_next_holder(h: Arc<dyn Harness>) {
    let name = unique_name("stale");
    let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let short = opts(&*h).keep_alive(false);
    let old = a.acquire(&name, &short).await.unwrap();
    let cause = timeout(h.ttl() + h.slack(), old.lost())
        .await
        .expect("an unrenewed guard never reported lost");
    assert_eq!(cause, LossCause::Expired);
    let new = b
        .acquire(&name, &opts(&*h).wait(h.ttl() + h.slack()))
        .await
        .expect("expired lock not retaken");
    assert!(
        !old.release().await.unwrap(),
        "a stale guard's release reported success"
    );
    assert!(
        c.try_acquire(&name, &opts(&*h)).await.unwrap().is_none(),
        "a stale release freed the next holder's lock"
    );
    assert!(new.is_held());
    assert!(new.release().await.unwrap());
}

/// A guard leaked with `mem::forget` (keep-alive off, as a crashed holder)
/// frees its lock within the TTL plus slack.
pub(super) async fn abandoned_guard_frees_within_ttl(h: Arc<dyn Harness>) {
    let name = unique_name("abandon");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let g = a
        .acquire(&name, &opts(&*h).keep_alive(false))
        .await
        .unwrap();
    let t = Instant::now();
    std::mem::forget(g);
    let g2 = b
        .acquire(&name, &opts(&*h).wait(h.ttl() + h.slack()))
        .await
        .expect("abandoned lock not freed within ttl + slack");
    assert!(t.elapsed() <= h.ttl() + h.slack(), "took {:?}", t.elapsed());
    assert!(g2.release().await.unwrap());
}

/// `with_lock` runs the section with the guard's view and releases after.
pub(super) async fn with_lock_runs_and_releases(h: Arc<dyn Harness>) {
    let name = unique_name("withlock");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let seen = a
        .with_lock(&name, &opts(&*h), |guard| async move {
            (guard.is_held(), guard.name().clone())
        })
        .await
        .unwrap();
    assert_eq!(seen, (true, name.clone()));
    let g = b
        .try_acquire(&name, &opts(&*h))
        .await
        .unwrap()
        .expect("with_lock did not release");
    assert!(g.release().await.unwrap());
}

/// Locks on different names are independent.
pub(super) async fn different_names_do_not_interfere(h: Arc<dyn Harness>) {
    let (n1, n2) = (unique_name("names-a"), unique_name("names-b"));
    let (a, b) = (client(&*h).await, client(&*h).await);
    let g1 = a.acquire(&n1, &opts(&*h)).await.unwrap();
    let g2 = b
        .try_acquire(&n2, &opts(&*h))
        .await
        .unwrap()
        .expect("other name blocked");
    let g3 = a.try_acquire(&n2.clone(), &opts(&*h)).await.unwrap();
    assert!(g3.is_none());
    assert!(g1.release().await.unwrap());
    assert!(g2.is_held());
    assert!(g2.release().await.unwrap());
}

/// Random interleavings of try-acquire, release, extend and removal from
/// several clients agree with a reference model: never two holders of one
/// name, tokens strictly increasing.
pub(super) async fn model_based_random_interleavings(h: Arc<dyn Harness>) {
    crate::model::run(h).await;
}

/// A name and its children (and its parent) are different locks: holding
/// one never blocks or is blocked by the other, also from the same client,
/// whatever the child's last segment looks like (a lease id, a contender
/// node, a read or write marker).
pub(super) async fn parent_and_child_names_are_independent(h: Arc<dyn Harness>) {
    let parent = unique_name("nested");
    let children: Vec<LockName> = [
        "nightly",
        "x-lock-0000000001",
        "x__lock__0000000002",
        "7f3a9c2e4b1d0005",
        "y-__WRIT__0000000003",
        "z-__READ__0000000004",
        "read",
        "write",
        "leases",
        "locks",
    ]
    .iter()
    .map(|seg| LockName::new(format!("{parent}/{seg}")).expect("valid child name"))
    .collect();
    let grandchild = LockName::new(format!("{parent}/nightly/part")).unwrap();
    let (a, b) = (client(&*h).await, client(&*h).await);
    let quick = opts(&*h).wait(h.slack());

    // Children held on one client: the parent is free for both clients.
    let mut held = Vec::new();
    for child in children.iter().chain([&grandchild]) {
        held.push(
            a.try_acquire(child, &quick)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("child {child} not free")),
        );
    }
    let p = a
        .acquire(&parent, &quick)
        .await
        .expect("the client holding the children could not take the parent");
    assert!(b.try_acquire(&parent, &quick).await.unwrap().is_none());
    assert!(p.release().await.unwrap());
    let p = b
        .try_acquire(&parent, &quick)
        .await
        .unwrap()
        .expect("parent blocked by its children");
    // The parent held: every child is still taken and released independently.
    for g in held.drain(..) {
        assert!(g.release().await.unwrap());
    }
    for child in children.iter().chain([&grandchild]) {
        let g = a
            .acquire(child, &quick)
            .await
            .unwrap_or_else(|e| panic!("child {child} blocked by its held parent: {e}"));
        assert!(b.try_acquire(child, &quick).await.unwrap().is_none());
        held.push(g);
    }
    // Releasing the parent does not free a child, and the other way round.
    assert!(p.release().await.unwrap());
    for (child, g) in children.iter().chain([&grandchild]).zip(&held) {
        assert!(
            g.is_held(),
            "child {child} lost when its parent was released"
        );
        assert!(b.try_acquire(child, &quick).await.unwrap().is_none());
    }
    let p = b
        .try_acquire(&parent, &quick)
        .await
        .unwrap()
        .expect("parent free");
    for g in held {
        assert!(g.release().await.unwrap());
    }
    assert!(p.is_held());
    assert!(p.release().await.unwrap());
    for name in children.iter().chain([&grandchild, &parent]) {
        assert_no_leftovers(&*h, name).await;
    }
}
