//! The places in the nodes' lines of waiters, each test on its own five
//! Redis servers: a turn reserved on a quorum is the lock, and a late node
//! joins it; a holder by reservation leaves every line when it releases,
//! and one that vanished holds the name up for one TTL only; a waiter that
//! gives up leaves the line, and the place of one that vanished or was cut
//! off lapses. (`line.rs`: who a release wakes and who goes first.)

use std::time::Duration;

use lock_core::{DistributedLock, LockErrorKind};
use lock_redlock::{RedlockConfig, RedlockLock};
use lock_testbed::{Proxy, RedisServer};
use tokio::time::{sleep, timeout, Instant};

mod support;
use support::{
    assert_gone_from, assert_no_place_in, config, get, held_by_reservation, lock_name, opts,
    proxies_for, scores, set_foreign, start_set, subscribed, through, waiters, waiters_in_line,
    NODE_TIMEOUT, SLACK,
};

/// A release that reaches a quorum of nodes gives the lock to the first in
/// line by their reservations alone: the key holds `line:<its wait id>`
/// there (or, where the announcements reached the waiter after its grace
/// for them, its own token from a round). The waiter keeps its
/// place in line while it holds, so a node whose release arrives late
/// reserves the key for that holder too, not for the waiter behind, who
/// gets nothing until the holder's release, which takes the holder's place
/// out of every line.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_on_a_quorum_is_the_lock_and_a_late_node_joins_it() {
    let set = start_set();
    let proxy = Proxy::start(set.nodes()[4].addr()).unwrap();
    let mut urls = set.urls();
    urls[4] = proxy.redis_url();
    let holder = RedlockLock::connect(RedlockConfig::new(urls).node_timeout(NODE_TIMEOUT))
        .await
        .unwrap();
    let name = lock_name("late-release");
    let key = holder.key_of(&name);
    let ttl = Duration::from_secs(60);
    let line = format!("{{{key}}} line");
    let held = holder.acquire(&name, &opts(ttl)).await.unwrap();
    let released = get(&set.nodes()[0], &key).expect("the holder's key");
    let (mut rx, ids) = waiters(&set, &name, ttl, 2, &line).await;
    // The release reaches node 4 300 ms after the others.
    proxy.set_latency(Duration::from_millis(300));
    assert!(held.release().await.unwrap());
    let (i, got) = timeout(SLACK, rx.recv())
        .await
        .expect("the first waiter got the lock")
        .unwrap();
    assert_eq!(i, 0, "the lock went to the longest waiter");
    let first = got.unwrap();
    // The release returned once a quorum had deleted the key; on a busy
    // machine the fourth quick node's delete may still be on its way. The
    // waiter then holds the key on every quick node: by its reservation,
    // or by a token of its own where it took the lock with a round (it
    // does when the quorum's announcements reach it later than its grace
    // for them, as beside two busy processes or another test binary).
    let reserved = format!("line:{}", ids[0]);
    let mut by_reservation = 0;
    for n in &set.nodes()[..4] {
        if held_by_reservation(n, &key, &reserved, &released, &line).await {
            by_reservation += 1;
        }
    }
    println!("the waiter holds by reservation on {by_reservation} of 4 nodes");
    // The late release lands: where the waiter holds by reservation, node
    // 4 reserves the key for that holder too; where it won with a round,
    // the holder's key is gone from node 4 all the same.
    let deadline = Instant::now() + 2 * SLACK;
    loop {
        let now = get(&set.nodes()[4], &key);
        let turned = if by_reservation == 4 {
            now.as_deref() == Some(reserved.as_str())
        } else {
            now.as_deref() != Some(released.as_str())
        };
        if turned {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 4 did not turn from the released holder: {now:?}"
        );
        sleep(Duration::from_millis(20)).await;
    }
    sleep(Duration::from_millis(300)).await;
    assert!(rx.try_recv().is_err(), "the second waiter got a held lock");
    assert!(first.is_held());
    // The holder's extension is its own.
    first.extend(ttl).await.unwrap();
    assert!(first.release().await.unwrap());
    let (i, got) = timeout(SLACK, rx.recv())
        .await
        .expect("the second waiter got the lock at the next release")
        .unwrap();
    assert_eq!(i, 1);
    // Node 4 answers 300 ms late.
    let deadline = Instant::now() + 2 * SLACK;
    while set
        .nodes()
        .iter()
        .any(|n| scores(n, &line).iter().any(|(id, _)| *id == ids[0]))
    {
        assert!(
            Instant::now() < deadline,
            "the released holder is still in line"
        );
        sleep(Duration::from_millis(20)).await;
    }
    assert!(got.unwrap().release().await.unwrap());
    assert_gone_from(set.nodes(), &key).await;
    assert_no_place_in(set.nodes(), &line).await;
}

