//! Redlock with replies late or lost, each test on its own five Redis
//! servers: keys set by a node that answers late or by a cancelled round are
//! released, a release does not wait for a node still answering, replies
//! slower than the TTL or a quorum completed too late grant nothing, a `SET`
//! whose reply was lost with its connection counts as won, an unanswered
//! shorter extension caps the validity, a decided round does not wait for
//! silent nodes, and a release is ours only when a quorum deleted our key.

use std::time::Duration;

use lock_core::{DistributedLock, LockErrorKind, LockGuard};
use lock_redlock::{RedlockConfig, RedlockLock};
use lock_testbed::Proxy;
use tokio::time::{sleep, timeout, Instant};

mod support;
use support::{
    assert_gone_from, config, get, gone_within, lock_name, opts, proxies_for, set_foreign,
    start_set, through, NODE_TIMEOUT, SLACK,
};

/// A release does not wait for a node whose acquiring `SET` is still
/// unanswered: the nodes that answered (a quorum) release at once, and the
/// silent node gets its delete after its `SET` (on the same connection),
/// so it keeps no key once it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_does_not_wait_for_a_node_still_answering_the_acquire() {
    let set = start_set();
    let locks = RedlockLock::connect(config(&set)).await.expect("connect");
    let name = lock_name("release-late");
    let key = locks.key_of(&name);
    set.nodes()[4].pause().unwrap();

    let g = locks
        .acquire(&name, &opts(Duration::from_secs(30)))
        .await
        .expect("a quorum of 4 is up");
    let t = Instant::now();
    assert!(g.release().await.unwrap());
    let took = t.elapsed();
    println!("release with one node still answering the acquire: {took:?}");
    assert!(
        took < NODE_TIMEOUT / 2,
        "the release waited {took:?} for the paused node (node timeout {NODE_TIMEOUT:?})"
    );
    for n in &set.nodes()[..4] {
        assert!(
            gone_within(n, &key, Duration::from_secs(1)).await,
            "key left on {}",
            n.addr()
        );
    }
    // Past the node timeout, the paused node gets its delete queued after
    // its SET.
    sleep(NODE_TIMEOUT * 2).await;
    set.nodes()[4].resume().unwrap();
    assert!(
        gone_within(&set.nodes()[4], &key, Duration::from_secs(2)).await,
        "the late node kept our key"
    );
}

/// A split vote with one node paused (two nodes foreign, two ours, one
/// silent): not acquired; our keys are removed at once on the nodes that
/// answered, and on the silent node as soon as it answers, not at TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keys_set_by_a_node_that_answers_late_are_released() {
    let set = start_set();
    let locks = RedlockLock::connect(config(&set)).await.expect("connect");
    let name = lock_name("late-node");
    let key = locks.key_of(&name);
    for n in &set.nodes()[..2] {
        set_foreign(n, &key, "foreign-token");
    }
    set.nodes()[4].pause().unwrap();

    let t = Instant::now();
    let got = locks
        .try_acquire(&name, &opts(Duration::from_secs(30)))
        .await
        .expect("enough nodes answered");
    assert!(got.is_none(), "acquired with 2 of 5 nodes");
    println!(
        "split vote try_acquire (with retries) took {:?}",
        t.elapsed()
    );
    for n in &set.nodes()[2..4] {
        assert_eq!(get(n, &key), None, "key left on {}", n.addr());
    }
    set.nodes()[4].resume().unwrap();
    assert!(
        gone_within(&set.nodes()[4], &key, Duration::from_secs(2)).await,
        "the late node kept our key"
    );
    for n in &set.nodes()[..2] {
        assert_eq!(get(n, &key).as_deref(), Some("foreign-token"));
    }
}

/// A round dropped mid-flight (the acquire future cancelled while a
/// majority is silent) is released in the background: no key on the nodes
/// that answered, nor on the silent ones once they resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelled_round_is_released_in_the_background() {
    let set = start_set();
    let locks = RedlockLock::connect(config(&set)).await.expect("connect");
    let name = lock_name("cancelled");
    let key = locks.key_of(&name);
    for n in &set.nodes()[..3] {
        n.pause().unwrap();
    }
    let r = timeout(
        Duration::from_millis(10),
        locks.try_acquire(&name, &opts(Duration::from_secs(30))),
    )
    .await;
    assert!(
        r.is_err(),
        "the round should still be waiting for the paused nodes"
    );
    for n in &set.nodes()[3..] {
        assert!(
            gone_within(n, &key, SLACK).await,
            "cancelled round left its key on {}",
            n.addr()
        );
    }
    for n in &set.nodes()[..3] {
        n.resume().unwrap();
    }
    for n in &set.nodes()[..3] {
        assert!(
            gone_within(n, &key, Duration::from_secs(2)).await,
            "key left on {}",
            n.addr()
        );
    }
}

