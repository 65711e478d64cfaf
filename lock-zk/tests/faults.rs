//! Faults on real ZooKeeper servers: a killed ensemble leader, a holder cut
//! off beyond its session timeout, a waiter dropped while its create reply is
//! held back, and a server that does not answer.
//!
//! The leader test starts its own 3-server ensemble; the others use the
//! testbed's standalone server (they fault a proxy, not the server).
//! A missing server fails the test.

use std::net::SocketAddr;
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, GuardState, LockErrorKind, LossCause};
use lock_testbed::{Proxy, ZkEnsemble, ZkOptions};
use lock_zk::{ZkConfig, ZkLock};
use tokio::time::{sleep, sleep_until, timeout, Instant};
mod support;
use support::{admin, children, name, server as standalone};

fn state_kind(st: &GuardState) -> &'static str {
    match st {
        GuardState::Held { .. } => "held",
        GuardState::Suspended { .. } => "suspended",
        GuardState::Lost { .. } => "lost",
        GuardState::Released => "released",
        _ => "other",
    }
}

/// Killing the ensemble's leader while a guard is held: every client is
/// disconnected during the election, the session survives it, and the guard
/// is never lost; it is held again afterwards, still excludes others, and the
/// next holder's token is larger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_while_held_guard_stays_held() {
    let mut ensemble = tokio::task::spawn_blocking(|| {
        ZkEnsemble::start_with(
            3,
            ZkOptions {
                tick_time_ms: 500,
                ..Default::default()
            },
        )
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("starting a 3-server ensemble: {e}"));
    let session_timeout = Duration::from_secs(8);
    let config = ZkConfig::new(ensemble.connect_string()).session_timeout(session_timeout);
    let a = ZkLock::connect(config.clone()).await.unwrap();
    let b = ZkLock::connect(config).await.unwrap();
    assert_eq!(
        a.session_timeout(),
        Some(session_timeout),
        "negotiated session timeout"
    );
    let lock = name("leader-kill");
    let opts = AcquireOptions::new().ttl(Duration::from_secs(2));
    let guard = a.acquire(&lock, &opts).await.unwrap();
    let first = guard.fencing_token().expect("zookeeper tokens");

    let leader = ensemble.leader().unwrap();
    ensemble.kill(leader).unwrap();
    let killed = Instant::now();
    let mut seen = Vec::new();
    // Long enough for a silent session to be presumed expired.
    while killed.elapsed() < session_timeout + Duration::from_secs(1) {
        let kind = state_kind(&guard.state());
        if seen.last() != Some(&kind) {
            seen.push(kind);
        }
        assert_ne!(
            kind,
            "lost",
            "the guard was lost across the election: {:?}",
            guard.state()
        );
        sleep(Duration::from_millis(20)).await;
    }
    println!("guard states after the leader was killed: {seen:?}");
    assert!(
        seen.contains(&"suspended"),
        "the election did not disturb the session: {seen:?}"
    );
    assert!(
        matches!(guard.state(), GuardState::Held { .. }),
        "{:?}",
        guard.state()
    );
    assert!(
        b.try_acquire(&lock, &opts).await.unwrap().is_none(),
        "another client took a held lock"
    );
    assert!(
        guard.release().await.unwrap(),
        "the guard's node was gone after the election"
    );
    let next = b
        .acquire(&lock, &opts.clone().wait(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(
        next.fencing_token().unwrap() > first,
        "{:?} after {first}",
        next.fencing_token()
    );
    assert!(next.release().await.unwrap());
}

/// The reply to a create is lost (the connection to the follower it went
/// through is reset) and the client reconnects to another follower that
/// lags behind the leader (its quorum link is slow): the create commits, but
/// the lagging follower applies it only later. The acquire fails
/// `Unavailable` without creating a second node; since the reset left the
/// create's outcome unknown, its clean-up looks for the node, syncing before
/// it lists (a plain list could be answered from the lagging follower's
/// stale tree), finds it once it is committed, and deletes it. Nothing of
/// ours is left to block the name while our session lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_create_reply_then_lagging_follower_leaves_no_node() {
    // tickTime 1 s: followers whose quorum links are slowed by up to 2 s
    // stay in the ensemble (syncLimit is 5 ticks).
    let ensemble = tokio::task::spawn_blocking(|| {
        ZkEnsemble::start_with_quorum_links(
            3,
            ZkOptions {
                tick_time_ms: 1000,
                ..Default::default()
            },
        )
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("starting a 3-server ensemble: {e}"));
    let leader = ensemble.leader().unwrap();
    let (near, lagging) = match leader {
        0 => (1, 2),
        1 => (0, 2),
        _ => (0, 1),
    };
    let to_near = Proxy::start(ensemble.endpoint(near).parse().unwrap()).unwrap();
    let to_lagging = Proxy::start(ensemble.endpoint(lagging).parse().unwrap()).unwrap();
    let session_timeout = Duration::from_secs(10);
    // The client starts on `near` (the other way in refuses connections).
    to_lagging.cut();
    let a = ZkLock::connect(
        ZkConfig::new(format!("{},{}", to_near.addr(), to_lagging.addr()))
            .session_timeout(session_timeout)
            .request_timeout(Duration::from_millis(500)),
    )
    .await
    .unwrap();
    to_lagging.heal();
    let b =
        ZkLock::connect(ZkConfig::new(ensemble.endpoint(leader)).session_timeout(session_timeout))
            .await
            .unwrap();
    let admin = admin(&ensemble.endpoint(leader)).await;
    let lock = name("lagging");
    let dir = a.lock_path(&lock).unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(5));
    // The lock's znode exists: the only write left is the contender's create.
    let g = a.acquire(&lock, &opts).await.unwrap();
    assert!(g.release().await.unwrap());

    // The leader hears of the create at once but can commit it only 1.5 s
    // later (its proposal reaches `near` late), and `lagging` hears of
    // everything the leader sends 2 s late: it revalidates the client's
    // session (at once, a leader round trip, answered 2 s later) 1.2 s
    // before the commit reaches it, and serves reads from its stale tree.
    let slow = ensemble.quorum_link(near, leader).unwrap();
    let late = ensemble.quorum_link(lagging, leader).unwrap();
    slow.set_reply_delay(Duration::from_millis(1500));
    late.set_reply_delay(Duration::from_secs(2));
    to_near.set_reply_delay(Duration::from_secs(30));
    let acquiring = {
        let (a, lock) = (a.clone(), lock.clone());
        let opts = opts.clone().wait(Duration::from_millis(100));
        tokio::spawn(async move { a.acquire(&lock, &opts).await.map(|_| ()) })
    };
    sleep(Duration::from_millis(300)).await;
    to_near.cut();
    let err = timeout(Duration::from_secs(5), acquiring)
        .await
        .expect("the acquire did not return")
        .unwrap()
        .expect_err("granted while the create's reply was lost");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    sleep(Duration::from_secs(5)).await;
    slow.heal();
    late.heal();

    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        let left = children(&admin, &dir).await;
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the committed node stayed on our session: {left:?}"
        );
        sleep(Duration::from_millis(50)).await;
    }
    let g = b
        .acquire(&lock, &opts.clone().wait(Duration::from_secs(5)))
        .await
        .expect("the name is blocked by a node the failed acquire left behind");
    assert!(g.release().await.unwrap());
    assert_eq!(
        a.session_timeout(),
        Some(session_timeout),
        "A's session was lost"
    );
}

