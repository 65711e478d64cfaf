//! Several names at once (`acquire_all`, `with_all`): all or nothing, no
//! deadlock, lost members.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{DistributedLockExt, LockErrorKind, LockName};
use tokio::time::{sleep, timeout, Instant};

use super::helpers::{assert_no_leftovers, client, opts};
use crate::{unique_name, Harness};

/// `acquire_all` takes every name or none: when one is held elsewhere it
/// times out and leaves the others free; otherwise it holds them all, with
/// a token each where the backend has them, and releases them all.
pub(super) async fn acquire_all_takes_all_or_nothing(h: Arc<dyn Harness>) {
    let names: Vec<LockName> = (0..3).map(|i| unique_name(&format!("all{i}"))).collect();
    let (a, b) = (client(&*h).await, client(&*h).await);
    let blocker = b.acquire(&names[2], &opts(&*h)).await.unwrap();
    let err = a
        .acquire_all(&names, &opts(&*h).wait(Duration::from_millis(300)))
        .await
        .expect_err("acquired a set with a member held elsewhere");
    assert_eq!(err.kind(), LockErrorKind::Timeout, "{err}");
    for n in &names[..2] {
        let g = b
            .try_acquire(n, &opts(&*h))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{n} kept after a failed acquire_all"));
        assert!(g.release().await.unwrap());
    }
    assert!(blocker.release().await.unwrap());
    let reversed: Vec<LockName> = names.iter().rev().cloned().collect();
    let all = a.acquire_all(&reversed, &opts(&*h)).await.unwrap();
    assert_eq!(
        all.names().cloned().collect::<Vec<_>>(),
        names,
        "not in the global order"
    );
    assert!(all.is_held());
    for g in all.guards() {
        assert_eq!(
            g.fencing_token().is_some(),
            h.client().await.capabilities().fencing.has_tokens()
        );
        assert!(b.try_acquire(g.name(), &opts(&*h)).await.unwrap().is_none());
    }
    let dup = [names[0].clone(), names[0].clone()];
    assert_eq!(
        a.acquire_all(&dup, &opts(&*h)).await.unwrap_err().kind(),
        LockErrorKind::InvalidArgument
    );
    assert!(all.release().await.unwrap());
    for n in &names {
        assert_no_leftovers(&*h, n).await;
    }
}

/// Two clients that repeatedly take {a, b} and {b, a} never deadlock and are
/// never inside at the same time.
pub(super) async fn crossing_multi_locks_never_deadlock_or_overlap(h: Arc<dyn Harness>) {
    let x = unique_name("cross-x");
    let y = unique_name("cross-y");
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for order in [[x.clone(), y.clone()], [y.clone(), x.clone()]] {
        let c = client(&*h).await;
        let (inside, overlaps) = (inside.clone(), overlaps.clone());
        let o = opts(&*h).wait(Duration::from_secs(30));
        tasks.push(tokio::spawn(async move {
            for _ in 0..6 {
                c.with_all(&order, &o, |_views| async {
                    if inside.swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    sleep(Duration::from_millis(5)).await;
                    inside.store(false, Ordering::SeqCst);
                })
                .await
                .expect("with_all");
            }
        }));
    }
    for t in tasks {
        timeout(Duration::from_secs(60), t)
            .await
            .expect("deadlock: the crossing multi-locks did not finish")
            .unwrap();
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
}

/// `acquire_all` never returns a set one of whose members was lost while
/// it waited for the others: it fails (retryably) and leaves every name free.
pub(super) async fn acquire_all_never_returns_a_lost_member(h: Arc<dyn Harness>) {
    let mut names = vec![unique_name("waiting-all-a"), unique_name("waiting-all-b")];
    names.sort();
    let (first, last) = (names[0].clone(), names[1].clone());
    let (a, b) = (client(&*h).await, client(&*h).await);
    let blocker = b.acquire(&last, &opts(&*h)).await.unwrap();
    let waiting = {
        let (a, names) = (a.clone(), names.clone());
        let o = opts(&*h);
        tokio::spawn(async move { a.acquire_all(&names, &o).await })
    };
    let deadline = Instant::now() + h.slack();
    while !b.inspect(&first).await.unwrap().held {
        assert!(
            Instant::now() < deadline,
            "acquire_all never took {first} while it waited for {last}"
        );
        sleep(Duration::from_millis(10)).await;
    }
    h.remove_behind_back(&first).await;
    // Long enough for the member's keeper to learn of the loss: a loss
    // event, or its next renewal (every TTL/3).
    sleep(h.ttl() + h.slack()).await;
    assert!(blocker.release().await.unwrap());
    let got = timeout(h.ttl() + h.slack(), waiting)
        .await
        .expect("acquire_all did not return once the last name was free")
        .unwrap();
    match got {
        Ok(all) => {
            let lost = all.first_lost().map(|(n, _)| n);
            let held = all.is_held();
            let _ = all.release().await;
            assert!(
                held,
                "acquire_all returned a set whose member {lost:?} was already lost"
            );
        }
        Err(e) => assert!(e.is_retryable(), "{e}"),
    }
    for n in &names {
        assert_no_leftovers(&*h, n).await;
    }
}

/// A member lost while the set is held is reported with its name, and a
/// `with_all` section is stopped.
pub(super) async fn multi_lock_reports_a_lost_member(h: Arc<dyn Harness>) {
    let names = [unique_name("member-a"), unique_name("member-b")];
    let a = client(&*h).await;
    let all = a.acquire_all(&names, &opts(&*h)).await.unwrap();
    h.remove_behind_back(&names[1]).await;
    let (name, _cause) = timeout(h.ttl() + h.slack(), all.lost())
        .await
        .expect("the lost member was never reported");
    assert_eq!(name, names[1]);
    assert!(!all.is_held());
    assert_eq!(all.first_lost().map(|(n, _)| n), Some(names[1].clone()));
    assert!(
        !all.release().await.unwrap(),
        "a set with a lost member reported fully held"
    );
    let removed = names[0].clone();
    let h2 = h.clone();
    let err = a
        .with_all(&names, &opts(&*h), |_| async move {
            h2.remove_behind_back(&removed).await;
            sleep(h2.ttl() * 3 + h2.slack()).await;
        })
        .await
        .expect_err("the section ran on after a member was lost");
    assert_eq!(err.kind(), LockErrorKind::Lost, "{err}");
    for n in &names {
        assert_no_leftovers(&*h, n).await;
    }
}
