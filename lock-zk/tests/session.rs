//! What a session means on a real ZooKeeper: guards sharing one session
//! exclude each other, validity is bounded by the session (and by the
//! guard's own TTL with keep-alive off), keep-alive traffic grows with
//! sessions, not guards, and `inspect` names the holder's session.
//!
//! On the testbed's standalone server (tickTime 200 ms).

use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, GuardState, LossCause};
use lock_testbed::{Proxy, ZkEnsemble};
use lock_zk::{ZkConfig, ZkLock};
use tokio::time::{sleep, Instant};

mod support;
use support::{admin, config, name, received, server};

/// Guards taken through one `ZkLock` (one session) on one name exclude each
/// other: each acquisition has its own node, and waiters of one session are
/// served in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_of_one_session_exclude_each_other() {
    let server = server().await;
    let locks = ZkLock::connect(config(&server.connect_string(), Duration::from_secs(4)))
        .await
        .unwrap();
    let lock = name("one-session");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(4))
        .wait(Duration::from_secs(10));
    let first = locks.acquire(&lock, &opts).await.unwrap();
    assert!(
        locks.try_acquire(&lock, &opts).await.unwrap().is_none(),
        "same session took it twice"
    );
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..3 {
        let (locks, lock, opts, order) = (locks.clone(), lock.clone(), opts.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let g = locks.acquire(&lock, &opts).await.unwrap();
            order.lock().unwrap().push(i);
            sleep(Duration::from_millis(20)).await;
            assert!(g.release().await.unwrap());
        }));
        sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(locks.inspect(&lock).await.unwrap().waiters, Some(3));
    assert!(first.release().await.unwrap());
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
}

/// With keep-alive on and a TTL far beyond the session timeout, a guard stays
/// held over many session timeouts, and its validity never promises more than
/// the session: at most one session timeout ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validity_is_bounded_by_the_session_and_keeps_up() {
    let server = server().await;
    let session = Duration::from_secs(2);
    let locks = ZkLock::connect(config(&server.connect_string(), session))
        .await
        .unwrap();
    let lock = name("bounded");
    let guard = locks
        .acquire(&lock, &AcquireOptions::new().ttl(Duration::from_secs(60)))
        .await
        .unwrap();
    let started = Instant::now();
    while started.elapsed() < session * 4 {
        match guard.state() {
            GuardState::Held { valid_until } => {
                assert!(
                    valid_until <= Instant::now() + session,
                    "validity beyond the session timeout"
                );
            }
            other => panic!("a kept-alive guard left the held state: {other:?}"),
        }
        sleep(Duration::from_millis(25)).await;
    }
    assert!(guard.release().await.unwrap());
}

/// With keep-alive off and a TTL longer than the session timeout (5 s on a
/// 2 s session), a guard is held for its own TTL while the session is
/// confirmed, its validity never more than one session timeout ahead; then it
/// is lost and its node deleted, so another client gets the lock at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_off_guard_lasts_its_ttl_while_the_session_is_confirmed() {
    let server = server().await;
    let session = Duration::from_secs(2);
    let a = ZkLock::connect(config(&server.connect_string(), session))
        .await
        .unwrap();
    let b = ZkLock::connect(config(&server.connect_string(), session))
        .await
        .unwrap();
    let lock = name("no-keepalive");
    let ttl = Duration::from_secs(5);
    let opts = AcquireOptions::new().ttl(ttl).keep_alive(false);
    let started = Instant::now();
    let guard = a.acquire(&lock, &opts).await.unwrap();
    while started.elapsed() < ttl - Duration::from_millis(400) {
        match guard.state() {
            GuardState::Held { valid_until } => assert!(
                valid_until <= Instant::now() + session,
                "validity beyond the session timeout"
            ),
            other => panic!(
                "an unrenewed guard left the held state after {:?}: {other:?}",
                started.elapsed()
            ),
        }
        sleep(Duration::from_millis(50)).await;
    }
    let cause = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("an unrenewed guard outlived its TTL");
    let lost_after = started.elapsed();
    assert_eq!(cause, LossCause::Expired);
    assert!(
        lost_after >= ttl - Duration::from_millis(200),
        "lost after {lost_after:?}, before its TTL of {ttl:?}"
    );
    let next = b
        .acquire(&lock, &opts.clone().wait(Duration::from_secs(2)))
        .await
        .expect("the lapsed guard's node was not deleted");
    let took = started.elapsed();
    println!("keep-alive off, ttl {ttl:?}, session {session:?}: lost after {lost_after:?}, next holder after {took:?}");
    assert!(took < ttl + Duration::from_secs(1), "took {took:?}");
    assert!(next.extend(Duration::from_secs(60)).await.unwrap() <= Instant::now() + session);
    assert!(next.release().await.unwrap());
}