/// The next time after `after` that the leader sends something on `link`,
/// a follower's quorum link on which nothing but the leader's pings passes.
async fn next_ping(link: &Proxy, after: Option<std::time::Instant>) -> std::time::Instant {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(at) = link.last_reply_at() {
            if after.is_none_or(|after| at > after) {
                return at;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the leader sent no ping for 10 s"
        );
        sleep(Duration::from_millis(1)).await;
    }
}

/// Clients on a follower whose messages to the leader are lost from some
/// moment on (the leader's still arrive). A ZooKeeper leader hears of a
/// session's activity on a follower only in the follower's replies to its
/// pings, every half tick, so it counts the session timeout from the last
/// reply it got, not from the client's last request. Cut just before a
/// ping, with a session timeout for which the leader's rounding of the
/// expiry adds little, the clients' last heartbeats are answered after the
/// last activity the leader heard of. No guard may still claim validity
/// when another client is granted its lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_cut_from_its_leader_never_vouches_past_the_leaders_expiry() {
    const CLIENTS: usize = 10;
    let tick = Duration::from_secs(2);
    let ensemble = tokio::task::spawn_blocking(|| {
        ZkEnsemble::start_with_quorum_links(
            3,
            ZkOptions {
                tick_time_ms: 2000,
                ..Default::default()
            },
        )
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("starting a 3-server ensemble: {e}"));
    let leader = ensemble.leader().unwrap();
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let (near, quiet) = (followers[0], followers[1]);
    // One loop of the leader pings every follower: what it sends `quiet`
    // (nothing else while nothing is written) shows when `near` is pinged.
    let pings = ensemble.quorum_link(quiet, leader).unwrap();
    let seen = next_ping(pings, None).await;
    let ping = next_ping(pings, Some(seen)).await;
    // A session timeout of 2 to 3 ticks for which the leader's rounding adds
    // about 200 ms to a touch at this ping's phase (every other ping).
    let extra = |touched: std::time::Instant, timeout: Duration| {
        lock_testbed::zk_session_expiry(touched, timeout, tick)
            .saturating_duration_since(touched + timeout)
    };
    let session_timeout = (4000..6000)
        .step_by(10)
        .map(Duration::from_millis)
        .find(|&t| (180..=220).contains(&extra(ping, t).as_millis()))
        .expect("a session timeout with a small rounding");

    let config = ZkConfig::new(ensemble.endpoint(near)).session_timeout(session_timeout);
    let rival = ZkLock::connect(
        ZkConfig::new(ensemble.endpoint(leader)).session_timeout(Duration::from_secs(20)),
    )
    .await
    .unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(60));
    let mut held = Vec::new();
    let mut rivals = Vec::new();
    for _ in 0..CLIENTS {
        // Spread over a heartbeat period: whatever the client's heartbeat
        // rhythm, some are sent between the leader's last ping and the cut.
        sleep(session_timeout / 4 / CLIENTS as u32).await;
        let client = ZkLock::connect(config.clone()).await.unwrap();
        assert_eq!(client.session_timeout(), Some(session_timeout));
        let lock = name("follower-cut");
        held.push((client.acquire(&lock, &opts).await.unwrap(), client));
        let (rival, opts) = (rival.clone(), opts.clone().wait(Duration::from_secs(60)));
        rivals.push(tokio::spawn(async move {
            let guard = rival.acquire(&lock, &opts).await;
            (std::time::Instant::now(), guard)
        }));
    }
    sleep(Duration::from_millis(500)).await;

    // Cut `near`'s messages to the leader 900 ms after a ping of the chosen
    // phase, just before the next: its reply to that ping is the last news
    // of the clients the leader gets, while their heartbeats go on being
    // answered until the cut.
    let mut last = next_ping(pings, None).await;
    let touched = loop {
        let ping = next_ping(pings, Some(last)).await;
        if (100..=300).contains(&extra(ping, session_timeout).as_millis()) {
            break ping;
        }
        last = ping;
    };
    sleep_until(Instant::from_std(touched + Duration::from_millis(900))).await;
    ensemble.quorum_link(near, leader).unwrap().drop_requests();
    let cut = std::time::Instant::now();
    sleep(Duration::from_millis(200)).await;
    let claims: Vec<std::time::Instant> = held
        .iter()
        .map(|(g, _)| g.valid_until().expect("a held guard's validity").into_std())
        .collect();

    let expected = lock_testbed::zk_session_expiry(touched, session_timeout, tick);
    println!(
        "session timeout {session_timeout:?}; cut {:?} after the last ping; the leader should expire the sessions {:?} after the cut",
        cut - touched,
        expected.saturating_duration_since(cut)
    );
    let mut failures = Vec::new();
    for (i, rival) in rivals.into_iter().enumerate() {
        let (granted_at, guard) = timeout(session_timeout + tick * 2, rival)
            .await
            .expect("the leader never expired the cut-off session")
            .unwrap();
        let guard = guard.expect("the rival's acquire");
        let claim = claims[i];
        println!(
            "client {i}: guard valid until cut + {:?}, lock granted to another at cut + {:?}",
            claim.saturating_duration_since(cut),
            granted_at.saturating_duration_since(cut)
        );
        // The leader expires no earlier than its rounding says (else what
        // this test sets up, and what the backend's bound rests on, is off).
        assert!(
            granted_at + Duration::from_millis(20) >= expected,
            "client {i}'s lock was granted to another {:?} before the leader should expire its session",
            expected - granted_at
        );
        if claim > granted_at {
            failures.push(format!(
                "client {i}'s guard claimed validity {:?} past the moment its lock was granted to another",
                claim - granted_at
            ));
        }
        assert!(guard.release().await.unwrap());
    }
    ensemble.quorum_link(near, leader).unwrap().heal();
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A proxy in front of the shared standalone server (with `latency` each way
/// from the start, if given), a client `a` through the proxy with these
/// timeouts and a client `b` straight to the server.
async fn through_a_proxy(
    session_timeout: Duration,
    latency: Option<Duration>,
    request_timeout: Duration,
    connect_timeout: Duration,
) -> (Proxy, ZkLock, ZkLock) {
    let server = standalone().await;
    let upstream: SocketAddr = server.endpoint(0).parse().unwrap();
    let proxy = Proxy::start(upstream).unwrap();
    if let Some(latency) = latency {
        proxy.set_latency(latency);
    }
    let a = ZkLock::connect(
        ZkConfig::new(proxy.addr().to_string())
            .session_timeout(session_timeout)
            .request_timeout(request_timeout)
            .connect_timeout(connect_timeout),
    )
    .await
    .unwrap();
    let b =
        ZkLock::connect(ZkConfig::new(server.connect_string()).session_timeout(session_timeout))
            .await
            .unwrap();
    (proxy, a, b)
}

/// A slow but healthy server (every answer takes longer than a quarter of
/// the session timeout, the heartbeat period, and well under half of it):
/// the holder's session is confirmed by each late answer from its send
/// time, so the lock stays held for three session timeouts and still
/// excludes others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_but_healthy_server_keeps_the_lock() {
    let session_timeout = Duration::from_secs(3);
    // 400 ms each way: a round trip of at least 800 ms, above the 750 ms
    // heartbeat period, and 2.2 s under the session timeout for a busy
    // machine's stalls (with 2 s and 300 ms, beside two busy loops and
    // another suite, the 1.4 s left was once not enough to create a node).
    let (proxy, a, b) = through_a_proxy(
        session_timeout,
        Some(Duration::from_millis(400)),
        Duration::from_secs(3),
        Duration::from_secs(5),
    )
    .await;
    let lock = name("slow-server");
    let held = a
        .acquire(&lock, &AcquireOptions::new().ttl(Duration::from_secs(30)))
        .await
        .unwrap();
    let started = Instant::now();
    while started.elapsed() < session_timeout * 3 {
        assert!(
            held.is_held(),
            "lost on a slow but healthy server after {:?}: {:?}",
            started.elapsed(),
            held.state()
        );
        sleep(Duration::from_millis(20)).await;
    }
    assert!(
        b.try_acquire(&lock, &AcquireOptions::new())
            .await
            .unwrap()
            .is_none(),
        "another client took the lock while its holder's session lives"
    );
    proxy.heal();
    assert!(held.release().await.unwrap());
}

