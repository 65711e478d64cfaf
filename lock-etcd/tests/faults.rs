//! Fault tests on etcd clusters of their own: leader death, a paused member,
//! a client cut off by a proxy, endpoints that stop answering, members
//! without a leader and elections. (`faults_replies.rs`: replies late or
//! lost, outcomes the client does not know.)

use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, GuardState, LockErrorKind, LossCause};
use lock_etcd::{EtcdConfig, EtcdLock};
use lock_testbed::{shared_etcd, EtcdCluster, Proxy};
use tokio::time::{sleep, timeout, Instant};

mod support;
use support::{config, connect, eventually, name, never_lost, start_cluster};

/// Waits until the member at `endpoint` says it has no leader.
async fn says_no_leader(endpoint: &str) {
    let admin = etcd_client::Client::connect([endpoint], None)
        .await
        .expect("admin client");
    eventually(
        Duration::from_secs(5),
        "the member says it has no leader",
        || {
            let mut admin = admin.clone();
            async move { admin.status().await.is_ok_and(|s| s.leader() == 0) }
        },
    )
    .await;
}

/// Resumes the paused `member` after `delay`, on a blocking thread.
fn resume_after(
    cluster: &Arc<EtcdCluster>,
    member: usize,
    delay: Duration,
) -> tokio::task::JoinHandle<Result<(), lock_testbed::TestbedError>> {
    let cluster = cluster.clone();
    tokio::task::spawn_blocking(move || {
        std::thread::sleep(delay);
        cluster.resume(member)
    })
}

/// Killing the leader while a guard is held: the guard stays held (a new
/// leader extends the lease), nobody else gets the lock meanwhile, and the next
/// holder's token is larger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_while_held_keeps_the_guard() {
    let mut cluster = start_cluster(3).await;
    // Clients talk to the first endpoint first: make it the leader's, so its
    // death also breaks the session's keep-alive stream and the key watch.
    let leader = tokio::task::block_in_place(|| cluster.leader()).expect("leader");
    let mut eps = cluster.endpoints();
    eps.rotate_left(leader);
    let lease = Duration::from_secs(3);
    let a = connect(config(eps.clone(), lease)).await;
    let b = connect(config(eps.clone(), lease)).await;
    let n = name("leaderkill");
    let opts = AcquireOptions::new()
        .ttl(lease)
        .wait(Duration::from_secs(10));
    let g = a.acquire(&n, &opts).await.expect("acquire");
    let token = g.fencing_token().expect("token");
    let (states, watcher) = never_lost(&g);

    let t = Instant::now();
    tokio::task::block_in_place(|| cluster.kill(leader)).expect("kill the leader");
    println!(
        "killed leader {leader} (endpoint {}, the clients' first)",
        eps[0]
    );
    // Three lease TTLs across the leader change.
    while t.elapsed() < lease * 3 {
        assert!(
            g.is_held(),
            "guard not held {:?} after the leader died: {:?}",
            t.elapsed(),
            g.state()
        );
        let other = b.try_acquire(&n, &opts).await;
        match other {
            Ok(None) => {}
            Ok(Some(_)) => panic!("lock granted to another client while held"),
            // Requests may fail while the cluster elects a new leader.
            Err(e) => assert_eq!(e.kind(), LockErrorKind::Unavailable, "{e}"),
        }
        sleep(Duration::from_millis(300)).await;
    }
    assert!(
        matches!(g.state(), GuardState::Held { .. }),
        "{:?}",
        g.state()
    );
    assert!(g.release().await.expect("release after the leader change"));
    watcher.abort();
    let history = states.lock().unwrap().clone();
    assert!(
        !history.iter().any(|s| matches!(s, GuardState::Lost { .. })),
        "guard was lost during the leader change: {history:?}"
    );
    let g2 = b
        .acquire(&n, &opts)
        .await
        .expect("acquire after the leader change");
    assert!(
        g2.fencing_token() > Some(token),
        "{:?} after {token}",
        g2.fencing_token()
    );
    assert!(g2.release().await.unwrap());
    println!("states seen by the guard: {history:?}");
}

