//! Requests whose outcome the client does not know (issue 31): a mutation
//! that timed out may still be applied later, after the call gave up. On
//! etcd clusters of their own, with a proxy that delays one member's
//! traffic: a late delete never removes a newer key of ours, a late put
//! never leaves an orphan key on our live lease, a downgrade whose reply
//! was lost is not reported lost, watches asked for while the watch stream
//! reopens are made, and every call keeps to its bound (wait + one request
//! timeout). Keep-alive answers later than the request timeout still keep
//! the lock.

use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, GuardState, LockName, ReadWriteLock};
use lock_etcd::{EtcdConfig, EtcdLock};
use lock_testbed::Proxy;
use tokio::time::{sleep, Instant};

mod support;
use support::{cluster_behind_a_proxy, connect, name, never_lost, start_cluster};

/// The request timeout of `support::config`.
const REQUEST: Duration = Duration::from_secs(1);

const LEASE: Duration = Duration::from_secs(10);

/// Longer than the request timeout: a request through the proxy is applied
/// after its call gave up.
const LATENCY: Duration = Duration::from_millis(1500);

fn config(endpoints: Vec<String>) -> EtcdConfig {
    support::config(endpoints, LEASE)
}

fn opts() -> AcquireOptions {
    AcquireOptions::new().ttl(LEASE)
}

/// Item 1: a release whose delete is delayed past its call, then an
/// acquisition of the same name at once. The late delete must not remove
/// the new key: nobody else gets the name while our second guard holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_delete_never_removes_our_next_key() {
    let (cluster, proxy, through) = cluster_behind_a_proxy().await;
    let a = connect(config(through)).await;
    let b = connect(config(cluster.endpoints())).await;
    let n = name("late-delete");
    let first = a.acquire(&n, &opts()).await.expect("first acquire");
    proxy.set_latency(LATENCY);
    let t = Instant::now();
    let released = first.release().await;
    println!("release answered {released:?} after {:?}", t.elapsed());
    let second = a
        .try_acquire(&n, &opts())
        .await
        .expect("acquire again")
        .expect("the name is free after our release");
    println!("acquired again after {:?}", t.elapsed());
    // The delayed copy of the delete lands about LATENCY after it was sent.
    sleep(LATENCY * 2 + Duration::from_millis(500)).await;
    let other = b.try_acquire(&n, &opts()).await.expect("try from b");
    assert!(
        other.is_none(),
        "another client took the name {:?} after our release while our second guard reports held = {}",
        t.elapsed(),
        second.is_held()
    );
    assert!(second.is_held(), "{:?}", second.state());
    proxy.heal();
    assert!(second.release().await.expect("release the second guard"));
}

/// Item 2: a put applied after its call gave up (the acquisition went on
/// through another member, or failed) must not leave our key behind the
/// holder: once the holder releases, another client gets the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_put_leaves_no_orphan_key() {
    let (cluster, proxy, through) = cluster_behind_a_proxy().await;
    let a = connect(config(through)).await;
    let b = connect(config(cluster.endpoints())).await;
    let n = name("late-put");
    let holder = b.acquire(&n, &opts()).await.expect("b holds the name");
    proxy.set_latency(LATENCY);
    let t = Instant::now();
    let tried = a.try_acquire(&n, &opts()).await;
    println!(
        "a's try_acquire: {:?} after {:?}",
        tried.as_ref().map(|g| g.is_some()),
        t.elapsed()
    );
    assert!(
        !matches!(tried, Ok(Some(_))),
        "a got the name while b holds it"
    );
    // The delayed put lands about LATENCY after it was sent.
    sleep(LATENCY * 2 + Duration::from_millis(500)).await;
    assert!(holder.release().await.expect("b releases"));
    let deadline = Instant::now() + REQUEST * 3;
    loop {
        match b.try_acquire(&n, &opts()).await.expect("try from b") {
            Some(g) => {
                assert!(g.release().await.expect("release"));
                break;
            }
            None => assert!(
                Instant::now() < deadline,
                "the name stays taken {:?} after its holder released: a late put of a left an orphan key",
                t.elapsed()
            ),
        }
        sleep(Duration::from_millis(100)).await;
    }
    proxy.heal();
}

