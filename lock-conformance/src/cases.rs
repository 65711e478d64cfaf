//! The cases. Each is a small async fn whose doc line states the contract.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use lock_core::{
    AcquireOptions, Capabilities, DistributedLock, DistributedLockExt, GuardState, LockErrorKind,
    LockName, LossCause, MAX_TTL,
};
use tokio::time::{sleep, timeout, Instant};

use crate::{unique_name, Case, Harness};

macro_rules! cases {
    ($( $name:ident if $applies:expr ),* $(,)?) => {
        /// Every case of the suite, in order.
        pub static CASES: &[Case] = &[
            $( Case {
                name: stringify!($name),
                applies: $applies,
                run: |h: Arc<dyn Harness>| -> BoxFuture<'static, ()> { $name(h).boxed() },
            } ),*
        ];
    };
}

fn always(_: &Capabilities) -> bool {
    true
}

cases! {
    mutual_exclusion_under_contention if always,
    try_acquire_on_held_lock_returns_none_quickly if always,
    acquire_times_out_when_held if always,
    release_frees_at_once if always,
    dropped_guard_releases_in_background if always,
    stale_guard_release_never_frees_next_holder if always,
    abandoned_guard_frees_within_ttl if always,
    fencing_tokens_strictly_increase if |c| c.fencing.has_tokens(),
    no_fencing_token_when_backend_has_none if |c| !c.fencing.has_tokens(),
    extend_keeps_lock_past_first_ttl if always,
    keep_alive_holds_lock_for_three_ttls if always,
    guard_reports_state_and_validity if always,
    loss_signal_fires_when_lock_removed if always,
    with_lock_stops_section_when_lock_lost if always,
    with_lock_runs_and_releases if always,
    dropped_waiting_acquire_leaves_nothing if always,
    different_names_do_not_interfere if always,
    waiters_are_served_in_fifo_order if |c| c.fifo,
    release_wakes_a_waiter_promptly if |c| c.notified_wait,
    bad_input_is_invalid_argument if always,
    unreachable_server_is_unavailable_quickly if |c| c.remote,
    inspect_reports_holder if always,
    model_based_random_interleavings if always,
}

fn opts(h: &dyn Harness) -> AcquireOptions {
    AcquireOptions::new()
        .ttl(h.ttl())
        .wait(Duration::from_secs(30))
}

async fn client(h: &dyn Harness) -> Arc<dyn DistributedLock> {
    h.client().await
}