/// One member paused (the one clients talk to first): clients move to the
/// other members and locking continues, with mutual exclusion and increasing
/// tokens; a guard held across the pause survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_member_does_not_stop_locking() {
    let cluster = start_cluster(3).await;
    let eps = cluster.endpoints();
    let lease = Duration::from_secs(3);
    let a = connect(config(eps.clone(), lease)).await;
    let b = connect(config(eps.clone(), lease)).await;
    let held_name = name("pause-held");
    let opts = AcquireOptions::new()
        .ttl(lease)
        .wait(Duration::from_secs(10));
    let held = a
        .acquire(&held_name, &opts)
        .await
        .expect("acquire before the pause");
    let (states, watcher) = never_lost(&held);

    // Every client is pinned to the leader first (it asks at connect).
    let pinned = tokio::task::block_in_place(|| cluster.leader()).expect("leader");
    tokio::task::block_in_place(|| cluster.pause(pinned)).expect("pause the pinned member");
    let t = Instant::now();
    let n = name("pause");
    let mut last = None;
    for i in 0..6 {
        let c = if i % 2 == 0 { &a } else { &b };
        let started = Instant::now();
        let g = c
            .acquire(&n, &opts)
            .await
            .unwrap_or_else(|e| panic!("acquire {i} with a member paused: {e}"));
        println!(
            "acquire {i} with member {pinned} paused took {:?}",
            started.elapsed()
        );
        assert!(g.fencing_token() > last);
        last = g.fencing_token();
        assert!(g.release().await.expect("release"));
    }
    assert!(
        held.is_held(),
        "guard held across the pause: {:?}",
        held.state()
    );
    assert!(b
        .try_acquire(&held_name, &opts)
        .await
        .expect("try")
        .is_none());
    println!("six cycles with a paused member took {:?}", t.elapsed());
    tokio::task::block_in_place(|| cluster.resume(pinned)).expect("resume");
    assert!(held.release().await.expect("release the held guard"));
    watcher.abort();
    let history = states.lock().unwrap().clone();
    assert!(
        !history.iter().any(|s| matches!(s, GuardState::Lost { .. })),
        "{history:?}"
    );
}

async fn cut_off_client_loses_its_guard(blackhole: bool) {
    let cluster = start_cluster(1).await;
    let eps = cluster.endpoints();
    let lease = Duration::from_secs(2);
    let proxy = Proxy::start(eps[0].parse().unwrap()).expect("proxy");
    let a = connect(config(vec![proxy.addr().to_string()], lease)).await;
    let b = connect(config(eps.clone(), lease)).await;
    let n = name(if blackhole { "blackhole" } else { "cut" });
    let opts = AcquireOptions::new()
        .ttl(lease)
        .wait(Duration::from_secs(20));
    let g = a.acquire(&n, &opts).await.expect("acquire");
    let token = g.fencing_token();
    let waiter = {
        let (b, n, opts) = (b.clone(), n.clone(), opts.clone());
        tokio::spawn(async move {
            let g = b
                .acquire(&n, &opts)
                .await
                .expect("the other client acquires");
            (g, Instant::now())
        })
    };
    sleep(Duration::from_millis(200)).await;
    let t = Instant::now();
    if blackhole {
        proxy.blackhole();
    } else {
        proxy.cut();
    }
    let cause = timeout(lease + Duration::from_secs(2), g.lost())
        .await
        .expect("guard not lost after the TTL");
    let lost_after = t.elapsed();
    // The client cannot tell a dead lease from a silent network: its guard
    // runs out of validity (bounded by the last confirmed keep-alive).
    assert_eq!(cause, LossCause::Expired);
    assert!(!g.is_held());
    let (g2, got_at) = timeout(Duration::from_secs(10), waiter)
        .await
        .expect("waiter hung")
        .expect("waiter task");
    println!(
        "cut off ({}) : guard lost after {lost_after:?}, other client acquired after {:?}",
        if blackhole { "blackhole" } else { "cut" },
        got_at - t
    );
    assert!(
        g2.fencing_token() > token,
        "{:?} after {token:?}",
        g2.fencing_token()
    );
    // The server freed the lock only when the lease ran out, not before.
    assert!(
        got_at - t >= lease - Duration::from_secs(1),
        "freed too early: {:?}",
        got_at - t
    );
    assert!(
        !g.release().await.unwrap(),
        "a lost guard's release reported success"
    );
    let token2 = g2.fencing_token();
    assert!(g2.release().await.unwrap());
    // Back in contact, the cut-off client works again with a new session.
    proxy.heal();
    let g3 = a.acquire(&n, &opts).await.expect("acquire after healing");
    assert!(g3.fencing_token() > token2);
    assert!(g3.release().await.unwrap());
}

