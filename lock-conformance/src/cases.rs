//! The cases. Each is a small async fn whose doc line states the contract.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use lock_core::{
    AcquireOptions, Capabilities, DistributedLockExt, GuardState, Holder, LockErrorKind, LockMode,
    LockName, LockService, LossCause, ReadWriteLockExt, MAX_NOTE_LEN, MAX_TTL,
};
use tokio::time::{sleep, timeout, Instant};

use crate::{client_through_proxies, unique_name, Case, Harness};

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
    inspect_and_list_describe_the_holder if |c| c.describes_holder,
    model_based_random_interleavings if always,
    parent_and_child_names_are_independent if always,
    every_call_honours_its_deadline_when_the_server_hangs if |c| c.remote,
    lost_release_notification_still_wakes_the_waiter if |c| c.remote && c.notified_wait,
    unanswered_extend_never_lengthens_validity if |c| c.remote,
    acquire_all_takes_all_or_nothing if always,
    crossing_multi_locks_never_deadlock_or_overlap if always,
    multi_lock_reports_a_lost_member if always,
    acquire_all_never_returns_a_lost_member if always,
    readers_hold_together_and_a_writer_alone if |c| c.read_write,
    waiting_writer_is_not_starved_by_new_readers if |c| c.read_write,
    read_write_exclusion_under_contention if |c| c.read_write,
    write_tokens_follow_every_earlier_grant if |c| c.read_write && c.fencing.has_tokens(),
    downgrade_keeps_writers_out_and_lets_readers_in if |c| c.read_write,
    upgrade_is_refused if |c| c.read_write,
    dropped_read_write_waiters_leave_nothing if |c| c.read_write,
    permits_never_exceed_the_count if |c| c.semaphore,
    freed_permit_goes_to_a_waiter_promptly if |c| c.semaphore && c.notified_wait,
    abandoned_permit_frees_within_ttl if |c| c.semaphore,
    dropped_permit_waiter_leaves_nothing if |c| c.semaphore,
    missing_primitives_are_unsupported if |c| !c.read_write || !c.semaphore,
    list_shows_held_locks_by_prefix if always,
    downgrade_keeps_a_queued_writer_out if |c| c.read_write,
    list_and_other_primitives_honour_their_deadline_when_the_server_hangs if |c| c.remote,
    a_returning_writer_queues_behind_waiting_readers if |c| c.read_write,
    a_releaser_coming_back_queues_behind_the_waiter if |c| c.fifo,
    a_wait_that_times_out_has_left_the_line_when_it_returns if always,
    a_waiter_cut_off_holds_nobody_up_long_after_its_deadline if |c| c.remote,
    a_forever_waiter_rides_out_an_outage if |c| c.remote,
    a_reader_queued_behind_a_writer_gets_a_newer_token if |c| c.read_write && c.fencing.has_tokens(),
    a_writer_queued_behind_a_downgrade_gets_a_newer_token if |c| c.read_write && c.fencing.has_tokens(),
    readers_let_in_together_get_distinct_newer_tokens if |c| c.read_write && c.fencing.has_tokens(),
    queued_permits_get_tokens_in_grant_order if |c| c.semaphore && c.fencing.has_tokens(),
    force_release_hands_the_mutex_to_the_waiter if always,
    force_release_removes_every_reader_and_permit if |c| c.read_write || c.semaphore,
    an_unanswered_downgrade_never_leaves_the_write_guard_held_beside_a_reader if |c| c.remote && c.read_write,
}

fn opts(h: &dyn Harness) -> AcquireOptions {
    AcquireOptions::new()
        .ttl(h.ttl())
        .wait(Duration::from_secs(30))
}

async fn client(h: &dyn Harness) -> Arc<dyn LockService> {
    h.client().await
}

/// `n` clients, each connected before the next (the connections are made
/// before the tasks that use them start, so they do not stagger them).
async fn clients(h: &dyn Harness, n: usize) -> Vec<Arc<dyn LockService>> {
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        all.push(h.client().await);
    }
    all
}

/// Waits until nothing of `name` is left on the server, or fails after `h.slack()`.
async fn assert_no_leftovers(h: &dyn Harness, name: &LockName) {
    let deadline = Instant::now() + h.slack();
    loop {
        let left = h.leftovers(name).await;
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "left behind on the server: {left:?}"
        );
        sleep(Duration::from_millis(50)).await;
    }
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