/// Validity accounting, replies delayed by proxies past the TTL (per-node
/// timeout above the delay): not held, an `Unavailable` error that says why,
/// no key left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replies_slower_than_the_ttl_do_not_grant_the_lock() {
    let set = start_set();
    let proxies = proxies_for(&set);
    let locks = through(&proxies, Duration::from_secs(2)).await;
    let ttl = Duration::from_millis(300);
    for p in &proxies {
        p.set_reply_delay(Duration::from_millis(400));
    }
    let name = lock_name("slow-replies");
    let key = locks.key_of(&name);
    let t = Instant::now();
    let err = locks
        .try_acquire(&name, &opts(ttl))
        .await
        .expect_err("a quorum that came after the TTL granted the lock");
    assert!(t.elapsed() >= Duration::from_millis(400));
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    assert!(err.message().contains("past the validity"), "{err}");
    println!("{err}");
    assert_gone_from(set.nodes(), &key).await;
    // The waiting acquire gives up the same way (after retry_count slow rounds).
    let err = locks
        .acquire(&name, &opts(ttl))
        .await
        .expect_err("granted past validity");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
}

/// A first round's plain `SET NX` that landed on every node but whose
/// replies were lost with their connections: the retry on a fresh
/// connection finds our own token and counts the node as won, so the round
/// holds the lock instead of waiting for its own keys to expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_set_whose_reply_was_lost_with_its_connection_counts_as_won() {
    let set = start_set();
    let proxies = proxies_for(&set);
    let locks = through(&proxies, Duration::from_secs(2)).await;
    let name = lock_name("lost-set-reply");
    let key = locks.key_of(&name);
    for p in &proxies {
        p.set_reply_delay(Duration::from_secs(5));
    }
    let o = opts(Duration::from_secs(10));
    let started = Instant::now();
    let (got, ()) = tokio::join!(locks.acquire(&name, &o), async {
        // Every SET has reached its server; the replies are held back.
        let landed = Instant::now() + Duration::from_secs(2);
        while set.nodes().iter().any(|n| get(n, &key).is_none()) {
            assert!(Instant::now() < landed, "the SETs did not reach every node");
            sleep(Duration::from_millis(10)).await;
        }
        for p in &proxies {
            p.reset_all();
            p.heal();
        }
    });
    let guard = got.expect("the retried SETs answered");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "held only after {:?}: the first round did not count our own keys as won",
        started.elapsed()
    );
    let ours: Vec<Option<String>> = set.nodes().iter().map(|n| get(n, &key)).collect();
    assert!(ours.iter().all(|v| v == &ours[0]), "{ours:?}");
    assert!(guard.release().await.unwrap());
    assert_gone_from(set.nodes(), &key).await;
}

/// Validity accounting where the cleanup can be seen: the third "yes" comes
/// from a node paused until after the TTL, so the quorum is void; that
/// node's key, set on resume and otherwise alive for a whole TTL more, is
/// deleted at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quorum_completed_after_the_validity_is_released() {
    let set = start_set();
    let cfg = config(&set)
        .node_timeout(Duration::from_secs(3))
        .retry_count(0);
    let locks = RedlockLock::connect(cfg).await.expect("connect");
    let name = lock_name("late-quorum");
    let key = locks.key_of(&name);
    for n in &set.nodes()[3..] {
        set_foreign(n, &key, "foreign-token");
    }
    let ttl = Duration::from_millis(500);
    set.nodes()[2].pause().unwrap();
    let started = Instant::now();
    let resume_at = started + ttl + Duration::from_millis(100);
    let o = opts(ttl);
    let (result, resumed) = tokio::join!(locks.try_acquire(&name, &o), async {
        tokio::time::sleep_until(resume_at).await;
        set.nodes()[2].resume().unwrap();
        Instant::now()
    });
    let err = result.expect_err("a quorum completed after the validity granted the lock");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    assert!(err.message().contains("past the validity"), "{err}");
    // Without the clean-up the key set on resume would live until resumed + ttl.
    let checked = Instant::now();
    assert_eq!(
        get(&set.nodes()[2], &key),
        None,
        "the late node kept our key"
    );
    assert!(
        checked < resumed + ttl,
        "checked {:?} after the resume: too late to tell a release from expiry",
        checked - resumed
    );
    for n in &set.nodes()[3..] {
        assert_eq!(get(n, &key).as_deref(), Some("foreign-token"));
    }
}

