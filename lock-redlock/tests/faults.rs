//! Redlock under node faults, each test on its own five Redis servers:
//! killed and paused nodes, keys left by failed rounds, extension with a
//! minority and a majority gone, the extension cap, a node down at connect,
//! and contention. (`faults_replies.rs`: replies late or lost.)

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{DistributedLock, GuardState, LockErrorKind, LossCause, NodeFailureReason};
use lock_redlock::{RedlockConfig, RedlockLock};
use lock_testbed::Proxy;
use tokio::time::{sleep, timeout, Instant};

mod support;
use support::{
    addr, assert_gone_from, config, get, gone_within, lock_name, opts, proxies_for, set_foreign,
    start_set, value_within, NODE_TIMEOUT, SLACK,
};

/// Two of five nodes killed: acquire, release and a fresh client's connect all still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_of_five_killed_acquire_still_succeeds() {
    let mut set = start_set();
    let locks = RedlockLock::connect(config(&set)).await.expect("connect");
    let name = lock_name("two-killed");
    let key = locks.key_of(&name);
    set.node_mut(0).kill().unwrap();
    set.node_mut(1).kill().unwrap();

    let t = Instant::now();
    let g = locks
        .acquire(&name, &opts(Duration::from_secs(30)))
        .await
        .expect("a quorum of 3 is up");
    assert!(
        t.elapsed() < NODE_TIMEOUT + SLACK,
        "acquire took {:?}",
        t.elapsed()
    );
    assert!(g.is_held());
    let tokens: Vec<Option<String>> = set.nodes()[2..].iter().map(|n| get(n, &key)).collect();
    assert!(tokens[0].is_some(), "no key on a live node");
    assert!(
        tokens.iter().all(|t| *t == tokens[0]),
        "different values on the live nodes: {tokens:?}"
    );

    let late = RedlockLock::connect(config(&set))
        .await
        .expect("connect with 3 of 5 nodes up");
    assert!(late
        .try_acquire(&name, &opts(Duration::from_secs(30)))
        .await
        .unwrap()
        .is_none());
    let st = late.inspect(&name).await.unwrap();
    assert!(st.held);
    assert!(st.ttl_remaining.unwrap() <= Duration::from_secs(30));

    assert!(g.release().await.unwrap());
    assert_gone_from(&set.nodes()[2..], &key).await;
}

/// Three of five nodes killed: a clear `Unavailable` naming the dead nodes,
/// within about one per-node timeout, from a connected client, a new client
/// (`connect`) and a lazily connected one; nothing left on the live nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_of_five_killed_is_unavailable_quickly_naming_the_nodes() {
    let mut set = start_set();
    let locks = RedlockLock::connect(config(&set)).await.expect("connect");
    let name = lock_name("three-killed");
    let key = locks.key_of(&name);
    let dead: Vec<String> = set.nodes()[..3].iter().map(addr).collect();
    for i in 0..3 {
        set.node_mut(i).kill().unwrap();
    }

    let check = |err: &lock_core::LockError| {
        assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
        for d in &dead {
            let f = err
                .nodes()
                .iter()
                .find(|f| &f.node == d)
                .unwrap_or_else(|| panic!("{d} not named in {err}"));
            assert!(
                matches!(
                    f.reason,
                    NodeFailureReason::Unreachable | NodeFailureReason::TimedOut
                ),
                "{f}"
            );
        }
    };

    let t = Instant::now();
    let err = locks
        .acquire(
            &name,
            &opts(Duration::from_secs(30)).wait(Duration::from_secs(10)),
        )
        .await
        .expect_err("acquired without a quorum");
    assert!(t.elapsed() < NODE_TIMEOUT + SLACK, "took {:?}", t.elapsed());
    check(&err);
    println!("connected client: {err}");
    for n in &set.nodes()[3..] {
        assert_eq!(
            get(n, &key),
            None,
            "a failed round left its key on {}",
            n.addr()
        );
    }

    let t = Instant::now();
    let err = RedlockLock::connect(config(&set))
        .await
        .expect_err("connected without a quorum");
    assert!(
        t.elapsed() < Duration::from_secs(1) + SLACK,
        "connect took {:?}",
        t.elapsed()
    );
    check(&err);

    let lazy = RedlockLock::connect_lazy(config(&set)).expect("lazy client");
    let t = Instant::now();
    let err = lazy
        .try_acquire(&name, &opts(Duration::from_secs(30)))
        .await
        .expect_err("acquired without a quorum");
    assert!(t.elapsed() < NODE_TIMEOUT + SLACK, "took {:?}", t.elapsed());
    check(&err);
}