/// A holder that releases and asks for the lock again at once queues
/// behind the client that was already waiting: the waiter gets the lock
/// first, every round (a releaser must not barge ahead of waiters).
async fn a_releaser_coming_back_queues_behind_the_waiter(h: Arc<dyn Harness>) {
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
        // Let the waiter take its place.
        sleep(Duration::from_millis(300)).await;
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
    let limit = Duration::from_millis(500);
    let bound = limit + h.slack();
    let name = unique_name("unreachable");
    // A server that accepts connections and never answers, from the start...
    let t = Instant::now();
    let (proxies, made) = {
        let proxies: Vec<crate::testbed::Proxy> = h
            .upstreams()
            .into_iter()
            .map(|up| crate::testbed::Proxy::start(up).expect("proxy"))
            .collect();
        for p in &proxies {
            p.blackhole();
        }
        let addrs: Vec<_> = proxies.iter().map(|p| p.addr()).collect();
        let made = h.client_at(&addrs, limit).await;
        (proxies, made)
    };
    let err = match made {
        Err(err) => err,
        Ok(c) => match timeout(bound * 2, c.acquire(&name, &opts(&*h))).await {
            Err(_) => panic!(
                "acquire against an unreachable server hung for {:?}",
                bound * 2
            ),
            Ok(Ok(_)) => panic!("acquired a lock from an unreachable server"),
            Ok(Err(err)) => err,
        },
    };
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
    assert!(
        t.elapsed() <= bound,
        "took {:?}, limit {limit:?}",
        t.elapsed()
    );
    drop(proxies);
    // ...and one that stops answering after the connect.
    let (proxies, made) = client_through_proxies(&*h, limit).await;
    let c = made.expect("connect through healthy proxies");
    for p in &proxies {
        p.blackhole();
    }
    let t = Instant::now();
    let err = c
        .acquire(&name, &opts(&*h))
        .await
        .expect_err("acquired from a server that stopped answering");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
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

/// Another client's `inspect` and `list` show who holds a mutex (this
/// machine's host, this process's id, the note given at acquire), also for
/// a waiter the lock was handed to; a released lock has no holder; a note
/// too long or of several lines is an `InvalidArgument` error.
async fn inspect_and_list_describe_the_holder(h: Arc<dyn Harness>) {
    let name = unique_name("holder");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let me = Holder::this_process();
    assert!(me.host.is_some(), "this machine has no host name");
    let first = a
        .acquire(&name, &opts(&*h).note("first holder: report job 17"))
        .await
        .unwrap();
    let st = b.inspect(&name).await.unwrap();
    assert!(st.held);
    let seen = st.holder.expect("inspect shows no holder");
    assert_eq!(seen.host, me.host);
    assert_eq!(seen.pid, me.pid);
    assert_eq!(seen.note.as_deref(), Some("first holder: report job 17"));
    let listed = b.list(name.as_str(), 10).await.expect("list");
    let Some((_, st)) = listed.iter().find(|(n, _)| *n == name) else {
        panic!("{name} not listed: {listed:?}");
    };
    assert_eq!(st.holder.as_ref(), Some(&seen), "list and inspect disagree");

    // A waiter gets the lock when it is released: its own description.
    let second = {
        let (b, name, o) = (b.clone(), name.clone(), opts(&*h).note("second"));
        tokio::spawn(async move { b.acquire(&name, &o).await })
    };
    sleep(Duration::from_millis(300)).await;
    assert!(first.release().await.unwrap());
    let second = timeout(Duration::from_secs(10) + h.slack(), second)
        .await
        .expect("the waiter did not get the released lock")
        .unwrap()
        .unwrap();
    let st = a.inspect(&name).await.unwrap();
    assert!(st.held);
    let seen = st.holder.expect("no holder shown for the waiter");
    assert_eq!(seen.note.as_deref(), Some("second"));
    assert_eq!((seen.host, seen.pid), (me.host.clone(), me.pid));
    assert!(second.release().await.unwrap());
    let st = a.inspect(&name).await.unwrap();
    assert!(!st.held, "{st:?}");
    assert_eq!(st.holder, None);

    // Without a note: host and pid only.
    let g = a.acquire(&name, &opts(&*h)).await.unwrap();
    let seen = b.inspect(&name).await.unwrap().holder.expect("no holder");
    assert_eq!((seen.host, seen.pid, seen.note), (me.host, me.pid, None));
    assert!(g.release().await.unwrap());

    for bad in ["n".repeat(MAX_NOTE_LEN + 1), "two\nlines".to_string()] {
        let err = a
            .try_acquire(&name, &opts(&*h).note(bad))
            .await
            .expect_err("a bad note was accepted");
        assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
    }
    let ok = a
        .try_acquire(&name, &opts(&*h).note("n".repeat(MAX_NOTE_LEN)))
        .await
        .unwrap()
        .expect("a note of the largest size");
    assert_eq!(
        b.inspect(&name).await.unwrap().holder.and_then(|d| d.note),
        Some("n".repeat(MAX_NOTE_LEN))
    );
    assert!(ok.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// Random interleavings of try-acquire, release, extend and removal from
/// several clients agree with a reference model: never two holders of one
/// name, tokens strictly increasing.
async fn model_based_random_interleavings(h: Arc<dyn Harness>) {
    crate::model::run(h).await;
}

/// A name and its children (and its parent) are different locks: holding
/// one never blocks or is blocked by the other, also from the same client,
/// whatever the child's last segment looks like (a lease id, a contender
/// node, a read or write marker).
async fn parent_and_child_names_are_independent(h: Arc<dyn Harness>) {
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

/// Every call returns within its own bound (its wait plus one request
/// timeout) when the servers stop answering after the connect, and a
/// connect to servers that never answer gives up within its timeout.
async fn every_call_honours_its_deadline_when_the_server_hangs(h: Arc<dyn Harness>) {
    let timeout_ = Duration::from_millis(800);
    let allowance = Duration::from_millis(400);
    let (proxies, made) = client_through_proxies(&*h, timeout_).await;
    let c = made.expect("connect through healthy proxies");
    let name = unique_name("deadline");
    let g = c
        .acquire(&name, &opts(&*h).ttl(h.ttl() * 20))
        .await
        .expect("acquire through healthy proxies");
    for p in &proxies {
        p.blackhole();
    }
    async fn bounded<T>(
        what: &str,
        bound: Duration,
        fut: impl std::future::Future<Output = T>,
    ) -> T {
        let t = Instant::now();
        let out = timeout(bound * 4, fut).await.unwrap_or_else(|_| {
            panic!(
                "{what} against a hung server did not return within {:?}",
                bound * 4
            )
        });
        assert!(
            t.elapsed() <= bound,
            "{what} took {:?}, bound {bound:?}",
            t.elapsed()
        );
        out
    }
    let other = unique_name("deadline-other");
    let wait = Duration::from_millis(200);
    let r = bounded(
        "try_acquire",
        timeout_ + allowance,
        c.try_acquire(&other, &opts(&*h)),
    )
    .await;
    assert!(r.is_err(), "try_acquire answered {r:?} from a hung server");
    let r = bounded(
        "acquire",
        wait + timeout_ + allowance,
        c.acquire(&other, &opts(&*h).wait(wait)),
    )
    .await;
    assert!(r.is_err(), "acquire answered from a hung server");
    bounded("inspect", timeout_ + allowance, c.inspect(&name))
        .await
        .ok();
    bounded("extend", timeout_ + allowance, g.extend(h.ttl() * 20))
        .await
        .ok();
    bounded("release", timeout_ + allowance, g.release())
        .await
        .ok();
    let addrs: Vec<_> = proxies.iter().map(|p| p.addr()).collect();
    let r = bounded(
        "connect",
        timeout_ + allowance,
        h.client_at(&addrs, timeout_),
    )
    .await;
    if let Ok(late) = r {
        // A lazy connect: the first call must still be bounded.
        let r = bounded(
            "try_acquire on a lazily connected client",
            timeout_ + allowance,
            late.try_acquire(&other, &opts(&*h)),
        )
        .await;
        assert!(r.is_err());
    }
    for p in &proxies {
        p.heal();
    }
    // The lock expires or was released: it is free again within its TTL.
    let fresh = client(&*h).await;
    let g = fresh
        .acquire(&name, &opts(&*h).wait(h.ttl() * 20 + h.slack()))
        .await
        .expect("the lock of the hung client never came free");
    assert!(g.release().await.unwrap());
}

/// A release whose notification is lost (the waiter's connections are cut
/// while it happens) still wakes the waiter promptly once they are back,
/// long before the holder's TTL or any long re-check.
async fn lost_release_notification_still_wakes_the_waiter(h: Arc<dyn Harness>) {
    let name = unique_name("lostnote");
    let holder = client(&*h).await;
    let long = opts(&*h)
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(60));
    let (proxies, made) = client_through_proxies(&*h, Duration::from_secs(1)).await;
    let waiter_client = made.expect("connect through healthy proxies");
    let g = holder.acquire(&name, &long).await.unwrap();
    let waiter = {
        let (c, name, o) = (waiter_client.clone(), name.clone(), long.clone());
        tokio::spawn(async move { c.acquire(&name, &o).await.map(|g| (Instant::now(), g)) })
    };
    sleep(Duration::from_millis(500)).await;
    for p in &proxies {
        p.cut();
    }
    assert!(g.release().await.unwrap());
    sleep(Duration::from_millis(300)).await;
    let healed = Instant::now();
    for p in &proxies {
        p.heal();
    }
    let bound = Duration::from_secs(4) + h.slack();
    let (got, g2) = timeout(bound * 2, waiter)
        .await
        .expect("the waiter slept through a release whose notification was lost")
        .unwrap()
        .expect("the waiter's acquire failed");
    assert!(
        got - healed <= bound,
        "the waiter took {:?} after the connection came back",
        got - healed
    );
    assert!(g2.release().await.unwrap());
    drop(proxies);
}

/// An extend to a shorter TTL whose reply never comes may have been applied:
/// the guard never reports a validity beyond what the server may keep.
async fn unanswered_extend_never_lengthens_validity(h: Arc<dyn Harness>) {
    let name = unique_name("ambiguous");
    let (proxies, made) = client_through_proxies(&*h, Duration::from_millis(800)).await;
    let c = made.expect("connect through healthy proxies");
    let long = h.ttl() * 10;
    let g = c
        .acquire(&name, &opts(&*h).ttl(long).keep_alive(false))
        .await
        .unwrap();
    for p in &proxies {
        p.set_reply_delay(Duration::from_secs(3));
    }
    let short = h.ttl();
    let sent = Instant::now();
    let _ = g.extend(short).await;
    if let Some(until) = g.valid_until() {
        assert!(
            until <= sent + short,
            "validity {:?} after an unanswered extend to {short:?}",
            until - sent
        );
    }
    for p in &proxies {
        p.heal();
    }
    let _ = g.release().await;
    drop(proxies);
    assert_no_leftovers(&*h, &name).await;
}

/// `acquire_all` takes every name or none: when one is held elsewhere it
/// times out and leaves the others free; otherwise it holds them all, with
/// a token each where the backend has them, and releases them all.
async fn acquire_all_takes_all_or_nothing(h: Arc<dyn Harness>) {
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
async fn crossing_multi_locks_never_deadlock_or_overlap(h: Arc<dyn Harness>) {
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
async fn acquire_all_never_returns_a_lost_member(h: Arc<dyn Harness>) {
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
async fn multi_lock_reports_a_lost_member(h: Arc<dyn Harness>) {
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

/// Readers hold together; a writer is alone: no reader beside a writer, no
/// writer beside a reader or another writer.
async fn readers_hold_together_and_a_writer_alone(h: Arc<dyn Harness>) {
    let name = unique_name("rw");
    let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let o = opts(&*h);
    let r1 = a
        .try_acquire_read(&name, &o)
        .await
        .unwrap()
        .expect("first reader");
    let r2 = b
        .try_acquire_read(&name, &o)
        .await
        .unwrap()
        .expect("second reader");
    assert_eq!(r1.mode(), LockMode::Read);
    assert!(
        c.try_acquire_write(&name, &o).await.unwrap().is_none(),
        "writer beside readers"
    );
    assert!(r1.release().await.unwrap());
    assert!(
        c.try_acquire_write(&name, &o).await.unwrap().is_none(),
        "writer beside a reader"
    );
    assert!(r2.release().await.unwrap());
    let w = c
        .try_acquire_write(&name, &o)
        .await
        .unwrap()
        .expect("writer on a free lock");
    assert_eq!(w.mode(), LockMode::Write);
    assert!(
        a.try_acquire_read(&name, &o).await.unwrap().is_none(),
        "reader beside a writer"
    );
    assert!(
        b.try_acquire_write(&name, &o).await.unwrap().is_none(),
        "two writers"
    );
    // The mutex of the same name is a different lock.
    let m = a
        .try_acquire(&name, &o)
        .await
        .unwrap()
        .expect("the mutex of the name is separate");
    assert!(m.release().await.unwrap());
    assert!(w.release().await.unwrap());
    let r = a
        .acquire_read(&name, &o.clone().wait(h.slack()))
        .await
        .expect("reader after the writer");
    assert!(r.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// Readers that arrive after a writer started waiting queue behind it, so a
/// stream of readers cannot starve the writer; the writer gets the lock as
/// soon as the earlier readers leave.
async fn waiting_writer_is_not_starved_by_new_readers(h: Arc<dyn Harness>) {
    let name = unique_name("starve");
    let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(30));
    let r1 = a.acquire_read(&name, &o).await.unwrap();
    let writer = spawn_acquire_write(&b, &name, &o);
    sleep(Duration::from_millis(500)).await;
    assert!(
        c.try_acquire_read(&name, &o).await.unwrap().is_none(),
        "a new reader went ahead of a waiting writer"
    );
    let late_reader = {
        let (c, name, o) = (c.clone(), name.clone(), o.clone());
        tokio::spawn(async move { c.acquire_read(&name, &o).await.map(|g| (Instant::now(), g)) })
    };
    sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    assert!(r1.release().await.unwrap());
    let (w_at, w) = writer.await.unwrap().expect("the writer");
    assert!(
        w_at - released < h.slack(),
        "writer woke {:?} after the last reader left",
        w_at - released
    );
    sleep(Duration::from_millis(200)).await;
    assert!(
        !late_reader.is_finished(),
        "a reader got in beside the writer"
    );
    let w_released = Instant::now();
    assert!(w.release().await.unwrap());
    let (r_at, r) = late_reader
        .await
        .unwrap()
        .expect("the reader behind the writer");
    assert!(r_at >= w_released);
    assert!(r.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// Tasks on several clients mixing reads and writes: never a reader beside a
/// writer, never two writers, and readers do overlap.
async fn read_write_exclusion_under_contention(h: Arc<dyn Harness>) {
    let name = unique_name("rwmix");
    let readers = Arc::new(AtomicU64::new(0));
    let writers = Arc::new(AtomicU64::new(0));
    let violations = Arc::new(AtomicU64::new(0));
    let max_readers = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    // Every client connected before any task starts, and all start
    // together: on a busy machine a connection can take longer than a
    // task's whole run, and tasks started one by one would never meet.
    let clients = clients(&*h, 6).await;
    let start = Arc::new(tokio::sync::Barrier::new(clients.len()));
    for (i, c) in clients.into_iter().enumerate() {
        let (name, readers, writers, violations, max_readers, start) = (
            name.clone(),
            readers.clone(),
            writers.clone(),
            violations.clone(),
            max_readers.clone(),
            start.clone(),
        );
        let o = opts(&*h).wait(Duration::from_secs(60));
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            for round in 0..5 {
                if (i + round) % 3 == 0 {
                    c.with_write(&name, &o, |_| async {
                        if writers.fetch_add(1, Ordering::SeqCst) > 0
                            || readers.load(Ordering::SeqCst) > 0
                        {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        sleep(Duration::from_millis(5)).await;
                        writers.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await
                    .expect("with_write");
                } else {
                    c.with_read(&name, &o, |_| async {
                        let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                        max_readers.fetch_max(now, Ordering::SeqCst);
                        if writers.load(Ordering::SeqCst) > 0 {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        sleep(Duration::from_millis(20)).await;
                        readers.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await
                    .expect("with_read");
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(violations.load(Ordering::SeqCst), 0, "exclusion violated");
    assert!(
        max_readers.load(Ordering::SeqCst) >= 2,
        "readers never shared the lock"
    );
    assert_no_leftovers(&*h, &name).await;
}

/// A write guard's token is greater than the token of every read or write
/// guard granted before it on that name; every read guard has a token too.
async fn write_tokens_follow_every_earlier_grant(h: Arc<dyn Harness>) {
    let name = unique_name("rwtoken");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(30));
    let mut highest = None;
    for _ in 0..3 {
        let r1 = a.acquire_read(&name, &o).await.unwrap();
        let r2 = b.acquire_read(&name, &o).await.unwrap();
        let (t1, t2) = (
            r1.fencing_token().expect("read token"),
            r2.fencing_token().expect("read token"),
        );
        assert_ne!(t1, t2, "two read guards share a token");
        highest = highest.max(Some(t1.max(t2)));
        assert!(r1.release().await.unwrap() && r2.release().await.unwrap());
        let w = a.acquire_write(&name, &o).await.unwrap();
        let tw = w.fencing_token().expect("write token");
        assert!(
            Some(tw) > highest,
            "write token {tw} not above an earlier grant {highest:?}"
        );
        highest = Some(tw);
        assert!(w.release().await.unwrap());
    }
}

/// A downgraded write guard becomes a read guard with a newer token: other
/// readers get in, writers stay out, and the name was never free between.
async fn downgrade_keeps_writers_out_and_lets_readers_in(h: Arc<dyn Harness>) {
    let name = unique_name("downgrade");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let o = opts(&*h);
    let w = a.acquire_write(&name, &o).await.unwrap();
    let wt = w.fencing_token();
    let r = a.downgrade(w).await.expect("downgrade");
    assert_eq!(r.mode(), LockMode::Read);
    assert!(r.is_held());
    if let (Some(wt), Some(rt)) = (wt, r.fencing_token()) {
        assert!(rt > wt, "read token {rt} not above the write token {wt}");
    }
    assert!(
        b.try_acquire_write(&name, &o).await.unwrap().is_none(),
        "a writer got in after a downgrade"
    );
    let r2 = b
        .try_acquire_read(&name, &o)
        .await
        .unwrap()
        .expect("a reader beside the downgraded guard");
    assert!(r2.release().await.unwrap());
    let err = a.downgrade(r).await.expect_err("downgraded a read guard");
    assert_eq!(err.kind(), LockErrorKind::InvalidArgument);
    assert_no_leftovers(&*h, &name).await;
    let w = b
        .try_acquire_write(&name, &o)
        .await
        .unwrap()
        .expect("free after everything was released");
    assert!(w.release().await.unwrap());
}

/// Upgrading a read guard is refused with `WouldDeadlock`; the read guard is kept.
async fn upgrade_is_refused(h: Arc<dyn Harness>) {
    let name = unique_name("upgrade");
    let a = client(&*h).await;
    let r = a.acquire_read(&name, &opts(&*h)).await.unwrap();
    let err = a.upgrade(&r).await.expect_err("upgrade succeeded");
    assert_eq!(err.kind(), LockErrorKind::WouldDeadlock, "{err}");
    assert!(!err.is_retryable());
    assert!(r.is_held());
    assert!(r.release().await.unwrap());
}

/// Waiting readers and writers that are dropped leave nothing on the server
/// and do not block the next ones.
async fn dropped_read_write_waiters_leave_nothing(h: Arc<dyn Harness>) {
    let name = unique_name("rwcancel");
    let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(60));
    let w = a.acquire_write(&name, &o).await.unwrap();
    let waiting_reader = {
        let (b, name, o) = (b.clone(), name.clone(), o.clone());
        tokio::spawn(async move { b.acquire_read(&name, &o).await.map(|_| ()) })
    };
    let waiting_writer = {
        let (c, name, o) = (c.clone(), name.clone(), o.clone());
        tokio::spawn(async move { c.acquire_write(&name, &o).await.map(|_| ()) })
    };
    sleep(Duration::from_millis(400)).await;
    waiting_reader.abort();
    waiting_writer.abort();
    assert!(waiting_reader.await.unwrap_err().is_cancelled());
    assert!(waiting_writer.await.unwrap_err().is_cancelled());
    assert!(w.release().await.unwrap());
    let t = Instant::now();
    let w2 = b
        .acquire_write(&name, &opts(&*h).wait(h.slack()))
        .await
        .expect("a cancelled waiter blocked the next writer");
    assert!(t.elapsed() < h.slack());
    assert!(w2.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// A stream of acquirers never sees more than N holders of a semaphore of N,
/// and the permits are really shared (N holders at once happen).
async fn permits_never_exceed_the_count(h: Arc<dyn Harness>) {
    const PERMITS: u32 = 3;
    let name = unique_name("permits");
    let inside = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    // Connected first, started together (see read_write_exclusion_under_contention).
    let clients = clients(&*h, 6).await;
    let start = Arc::new(tokio::sync::Barrier::new(clients.len()));
    for c in clients {
        let (name, inside, most, tokens, start) = (
            name.clone(),
            inside.clone(),
            most.clone(),
            tokens.clone(),
            start.clone(),
        );
        let o = opts(&*h).wait(Duration::from_secs(60));
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            for _ in 0..4 {
                let g = c.acquire_permit(&name, PERMITS, &o).await.expect("permit");
                assert!(matches!(g.mode(), LockMode::Permit { permits: PERMITS }));
                tokens.lock().unwrap().push(g.fencing_token());
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                sleep(Duration::from_millis(30)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(
                    g.release().await.unwrap(),
                    "permit lost during a short section"
                );
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= u64::from(PERMITS),
        "{most} holders of {PERMITS} permits"
    );
    assert!(most >= 2, "the permits were never shared");
    let mut seen: Vec<_> = tokens.lock().unwrap().iter().flatten().copied().collect();
    let all = seen.len();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), all, "two permits shared a fencing token");
    assert_no_leftovers(&*h, &name).await;
}

/// A released permit goes to a waiter on another client at once.
async fn freed_permit_goes_to_a_waiter_promptly(h: Arc<dyn Harness>) {
    let name = unique_name("permitwake");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let long = opts(&*h).ttl(h.ttl() * 20).wait(h.ttl() * 20);
    let p1 = a.acquire_permit(&name, 2, &long).await.unwrap();
    let p2 = a.acquire_permit(&name, 2, &long).await.unwrap();
    let waiter = {
        let (b, name, o) = (b.clone(), name.clone(), long.clone());
        tokio::spawn(async move {
            b.acquire_permit(&name, 2, &o)
                .await
                .map(|g| (Instant::now(), g))
        })
    };
    sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "a third holder of two permits");
    let released = Instant::now();
    assert!(p1.release().await.unwrap());
    let (got, p3) = waiter.await.unwrap().unwrap();
    assert!(
        got - released < h.slack().min(h.ttl() * 5),
        "hand-off took {:?}",
        got - released
    );
    assert!(p2.release().await.unwrap() && p3.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// A permit whose holder vanished (keep-alive off, guard leaked) frees
/// within its TTL.
async fn abandoned_permit_frees_within_ttl(h: Arc<dyn Harness>) {
    let name = unique_name("permitabandon");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let g = a
        .acquire_permit(&name, 1, &opts(&*h).keep_alive(false))
        .await
        .unwrap();
    let t = Instant::now();
    std::mem::forget(g);
    let g2 = b
        .acquire_permit(&name, 1, &opts(&*h).wait(h.ttl() + h.slack()))
        .await
        .expect("abandoned permit not freed within ttl + slack");
    assert!(t.elapsed() <= h.ttl() + h.slack(), "took {:?}", t.elapsed());
    assert!(g2.release().await.unwrap());
}

/// A dropped waiter for a permit leaves nothing behind and blocks nobody.
async fn dropped_permit_waiter_leaves_nothing(h: Arc<dyn Harness>) {
    let name = unique_name("permitcancel");
    let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(60));
    let p = a.acquire_permit(&name, 1, &o).await.unwrap();
    let waiting = {
        let (b, name, o) = (b.clone(), name.clone(), o.clone());
        tokio::spawn(async move { b.acquire_permit(&name, 1, &o).await.map(|_| ()) })
    };
    sleep(Duration::from_millis(300)).await;
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    assert!(p.release().await.unwrap());
    let p2 = c
        .acquire_permit(&name, 1, &opts(&*h).wait(h.slack()))
        .await
        .expect("a cancelled permit waiter blocked the next one");
    assert!(p2.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// A backend without read-write locks or semaphores says so with
/// `Unsupported`, and leaves nothing behind.
async fn missing_primitives_are_unsupported(h: Arc<dyn Harness>) {
    let name = unique_name("unsupported");
    let a = client(&*h).await;
    let caps = a.capabilities();
    let o = opts(&*h);
    if !caps.read_write {
        for err in [
            a.try_acquire_read(&name, &o).await.err(),
            a.try_acquire_write(&name, &o).await.err(),
            a.acquire_read(&name, &o).await.err(),
            a.acquire_write(&name, &o).await.err(),
        ] {
            let err = err.expect("a read-write lock from a backend without them");
            assert_eq!(err.kind(), LockErrorKind::Unsupported, "{err}");
            assert!(!err.is_retryable());
        }
    }
    if !caps.semaphore {
        for err in [
            a.try_acquire_permit(&name, 2, &o).await.err(),
            a.acquire_permit(&name, 2, &o).await.err(),
        ] {
            let err = err.expect("a permit from a backend without semaphores");
            assert_eq!(err.kind(), LockErrorKind::Unsupported, "{err}");
        }
    }
    assert!(h.leftovers(&name).await.is_empty());
}

/// `list` shows the held mutexes under a prefix, sorted, with their status,
/// and nothing that was released or that lies outside the prefix.
async fn list_shows_held_locks_by_prefix(h: Arc<dyn Harness>) {
    let base = unique_name("list");
    let names: Vec<LockName> = ["b", "a", "c/deeper"]
        .iter()
        .map(|s| LockName::new(format!("{base}/{s}")).unwrap())
        .collect();
    let outside = LockName::new(format!("{base}-outside")).unwrap();
    let (a, b) = (client(&*h).await, client(&*h).await);
    let mut guards = Vec::new();
    for n in names.iter().chain([&outside]) {
        guards.push(a.acquire(n, &opts(&*h)).await.unwrap());
    }
    let prefix = format!("{base}/");
    let listed = b.list(&prefix, 100).await.expect("list");
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(
        listed.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        expected,
        "listed {listed:?}"
    );
    assert!(listed.iter().all(|(_, st)| st.held));
    let first_two = b.list(&prefix, 2).await.unwrap();
    assert_eq!(first_two.len(), 2);
    for g in guards {
        assert!(g.release().await.unwrap());
    }
    let deadline = Instant::now() + h.slack();
    loop {
        let left = b.list(&prefix, 100).await.unwrap();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "released locks still listed: {left:?}"
        );
        sleep(Duration::from_millis(50)).await;
    }
}

/// A writer already waiting when a write guard is downgraded keeps waiting
/// while the downgraded reader holds: the name is never held by a reader
/// and a writer at once, and the writer gets it when the reader leaves.
async fn downgrade_keeps_a_queued_writer_out(h: Arc<dyn Harness>) {
    let name = unique_name("downgradeq");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(30));
    let w = a.acquire_write(&name, &o).await.unwrap();
    let writer = spawn_acquire_write(&b, &name, &o);
    sleep(Duration::from_millis(300)).await;
    assert!(!writer.is_finished(), "two writers at once");
    let r = a.downgrade(w).await.expect("downgrade");
    sleep(Duration::from_millis(500)).await;
    assert!(
        !writer.is_finished(),
        "a queued writer got in beside the downgraded reader"
    );
    assert!(r.is_held());
    let released = Instant::now();
    assert!(r.release().await.unwrap());
    let (at, g) = writer
        .await
        .unwrap()
        .expect("the queued writer after the reader left");
    assert!(
        at - released < h.slack(),
        "the queued writer took {:?} after the reader left",
        at - released
    );
    assert!(g.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// `c.acquire_write(name, o)` in a task of its own; the guard comes with
/// the instant it was granted.
fn spawn_acquire_write(
    c: &Arc<dyn LockService>,
    name: &LockName,
    o: &AcquireOptions,
) -> tokio::task::JoinHandle<lock_core::Result<(Instant, lock_core::LockGuard)>> {
    let (c, name, o) = (c.clone(), name.clone(), o.clone());
    tokio::spawn(async move {
        c.acquire_write(&name, &o)
            .await
            .map(|g| (Instant::now(), g))
    })
}

/// `list`, and the read-write and permit acquires where the backend offers
/// them, return within their own bound (their wait plus one request
/// timeout) when the servers stop answering after the connect.
async fn list_and_other_primitives_honour_their_deadline_when_the_server_hangs(
    h: Arc<dyn Harness>,
) {
    let timeout_ = Duration::from_millis(800);
    let allowance = Duration::from_millis(400);
    let (proxies, made) = client_through_proxies(&*h, timeout_).await;
    let c = made.expect("connect through healthy proxies");
    let caps = c.capabilities();
    let base = unique_name("deadline-more");
    let name = LockName::new(format!("{base}/x")).unwrap();
    let g = c
        .acquire(&name, &opts(&*h).ttl(h.ttl() * 20))
        .await
        .expect("acquire through healthy proxies");
    for p in &proxies {
        p.blackhole();
    }
    let wait = Duration::from_millis(200);
    let bound = wait + timeout_ + allowance;
    let within = |what: &'static str, t: Instant| {
        assert!(
            t.elapsed() <= bound,
            "{what} against a hung server took {:?}, bound {bound:?}",
            t.elapsed()
        );
    };
    let t = Instant::now();
    let r = timeout(bound * 4, c.list(&format!("{base}/"), 10))
        .await
        .expect("list against a hung server never returned");
    within("list", t);
    assert!(r.is_err(), "list answered {r:?} from a hung server");
    let other = LockName::new(format!("{base}/other")).unwrap();
    let o = opts(&*h).wait(wait);
    if caps.read_write {
        for write in [false, true] {
            let t = Instant::now();
            let r = if write {
                timeout(bound * 4, c.acquire_write(&other, &o)).await
            } else {
                timeout(bound * 4, c.acquire_read(&other, &o)).await
            }
            .expect("a read-write acquire against a hung server never returned");
            within(
                if write {
                    "acquire_write"
                } else {
                    "acquire_read"
                },
                t,
            );
            assert!(
                r.is_err(),
                "a read-write acquire succeeded on a hung server"
            );
        }
    }
    if caps.semaphore {
        let t = Instant::now();
        let r = timeout(bound * 4, c.acquire_permit(&other, 2, &o))
            .await
            .expect("acquire_permit against a hung server never returned");
        within("acquire_permit", t);
        assert!(r.is_err(), "acquire_permit succeeded on a hung server");
    }
    for p in &proxies {
        p.heal();
    }
    drop(g);
    drop(proxies);
}

/// Readers that waited for a writer get in when it releases, before that
/// writer's next write: a writer that comes straight back queues behind
/// them, so a busy writer cannot starve readers either.
async fn a_returning_writer_queues_behind_waiting_readers(h: Arc<dyn Harness>) {
    let name = unique_name("rwreturn");
    let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(30));
    let w = a.acquire_write(&name, &o).await.unwrap();
    let spawn_read = |client: &Arc<dyn LockService>| {
        let (client, name, o) = (client.clone(), name.clone(), o.clone());
        tokio::spawn(async move { client.acquire_read(&name, &o).await })
    };
    let (r1, r2) = (spawn_read(&b), spawn_read(&c));
    sleep(Duration::from_millis(500)).await;
    assert!(
        !r1.is_finished() && !r2.is_finished(),
        "a reader got in beside the writer"
    );
    assert!(w.release().await.unwrap());
    // At once, before the readers could react to the release.
    if let Some(g) = a.try_acquire_write(&name, &o).await.unwrap() {
        panic!(
            "the returning writer went ahead of the readers that waited for it (token {:?})",
            g.fencing_token()
        );
    }
    let again = spawn_acquire_write(&a, &name, &o);
    let bound = h.slack() * 2;
    let g1 = timeout(bound, r1)
        .await
        .expect(
            "a reader that waited for the writer is still waiting: the returning writer went first",
        )
        .unwrap()
        .expect("first reader");
    let g2 = timeout(bound, r2)
        .await
        .expect(
            "a reader that waited for the writer is still waiting: the returning writer went first",
        )
        .unwrap()
        .expect("second reader");
    assert!(
        !again.is_finished(),
        "the returning writer got in beside the readers"
    );
    let released = Instant::now();
    assert!(g1.release().await.unwrap());
    assert!(g2.release().await.unwrap());
    let (at, w2) = again.await.unwrap().expect("the returning writer");
    assert!(
        at - released < h.slack(),
        "the returning writer took {:?} after the readers left",
        at - released
    );
    assert!(w2.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// The kinds of lease a backend with `caps` offers, for cases that check
/// each of them the same way.
fn offered_modes(caps: &Capabilities) -> Vec<LockMode> {
    let mut modes = vec![LockMode::Exclusive];
    if caps.read_write {
        modes.extend([LockMode::Read, LockMode::Write]);
    }
    if caps.semaphore {
        modes.push(LockMode::Permit { permits: 1 });
    }
    modes
}

/// A waiting acquire of `mode` (a reader waits behind a writer, anything
/// else behind its own kind).
async fn acquire_as(
    c: &dyn LockService,
    mode: LockMode,
    name: &LockName,
    o: &AcquireOptions,
) -> lock_core::Result<lock_core::LockGuard> {
    match mode {
        LockMode::Read => c.acquire_read(name, o).await,
        LockMode::Write => c.acquire_write(name, o).await,
        LockMode::Permit { permits } => c.acquire_permit(name, permits, o).await,
        _ => c.acquire(name, o).await,
    }
}

/// The lease that makes a waiter of `mode` wait: the write side for a
/// reader, the same kind for the others.
fn blocking_mode(mode: LockMode) -> LockMode {
    match mode {
        LockMode::Read => LockMode::Write,
        other => other,
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
async fn a_wait_that_times_out_has_left_the_line_when_it_returns(h: Arc<dyn Harness>) {
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

/// A waiter that loses its link to the servers while it waits, and so
/// cannot leave the line when it gives up, holds nobody up for long after
/// its deadline: once the holder releases, the next caller gets the lock
/// within the waiter's deadline plus one TTL (what a session or lease of
/// the waiter's may last) and one request timeout, never after a long
/// re-check period. The waiter stays cut off, as a process that died.
async fn a_waiter_cut_off_holds_nobody_up_long_after_its_deadline(h: Arc<dyn Harness>) {
    let caps = client(&*h).await.capabilities();
    let request_timeout = Duration::from_secs(1);
    let wait = Duration::from_millis(1500);
    for mode in offered_modes(&caps) {
        let name = unique_name("cutoff");
        let (holder, next) = (client(&*h).await, client(&*h).await);
        let held = acquire_as(&*holder, blocking_mode(mode), &name, &opts(&*h))
            .await
            .unwrap();
        let (proxies, made) = client_through_proxies(&*h, request_timeout).await;
        let waiter = made.expect("connect through healthy proxies");
        let deadline = Instant::now() + wait;
        let waiting = {
            let (w, name, o) = (waiter.clone(), name.clone(), opts(&*h).wait(wait));
            tokio::spawn(async move { acquire_as(&*w, mode, &name, &o).await.map(|_| ()) })
        };
        sleep(wait / 3).await;
        for p in &proxies {
            p.blackhole();
        }
        let outcome = timeout(wait + request_timeout * 4 + h.slack(), waiting)
            .await
            .unwrap_or_else(|_| panic!("{mode:?}: the cut-off waiter's call never returned"))
            .unwrap();
        outcome.expect_err("a waiter got a held lock");
        assert!(held.release().await.unwrap());
        let bound = h.ttl() + request_timeout + h.slack();
        let got = acquire_as(
            &*next,
            blocking_mode(mode),
            &name,
            &opts(&*h).wait(Duration::from_secs(60)),
        )
        .await
        .unwrap_or_else(|e| panic!("{mode:?}: the next caller never got the lock: {e}"));
        let late = Instant::now().saturating_duration_since(deadline);
        assert!(
            late <= bound,
            "{mode:?}: the next caller got the free lock only {late:?} after the cut-off \
             waiter's deadline (bound: TTL + request timeout + slack = {bound:?}): \
             the waiter's place outlived its call"
        );
        assert!(got.release().await.unwrap());
        drop(waiter);
        drop(proxies);
        assert_no_leftovers(&*h, &name).await;
    }
}

/// A hot standby (a wait without end that rides out errors) keeps trying
/// through an outage longer than the TTL (every connection of its client
/// reset or refused), during which the holder releases, and takes the lock
/// once its servers are reachable again: within the longest backoff, one
/// TTL (a session or lease to renew) and two request timeouts.
async fn a_forever_waiter_rides_out_an_outage(h: Arc<dyn Harness>) {
    let name = unique_name("outage");
    let holder = client(&*h).await;
    let held = holder.acquire(&name, &opts(&*h)).await.unwrap();
    let request_timeout = Duration::from_secs(1);
    let (proxies, made) = client_through_proxies(&*h, request_timeout).await;
    let standby = made.expect("connect through healthy proxies");
    let waiting = {
        let (c, name) = (standby.clone(), name.clone());
        let o = opts(&*h).wait_forever().retry_errors(true);
        tokio::spawn(async move { c.acquire(&name, &o).await })
    };
    sleep(Duration::from_millis(300)).await;
    for p in &proxies {
        p.cut();
    }
    let outage = (h.ttl() * 3).max(Duration::from_secs(6));
    sleep(outage / 2).await;
    assert!(held.release().await.unwrap());
    sleep(outage / 2).await;
    assert!(
        !waiting.is_finished(),
        "the standby stopped waiting during the outage: {:?}",
        waiting.await
    );
    let healed = Instant::now();
    for p in &proxies {
        p.heal();
    }
    let bound = lock_core::ERROR_BACKOFF.max_delay + h.ttl() + request_timeout * 2 + h.slack();
    let got = timeout(bound * 2, waiting)
        .await
        .expect("the standby never took the free lock after the outage")
        .unwrap()
        .expect("the standby's acquire failed");
    let took = healed.elapsed();
    assert!(
        took <= bound,
        "the standby took the free lock {took:?} after the outage (bound {bound:?})"
    );
    assert!(got.is_held());
    assert!(got.release().await.unwrap());
    drop(proxies);
    assert_no_leftovers(&*h, &name).await;
}

/// Every grant seen so far of one lock, in the order the test observed
/// them: each new one must have a token above all of them.
#[derive(Default)]
struct Grants(Vec<(&'static str, lock_core::FencingToken)>);

impl Grants {
    /// Records the grant `what` of `g`, checking that its token is above
    /// the token of every grant recorded before it.
    fn after_all(&mut self, what: &'static str, g: &lock_core::LockGuard) {
        let t = g
            .fencing_token()
            .unwrap_or_else(|| panic!("{what}: no fencing token"));
        if let Some((earlier, te)) = self.0.iter().find(|(_, te)| *te >= t) {
            panic!(
                "{what} got token {t}, not above the earlier grant {earlier} (token {te}); \
                 every grant so far: {:?}",
                self.0
            );
        }
        self.0.push((what, t));
    }
}

/// Waits until a writer is queued on `name`: a new reader is refused
/// (writer preference) while `held` readers hold. A reader that still gets
/// in is recorded in `grants` and released. Fails after `h.slack()`.
async fn until_a_writer_waits(
    h: &dyn Harness,
    c: &dyn LockService,
    name: &LockName,
    grants: &mut Grants,
) {
    let deadline = Instant::now() + h.slack();
    loop {
        match c.try_acquire_read(name, &opts(h)).await.unwrap() {
            None => return,
            Some(r) => {
                grants.after_all("a reader before the writer queued", &r);
                assert!(r.release().await.unwrap());
            }
        }
        assert!(
            Instant::now() < deadline,
            "the writer did not queue within {:?}",
            h.slack()
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// Issue 31 item 5: a reader that queued behind a waiting writer is granted
/// after the writer, with a token above the writer's (and above the first
/// reader's): R0 holds, W queues, R1 queues behind W; R0 leaves, W is
/// granted; W leaves, R1 is granted.
async fn a_reader_queued_behind_a_writer_gets_a_newer_token(h: Arc<dyn Harness>) {
    let name = unique_name("rtokenq");
    let (a, b, c, d) = (
        client(&*h).await,
        client(&*h).await,
        client(&*h).await,
        client(&*h).await,
    );
    let o = opts(&*h).wait(Duration::from_secs(30));
    let mut grants = Grants::default();
    let r0 = a.acquire_read(&name, &o).await.unwrap();
    grants.after_all("R0", &r0);
    let writer = spawn_acquire_write(&b, &name, &o);
    until_a_writer_waits(&*h, &*d, &name, &mut grants).await;
    let reader = {
        let (c, name, o) = (c.clone(), name.clone(), o.clone());
        tokio::spawn(async move { c.acquire_read(&name, &o).await })
    };
    // Time for R1 to queue behind W (were it slower, it would queue behind
    // W while W holds: the same order).
    sleep(Duration::from_millis(300)).await;
    assert!(
        !reader.is_finished(),
        "R1 got in beside R0 past a waiting W"
    );
    assert!(r0.release().await.unwrap());
    let (_, w) = writer.await.unwrap().expect("W after R0 left");
    grants.after_all("W", &w);
    sleep(Duration::from_millis(200)).await;
    assert!(!reader.is_finished(), "R1 got in beside W");
    assert!(w.release().await.unwrap());
    let r1 = reader.await.unwrap().expect("R1 after W left");
    grants.after_all("R1 (queued behind W)", &r1);
    assert!(r1.release().await.unwrap());
    let w2 = b.acquire_write(&name, &o).await.unwrap();
    grants.after_all("a writer after everything", &w2);
    assert!(w2.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// Issue 31 item 9: W1 holds, W2 queues, W1 downgrades to a read guard, the
/// reader leaves, W2 is granted: every grant (the downgrade's read guard
/// included) has a token above every earlier one.
async fn a_writer_queued_behind_a_downgrade_gets_a_newer_token(h: Arc<dyn Harness>) {
    let name = unique_name("wtokendg");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(30));
    let mut grants = Grants::default();
    let w1 = a.acquire_write(&name, &o).await.unwrap();
    grants.after_all("W1", &w1);
    let writer = spawn_acquire_write(&b, &name, &o);
    // Time for W2 to queue behind W1 (were it slower, it would queue behind
    // the downgraded reader: the same order).
    sleep(Duration::from_millis(300)).await;
    assert!(!writer.is_finished(), "W2 got in beside W1");
    let r = a.downgrade(w1).await.expect("downgrade");
    grants.after_all("W1 downgraded to a read guard", &r);
    sleep(Duration::from_millis(200)).await;
    assert!(
        !writer.is_finished(),
        "W2 got in beside the downgraded reader"
    );
    assert!(r.release().await.unwrap());
    let (_, w2) = writer.await.unwrap().expect("W2 after the reader left");
    grants.after_all("W2 (queued behind W1)", &w2);
    // And once more, with a downgrade whose read guard leaves after a new
    // reader came in beside it.
    let r2 = b.downgrade(w2).await.expect("second downgrade");
    grants.after_all("W2 downgraded", &r2);
    let r3 = a
        .try_acquire_read(&name, &o)
        .await
        .unwrap()
        .expect("a reader beside a downgraded guard");
    grants.after_all("a reader beside W2's read guard", &r3);
    assert!(r2.release().await.unwrap());
    assert!(r3.release().await.unwrap());
    let w3 = a.acquire_write(&name, &o).await.unwrap();
    grants.after_all("W3", &w3);
    assert!(w3.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// Readers queued behind a writer are let in together when it leaves: each
/// has its own token, above the writer's; a writer after them is above
/// both, and so is a reader after that writer.
async fn readers_let_in_together_get_distinct_newer_tokens(h: Arc<dyn Harness>) {
    let name = unique_name("rtokens");
    let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(30));
    let mut grants = Grants::default();
    let w = a.acquire_write(&name, &o).await.unwrap();
    grants.after_all("W", &w);
    let spawn_read = |client: &Arc<dyn LockService>| {
        let (client, name, o) = (client.clone(), name.clone(), o.clone());
        tokio::spawn(async move { client.acquire_read(&name, &o).await })
    };
    let (r1, r2) = (spawn_read(&b), spawn_read(&c));
    sleep(Duration::from_millis(300)).await;
    assert!(
        !r1.is_finished() && !r2.is_finished(),
        "a reader got in beside the writer"
    );
    assert!(w.release().await.unwrap());
    let g1 = r1.await.unwrap().expect("first reader");
    let g2 = r2.await.unwrap().expect("second reader");
    // Let in together: neither is earlier than the other, but both follow W
    // and their tokens differ.
    let mut together = Grants(grants.0.clone());
    grants.after_all("R1", &g1);
    together.after_all("R2", &g2);
    assert_ne!(
        g1.fencing_token(),
        g2.fencing_token(),
        "two readers let in together share a token"
    );
    grants.0.extend(together.0.last().copied());
    assert!(g1.release().await.unwrap() && g2.release().await.unwrap());
    let w2 = a.acquire_write(&name, &o).await.unwrap();
    grants.after_all("W2 after the readers", &w2);
    let r3 = spawn_read(&b);
    sleep(Duration::from_millis(300)).await;
    assert!(w2.release().await.unwrap());
    let g3 = r3.await.unwrap().expect("a reader after W2");
    grants.after_all("R3 (queued behind W2)", &g3);
    assert!(g3.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// A semaphore's permits carry tokens in grant order: with one permit
/// held and two waiters queued, each grant's token is above every earlier
/// grant's, whichever waiter is let in first.
async fn queued_permits_get_tokens_in_grant_order(h: Arc<dyn Harness>) {
    let name = unique_name("ptokens");
    let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(30));
    let mut grants = Grants::default();
    let p0 = a.acquire_permit(&name, 1, &o).await.unwrap();
    grants.after_all("P0", &p0);
    let spawn_permit = |client: &Arc<dyn LockService>| {
        let (client, name, o) = (client.clone(), name.clone(), o.clone());
        tokio::spawn(async move { client.acquire_permit(&name, 1, &o).await })
    };
    let p1 = spawn_permit(&b);
    sleep(Duration::from_millis(300)).await;
    let p2 = spawn_permit(&c);
    sleep(Duration::from_millis(300)).await;
    assert!(!p1.is_finished() && !p2.is_finished(), "two permits of one");
    assert!(p0.release().await.unwrap());
    // Whichever waiter is let in first (not every backend's semaphore is
    // FIFO), then the other.
    let (first, _, rest) = futures::future::select_all([p1, p2]).await;
    let g1 = first.unwrap().expect("a waiter after P0 left");
    grants.after_all("the first waiter let in", &g1);
    sleep(Duration::from_millis(200)).await;
    assert!(!rest[0].is_finished(), "two permits of one");
    assert!(g1.release().await.unwrap());
    let rest = rest.into_iter().next().expect("the other waiter");
    let g2 = rest.await.unwrap().expect("the other waiter");
    grants.after_all("the second waiter let in", &g2);
    assert!(g2.release().await.unwrap());
    let g3 = a.acquire_permit(&name, 1, &o).await.unwrap();
    grants.after_all("P3 after everything", &g3);
    assert!(g3.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

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
async fn force_release_hands_the_mutex_to_the_waiter(h: Arc<dyn Harness>) {
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
async fn force_release_removes_every_reader_and_permit(h: Arc<dyn Harness>) {
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

/// A downgrade whose answer comes too late (its link slower each way than
/// three quarters of the request timeout: the server applies it, and the
/// call has given up before the answer arrives) never leaves the write
/// guard saying held while a reader holds the name. The write guard ends
/// when the downgrade is called, whatever its outcome; a reader that waited
/// gets in once the server has applied it (or the write lock is released).
async fn an_unanswered_downgrade_never_leaves_the_write_guard_held_beside_a_reader(
    h: Arc<dyn Harness>,
) {
    let name = unique_name("lostdowngrade");
    let request_timeout = Duration::from_secs(1);
    let (proxies, made) = client_through_proxies(&*h, request_timeout).await;
    let writer = made.expect("connect through healthy proxies");
    let reader = client(&*h).await;
    // A TTL that outlasts the episode: the write guard must not end by
    // expiring, only by the downgrade.
    let long = opts(&*h).ttl(h.ttl().max(Duration::from_secs(10)));
    let held = writer.acquire_write(&name, &long).await.unwrap();
    let view = held.view();
    let waiting = {
        let (c, name, o, view) = (reader.clone(), name.clone(), opts(&*h), view.clone());
        tokio::spawn(async move {
            let got = c.acquire_read(&name, &o).await;
            // Sampled as soon as the read guard is ours: the write guard
            // must have stopped saying held before the server let us in.
            (got, view.state())
        })
    };
    // Time for the reader to queue behind the writer.
    sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "a reader got in beside the writer");
    for p in &proxies {
        p.set_latency(request_timeout * 3 / 4);
    }
    let downgraded = writer.downgrade(held).await;
    let returned = Instant::now();
    let (got, write_state) = timeout(Duration::from_secs(30) + h.slack(), waiting)
        .await
        .expect("the reader never got in after the downgrade")
        .unwrap();
    let read = got.expect("the reader never got in after the downgrade");
    assert!(
        write_state.valid_until().is_none(),
        "a reader holds while the write guard of the downgrade ({}) still says {write_state:?}",
        match &downgraded {
            Ok(_) => "answered".to_string(),
            Err(e) => format!("failed: {e}"),
        }
    );
    assert!(!view.is_held(), "the write guard still says held");
    for p in &proxies {
        p.heal();
    }
    assert!(read.release().await.unwrap());
    if let Ok(read) = downgraded {
        let _ = read.release().await;
    }
    // A failed downgrade's lease is released in the background, through the
    // slow link: within one request timeout of the call's return, landing
    // at most three quarters of one later.
    tokio::time::sleep_until(returned + request_timeout * 2).await;
    drop(writer);
    drop(proxies);
    assert_no_leftovers(&*h, &name).await;
}