/// With keep-alive off, a guard whose TTL (30 s) is far beyond the session
/// timeout outlives several session timeouts while connected, but once its
/// client is cut off (blackholed), its validity never passes the cut + one
/// session timeout and it is lost within about that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_off_guard_cut_off_is_lost_within_the_session_timeout() {
    let server = server().await;
    let proxy = Proxy::start(server.endpoint(0).parse().unwrap()).expect("proxy");
    let session = Duration::from_secs(2);
    let a = ZkLock::connect(
        ZkConfig::new(proxy.addr().to_string())
            .session_timeout(session)
            .request_timeout(Duration::from_secs(1))
            .connect_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap();
    let lock = name("no-keepalive-cut");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .keep_alive(false);
    let guard = a.acquire(&lock, &opts).await.unwrap();
    let started = Instant::now();
    while started.elapsed() < session * 2 {
        assert!(
            matches!(guard.state(), GuardState::Held { .. }),
            "after {:?}: {:?}",
            started.elapsed(),
            guard.state()
        );
        sleep(Duration::from_millis(50)).await;
    }
    let cut = Instant::now();
    proxy.blackhole();
    let lost_after = loop {
        let now = Instant::now();
        match guard.valid_until() {
            Some(v) => {
                assert!(
                    v <= cut + session,
                    "valid {:?} past the cut; session timeout {session:?}",
                    v - cut
                );
                assert!(
                    now - cut <= session + Duration::from_millis(250),
                    "still held {:?} after the cut",
                    now - cut
                );
            }
            None => break now - cut,
        }
        sleep(Duration::from_millis(10)).await;
    };
    let mut states = guard.subscribe();
    let lost = tokio::time::timeout(
        Duration::from_secs(1),
        states.wait_for(|s| matches!(s, GuardState::Lost { .. })),
    )
    .await
    .expect("the loss was not reported")
    .expect("keeper gone")
    .clone();
    println!("keep-alive off, ttl 30 s, session {session:?}: lost {lost_after:?} after the cut ({lost:?})");
    assert!(
        matches!(
            lost,
            GuardState::Lost {
                cause: LossCause::SessionExpired | LossCause::Expired
            }
        ),
        "{lost:?}"
    );
}

/// Keep-alive sends no request per guard: a session with 20 kept-alive guards
/// (renewed every 500 ms each) gets as few requests as a session with one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_traffic_grows_with_sessions_not_guards() {
    let server = server().await;
    let connect = server.connect_string();
    let session = Duration::from_secs(4);
    let one = ZkLock::connect(config(&connect, session)).await.unwrap();
    let many = ZkLock::connect(config(&connect, session)).await.unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_millis(1500));
    let single = one.acquire(&name("traffic-one"), &opts).await.unwrap();
    let mut guards = Vec::new();
    for _ in 0..20 {
        guards.push(many.acquire(&name("traffic-many"), &opts).await.unwrap());
    }
    // Each guard sets the watch on its node once, shortly after its grant:
    // not keep-alive traffic, and done before the counting starts.
    sleep(Duration::from_millis(300)).await;
    let (sid_one, sid_many) = (one.session_id().unwrap(), many.session_id().unwrap());
    let server_ref: &'static ZkEnsemble = server;
    let count = |sid: String| tokio::task::spawn_blocking(move || received(server_ref, &sid));
    let (one_before, many_before) = (
        count(sid_one.clone()).await.unwrap(),
        count(sid_many.clone()).await.unwrap(),
    );
    sleep(Duration::from_secs(3)).await;
    let one_sent = count(sid_one).await.unwrap() - one_before;
    let many_sent = count(sid_many).await.unwrap() - many_before;
    println!("requests in 3 s: one guard {one_sent}, 20 guards {many_sent} (per-guard renewals would be about 120)");
    for g in &guards {
        assert!(
            matches!(g.state(), GuardState::Held { .. }),
            "{:?}",
            g.state()
        );
    }
    assert!(
        many_sent <= one_sent + 3,
        "20 guards cost {many_sent} requests, one guard {one_sent}"
    );
    assert!(many_sent < 30, "{many_sent} requests in 3 s");
    for g in guards {
        assert!(g.release().await.unwrap());
    }
    assert!(single.release().await.unwrap());
}

/// `inspect` names the holder's session (the node's ephemeral owner, as
/// ZooKeeper prints session ids) and the guard its node's path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_names_the_holders_session_and_the_guard_its_node() {
    let server = server().await;
    let connect = server.connect_string();
    let (a, b) = (
        ZkLock::connect(config(&connect, Duration::from_secs(4)))
            .await
            .unwrap(),
        ZkLock::connect(config(&connect, Duration::from_secs(4)))
            .await
            .unwrap(),
    );
    let lock = name("owner");
    let g = a.acquire(&lock, &AcquireOptions::new()).await.unwrap();
    let status = b.inspect(&lock).await.unwrap();
    assert_eq!(status.owner, a.session_id(), "{status:?}");
    let key = g.server_key().expect("the node path").to_string();
    assert!(
        key.starts_with(&format!("{}/_c_", a.lock_path(&lock).unwrap())),
        "{key}"
    );
    let admin = admin(&connect).await;
    assert!(admin.check_stat(&key).await.unwrap().is_some());
    assert!(g.release().await.unwrap());
    assert!(admin.check_stat(&key).await.unwrap().is_none());
}
