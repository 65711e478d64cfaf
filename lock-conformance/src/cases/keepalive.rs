//! A held lease: `extend`, keep-alive, the guard's state and validity, and the
//! loss signal.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{DistributedLockExt, GuardState, LockErrorKind, LossCause};
use tokio::time::{sleep, timeout, Instant};

use super::helpers::{client, opts};
use crate::{unique_name, Harness};

/// `extend` keeps a lock (keep-alive off) held past its first TTL.
pub(super) async fn extend_keeps_lock_past_first_ttl(h: Arc<dyn Harness>) {
    let name = unique_name("extend");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let ttl = h.ttl();
    let g = a
        .acquire(&name, &opts(&*h).keep_alive(false))
        .await
        .unwrap();
    let start = Instant::now();
    sleep(ttl / 2).await;
    let until = g.extend(ttl * 2).await.expect("extend of a held lock");
    assert!(
        until > start + ttl,
        "extend did not move validity past the first ttl"
    );
    sleep_until_past(start + ttl + ttl / 4).await;
    assert!(g.is_held(), "state {:?}", g.state());
    assert!(
        b.try_acquire(&name, &opts(&*h)).await.unwrap().is_none(),
        "extended lock was free"
    );
    assert!(g.release().await.unwrap());
}

async fn sleep_until_past(t: Instant) {
    tokio::time::sleep_until(t).await;
}

/// Keep-alive holds a lock for three TTLs and more.
pub(super) async fn keep_alive_holds_lock_for_three_ttls(h: Arc<dyn Harness>) {
    let name = unique_name("keepalive");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let g = a.acquire(&name, &opts(&*h)).await.unwrap();
    sleep(h.ttl() * 3).await;
    assert!(
        matches!(g.state(), GuardState::Held { .. }),
        "state {:?}",
        g.state()
    );
    assert!(
        b.try_acquire(&name, &opts(&*h)).await.unwrap().is_none(),
        "kept-alive lock was free"
    );
    assert!(g.release().await.unwrap());
}

/// A fresh guard is held, valid for about one TTL, and released afterwards.
pub(super) async fn guard_reports_state_and_validity(h: Arc<dyn Harness>) {
    let name = unique_name("state");
    let a = client(&*h).await;
    let before = Instant::now();
    let g = a.acquire(&name, &opts(&*h)).await.unwrap();
    assert_eq!(g.name(), &name);
    let until = g.valid_until().expect("fresh guard has a validity");
    assert!(until > Instant::now(), "fresh guard already expired");
    assert!(
        until <= Instant::now() + h.ttl() + h.slack(),
        "validity beyond ttl: {:?}",
        until - before
    );
    assert!(g.is_held());
    let mut watch = g.subscribe();
    assert!(g.release().await.unwrap());
    watch.changed().await.ok();
    assert_eq!(*watch.borrow(), GuardState::Released);
}

/// When the lock is removed behind the holder's back, the loss signal fires
/// within a TTL (the next renewal or a server event at the latest).
pub(super) async fn loss_signal_fires_when_lock_removed(h: Arc<dyn Harness>) {
    let name = unique_name("loss");
    let a = client(&*h).await;
    let g = a.acquire(&name, &opts(&*h)).await.unwrap();
    h.remove_behind_back(&name).await;
    let cause = timeout(h.ttl() + h.slack(), g.lost())
        .await
        .expect("loss never signalled");
    assert_ne!(
        cause,
        LossCause::Expired,
        "a removal should be seen by the server, not by expiry"
    );
    assert!(matches!(g.state(), GuardState::Lost { .. }));
    assert!(!g.is_held());
    assert!(
        !g.release().await.unwrap(),
        "release of a lost lock reported success"
    );
}

/// `with_lock` stops the critical section when the lock is lost and returns
/// a `Lost` error.
pub(super) async fn with_lock_stops_section_when_lock_lost(h: Arc<dyn Harness>) {
    let name = unique_name("withlock-loss");
    let a = client(&*h).await;
    let finished = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<Instant>();
    // Removes the lock once the section is running (never during the acquisition).
    let remover = {
        let (h, name) = (h.clone(), name.clone());
        tokio::spawn(async move {
            let started = started_rx.await.ok()?;
            sleep(Duration::from_millis(100)).await;
            h.remove_behind_back(&name).await;
            Some((started, Instant::now()))
        })
    };
    let section_done = finished.clone();
    let long = h.ttl() * 10;
    let result = a
        .with_lock(&name, &opts(&*h), |_guard| async move {
            let _ = started_tx.send(Instant::now());
            sleep(long).await;
            section_done.store(true, Ordering::SeqCst);
        })
        .await;
    let ended = Instant::now();
    let (_, removed) = remover.await.unwrap().expect("the section never started");
    let err = result.expect_err("section ran to the end on a lost lock");
    assert_eq!(err.kind(), LockErrorKind::Lost, "{err}");
    assert!(!finished.load(Ordering::SeqCst));
    let noticed = ended - removed;
    assert!(
        noticed < h.ttl() + h.slack(),
        "loss noticed {noticed:?} after the removal"
    );
}