/// A holder cut off (blackholed, no reset) beyond its session timeout: its
/// guard goes suspended, then lost with `SessionExpired` within the session
/// timeout; it is never reported held once another client has the lock; the
/// next holder's token is larger; after the network heals the same `ZkLock`
/// opens a new session and acquires again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_holder_goes_suspended_then_lost_before_anyone_else_holds() {
    let session_timeout = Duration::from_secs(2);
    let (proxy, a, b) = through_a_proxy(
        session_timeout,
        None,
        Duration::from_secs(1),
        Duration::from_secs(2),
    )
    .await;
    let lock = name("partition");
    // A TTL far beyond the session timeout: the session, not the TTL, decides.
    let opts = AcquireOptions::new().ttl(Duration::from_secs(30));
    let held = a.acquire(&lock, &opts).await.unwrap();
    let held_token = held.fencing_token().unwrap();
    let until = held.valid_until().unwrap();
    assert!(
        until <= Instant::now() + session_timeout,
        "validity beyond the session timeout"
    );

    let view = held.view();
    let waiter = {
        let (b, lock, opts) = (
            b.clone(),
            lock.clone(),
            opts.clone().wait(Duration::from_secs(20)),
        );
        tokio::spawn(async move {
            let guard = b.acquire(&lock, &opts).await;
            // The moment the other client holds it, the cut-off guard must not say held.
            let old_still_held = view.is_held();
            (Instant::now(), old_still_held, guard)
        })
    };
    sleep(Duration::from_millis(300)).await;
    let cut = Instant::now();
    proxy.blackhole();

    let mut suspended_at = None;
    let lost_at = loop {
        match held.state() {
            GuardState::Suspended { .. } => {
                suspended_at.get_or_insert_with(Instant::now);
            }
            GuardState::Lost { .. } => break Instant::now(),
            _ => {}
        }
        assert!(
            cut.elapsed() < session_timeout * 3,
            "the cut-off guard never went lost: {:?}",
            held.state()
        );
        sleep(Duration::from_millis(5)).await;
    };
    let suspended_at = suspended_at.expect("the guard was never suspended before it was lost");
    assert!(suspended_at < lost_at);
    assert!(
        lost_at - cut <= session_timeout + Duration::from_millis(250),
        "lost {:?} after the cut; session timeout {session_timeout:?}",
        lost_at - cut
    );
    // The session monitor reports the presumed expiry just before the guard's
    // validity (bounded by the same session) runs out; a starved process may
    // see the validity run out first.
    let cause = held.lost().await;
    assert!(
        matches!(cause, LossCause::SessionExpired | LossCause::Expired),
        "{cause:?}"
    );
    println!(
        "cut-off guard: suspended after {:?}, lost ({cause:?}) after {:?}",
        suspended_at - cut,
        lost_at - cut
    );
    sleep(Duration::from_millis(100)).await;
    assert_eq!(a.session_id(), None, "the silent session was not retired");

    let (b_at, old_still_held, b_guard) = waiter.await.unwrap();
    let b_guard = b_guard.expect("the other client got the lock once the session expired");
    assert!(
        !old_still_held,
        "the cut-off guard said held while another client held the lock"
    );
    assert!(
        b_at >= lost_at,
        "the other client held the lock before the cut-off guard was lost"
    );
    let b_token = b_guard.fencing_token().unwrap();
    assert!(b_token > held_token);
    assert!(
        !held.release().await.unwrap(),
        "a lost guard's release reported success"
    );

    proxy.heal();
    assert!(b_guard.release().await.unwrap());
    let again = a
        .acquire(&lock, &opts.clone().wait(Duration::from_secs(10)))
        .await
        .expect("the same ZkLock acquires again on a new session after the partition");
    assert!(again.fencing_token().unwrap() > b_token);
    assert!(again.release().await.unwrap());
}