/// A client cut off (connections reset) for longer than its lease TTL loses
/// its guard with `SessionExpired`; another client then acquires with a larger token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_cut_off_longer_than_ttl_loses_its_guard() {
    cut_off_client_loses_its_guard(false).await;
}

/// The same with a blackhole (connections hang without answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_blackholed_longer_than_ttl_loses_its_guard() {
    cut_off_client_loses_its_guard(true).await;
}

/// After a successful connect, a server that stops answering makes
/// `try_acquire` and `acquire` fail with `Unavailable` within the request
/// timeout (tonic connects lazily; nothing hangs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackholed_after_connect_fails_within_request_timeout() {
    let etcd = shared_etcd().expect("shared etcd");
    let proxy = Proxy::start(etcd.endpoint(0).parse().unwrap()).expect("proxy");
    let request_timeout = Duration::from_millis(800);
    let a = connect(
        config(vec![proxy.addr().to_string()], Duration::from_secs(2))
            .request_timeout(request_timeout),
    )
    .await;
    proxy.blackhole();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(2))
        .wait(Duration::from_secs(30));
    for single in [true, false] {
        // A new name each time: an attempt whose answer was lost keeps its name's
        // in-process turn until its key is surely gone (deleted, or the session
        // lease expired), so a second attempt on the same name waits for that.
        let n = name("blackholed-acquire");
        let t = Instant::now();
        let err = if single {
            a.try_acquire(&n, &opts)
                .await
                .map(|_| ())
                .expect_err("try_acquire on a blackholed server")
        } else {
            a.acquire(&n, &opts)
                .await
                .map(|_| ())
                .expect_err("acquire on a blackholed server")
        };
        let took = t.elapsed();
        println!(
            "{} failed after {took:?}: {err}",
            if single { "try_acquire" } else { "acquire" }
        );
        assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
        // One request (plus, at worst, one new session grant), each bounded.
        assert!(
            took < request_timeout * 2 + Duration::from_millis(700),
            "took {took:?}"
        );
    }
    // Connecting to a port nobody listens on fails fast too.
    let t = Instant::now();
    let dead = format!("127.0.0.1:{}", lock_testbed::free_port());
    let err = EtcdLock::connect(config(vec![dead], Duration::from_secs(2)))
        .await
        .expect_err("connect to nothing");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
}