/// A holder by reservation whose key on one node is someone else's (here
/// a peer client's) still takes its place out of that node's line when it
/// releases: the node does not keep the lock reserved for a waiter that is
/// gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_holder_by_reservation_leaves_every_line_when_it_releases() {
    let set = start_set();
    let holder = RedlockLock::connect(config(&set)).await.unwrap();
    let name = lock_name("reserved-release");
    let key = holder.key_of(&name);
    let ttl = Duration::from_secs(60);
    let line = format!("{{{key}}} line");
    let held = holder.acquire(&name, &opts(ttl)).await.unwrap();
    let (mut rx, ids) = waiters(&set, &name, ttl, 1, &line).await;
    // Node 4's key changes hands behind the holder's back: its release
    // there finds a stranger's key.
    set_foreign(&set.nodes()[4], &key, "0123456789abcdef0123456789abcdef");
    let released = get(&set.nodes()[0], &key).expect("the holder's key");
    assert!(held.release().await.unwrap());
    let (_, got) = timeout(SLACK, rx.recv())
        .await
        .expect("the waiter got the lock")
        .unwrap();
    let got = got.unwrap();
    // The release returned once a quorum had deleted the key; on a busy
    // machine the fourth node's delete may still be on its way. The waiter
    // then holds the key on every node the holder released: by its
    // reservation, or (seen beside two busy processes) by a token of its
    // own from a round it ran.
    let reserved = format!("line:{}", ids[0]);
    let mut by_reservation = 0;
    for n in &set.nodes()[..4] {
        if held_by_reservation(n, &key, &reserved, &released, &line).await {
            by_reservation += 1;
        }
    }
    println!("the waiter holds by reservation on {by_reservation} of 4 nodes");
    // A holder by reservation keeps its place in line on every node, node
    // 4 included; one that won with a round left the other nodes' lines.
    let in_line_on_4 = scores(&set.nodes()[4], &line)
        .iter()
        .any(|(id, _)| *id == ids[0]);
    if by_reservation == 4 {
        assert!(in_line_on_4, "the holder by reservation left node 4's line");
    }
    assert!(got.release().await.unwrap());
    assert_no_place_in(set.nodes(), &line).await;
    assert_gone_from(&set.nodes()[..4], &key).await;
    assert_eq!(
        get(&set.nodes()[4], &key).as_deref(),
        Some("0123456789abcdef0123456789abcdef")
    );
}