/// A majority behind blackholed proxies (connects succeed, nothing answers):
/// a lazily connected client fails with `Unavailable`, nodes timed out,
/// within two per-node timeouts (a round, and one retry since a silent
/// majority may be a hiccup).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn blackholed_majority_is_unavailable_within_a_node_timeout() {
    let set = start_set();
    let proxies = proxies_for(&set);
    for p in &proxies[..3] {
        p.blackhole();
    }
    let lazy = RedlockLock::connect_lazy(
        RedlockConfig::new(proxies.iter().map(Proxy::redis_url)).node_timeout(NODE_TIMEOUT),
    )
    .unwrap();
    let name = lock_name("blackholed");
    let t = Instant::now();
    let err = lazy
        .acquire(
            &name,
            &opts(Duration::from_secs(30)).wait(Duration::from_secs(10)),
        )
        .await
        .expect_err("acquired without a quorum");
    // One round, and one more because a silent majority may be a hiccup.
    assert!(
        t.elapsed() < NODE_TIMEOUT * 2 + SLACK,
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    let timed_out = err
        .nodes()
        .iter()
        .filter(|f| f.reason == NodeFailureReason::TimedOut)
        .count();
    assert_eq!(timed_out, 3, "{err}");
    let key = lazy.key_of(&name);
    assert_gone_from(&set.nodes()[3..], &key).await;
}

/// One paused node (SIGSTOP): acquire succeeds within one per-node timeout;
/// the `SET` and the release queued for the paused node both run when it
/// resumes, so no key is left there (long before its TTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn paused_node_costs_at_most_one_node_timeout() {
    let set = start_set();
    let locks = RedlockLock::connect(config(&set)).await.expect("connect");
    let name = lock_name("paused-one");
    let key = locks.key_of(&name);
    set.nodes()[0].pause().unwrap();

    let mut took = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let g = locks
            .acquire(&name, &opts(Duration::from_secs(30)))
            .await
            .expect("a quorum of 4 is up");
        took.push(t.elapsed());
        assert!(g.is_held());
        assert!(g.release().await.unwrap());
    }
    println!("acquire with one node paused: {took:?}");
    assert!(took.iter().all(|t| *t < NODE_TIMEOUT + SLACK), "{took:?}");

    set.nodes()[0].resume().unwrap();
    assert!(
        gone_within(&set.nodes()[0], &key, Duration::from_secs(2)).await,
        "the paused node kept a key set by a round it answered late"
    );
}

/// A failed attempt leaves no key of ours anywhere: three nodes held by a
/// foreign token, our try and our timed-out wait fail, and each node holds
/// exactly what it held before: at once when the nodes answer promptly,
/// and on a busy machine once the deletes that go on in the background
/// have landed, within their bound (the connect timeout, 1 s by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_attempt_leaves_no_key_on_any_node() {
    let set = start_set();
    let locks = RedlockLock::connect(config(&set)).await.expect("connect");
    let name = lock_name("foreign");
    let key = locks.key_of(&name);
    for n in &set.nodes()[..3] {
        set_foreign(n, &key, "foreign-token");
    }
    let check = || async {
        for (i, n) in set.nodes().iter().enumerate() {
            let expect = (i < 3).then_some("foreign-token");
            assert!(
                value_within(n, &key, expect, Duration::from_secs(1) + SLACK).await,
                "node {i} ({}) holds {:?}, not {expect:?}",
                n.addr(),
                get(n, &key)
            );
        }
    };

    assert!(locks
        .try_acquire(&name, &opts(Duration::from_secs(30)))
        .await
        .unwrap()
        .is_none());
    check().await;
    let wait = Duration::from_millis(300);
    let t = Instant::now();
    let err = locks
        .acquire(&name, &opts(Duration::from_secs(30)).wait(wait))
        .await
        .expect_err("a lock held on 3 of 5 nodes was granted");
    assert_eq!(err.kind(), LockErrorKind::Timeout, "{err}");
    assert!(
        t.elapsed() >= wait && t.elapsed() < wait + SLACK,
        "{:?}",
        t.elapsed()
    );
    check().await;
    let st = locks.inspect(&name).await.unwrap();
    assert!(st.held, "a key on 3 of 5 nodes is a held lock");
    assert!(st.ttl_remaining.unwrap() <= Duration::from_secs(60));
}