/// Three endpoints that accept connections and never answer: `connect`
/// gives up within its timeout, and once connected, every call returns
/// within its wait plus ONE request timeout (fail-over included), not one
/// per endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_endpoints_cost_one_request_timeout_per_call() {
    let cluster = start_cluster(3).await;
    let proxies: Vec<Proxy> = cluster
        .endpoints()
        .iter()
        .map(|e| Proxy::start(e.parse().unwrap()).expect("proxy"))
        .collect();
    let through: Vec<String> = proxies.iter().map(|p| p.addr().to_string()).collect();
    let request = Duration::from_millis(900);
    let cfg = EtcdConfig::new(through.clone())
        .lease_ttl(Duration::from_secs(10))
        .request_timeout(request)
        .connect_timeout(request);
    let client = connect(cfg.clone()).await;
    let held = client
        .acquire(
            &name("hung-held"),
            &AcquireOptions::new().ttl(Duration::from_secs(10)),
        )
        .await
        .expect("acquire through healthy proxies");
    for p in &proxies {
        p.blackhole();
    }
    let slack = Duration::from_millis(400);
    let wait = Duration::from_millis(200);
    let t = Instant::now();
    let err = client
        .acquire(&name("hung"), &AcquireOptions::new().wait(wait))
        .await
        .expect_err("acquired from hung servers");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    assert!(
        t.elapsed() <= wait + request + slack,
        "acquire took {:?}",
        t.elapsed()
    );
    let t = Instant::now();
    assert!(client.inspect(held.name()).await.is_err());
    assert!(
        t.elapsed() <= request + slack,
        "inspect took {:?}",
        t.elapsed()
    );
    let t = Instant::now();
    let _ = held.release().await;
    assert!(
        t.elapsed() <= request + slack,
        "release took {:?}",
        t.elapsed()
    );
    let t = Instant::now();
    let err = EtcdLock::connect(cfg)
        .await
        .expect_err("connected to hung servers");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    assert!(
        t.elapsed() <= request + slack,
        "connect took {:?}",
        t.elapsed()
    );
}

/// A member without a leader (the other two paused) answers requests that
/// ask for a leader with "no leader": a call asks it again until its request
/// timeout runs out (the election may end meanwhile), then fails with that
/// answer, never later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_without_a_leader_fails_calls_within_the_request_timeout() {
    let cluster = start_cluster(3).await;
    let eps = cluster.endpoints();
    let client = connect(
        EtcdConfig::new([eps[2].clone()])
            .lease_ttl(Duration::from_secs(10))
            .request_timeout(Duration::from_secs(2))
            .connect_timeout(Duration::from_secs(2)),
    )
    .await;
    tokio::task::block_in_place(|| {
        cluster.pause(0)?;
        cluster.pause(1)
    })
    .expect("pause two members");
    // Let member 2 notice it has no leader (election timeout 100 ms).
    sleep(Duration::from_millis(1500)).await;
    let t = Instant::now();
    let err = client
        .try_acquire(&name("no-leader"), &AcquireOptions::new())
        .await
        .expect_err("a lock from a member without a leader");
    let took = t.elapsed();
    tokio::task::block_in_place(|| {
        cluster.resume(0)?;
        cluster.resume(1)
    })
    .expect("resume");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    assert!(
        err.to_string().contains("no leader"),
        "the member should say it has no leader: {err}"
    );
    assert!(
        took < Duration::from_millis(2500),
        "took {took:?}: longer than the request timeout of 2 s"
    );
}

/// A member without a leader that answers slowly: its "no leader" answer
/// comes back after 600 ms of a 1 s request timeout, the call asks again,
/// and the time runs out before the second answer. The call fails with the
/// answer it had ("no leader"), not with the silence that the deadline cut
/// short, and within its request timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_member_without_a_leader_fails_with_its_answer_not_the_deadline() {
    let cluster = start_cluster(3).await;
    let proxy = Proxy::start(cluster.endpoints()[2].parse().unwrap()).expect("proxy");
    let request_timeout = Duration::from_secs(1);
    let client = connect(
        EtcdConfig::new([proxy.addr().to_string()])
            .lease_ttl(Duration::from_secs(10))
            .request_timeout(request_timeout)
            .connect_timeout(Duration::from_secs(2)),
    )
    .await;
    // Connected and answering before the faults.
    let warm = client
        .try_acquire(&name("slow-no-leader-warm"), &AcquireOptions::new())
        .await
        .expect("a lock before the faults")
        .expect("free");
    warm.release().await.expect("released");
    tokio::task::block_in_place(|| {
        cluster.pause(0)?;
        cluster.pause(1)
    })
    .expect("pause two members");
    // Let member 2 notice it has no leader (election timeout 100 ms).
    sleep(Duration::from_millis(1500)).await;
    proxy.set_reply_delay(Duration::from_millis(600));
    let t = Instant::now();
    let got = client
        .try_acquire(&name("slow-no-leader"), &AcquireOptions::new())
        .await;
    let took = t.elapsed();
    proxy.heal();
    tokio::task::block_in_place(|| {
        cluster.resume(0)?;
        cluster.resume(1)
    })
    .expect("resume");
    let err = got.expect_err("a lock from a member without a leader");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    assert!(
        err.to_string().contains("no leader"),
        "the call should fail with the member's answer: {err}"
    );
    assert!(
        took < request_timeout + Duration::from_millis(500),
        "took {took:?}: longer than the request timeout of {request_timeout:?}"
    );
}