/// Item 3: a downgrade applied at once whose reply comes after the request
/// timeout is not reported lost: the caller gets its read guard, readers
/// get in, writers do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_whose_reply_is_late_gives_the_read_guard() {
    let (cluster, proxy, through) = cluster_behind_a_proxy().await;
    let a = connect(config(through)).await;
    let b = connect(config(cluster.endpoints())).await;
    let n = name("late-downgrade");
    let write = a.acquire_write(&n, &opts()).await.expect("write lock");
    proxy.set_reply_delay(LATENCY);
    let t = Instant::now();
    let downgraded = a.downgrade(write).await;
    println!(
        "downgrade answered {:?} after {:?}",
        downgraded.as_ref().map(|g| g.mode()),
        t.elapsed()
    );
    let read = downgraded.expect("the downgrade was applied: a read guard");
    assert!(read.is_held(), "{:?}", read.state());
    let reader = b
        .try_acquire_read(&n, &opts())
        .await
        .expect("try read from b");
    assert!(reader.is_some(), "a reader is kept out by a read guard");
    let writer = b
        .try_acquire_write(&n, &opts())
        .await
        .expect("try write from b");
    assert!(writer.is_none(), "a writer got in while readers hold");
    drop(reader);
    proxy.heal();
    assert!(read.release().await.expect("release the read guard"));
}

/// Item 6: with answers that take most of a request timeout, a try_acquire
/// that finds the name held, and an acquire whose wait runs out, return
/// within their wait plus ONE request timeout (slack for scheduling only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_on_a_slow_network_keep_to_one_request_timeout() {
    let cluster = start_cluster(1).await;
    let proxy = Proxy::start(cluster.endpoints()[0].parse().unwrap()).expect("proxy");
    let a = connect(config(vec![proxy.addr().to_string()])).await;
    let b = connect(config(cluster.endpoints())).await;
    let slack = Duration::from_millis(400);
    // A round trip is 0.7 request timeouts: one fits in the bound, two do not.
    proxy.set_latency(REQUEST * 7 / 20);
    for round in 0..2 {
        // Two names held by b: a try on one, a wait on the other (a name
        // of its own, so that the wait is not spent on this client's turn
        // of the first name while its delete goes on in the background).
        let (tried_name, waited_name) = (name("slow-bound-try"), name("slow-bound-wait"));
        let held = b
            .acquire(&tried_name, &opts())
            .await
            .expect("b holds the name");
        let held2 = b
            .acquire(&waited_name, &opts())
            .await
            .expect("b holds the name");
        let t = Instant::now();
        let tried = a.try_acquire(&tried_name, &opts()).await;
        let took = t.elapsed();
        println!(
            "round {round}: try_acquire {:?} took {took:?}",
            tried.as_ref().map(|g| g.is_some())
        );
        assert!(!matches!(tried, Ok(Some(_))), "got a held name");
        assert!(took <= REQUEST + slack, "try_acquire took {took:?}");
        let wait = Duration::from_millis(200);
        let t = Instant::now();
        let waited = a.acquire(&waited_name, &opts().wait(wait)).await;
        let took = t.elapsed();
        println!(
            "round {round}: acquire with a wait of {wait:?}: {:?} took {took:?}",
            waited.as_ref().map(|g| g.mode())
        );
        assert!(waited.is_err(), "got a held name");
        assert!(took <= wait + REQUEST + slack, "acquire took {took:?}");
        assert!(held.release().await.expect("release"));
        assert!(held2.release().await.expect("release"));
    }
    proxy.heal();
}