/// Keep-alive with a paused minority keeps the lock held; with a majority
/// paused the guard turns suspended (naming the nodes), then lost at its
/// validity; nothing is left once the nodes resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn extension_survives_a_minority_and_a_majority_loss_suspends_then_loses() {
    let set = start_set();
    let locks = RedlockLock::connect(config(&set)).await.expect("connect");
    let name = lock_name("extend-faults");
    let key = locks.key_of(&name);
    let ttl = Duration::from_millis(600);
    let g = locks.acquire(&name, &opts(ttl)).await.unwrap();
    for n in &set.nodes()[..2] {
        n.pause().unwrap();
    }
    sleep(ttl * 3).await;
    assert!(
        matches!(g.state(), GuardState::Held { .. }),
        "{:?}",
        g.state()
    );
    assert!(g.valid_until().unwrap() > Instant::now() + ttl / 3);

    let mut states = g.subscribe();
    let paused_at = Instant::now();
    set.nodes()[2].pause().unwrap();
    let mut suspended = None;
    let cause = timeout(ttl + SLACK, async {
        loop {
            states.changed().await.expect("guard state");
            let st = states.borrow_and_update().clone();
            match st {
                GuardState::Suspended { reason, .. } => suspended = Some(reason),
                GuardState::Lost { cause } => return cause,
                _ => {}
            }
        }
    })
    .await
    .expect("never lost");
    assert_eq!(cause, LossCause::Expired);
    let reason = suspended.expect("lost without being suspended first");
    println!("suspended: {reason}; lost after {:?}", paused_at.elapsed());
    assert!(reason.contains(&addr(&set.nodes()[2])), "{reason}");
    assert!(!g.is_held());

    for n in &set.nodes()[..3] {
        n.resume().unwrap();
    }
    for n in set.nodes() {
        assert!(
            gone_within(n, &key, Duration::from_secs(2)).await,
            "key left on {}",
            n.addr()
        );
    }
}

/// `extend` with a majority paused: an `Unavailable` error naming the
/// silent nodes; with a minority paused it succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn extend_needs_a_quorum() {
    let set = start_set();
    let locks = RedlockLock::connect(config(&set)).await.expect("connect");
    let name = lock_name("extend-quorum");
    let ttl = Duration::from_secs(5);
    let g = locks
        .acquire(&name, &opts(ttl).keep_alive(false))
        .await
        .unwrap();
    set.nodes()[0].pause().unwrap();
    set.nodes()[1].pause().unwrap();
    let until = g.extend(ttl).await.expect("extend with 3 of 5 nodes");
    assert!(until > Instant::now() + ttl / 2);
    set.nodes()[2].pause().unwrap();
    let t = Instant::now();
    let err = g.extend(ttl).await.expect_err("extended without a quorum");
    assert!(t.elapsed() < NODE_TIMEOUT + SLACK);
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    for n in &set.nodes()[..3] {
        let f = err
            .nodes()
            .iter()
            .find(|f| f.node == addr(n))
            .unwrap_or_else(|| panic!("{} not named: {err}", n.addr()));
        assert_eq!(f.reason, NodeFailureReason::TimedOut);
    }
    assert!(
        matches!(g.state(), GuardState::Suspended { .. }),
        "{:?}",
        g.state()
    );
    for n in &set.nodes()[..3] {
        n.resume().unwrap();
    }
    g.extend(ttl).await.expect("extend once the nodes are back");
    assert!(matches!(g.state(), GuardState::Held { .. }));
    assert!(g.release().await.unwrap());
}

/// With `max_extensions = 2`, the third renewal fails: the guard turns
/// suspended, is lost (expired) at its validity, its keys are removed and
/// another client gets the lock; an explicit `extend` past the cap is a
/// `Lost` error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn extension_cap_ends_the_lease_at_its_validity() {
    let set = start_set();
    let capped = RedlockLock::connect(config(&set).max_extensions(Some(2)))
        .await
        .unwrap();
    let other = RedlockLock::connect(config(&set)).await.unwrap();
    let name = lock_name("capped");
    let key = capped.key_of(&name);
    let ttl = Duration::from_millis(450);

    let g = capped
        .acquire(&name, &opts(ttl).keep_alive(false))
        .await
        .unwrap();
    g.extend(ttl).await.unwrap();
    g.extend(ttl).await.unwrap();
    let err = g
        .extend(ttl)
        .await
        .expect_err("a third extension past the cap");
    assert_eq!(err.kind(), LockErrorKind::Lost, "{err}");
    assert!(err.message().contains("limit of 2 extensions"), "{err}");
    drop(g);
    assert!(other
        .acquire(&name, &opts(ttl).wait(SLACK))
        .await
        .unwrap()
        .release()
        .await
        .unwrap());

    let t = Instant::now();
    let g = capped.acquire(&name, &opts(ttl)).await.unwrap();
    let mut states = g.subscribe();
    let mut suspended = None;
    let cause = timeout(ttl * 3 + SLACK, async {
        loop {
            states.changed().await.expect("guard state");
            let st = states.borrow_and_update().clone();
            match st {
                GuardState::Suspended { reason, .. } => suspended = Some(reason),
                GuardState::Lost { cause } => return cause,
                _ => {}
            }
        }
    })
    .await
    .expect("a capped lease was never lost");
    let lost_after = t.elapsed();
    assert_eq!(cause, LossCause::Expired);
    let reason = suspended.expect("lost without being suspended");
    assert!(reason.contains("limit of 2 extensions"), "{reason}");
    // Two renewals at ttl/3 and 2ttl/3, then the lease runs out one ttl after the last.
    assert!(lost_after >= ttl, "lost after {lost_after:?}");
    println!("capped lease lost after {lost_after:?}");
    assert_gone_from(set.nodes(), &key).await;
    let g2 = other
        .try_acquire(&name, &opts(ttl))
        .await
        .unwrap()
        .expect("lock free after the capped lease");
    assert!(g2.release().await.unwrap());
}