/// An extension to a shorter TTL that a minority confirms while the
/// replies of a majority are held (the majority applied it, we cannot
/// know): the outcome is unknown, so `extend` fails and the guard never
/// reports a validity beyond the shorter TTL; another client gets the lock
/// once the shorter TTL has run out on the majority.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unanswered_shorter_extension_on_a_majority_caps_the_validity() {
    let set = start_set();
    let proxies = proxies_for(&set);
    let locks = RedlockLock::connect(
        RedlockConfig::new(proxies.iter().map(Proxy::redis_url)).node_timeout(NODE_TIMEOUT),
    )
    .await
    .expect("connect");
    let other = RedlockLock::connect(config(&set)).await.expect("connect");
    let name = lock_name("short-extend");
    let long = Duration::from_secs(30);
    let g = locks
        .acquire(&name, &opts(long).keep_alive(false))
        .await
        .unwrap();
    for p in &proxies[..3] {
        p.set_reply_delay(Duration::from_secs(5));
    }
    let short = Duration::from_millis(600);
    let sent = Instant::now();
    let err = g
        .extend(short)
        .await
        .expect_err("an extension a majority did not answer is not confirmed");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    let until = g.valid_until().expect("no validity");
    assert!(
        until <= sent + short,
        "the guard kept a validity {:?} past the shorter TTL",
        until - (sent + short)
    );
    let got = other
        .acquire(&name, &opts(Duration::from_secs(5)))
        .await
        .expect("another client gets the lock after the shorter TTL");
    assert!(!g.is_held(), "two guards held at once");
    assert!(
        sent.elapsed() >= short - short / 10,
        "acquired after {:?}: the majority did not apply the extension",
        sent.elapsed()
    );
    assert!(got.release().await.unwrap());
}

/// A round whose outcome a quorum of answers already decides (three nodes
/// hold a foreign key, two are silent) returns without waiting for the
/// silent nodes; the silent nodes get our delete once they answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_decided_round_does_not_wait_for_silent_nodes() {
    let set = start_set();
    let locks = RedlockLock::connect(config(&set)).await.expect("connect");
    let name = lock_name("decided");
    let key = locks.key_of(&name);
    for n in &set.nodes()[..3] {
        set_foreign(n, &key, "foreign-token");
    }
    for n in &set.nodes()[3..] {
        n.pause().unwrap();
    }
    let t = Instant::now();
    let got = locks
        .try_acquire(&name, &opts(Duration::from_secs(30)))
        .await
        .expect("a quorum answered");
    let took = t.elapsed();
    assert!(got.is_none(), "acquired a lock held on 3 of 5 nodes");
    assert!(
        took < NODE_TIMEOUT,
        "the round waited {took:?} for nodes that could not change its outcome"
    );
    for n in &set.nodes()[3..] {
        n.resume().unwrap();
    }
    for n in &set.nodes()[3..] {
        assert!(
            gone_within(n, &key, Duration::from_secs(2)).await,
            "our key stayed on {}",
            n.addr()
        );
    }
}

/// `release` says the lock was still ours only when a quorum of nodes
/// deleted our key. Here our key is left on one node of five (two hold a
/// stranger's key, two are down): a quorum answered, one delete proved
/// nothing, so the outcome is an error (unknown: the nodes that are down
/// may have held ours), never `Ok(true)`. The delete still happens where
/// the key was ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn release_is_ours_only_when_a_quorum_deleted_our_key() {
    let mut set = start_set();
    let locks = RedlockLock::connect(config(&set)).await.unwrap();
    let name = lock_name("release-quorum");
    let key = locks.key_of(&name);
    let g = locks
        .acquire(&name, &opts(Duration::from_secs(30)))
        .await
        .unwrap();
    for n in &set.nodes()[1..3] {
        set_foreign(n, &key, "0123456789abcdef0123456789abcdef");
    }
    set.node_mut(3).kill().unwrap();
    set.node_mut(4).kill().unwrap();
    let t = Instant::now();
    let released = g.release().await;
    assert!(
        t.elapsed() < NODE_TIMEOUT + SLACK,
        "release took {:?}",
        t.elapsed()
    );
    match released {
        Err(e) => assert_eq!(e.kind(), LockErrorKind::Unavailable, "{e}"),
        Ok(ours) => panic!("release said {ours} after 1 delete of 5 (quorum 3)"),
    }
    assert!(gone_within(&set.nodes()[0], &key, SLACK).await);
    for n in &set.nodes()[1..3] {
        assert_eq!(
            get(n, &key).as_deref(),
            Some("0123456789abcdef0123456789abcdef")
        );
    }
}