/// A holder by reservation that vanishes (cut off from every node before
/// it could extend or release) holds the name up for its TTL, as one that
/// took the key with a round would: the reservation and the holder's place
/// in line both last the TTL, not the place's full length (here 20 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_vanished_holder_by_reservation_holds_the_name_up_for_one_ttl() {
    let set = start_set();
    let name = lock_name("vanished-holder");
    let ttl = Duration::from_secs(1);
    let holder = RedlockLock::connect(config(&set)).await.unwrap();
    let key = holder.key_of(&name);
    let line = format!("{{{key}}} line");
    let held = holder.acquire(&name, &opts(ttl)).await.unwrap();
    let proxies = proxies_for(&set);
    let waiter = through(&proxies, NODE_TIMEOUT).await;
    let waiting = {
        let name = name.clone();
        tokio::spawn(async move {
            waiter
                .acquire(&name, &opts(ttl).wait(Duration::from_secs(60)))
                .await
        })
    };
    let deadline = Instant::now() + 2 * SLACK;
    while waiters_in_line(&set, &line).is_empty() {
        assert!(Instant::now() < deadline, "the waiter never got in line");
        sleep(Duration::from_millis(10)).await;
    }
    let id = waiters_in_line(&set, &line).remove(0);
    // The waiter's inbox is subscribed on every node before the release: a
    // node confirming it later wakes the waiter for a round (a release may
    // have gone unheard there), and a round after the release takes the
    // reserved keys as its own, which is not the case under test.
    let inbox = format!("distlock inbox {}", id.split('.').next().unwrap());
    let deadline = Instant::now() + 2 * SLACK;
    while !set.nodes().iter().all(|n| subscribed(n, &inbox)) {
        assert!(
            Instant::now() < deadline,
            "the waiter's inbox is not subscribed on every node"
        );
        sleep(Duration::from_millis(10)).await;
    }
    // Its rounds on those confirmations (one per node, at once) are done.
    sleep(Duration::from_millis(200)).await;
    assert!(held.release().await.unwrap());
    let got = timeout(SLACK, waiting)
        .await
        .expect("the waiter got the lock")
        .unwrap()
        .unwrap();
    let reserved = format!("line:{id}");
    let by_reservation = set
        .nodes()
        .iter()
        .filter(|n| get(n, &key).as_deref() == Some(reserved.as_str()))
        .count();
    assert!(
        by_reservation >= 3,
        "held by reservation on {by_reservation} nodes"
    );
    proxies.iter().for_each(Proxy::cut);
    let started = Instant::now();
    let next = RedlockLock::connect(config(&set)).await.unwrap();
    let again = next
        .acquire(&name, &opts(ttl).wait(Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(
        started.elapsed() < ttl + 2 * SLACK,
        "the next caller waited {:?} for the vanished holder",
        started.elapsed()
    );
    assert!(again.release().await.unwrap());
    drop(got);
}

/// A waiter that gives up (its wait runs out, or its future is dropped)
/// leaves the line on every node: a single try after the holder's release
/// gets the lock at once instead of waiting for the place to lapse.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_that_gives_up_leaves_the_line() {
    let set = start_set();
    let name = lock_name("gives-up");
    let ttl = Duration::from_secs(10);
    let (holder, waiter) = (
        RedlockLock::connect(config(&set)).await.unwrap(),
        RedlockLock::connect(config(&set)).await.unwrap(),
    );
    let line = format!("{{{}}} line", holder.key_of(&name));
    let held = holder.acquire(&name, &opts(ttl)).await.unwrap();
    let short = opts(ttl).wait(Duration::from_millis(300));
    let err = waiter
        .acquire(&name, &short)
        .await
        .expect_err("held lock granted");
    assert_eq!(err.kind(), LockErrorKind::Timeout, "{err}");
    let in_line = |node: &RedisServer| {
        tokio::task::block_in_place(|| node.cmd(&["ZCARD", &line]).unwrap().as_int())
    };
    // Leaving and joining the line take a moment on a loaded machine.
    // `at_least` nodes must hold `n` and none more: a round decided by a
    // quorum of answers does not send its requests still waiting to be
    // written, so a loaded machine can leave a waiter out of one node's
    // line until its next round.
    let lines_are = |n: i64, at_least: usize| {
        let in_line = &in_line;
        let set = &set;
        async move {
            let deadline = Instant::now() + 4 * SLACK;
            loop {
                let seen: Vec<Option<i64>> = set.nodes().iter().map(in_line).collect();
                let holding = seen.iter().filter(|c| **c == Some(n)).count();
                if holding >= at_least && seen.iter().all(|c| c.is_some_and(|c| c <= n)) {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "lines hold {seen:?}, not {n} on {at_least} nodes"
                );
                sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let every = set.nodes().len();
    let quorum = every / 2 + 1;
    // The waiter that gave up left the line on every node.
    lines_are(0, every).await;
    let dropped = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move { waiter.acquire(&name, &opts(ttl)).await })
    };
    // The waiting acquire is in line on (at least) a quorum of nodes.
    lines_are(1, quorum).await;
    dropped.abort();
    let _ = dropped.await;
    // The dropped waiter left it everywhere.
    lines_are(0, every).await;
    assert!(held.release().await.unwrap());
    let again = waiter.try_acquire(&name, &opts(ttl)).await.unwrap();
    assert!(again.is_some(), "a single try gets the free lock at once");
}

/// The place of a waiter that vanished without leaving (its process
/// died) lapses: the free lock goes to the next in line, or to a single
/// try, once it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_vanished_waiters_place_lapses() {
    let set = start_set();
    let name = lock_name("vanished");
    let client = RedlockLock::connect(config(&set)).await.unwrap();
    let key = client.key_of(&name);
    let (line, lapse) = (format!("{{{key}}} line"), format!("{{{key}}} line lapse"));
    // A place first in line on every node, lapsing in 400 ms by each node's clock.
    for node in set.nodes() {
        let placed = tokio::task::block_in_place(|| {
            node.cmd(&[
                "EVAL",
                "local t = redis.call('TIME')
                 redis.call('ZADD', KEYS[1], 1, 'vanished')
                 return redis.call('ZADD', KEYS[2], t[1] * 1000 + math.floor(t[2] / 1000) + 400, 'vanished')",
                "2",
                &line,
                &lapse,
            ])
            .unwrap()
        });
        assert_eq!(placed.as_int(), Some(1), "{placed:?}");
    }
    let ttl = Duration::from_secs(10);
    assert!(
        client
            .try_acquire(&name, &opts(ttl))
            .await
            .unwrap()
            .is_none(),
        "the free lock is the turn of the first in line"
    );
    let started = Instant::now();
    let got = client
        .acquire(&name, &opts(ttl).wait(Duration::from_secs(5)))
        .await;
    assert!(
        got.is_ok(),
        "the lock is had once the place lapsed: {got:?}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(400) + SLACK,
        "got it {:?} after the place lapsed",
        started.elapsed()
    );
}