/// A node down when the client connects is used as soon as it is back: the
/// round right after the restart may still finish (on a quorum) before the
/// node's new connection is up, the next one sets the key on all five.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_down_at_connect_is_used_once_it_is_back() {
    let mut set = start_set();
    set.node_mut(0).kill().unwrap();
    let locks = RedlockLock::connect(config(&set))
        .await
        .expect("connect with 4 of 5 nodes");
    set.node_mut(0).restart().unwrap();
    let name = lock_name("comes-back");
    let key = locks.key_of(&name);
    let o = opts(Duration::from_secs(30));
    assert!(locks
        .acquire(&name, &o)
        .await
        .unwrap()
        .release()
        .await
        .unwrap());
    sleep(Duration::from_millis(100)).await;
    let g = locks.acquire(&name, &o).await.unwrap();
    let deadline = Instant::now() + SLACK;
    loop {
        // The round returns at a quorum; the slower nodes' SETs land just after.
        let values: Vec<Option<String>> = set.nodes().iter().map(|n| get(n, &key)).collect();
        if values.iter().all(|v| v.is_some() && *v == values[0]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted node is not used: {values:?}"
        );
        sleep(Duration::from_millis(10)).await;
    }
    assert!(g.release().await.unwrap());
    assert_gone_from(set.nodes(), &key).await;
}

/// Eight clients contending on one name for a while: never two holders,
/// steady progress (split votes resolve), and no orphan key afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_contending_clients_make_progress_and_leave_no_orphans() {
    let set = start_set();
    let name = lock_name("contention");
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let run_for = Duration::from_secs(2);
    let stop_at = Instant::now() + run_for;
    let mut tasks = Vec::new();
    let mut key = String::new();
    for _ in 0..8 {
        // A longer per-node timeout than the default: this test is about
        // progress and orphans, and runs on a loaded machine.
        let cfg = config(&set).node_timeout(Duration::from_millis(250));
        let locks = RedlockLock::connect(cfg).await.unwrap();
        key = locks.key_of(&name);
        let (name, inside, overlaps, done) =
            (name.clone(), inside.clone(), overlaps.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < stop_at {
                let g = locks
                    .acquire(
                        &name,
                        &opts(Duration::from_secs(10)).wait(Duration::from_secs(10)),
                    )
                    .await
                    .expect("acquire under contention");
                if inside.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                assert!(g.release().await.expect("release"));
                done.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let n = done.load(Ordering::SeqCst);
    println!(
        "8 clients: {n} acquisitions in {run_for:?} ({:.0}/s)",
        n as f64 / run_for.as_secs_f64()
    );
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    // On an idle machine this is hundreds per second; the bound only catches
    // jamming (a peer that does not release failed rounds drops to zero).
    assert!(n >= 20, "only {n} acquisitions in {run_for:?}");
    for node in set.nodes() {
        if !gone_within(node, &key, SLACK).await {
            let held = node.cmd_async(&["GET", &key]).await.unwrap();
            let pttl = node.cmd_async(&["PTTL", &key]).await.unwrap();
            let keys = node.cmd_async(&["KEYS", "*"]).await.unwrap();
            panic!(
                "orphan key on {}: it holds {:?} for {:?} ms more; keys there: {keys:?}",
                node.addr(),
                held.as_str(),
                pttl.as_int()
            );
        }
        let keys = tokio::task::block_in_place(|| node.cmd(&["DBSIZE"]).unwrap());
        assert_eq!(keys.as_int(), Some(0), "keys left on {}", node.addr());
    }
}