/// Many tasks on two clients doing a non-atomic read-modify-write with an
/// `.await` inside the critical section: the count is exact and no two are
/// ever inside at once.
async fn mutual_exclusion_under_contention(h: Arc<dyn Harness>) {
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
async fn try_acquire_on_held_lock_returns_none_quickly(h: Arc<dyn Harness>) {
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
async fn acquire_times_out_when_held(h: Arc<dyn Harness>) {
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
async fn release_frees_at_once(h: Arc<dyn Harness>) {
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
async fn dropped_guard_releases_in_background(h: Arc<dyn Harness>) {
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
async fn stale_guard_release_never_frees_next_holder(h: Arc<dyn Harness>) {
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
async fn abandoned_guard_frees_within_ttl(h: Arc<dyn Harness>) {
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

/// Fencing tokens strictly increase over successive holders, across clients,
/// including after a holder lost its lock by expiry.
async fn fencing_tokens_strictly_increase(h: Arc<dyn Harness>) {
    let name = unique_name("fencing");
    let clients = [client(&*h).await, client(&*h).await, client(&*h).await];
    let mut last = None;
    for i in 0..9 {
        let g = clients[i % 3].acquire(&name, &opts(&*h)).await.unwrap();
        let token = g
            .fencing_token()
            .expect("a fencing backend returned no token");
        assert!(Some(token) > last, "token {token} after {last:?}");
        last = Some(token);
        assert!(g.release().await.unwrap());
    }
    let lapsed = clients[0]
        .acquire(&name, &opts(&*h).keep_alive(false))
        .await
        .unwrap();
    let lapsed_token = lapsed.fencing_token();
    timeout(h.ttl() + h.slack(), lapsed.lost())
        .await
        .expect("expiry not reported");
    let next = clients[1].acquire(&name, &opts(&*h)).await.unwrap();
    assert!(
        next.fencing_token() > lapsed_token,
        "{:?} after {lapsed_token:?}",
        next.fencing_token()
    );
    assert!(next.release().await.unwrap());
}

/// A backend without fencing says so with `None`, never a made-up number.
async fn no_fencing_token_when_backend_has_none(h: Arc<dyn Harness>) {
    let name = unique_name("nofencing");
    let g = client(&*h).await.acquire(&name, &opts(&*h)).await.unwrap();
    assert_eq!(g.fencing_token(), None);
    assert!(g.release().await.unwrap());
}

/// `extend` keeps a lock (keep-alive off) held past its first TTL.
async fn extend_keeps_lock_past_first_ttl(h: Arc<dyn Harness>) {
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
async fn keep_alive_holds_lock_for_three_ttls(h: Arc<dyn Harness>) {
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
async fn guard_reports_state_and_validity(h: Arc<dyn Harness>) {
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
async fn loss_signal_fires_when_lock_removed(h: Arc<dyn Harness>) {
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
async fn with_lock_stops_section_when_lock_lost(h: Arc<dyn Harness>) {
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

/// `with_lock` runs the section with the guard's view and releases after.
async fn with_lock_runs_and_releases(h: Arc<dyn Harness>) {
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

/// A waiting acquire that is dropped leaves nothing on the server and does
/// not delay the next acquirer.
async fn dropped_waiting_acquire_leaves_nothing(h: Arc<dyn Harness>) {
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

/// Locks on different names are independent.
async fn different_names_do_not_interfere(h: Arc<dyn Harness>) {
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

/// Waiters get the lock in the order they started waiting.
async fn waiters_are_served_in_fifo_order(h: Arc<dyn Harness>) {
    const WAITERS: usize = 4;
    let name = unique_name("fifo");
    let holder = client(&*h).await;
    let g = holder.acquire(&name, &opts(&*h)).await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let c = client(&*h).await;
        let (name, order, o) = (
            name.clone(),
            order.clone(),
            opts(&*h).wait(Duration::from_secs(60)),
        );
        tasks.push(tokio::spawn(async move {
            let g = c.acquire(&name, &o).await.expect("waiter");
            order.lock().unwrap().push(i);
            sleep(Duration::from_millis(20)).await;
            assert!(g.release().await.unwrap());
        }));
        // Give each waiter time to queue before the next one starts.
        sleep(Duration::from_millis(150)).await;
    }
    assert!(g.release().await.unwrap());
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
}

/// A release wakes a waiter on another client at once (a notification or a
/// watch), long before the holder's TTL would have run out.
async fn release_wakes_a_waiter_promptly(h: Arc<dyn Harness>) {
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

/// Bad names and zero or oversized TTLs give `InvalidArgument`, never a panic.
async fn bad_input_is_invalid_argument(h: Arc<dyn Harness>) {
    for bad in [
        "",
        "a b",
        "x\0y",
        "/lead",
        "trail/",
        "a//b",
        &"n".repeat(500),
    ] {
        let err = LockName::new(bad).expect_err(bad);
        assert_eq!(err.kind(), LockErrorKind::InvalidArgument);
        assert!(!err.is_retryable());
    }
    let a = client(&*h).await;
    let name = unique_name("badinput");
    for o in [
        opts(&*h).ttl(Duration::ZERO),
        opts(&*h).ttl(MAX_TTL + Duration::from_secs(1)),
        opts(&*h).wait(Duration::from_secs(400 * 86_400)),
    ] {
        let err = a
            .acquire(&name, &o)
            .await
            .expect_err("bad options accepted");
        assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
        let err = a
            .try_acquire(&name, &o)
            .await
            .expect_err("bad options accepted");
        assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
    }
    assert!(h.leftovers(&name).await.is_empty());
}

/// A server that does not answer gives `Unavailable` within the configured
/// timeout (plus slack), never a hang.
async fn unreachable_server_is_unavailable_quickly(h: Arc<dyn Harness>) {
    let t = Instant::now();
    let (made, limit) = h.unreachable_client().await;
    let bound = limit + h.slack();
    let err = match made {
        Err(err) => err,
        Ok(c) => {
            let name = unique_name("unreachable");
            match timeout(
                bound * 2,
                c.acquire(&name, &opts(&*h).wait(Duration::from_secs(30))),
            )
            .await
            {
                Err(_) => panic!(
                    "acquire against an unreachable server hung for {:?}",
                    bound * 2
                ),
                Ok(Ok(_)) => panic!("acquired a lock from an unreachable server"),
                Ok(Err(err)) => err,
            }
        }
    };
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
    assert!(
        t.elapsed() <= bound,
        "took {:?}, limit {limit:?}",
        t.elapsed()
    );
}

/// `inspect` tells held from free, with the holder's token where the backend has one.
async fn inspect_reports_holder(h: Arc<dyn Harness>) {
    let name = unique_name("inspect");
    let a = client(&*h).await;
    assert!(!a.inspect(&name).await.unwrap().held);
    let g = a.acquire(&name, &opts(&*h)).await.unwrap();
    let st = a.inspect(&name).await.unwrap();
    assert!(st.held);
    if let Some(token) = g.fencing_token() {
        assert_eq!(st.token, Some(token));
    }
    if let Some(ttl) = st.ttl_remaining {
        assert!(ttl <= h.ttl() + h.slack());
    }
    assert!(g.release().await.unwrap());
    assert!(!a.inspect(&name).await.unwrap().held);
}

/// Random interleavings of try-acquire, release, extend and removal from
/// several clients agree with a reference model: never two holders of one
/// name, tokens strictly increasing.
async fn model_based_random_interleavings(h: Arc<dyn Harness>) {
    crate::model::run(h).await;
}