/// A waiting acquire dropped while the reply to its create is held back (so
/// it never learned its node's name): the clean-up finds the node by the
/// uuid in its name and deletes it; only the holder's node is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_waiter_with_lost_create_reply_leaves_no_node() {
    let server = standalone().await;
    let connect = server.connect_string();
    let proxy = Proxy::start(server.endpoint(0).parse().unwrap()).unwrap();
    let config = ZkConfig::new(connect.clone()).session_timeout(Duration::from_secs(4));
    let holder = ZkLock::connect(config.clone()).await.unwrap();
    let waiter = ZkLock::connect(
        ZkConfig::new(proxy.addr().to_string()).session_timeout(Duration::from_secs(4)),
    )
    .await
    .unwrap();
    let admin = admin(&connect).await;
    let lock = name("lost-reply");
    let dir = holder.lock_path(&lock).unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(4));
    let guard = holder.acquire(&lock, &opts).await.unwrap();
    let before = children(&admin, &dir).await;
    assert_eq!(before.len(), 1, "{before:?}");

    proxy.set_reply_delay(Duration::from_millis(600));
    let task = {
        let (lock, opts) = (lock.clone(), opts.clone().wait(Duration::from_secs(30)));
        tokio::spawn(async move { waiter.acquire(&lock, &opts).await.map(|_| ()) })
    };
    let deadline = Instant::now() + Duration::from_millis(500);
    while children(&admin, &dir).await.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the waiter's create never reached the server"
        );
        sleep(Duration::from_millis(10)).await;
    }
    // The create is applied; its reply is still in the proxy.
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());

    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = children(&admin, &dir).await;
        if now == before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left behind: {now:?} (holder: {before:?})"
        );
        sleep(Duration::from_millis(50)).await;
    }
    proxy.heal();
    assert!(guard.release().await.unwrap());
    assert!(children(&admin, &dir).await.is_empty());
}