/// A release is not a round against the lock's validity: its deletes
/// were sent, so it waits for their answers up to the bound of its requests
/// (the connect timeout, when longer than the node timeout) rather than
/// giving up at the node timeout. Here three of five nodes answer three
/// node timeouts late (a busy machine): the release still confirms that
/// the lock was ours, and the keys are gone everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_waits_for_late_answers_within_its_requests_bound() {
    let late = answered_late("release-late-answers").await;
    let connect_timeout = LATE_CONNECT_TIMEOUT;
    let t = Instant::now();
    let released = late.guard.release().await;
    let took = t.elapsed();
    println!("release with three nodes answering late: {took:?}");
    assert!(
        matches!(released, Ok(true)),
        "the release gave up on answers that came {:?} late: {released:?}",
        NODE_TIMEOUT * 3
    );
    assert!(
        took < connect_timeout + SLACK,
        "the release took {took:?}, past its requests' bound {connect_timeout:?}"
    );
    assert_gone_from(late.set.nodes(), &late.key).await;
}

/// The other side of that wait: when a quorum of nodes never answers
/// (their requests are swallowed), the release reports `Unavailable` once
/// its requests' bound has passed, not later.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_that_no_quorum_answers_fails_within_its_requests_bound() {
    let set = start_set();
    let proxies = proxies_for(&set);
    let connect_timeout = Duration::from_millis(600);
    let (_locks, g) = held_through(&proxies, connect_timeout, "release-silent-quorum").await;
    for p in &proxies[..3] {
        p.drop_requests();
    }
    let t = Instant::now();
    let released = timeout(connect_timeout * 4 + SLACK, g.release())
        .await
        .expect("the release outlived four times its requests' bound");
    let took = t.elapsed();
    match released {
        Err(e) => assert_eq!(e.kind(), LockErrorKind::Unavailable, "{e}"),
        Ok(ours) => panic!("release said {ours} with three of five nodes silent"),
    }
    assert!(
        took < connect_timeout + SLACK,
        "the release took {took:?}, past its requests' bound {connect_timeout:?}"
    );
    for p in &proxies[..3] {
        p.heal();
    }
}

/// An operator's force release decides like a release: it waits for the
/// nodes' answers up to its requests' bound (the connect timeout, here
/// above the node timeout), so three nodes answering three node timeouts
/// late still make it a removal, with no key left anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_force_release_waits_for_late_answers_within_its_requests_bound() {
    let late = answered_late("force-late-answers").await;
    let connect_timeout = LATE_CONNECT_TIMEOUT;
    let t = Instant::now();
    let removed = late.locks.force_release(late.guard.name()).await;
    let took = t.elapsed();
    assert!(
        matches!(&removed, Ok(r) if r.mutex == 1 && r.total() == 1),
        "the force release gave up on answers that came {:?} late: {removed:?}",
        NODE_TIMEOUT * 3
    );
    assert!(
        took < connect_timeout + SLACK,
        "the force release took {took:?}, past its requests' bound {connect_timeout:?}"
    );
    assert_gone_from(late.set.nodes(), &late.key).await;
    assert!(
        !late.guard.release().await.unwrap(),
        "the evicted guard's release freed something"
    );
}

/// The connect timeout of [`answered_late`]'s client: the bound of its
/// requests, above the node timeout.
const LATE_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A lock held through proxies whose first three nodes then answer three
/// node timeouts late (a busy machine): what the late-answer tests need.
struct AnsweredLate {
    set: lock_testbed::RedisSet,
    _proxies: Vec<Proxy>,
    locks: RedlockLock,
    guard: LockGuard,
    key: String,
}

/// [`AnsweredLate`] for a fresh lock named after `prefix`.
async fn answered_late(prefix: &str) -> AnsweredLate {
    let set = start_set();
    let proxies = proxies_for(&set);
    let (locks, guard) = held_through(&proxies, LATE_CONNECT_TIMEOUT, prefix).await;
    let key = locks.key_of(guard.name());
    for p in &proxies[..3] {
        p.set_reply_delay(NODE_TIMEOUT * 3);
    }
    AnsweredLate {
        set,
        _proxies: proxies,
        locks,
        guard,
        key,
    }
}

/// A client of `proxies` (the tests' node timeout, `connect_timeout`)
/// holding a fresh lock named after `prefix` for 30 s.
async fn held_through(
    proxies: &[Proxy],
    connect_timeout: Duration,
    prefix: &str,
) -> (RedlockLock, LockGuard) {
    let cfg = RedlockConfig::new(proxies.iter().map(Proxy::redis_url))
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(connect_timeout);
    let locks = RedlockLock::connect(cfg).await.expect("connect");
    let g = locks
        .acquire(&lock_name(prefix), &opts(Duration::from_secs(30)))
        .await
        .expect("every node is up");
    (locks, g)
}