/// A waiter that gives up while it cannot reach the nodes (so it cannot
/// leave the line) holds no one up for longer than it would have waited:
/// its place lapses with its deadline, not with the place's full duration
/// (twice the re-check bound, 20 s by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_cut_off_holds_no_one_up_past_its_deadline() {
    cut_off_waiter_holds_no_one_up(Duration::ZERO).await;
}

/// The same when the waiter's attempt reached the nodes late (a busy
/// machine, a slow link): its place there lasts as much longer, but the
/// release that finds it still in line does not take it for a waiter
/// still waiting and reserve the key for the waiter's whole TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_cut_off_after_a_late_attempt_holds_no_one_up_past_its_deadline() {
    cut_off_waiter_holds_no_one_up(Duration::from_millis(60)).await;
}

/// A waiter for 800 ms whose requests reach the nodes `late` is in line on
/// every node, then cut off until it has given up; the holder releases,
/// and the next caller must get the lock within the time the waiter's
/// place outlasts its deadline (plus `late`), not the waiter's TTL.
async fn cut_off_waiter_holds_no_one_up(late: Duration) {
    let set = start_set();
    let name = lock_name("cut-off-waiter");
    let ttl = Duration::from_secs(10);
    let holder = RedlockLock::connect(config(&set)).await.unwrap();
    let held = holder.acquire(&name, &opts(ttl)).await.unwrap();
    let proxies: Vec<Proxy> = set
        .nodes()
        .iter()
        .map(|n| Proxy::start(n.addr()).unwrap())
        .collect();
    let cut_off = RedlockLock::connect(
        RedlockConfig::new(proxies.iter().map(Proxy::redis_url)).node_timeout(NODE_TIMEOUT),
    )
    .await
    .unwrap();
    proxies.iter().for_each(|p| p.set_latency(late));
    let wait = Duration::from_millis(800);
    let waiting = {
        let (cut_off, name) = (cut_off.clone(), name.clone());
        tokio::spawn(async move { cut_off.acquire(&name, &opts(ttl).wait(wait)).await })
    };
    // In line on every node, then unreachable until it has given up.
    sleep(Duration::from_millis(300) + late).await;
    proxies.iter().for_each(Proxy::cut);
    let gave_up = waiting.await.unwrap();
    assert!(gave_up.is_err(), "the cut-off waiter gave up");
    let started = Instant::now();
    assert!(held.release().await.unwrap());
    let next = RedlockLock::connect(config(&set)).await.unwrap();
    let got = next.acquire(&name, &opts(ttl)).await;
    assert!(got.is_ok(), "the next caller got the lock: {got:?}");
    // Its place outlasts the deadline by one node timeout and the time to
    // leave (the connect timeout here), and by how late its attempt
    // arrived; the next caller re-checks at most that much later again.
    let bound = Duration::from_secs(2) + late + SLACK;
    assert!(
        started.elapsed() < bound,
        "the next caller waited {:?} for the gone waiter's place",
        started.elapsed()
    );
    drop(proxies);
}