/// The count of gRPC calls a member has started for `method`, from its
/// Prometheus metrics.
fn started_calls(endpoint: &str, method: &str) -> u64 {
    lock_testbed::etcd_metrics(endpoint)
        .expect("the member's metrics")
        .lines()
        .filter(|l| {
            l.starts_with("grpc_server_started_total")
                && l.contains(&format!("grpc_method=\"{method}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// A member cut off from a client with many guards (its connections reset):
/// the client moves to another member, and its guards' watches resume there
/// from where they were, with no read per guard (and no guard lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_member_costs_no_request_per_guard() {
    const GUARDS: usize = 200;
    let cluster = start_cluster(3).await;
    let eps = cluster.endpoints();
    let proxies: Vec<Proxy> = eps
        .iter()
        .map(|e| Proxy::start(e.parse().unwrap()).expect("proxy"))
        .collect();
    let client = connect(config(
        proxies.iter().map(|p| p.addr().to_string()).collect(),
        Duration::from_secs(5),
    ))
    .await;
    let opts = AcquireOptions::new().ttl(Duration::from_secs(5));
    let mut guards = Vec::new();
    for i in 0..GUARDS {
        guards.push(
            client
                .acquire(&name(&format!("many-{i}")), &opts)
                .await
                .expect("acquire"),
        );
    }
    let reads = |eps: &[String]| -> u64 {
        eps.iter()
            .map(|e| started_calls(e, "Range") + started_calls(e, "Txn"))
            .sum()
    };
    let before = tokio::task::block_in_place(|| reads(&eps));
    // The member the client talks to first (the leader: it asks at
    // connect) goes away for the client.
    let pinned = tokio::task::block_in_place(|| cluster.leader()).expect("leader");
    proxies[pinned].cut();
    sleep(Duration::from_secs(3)).await;
    let after = tokio::task::block_in_place(|| reads(&eps));
    proxies[pinned].heal();
    assert!(
        after - before < 20,
        "{} reads after one member was cut off with {GUARDS} guards held",
        after - before
    );
    for g in &guards {
        assert!(g.is_held(), "a guard was lost: {:?}", g.state());
    }
    for g in guards {
        assert!(g.release().await.unwrap());
    }
}

/// A member that answers "no leader" while the cluster is between leaders:
/// a call asks it again until a leader is elected or its request timeout
/// runs out, so an election shorter than the request timeout never fails an
/// acquisition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_shorter_than_the_request_timeout_is_ridden_out() {
    let cluster = Arc::new(start_cluster(3).await);
    let eps = cluster.endpoints();
    let leader = tokio::task::block_in_place(|| cluster.leader()).expect("leader");
    let followers: Vec<usize> = (0..eps.len()).filter(|&i| i != leader).collect();
    let (stay, other) = (followers[0], followers[1]);
    // The client knows one member only, so every request goes to it.
    let c = connect(
        config(vec![eps[stay].clone()], Duration::from_secs(10))
            .request_timeout(Duration::from_secs(4)),
    )
    .await;
    let n = name("election");

    // No quorum: the member left alone loses its leader and says so.
    tokio::task::block_in_place(|| cluster.pause(leader)).expect("pause the leader");
    tokio::task::block_in_place(|| cluster.pause(other)).expect("pause a follower");
    says_no_leader(&eps[stay]).await;

    // The quorum comes back 500 ms after the acquisition starts.
    let resumed = resume_after(&cluster, other, Duration::from_millis(500));
    let t = Instant::now();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(10));
    let g = c
        .acquire(&n, &opts)
        .await
        .unwrap_or_else(|e| panic!("acquire during the election, after {:?}: {e}", t.elapsed()));
    let took = t.elapsed();
    println!("acquired {took:?} after the acquisition started, the quorum back after 500 ms");
    resumed
        .await
        .expect("resume thread")
        .expect("resume the follower");
    assert!(
        took >= Duration::from_millis(400),
        "granted without a leader after {took:?}"
    );
    assert!(g.fencing_token().is_some());
    assert!(g.release().await.expect("release"));
    tokio::task::block_in_place(|| cluster.resume(leader)).expect("resume the leader");
}

/// A silent member tried after members that answered "no leader": it costs
/// a share of the request timeout, not all of it, so the acquisition asks
/// the electing members again in time and an election shorter than the
/// request timeout does not fail it. (A guard's keep-alive that noticed a
/// paused leader first puts that member last in line, behind the electing
/// ones: this failed an acquisition with a 10 s wait after one request
/// timeout.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_member_leaves_time_to_ask_electing_members_again() {
    let cluster = Arc::new(start_cluster(3).await);
    let eps = cluster.endpoints();
    let leader = tokio::task::block_in_place(|| cluster.leader()).expect("leader");
    let followers: Vec<usize> = (0..eps.len()).filter(|&i| i != leader).collect();
    let (electing, silent) = (followers[0], followers[1]);
    let to_silent = Proxy::start(eps[silent].parse().unwrap()).expect("proxy");
    let to_electing = Proxy::start(eps[electing].parse().unwrap()).expect("proxy");
    let request_timeout = Duration::from_secs(4);
    // Neither endpoint leads, so the client starts on the first one.
    let c = connect(
        config(
            vec![to_silent.addr().to_string(), to_electing.addr().to_string()],
            Duration::from_secs(10),
        )
        .request_timeout(request_timeout),
    )
    .await;
    let try_opts = AcquireOptions::new().ttl(Duration::from_secs(10));
    // A connection to each member, the electing one first in line: the
    // silent member answers one lock, then goes quiet and the next moves on.
    let warm = c
        .try_acquire(&name("silent-warm"), &try_opts)
        .await
        .expect("a lock from the silent member before the faults")
        .expect("free");
    warm.release().await.expect("released");
    to_silent.blackhole();
    let moved = c
        .try_acquire(&name("silent-move"), &try_opts)
        .await
        .expect("a lock from the other member")
        .expect("free");
    moved.release().await.expect("released");

    // The member in front loses its quorum and says it has no leader.
    tokio::task::block_in_place(|| {
        cluster.pause(leader)?;
        cluster.pause(silent)
    })
    .expect("pause the leader and the silent member");
    says_no_leader(&eps[electing]).await;

    // The quorum comes back 500 ms after the acquisition starts; the
    // silent member stays silent to the client (its proxy swallows bytes).
    let resumed = resume_after(&cluster, silent, Duration::from_millis(500));
    let t = Instant::now();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(10));
    let got = c.acquire(&name("silent-election"), &opts).await;
    let took = t.elapsed();
    resumed
        .await
        .expect("resume thread")
        .expect("resume the silent member");
    let g = got.unwrap_or_else(|e| panic!("acquire during the election, after {took:?}: {e}"));
    println!("acquired {took:?} after the acquisition started, the quorum back after 500 ms");
    assert!(g.fencing_token().is_some());
    assert!(g.release().await.expect("release"));
    to_silent.heal();
    tokio::task::block_in_place(|| cluster.resume(leader)).expect("resume the leader");
}