/// Item 4: waiters and guards whose watches are asked for while the watch
/// stream reopens (its connection was reset while it carried many
/// watches, whose re-creation takes a while through a slow link) get them:
/// every waiter is granted its lock once the holder releases, none fails
/// with "watch not created", and a guard granted then hears that its key
/// was deleted. The request timeout leaves room for re-creating the many
/// watches on a busy machine: a watch that is never made fails either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_asked_for_while_the_stream_reopens_are_made() {
    let cluster = start_cluster(1).await;
    let proxy = Proxy::start(cluster.endpoints()[0].parse().unwrap()).expect("proxy");
    let request = Duration::from_secs(3);
    let a = connect(config(vec![proxy.addr().to_string()]).request_timeout(request)).await;
    let b = connect(config(cluster.endpoints())).await;
    let admin = cluster.endpoints();
    // Many held keys, each with a watch of its own on a's stream: reopening
    // the stream re-creates them all, which takes a while.
    let mut guards = Vec::new();
    for _ in 0..1500 {
        let g = a
            .try_acquire(&name("reopen-many"), &opts())
            .await
            .expect("acquire")
            .expect("a fresh name");
        guards.push(g);
    }
    sleep(Duration::from_millis(300)).await;
    let mut held_by_b = Vec::new();
    let mut waiters = Vec::new();
    let mut fresh = Vec::new();
    // Names for b first: the reset below must not catch b's requests.
    let names: Vec<LockName> = (0..150).map(|_| name("reopen-wait")).collect();
    for n in &names {
        held_by_b.push(b.acquire(n, &opts()).await.expect("b holds"));
    }
    proxy.set_latency(Duration::from_millis(100));
    proxy.reset_all();
    // While the stream reopens: new waiters (one queue watch each) and new
    // guards (a key watch each, 50 ms after their grant), a few every 5 ms.
    for n in names {
        let a2 = a.clone();
        waiters.push(tokio::spawn(async move {
            a2.acquire(&n, &opts().wait(Duration::from_secs(30))).await
        }));
        let a2 = a.clone();
        fresh.push(tokio::spawn(async move {
            a2.try_acquire(&name("reopen-fresh"), &opts()).await
        }));
        sleep(Duration::from_millis(5)).await;
    }
    let mut fresh_guards = Vec::new();
    for (i, g) in fresh.into_iter().enumerate() {
        let g = g
            .await
            .expect("fresh task")
            .unwrap_or_else(|e| panic!("fresh guard {i}: acquire while reopening: {e}"))
            .expect("a fresh name");
        fresh_guards.push(g);
    }
    let fresh = fresh_guards;
    sleep(Duration::from_millis(400)).await;
    proxy.heal();
    sleep(Duration::from_secs(1)).await;
    for g in held_by_b {
        assert!(g.release().await.expect("b releases"));
    }
    for (i, w) in waiters.into_iter().enumerate() {
        let g = w
            .await
            .expect("waiter task")
            .unwrap_or_else(|e| panic!("waiter {i}: {e}"));
        assert!(g.is_held());
        drop(g);
    }
    // Every fresh guard's key deleted behind its back: each must hear it.
    let mut admin = etcd_client::Client::connect(&admin, None)
        .await
        .expect("admin client");
    for g in &fresh {
        let key = g
            .server_key()
            .expect("an etcd guard knows its key")
            .to_string();
        admin
            .delete(key, None)
            .await
            .expect("delete behind a guard");
    }
    let deadline = Instant::now() + LEASE;
    for (i, g) in fresh.iter().enumerate() {
        while g.is_held() {
            assert!(
                Instant::now() < deadline,
                "guard {i} never heard its key was deleted: {:?}",
                g.state()
            );
            sleep(Duration::from_millis(20)).await;
        }
    }
    drop(guards);
}

/// Item 7: a put held back longer than any time window the client could
/// wait for it (a member paused for seconds holds a request in its socket
/// as long; here a proxy delays the leader's traffic past a lease TTL plus
/// a request timeout) is applied after the acquisition gave up, while the
/// session lives on through the other members. It must not leave our key
/// on our live lease: once the holder releases, the name is free. Both
/// key shapes: a write contender (a key of its own per attempt) and a
/// mutex (one key per session and name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_applied_after_any_window_leaves_no_orphan_key() {
    let (cluster, proxy, through) = cluster_behind_a_proxy().await;
    let short = Duration::from_secs(2);
    let a = connect(config(through).lease_ttl(short)).await;
    let b = connect(config(cluster.endpoints())).await;
    let (lease_before, _) = a.session_lease().await.expect("a's session");
    let (w, m) = (name("late-put-write"), name("late-put-mutex"));
    let held_w = b.acquire_write(&w, &opts()).await.expect("b writes");
    let held_m = b.acquire(&m, &opts()).await.expect("b holds");
    // One way, longer than any window the client could look for the key
    // in (it used to: a lease TTL, at least 5 s, plus a request timeout
    // after the put gave up).
    let late = Duration::from_secs(5).max(short) + REQUEST * 3;
    proxy.set_latency(late);
    let t = Instant::now();
    let o = opts();
    let (tried_w, tried_m) = tokio::join!(a.try_acquire_write(&w, &o), a.try_acquire(&m, &o));
    println!(
        "a's tries: write {:?}, mutex {:?} after {:?}",
        tried_w.as_ref().map(|g| g.is_some()),
        tried_m.as_ref().map(|g| g.is_some()),
        t.elapsed()
    );
    assert!(!matches!(tried_w, Ok(Some(_))), "a wrote while b writes");
    assert!(!matches!(tried_m, Ok(Some(_))), "a got the mutex b holds");
    // Stop delaying what is sent from now on; what the proxy holds is
    // still delivered that late.
    sleep(Duration::from_millis(300)).await;
    proxy.heal();
    sleep(late + Duration::from_secs(1)).await;
    released_then_both_free(
        &a,
        lease_before,
        &b,
        [held_w, held_m],
        (&w, &m),
        t,
        "a put of a applied late left an orphan key on a's live lease",
    )
    .await;
}