/// `ZkLock::connect` to a server that accepts TCP but never answers fails
/// with `Unavailable` within the connect timeout: no hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_blackholed_server_is_unavailable_within_connect_timeout() {
    let server = standalone().await;
    let proxy = Proxy::start(server.endpoint(0).parse().unwrap()).unwrap();
    proxy.blackhole();
    let connect_timeout = Duration::from_millis(800);
    let started = Instant::now();
    let err =
        ZkLock::connect(ZkConfig::new(proxy.addr().to_string()).connect_timeout(connect_timeout))
            .await
            .expect_err("connected through a blackhole");
    let took = started.elapsed();
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    assert!(
        took >= connect_timeout && took < connect_timeout + Duration::from_millis(300),
        "took {took:?}"
    );
}

/// With the default configuration, every call returns within its own bound
/// once the server stops answering after the connect (the wait plus one
/// request timeout, which defaults to 2 s), and a connect to a server that
/// never answers gives up within the default connect timeout (2 s): so
/// `distlock run --wait 200ms` can exit within 2.2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_returns_within_its_bound_with_the_defaults() {
    assert!(lock_zk::DEFAULT_CONNECT_TIMEOUT <= Duration::from_secs(2));
    assert!(lock_zk::DEFAULT_REQUEST_TIMEOUT <= Duration::from_secs(2));
    let request = lock_zk::DEFAULT_REQUEST_TIMEOUT;
    // Scheduling on a loaded machine; far below one request timeout.
    let allowance = Duration::from_millis(250);
    let server = standalone().await;
    let proxy = Proxy::start(server.endpoint(0).parse().unwrap()).unwrap();
    let locks = ZkLock::connect(ZkConfig::new(proxy.addr().to_string()))
        .await
        .unwrap();
    let held = name("defaults-held");
    let guard = locks
        .acquire(&held, &AcquireOptions::new().ttl(Duration::from_secs(30)))
        .await
        .unwrap();
    proxy.blackhole();

    async fn within<T>(
        what: &str,
        bound: Duration,
        fut: impl std::future::Future<Output = T>,
    ) -> T {
        let started = Instant::now();
        let out = timeout(bound * 10, fut)
            .await
            .unwrap_or_else(|_| panic!("{what} against a hung server did not return"));
        assert!(
            started.elapsed() <= bound,
            "{what} took {:?}, bound {bound:?}",
            started.elapsed()
        );
        out
    }
    let other = name("defaults-other");
    let wait = Duration::from_millis(200);
    let opts = AcquireOptions::new().wait(wait);
    let err = within(
        "acquire",
        wait + request + allowance,
        locks.acquire(&other, &opts),
    )
    .await
    .expect_err("acquired from a hung server");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    let err = within(
        "try_acquire",
        request + allowance,
        locks.try_acquire(&other, &opts),
    )
    .await
    .expect_err("answered from a hung server");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    let err = within("inspect", request + allowance, locks.inspect(&held))
        .await
        .expect_err("inspected a hung server");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    within(
        "extend",
        request + allowance,
        guard.extend(Duration::from_secs(30)),
    )
    .await
    .ok();
    within("release", request + allowance, guard.release())
        .await
        .ok();
    let err = within(
        "connect",
        lock_zk::DEFAULT_CONNECT_TIMEOUT + allowance,
        ZkLock::connect(ZkConfig::new(proxy.addr().to_string())),
    )
    .await
    .expect_err("connected to a hung server");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
}