/// Item 8: an acquisition dropped while its put is on its way (a wait
/// cancelled part-way, as `tokio::time::timeout` or `select!` do) does not
/// know whether the put was applied: it must not leave the key behind on
/// our live lease when it was. The put takes a while through a slow link
/// (below the request timeout); the acquisition is dropped before its
/// answer; once the holder releases, the name is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_dropped_while_its_put_is_on_its_way_leaves_no_key() {
    let (cluster, proxy, through) = cluster_behind_a_proxy().await;
    let a = connect(config(through)).await;
    let b = connect(config(cluster.endpoints())).await;
    let (lease_before, _) = a.session_lease().await.expect("a's session");
    let (w, m) = (name("dropped-put-write"), name("dropped-put-mutex"));
    let held_w = b.acquire_write(&w, &opts()).await.expect("b writes");
    let held_m = b.acquire(&m, &opts()).await.expect("b holds");
    let slow = REQUEST * 3 / 10;
    proxy.set_latency(slow);
    let o = opts().wait(Duration::from_secs(30));
    let t = Instant::now();
    let dropped = tokio::time::timeout(slow / 2, async {
        tokio::join!(a.acquire_write(&w, &o), a.acquire(&m, &o))
    })
    .await;
    assert!(dropped.is_err(), "the acquisitions were not dropped");
    // The puts land `slow` after they were sent.
    sleep(slow * 4).await;
    proxy.heal();
    released_then_both_free(
        &a,
        lease_before,
        &b,
        [held_w, held_m],
        (&w, &m),
        t,
        "a put of an acquisition dropped before its answer left its key on a's live lease",
    )
    .await;
}

/// `b` releases what it holds (`held`: the write lock `w`, then the mutex
/// `m`); `a`'s session is still the one it had (`lease_before`), so a key
/// left on it would still be there; then both names are free soon
/// ([`both_free_soon`]).
async fn released_then_both_free(
    a: &EtcdLock,
    lease_before: i64,
    b: &EtcdLock,
    held: [lock_core::LockGuard; 2],
    (w, m): (&LockName, &LockName),
    t: Instant,
    why: &str,
) {
    let [held_w, held_m] = held;
    assert!(held_w.release().await.expect("b releases the write lock"));
    assert!(held_m.release().await.expect("b releases the mutex"));
    let (lease_after, _) = a.session_lease().await.expect("a's session lives on");
    assert_eq!(
        lease_before, lease_after,
        "a's session ended: no orphan to see"
    );
    both_free_soon(b, w, m, t, why).await;
}

/// Waits until `b` can take the write lock `w` and the mutex `m` (each
/// released at once), or fails after three request timeouts saying `why`
/// (`t`: when the scenario started).
async fn both_free_soon(
    b: &dyn lock_core::LockService,
    w: &lock_core::LockName,
    m: &lock_core::LockName,
    t: Instant,
    why: &str,
) {
    let deadline = Instant::now() + REQUEST * 3;
    let (mut free_w, mut free_m) = (false, false);
    while !(free_w && free_m) {
        if !free_w {
            if let Some(g) = b.try_acquire_write(w, &opts()).await.expect("try write") {
                assert!(g.release().await.expect("release"));
                free_w = true;
            }
        }
        if !free_m {
            if let Some(g) = b.try_acquire(m, &opts()).await.expect("try mutex") {
                assert!(g.release().await.expect("release"));
                free_m = true;
            }
        }
        assert!(
            Instant::now() < deadline || (free_w && free_m),
            "names taken {:?} after their holder released (write free: {free_w}, mutex free: {free_m}): {why}",
            t.elapsed()
        );
        sleep(Duration::from_millis(100)).await;
    }
}

/// Slow commits: keep-alive answers arrive later than the request timeout
/// but well within the lease TTL. They still confirm the lease (from when
/// each was sent), so the guard is at most suspended, never lost, and is
/// held again once the answers speed up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_keep_alive_answers_keep_the_lock() {
    let cluster = start_cluster(1).await;
    let proxy = Proxy::start(cluster.endpoints()[0].parse().unwrap()).expect("proxy");
    let lease = Duration::from_secs(4);
    let cfg = EtcdConfig::new([proxy.addr().to_string()])
        .lease_ttl(lease)
        .request_timeout(Duration::from_millis(400))
        .connect_timeout(Duration::from_secs(2));
    let client = connect(cfg).await;
    let g = client
        .acquire(&name("slow-commits"), &AcquireOptions::new().ttl(lease))
        .await
        .unwrap();
    let (states, watcher) = never_lost(&g);
    proxy.set_reply_delay(Duration::from_millis(900));
    sleep(lease * 2).await;
    proxy.heal();
    sleep(Duration::from_secs(2)).await;
    watcher.abort();
    let history = states.lock().unwrap().clone();
    assert!(
        !history.iter().any(|s| matches!(s, GuardState::Lost { .. })),
        "the lock was lost to late but successful keep-alives: {history:?}"
    );
    assert!(
        matches!(g.state(), GuardState::Held { .. }),
        "not held again after the answers sped up: {:?}",
        g.state()
    );
    assert!(g.release().await.unwrap());
}
