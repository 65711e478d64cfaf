//! The nodes' line of waiters, each test on its own five Redis servers: a
//! release wakes a waiter of another client through the notification, only
//! the first in line, and announces the turn in that waiter's inbox alone;
//! a round lost to a holder wakes no one; a releaser coming back lets the
//! waiter go first; a release still arriving at other nodes, or naming no
//! waiter on a quorum, still hands the lock on; a turn announced without a
//! reservation grants nothing; a newcomer does not overtake the line.
//! (`line_places.rs`: the places in line, reserved, left and lapsed.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockName, RetryPolicy};
use lock_redlock::{RedlockConfig, RedlockLock};
use lock_testbed::{Proxy, RedisServer, RedisSet};
use tokio::time::{sleep, timeout, Instant};

mod support;
use support::{
    assert_gone_from, assert_no_place_in, config, get, gone_within, lock_name, opts, scores,
    set_foreign, start_set, waiters, NODE_TIMEOUT, SLACK,
};

/// A 30 s TTL and a 5 s polling backoff, both far longer than a hand-off
/// by release notification: only the notification explains a fast one.
fn slow_poll_opts() -> AcquireOptions {
    let slow_poll = RetryPolicy {
        min_delay: Duration::from_secs(5),
        max_delay: Duration::from_secs(5),
    };
    opts(Duration::from_secs(30))
        .wait(Duration::from_secs(20))
        .retry(slow_poll)
}

/// One hand-off: `holder` takes `name`, `waiter` waits for it, the holder
/// releases after `hold`. The time from the release until the waiter held
/// the lock (it releases it again), or `None` if that took over 3 s.
async fn handoff(
    holder: &RedlockLock,
    waiter: &Arc<RedlockLock>,
    name: &LockName,
    o: &AcquireOptions,
    hold: Duration,
) -> Option<Duration> {
    let g = holder.acquire(name, o).await.unwrap();
    let task = {
        let (waiter, name, o) = (waiter.clone(), name.clone(), o.clone());
        tokio::spawn(async move {
            let g = waiter.acquire(&name, &o).await.expect("waiter");
            (Instant::now(), g)
        })
    };
    sleep(hold).await;
    let released = Instant::now();
    assert!(g.release().await.unwrap());
    let (got, g2) = timeout(Duration::from_secs(3), task).await.ok()?.unwrap();
    assert!(g2.release().await.unwrap());
    Some(got - released)
}

/// A release wakes a waiter of another client through the release
/// notification, in a few milliseconds: the holder's TTL (30 s) and the
/// waiter's polling backoff (5 s) are both far longer, so only the
/// notification can explain it. Also with one node down.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn release_wakes_a_waiter_through_the_notification() {
    let mut set = start_set();
    let holder = RedlockLock::connect(config(&set)).await.unwrap();
    let waiter = Arc::new(RedlockLock::connect(config(&set)).await.unwrap());
    let name = lock_name("handoff");
    let o = slow_poll_opts();
    let mut handoffs = Vec::new();
    for round in 0..6 {
        if round == 3 {
            set.node_mut(0).kill().unwrap();
        }
        let waited = handoff(&holder, &waiter, &name, &o, Duration::from_millis(200)).await;
        handoffs.push(waited.unwrap_or_else(|| panic!("round {round}: waiter not woken")));
    }
    println!("hand-off after release: {handoffs:?}");
    assert!(handoffs.iter().all(|h| *h < SLACK), "{handoffs:?}");
}

/// How many times `node` has run `command` so far (scripts' commands too).
fn calls(node: &RedisServer, command: &str) -> u64 {
    tokio::task::block_in_place(|| node.calls(command))
        .unwrap_or_else(|e| panic!("INFO on {}: {e}", node.addr()))
}

/// A round that wins a minority against a holder with a quorum deletes its
/// keys without waking the waiters: the lock is not free, and a waiter woken
/// would only run a round in vain (whose own clean-up would wake the others
/// again). The holder's release still wakes the waiter at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_round_lost_to_a_holder_wakes_no_waiter() {
    let set = start_set();
    let name = lock_name("lost-round");
    let connect = || async { RedlockLock::connect(config(&set)).await.unwrap() };
    let (holder, waiter, racer) = (connect().await, connect().await, connect().await);
    let ttl = Duration::from_secs(10);
    let held = holder.acquire(&name, &opts(ttl)).await.unwrap();
    // The holder keeps a quorum (nodes 0-2); nodes 3 and 4 lost its key.
    let key = holder.key_of(&name);
    for node in &set.nodes()[3..] {
        tokio::task::block_in_place(|| node.cmd(&["DEL", &key]).unwrap());
    }
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move {
            let got = waiter.acquire(&name, &opts(ttl)).await;
            (Instant::now(), got)
        })
    };
    // The waiter's first round (and its round once subscribed) are done.
    sleep(Duration::from_millis(500)).await;
    // Nodes 3 and 4 forget the waiter's place and the key reserved for it
    // there (as a restart without persistence would).
    let (line, lapse) = (format!("{{{key}}} line"), format!("{{{key}}} line lapse"));
    for node in &set.nodes()[3..] {
        tokio::task::block_in_place(|| node.cmd(&["DEL", &key, &line, &lapse]).unwrap());
    }
    // Every acquisition round runs one script per node.
    let before = calls(&set.nodes()[0], "evalsha");
    // The racer wins nodes 3 and 4, loses to the holder, cleans up.
    assert!(racer
        .try_acquire(&name, &opts(ttl))
        .await
        .unwrap()
        .is_none());
    for node in &set.nodes()[3..] {
        assert!(
            gone_within(node, &key, SLACK).await,
            "the racer's key was removed"
        );
    }
    sleep(Duration::from_millis(300)).await;
    let rounds = calls(&set.nodes()[0], "evalsha") - before;
    assert_eq!(
        rounds, 1,
        "only the racer's round reached node 0: the clean-up of a round lost to a holder woke the waiter into a round in vain"
    );
    assert!(!waiting.is_finished());
    let released = Instant::now();
    assert!(held.release().await.unwrap());
    let (at, got) = timeout(SLACK * 4, waiting).await.unwrap().unwrap();
    assert!(got.is_ok(), "the waiter got the lock: {got:?}");
    assert!(at - released < SLACK, "woken by the release");
}

/// A holder that releases while another client waits and asks for the lock
/// again at once lets the waiter have its turn, even a waiter that hears of
/// the release 20 ms later than the releaser could start a round: the waiter
/// gets the lock first, every round.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_releaser_coming_back_lets_the_waiter_go_first() {
    let set = start_set();
    let name = lock_name("comeback");
    let a = RedlockLock::connect(config(&set)).await.unwrap();
    let proxies: Vec<Proxy> = set
        .nodes()
        .iter()
        .map(|n| Proxy::start(n.addr()).unwrap())
        .collect();
    for p in &proxies {
        p.set_reply_delay(Duration::from_millis(20));
    }
    let b = RedlockLock::connect(
        RedlockConfig::new(proxies.iter().map(Proxy::redis_url)).node_timeout(NODE_TIMEOUT),
    )
    .await
    .unwrap();
    let o = opts(Duration::from_secs(10));
    let mut held = a.acquire(&name, &o).await.unwrap();
    for round in 0..5 {
        let served = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (b, name, o, served) = (b.clone(), name.clone(), o.clone(), served.clone());
            tokio::spawn(async move {
                let g = b.acquire(&name, &o).await.expect("waiter");
                served.store(true, Ordering::SeqCst);
                sleep(Duration::from_millis(20)).await;
                assert!(g.release().await.unwrap());
            })
        };
        sleep(Duration::from_millis(300)).await;
        assert!(held.release().await.unwrap());
        let again = a
            .acquire(&name, &o)
            .await
            .expect("the releaser's second acquire");
        assert!(
            served.load(Ordering::SeqCst),
            "round {round}: the releaser took the lock back ahead of the client already waiting"
        );
        waiter.await.unwrap();
        held = again;
    }
    assert!(held.release().await.unwrap());
}

/// A release reaches the nodes at different times: the waiter hears it from
/// the first node that deleted the key and tries while the others still hold
/// the releaser's key, so that try loses to a quorum it is about to lose.
/// The later nodes' deletes must still wake it (they are copies of a release
/// already announced), or it sleeps until the holder's TTL (30 s here, with a
/// 5 s polling backoff): the hand-off stays within a few node round trips.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_still_arriving_at_other_nodes_wakes_the_waiter_again() {
    let set = start_set();
    let name = lock_name("staggered");
    // The holder reaches node 0 directly and the others through proxies
    // that delay each request and reply by 40 ms.
    let proxies: Vec<Proxy> = set.nodes()[1..]
        .iter()
        .map(|n| Proxy::start(n.addr()).unwrap())
        .collect();
    for p in &proxies {
        p.set_latency(Duration::from_millis(40));
    }
    let urls = std::iter::once(set.urls()[0].clone()).chain(proxies.iter().map(Proxy::redis_url));
    let holder =
        RedlockLock::connect(RedlockConfig::new(urls).node_timeout(Duration::from_millis(500)))
            .await
            .unwrap();
    let waiter = Arc::new(RedlockLock::connect(config(&set)).await.unwrap());
    let o = slow_poll_opts();
    let mut handoffs = Vec::new();
    for round in 0..3 {
        let waited = handoff(&holder, &waiter, &name, &o, Duration::from_millis(300)).await;
        handoffs.push(waited.unwrap_or_else(|| {
            panic!("round {round}: the waiter was not woken again by the later deletes")
        }));
    }
    println!("hand-off after release: {handoffs:?}");
    assert!(handoffs.iter().all(|h| *h < SLACK), "{handoffs:?}");
}

/// A release wakes only the first in line, in whichever client it waits:
/// the other waiting clients run no round (no herd across processes), and
/// the lock goes to the clients in the order they started waiting.
///
/// A waiter's round that does not win renews its place on every node it
/// reaches (the place's lapse time moves on), so a woken waiter that is not
/// first in line shows as a changed lapse time. That tells it apart from the
/// first in line, which may run more than one round to collect its quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_wakes_only_the_first_in_line() {
    const WAITERS: usize = 3;
    let set = start_set();
    let name = lock_name("first-in-line");
    // Long enough that no guard renews and no waiter re-checks by itself
    // (every `max_recheck`, 10 s by default) while the test looks.
    let ttl = Duration::from_secs(60);
    let holder = RedlockLock::connect(config(&set)).await.unwrap();
    let line = format!("{{{}}} line", holder.key_of(&name));
    let lapse = format!("{line} lapse");
    let mut held = holder.acquire(&name, &opts(ttl)).await.unwrap();
    let (mut rx, ids) = waiters(&set, &name, ttl, WAITERS, &line).await;
    for expected in 0..WAITERS {
        let before = lapse_times(&set, &lapse);
        assert!(held.release().await.unwrap());
        let (i, got) = timeout(SLACK, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("hand-off {expected}: nobody got the lock"))
            .unwrap();
        assert_eq!(i, expected, "the lock went to the longest waiter");
        held = got.unwrap();
        // A waiter woken by mistake runs its round within this time.
        sleep(Duration::from_millis(200)).await;
        let after = lapse_times(&set, &lapse);
        for id in &ids[expected + 1..] {
            assert_ran_no_round(&before, &after, id, &format!("hand-off {expected}"));
        }
    }
    assert!(held.release().await.unwrap());
}

/// A release with someone in line announces the turn in that waiter's
/// client's inbox alone: a client subscribed to the lock's release channel
/// hears no turn (with 8 clients waiting, a hand-off would otherwise wake
/// all of them on every node), and the waiter, in another client, gets the
/// lock at once (its re-check is 10 s away).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_is_announced_only_in_the_waiters_inbox() {
    use futures::StreamExt;
    let set = start_set();
    let holder = RedlockLock::connect(config(&set)).await.unwrap();
    let name = lock_name("inbox");
    let key = holder.key_of(&name);
    let ttl = Duration::from_secs(30);
    let held = holder.acquire(&name, &opts(ttl)).await.unwrap();
    let bystander = redis::Client::open(set.nodes()[0].url()).unwrap();
    let mut pubsub = bystander.get_async_pubsub().await.unwrap();
    pubsub
        .subscribe(format!("{{{key}}} released"))
        .await
        .unwrap();
    let (mut rx, _) = waiters(&set, &name, ttl, 1, &format!("{{{key}}} line")).await;
    assert!(held.release().await.unwrap());
    let (_, got) = timeout(SLACK, rx.recv())
        .await
        .expect("the waiter was not told its turn")
        .unwrap();
    assert!(got.unwrap().release().await.unwrap());
    // That last release had nobody in line: its owner token goes on the
    // release channel, where every client's waiters may be.
    let mut heard = Vec::new();
    let mut messages = pubsub.into_on_message();
    while let Ok(Some(msg)) = timeout(Duration::from_millis(300), messages.next()).await {
        heard.push(msg.get_payload::<String>().unwrap());
    }
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert!(!heard[0].starts_with("n "), "{heard:?}");
}

/// When the nodes' lines have drifted apart so far that a release names
/// three different waiters, none of them named by a quorum, they still try
/// (after the turn grace) and one of them gets the lock at once, rather
/// than all sleeping until their re-check.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_naming_no_waiter_on_a_quorum_still_hands_the_lock_on() {
    let set = start_set();
    let holder = RedlockLock::connect(config(&set)).await.unwrap();
    let name = lock_name("three-heads");
    let ttl = Duration::from_secs(60);
    let line = format!("{{{}}} line", holder.key_of(&name));
    let lapse = format!("{line} lapse");
    let held = holder.acquire(&name, &opts(ttl)).await.unwrap();
    let (mut rx, ids) = waiters(&set, &name, ttl, 3, &line).await;
    // Nodes 0-1 keep the first waiter first, 2-3 the second, 4 the third.
    let drop_place = |node: usize, id: &str| {
        for key in [&line, &lapse] {
            tokio::task::block_in_place(|| set.nodes()[node].cmd(&["ZREM", key, id])).unwrap();
        }
    };
    for node in 2..5 {
        drop_place(node, &ids[0]);
    }
    drop_place(4, &ids[1]);
    let released = Instant::now();
    assert!(held.release().await.unwrap());
    let (i, got) = timeout(2 * SLACK, rx.recv())
        .await
        .unwrap_or_else(|_| panic!("nobody got the lock within {:?}", 2 * SLACK))
        .unwrap();
    println!(
        "waiter {i} got the lock {:?} after the release",
        released.elapsed()
    );
    let next = got.expect("the lock, not an error");
    assert!(next.release().await.unwrap());
}

/// Waiter `id` ran no round between the two [`lapse_times`] (a round that
/// does not win moves its place's lapse time on, on every node it reaches).
fn assert_ran_no_round(
    before: &std::collections::HashMap<(usize, String), String>,
    after: &std::collections::HashMap<(usize, String), String>,
    id: &str,
    when: &str,
) {
    let compared: Vec<_> = before
        .iter()
        .filter(|(key, _)| key.1 == id)
        .filter_map(|(key, was)| after.get(key).map(|now| (key.0, was, now)))
        .collect();
    assert!(
        !compared.is_empty(),
        "{when}: waiter {id} is in no node's line"
    );
    for (node, was, now) in compared {
        assert_eq!(
            was, now,
            "{when}: waiter {id}, not first in line, ran a round (node {node})"
        );
    }
}

/// Every node's lapse times of the line `lapse`, by (node, wait id).
fn lapse_times(set: &RedisSet, lapse: &str) -> std::collections::HashMap<(usize, String), String> {
    let mut times = std::collections::HashMap::new();
    for (n, node) in set.nodes().iter().enumerate() {
        for (id, at) in scores(node, lapse) {
            times.insert((n, id), at);
        }
    }
    times
}

/// A turn announcement is no proof of a reservation: only a reservation
/// made after the waiter's round reached the node is. Here nobody released:
/// the holder holds the key on every node, and a turn message naming the
/// waiter (the holder's release as it would be announced, without the
/// node's sequence, then with a stale one) is published in the waiter's
/// inbox on a quorum of nodes, all at once. The waiter must not get a
/// guard (it may run a round, which the holder's keys refuse); it gets
/// the lock at the holder's real release.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_announced_without_a_reservation_grants_nothing() {
    let set = start_set();
    let holder = RedlockLock::connect(config(&set)).await.unwrap();
    let name = lock_name("forged-turn");
    let key = holder.key_of(&name);
    let ttl = Duration::from_secs(60);
    let line = format!("{{{key}}} line");
    let held = holder.acquire(&name, &opts(ttl)).await.unwrap();
    let token = get(&set.nodes()[0], &key).expect("the holder's key");
    let (mut rx, ids) = waiters(&set, &name, ttl, 1, &line).await;
    let id = &ids[0];
    let client = id.split('.').next().expect("a wait id names its client");
    let inbox = format!("distlock inbox {client}");
    let channel = format!("{{{key}}} released");
    let mut publishers = Vec::new();
    for n in &set.nodes()[..3] {
        let c = redis::Client::open(n.url()).unwrap();
        publishers.push(c.get_multiplexed_async_connection().await.unwrap());
    }
    for message in [
        format!("{channel}\nn {token} {id}"),
        format!("{channel}\nn {token} {id} 1"),
    ] {
        let sent = futures::future::join_all(publishers.iter_mut().map(|c| {
            let (inbox, message) = (inbox.clone(), message.clone());
            async move {
                redis::cmd("PUBLISH")
                    .arg(inbox)
                    .arg(message)
                    .query_async::<i64>(c)
                    .await
                    .unwrap()
            }
        }))
        .await;
        assert_eq!(sent, vec![1, 1, 1], "the waiter's client hears its inbox");
        sleep(Duration::from_millis(500)).await;
        if let Ok((_, got)) = rx.try_recv() {
            panic!(
                "the waiter got {:?} on a turn message alone, while the holder holds every key",
                got.map(|g| g.is_held())
            );
        }
        assert!(held.is_held());
        for n in set.nodes() {
            assert_eq!(get(n, &key).as_deref(), Some(token.as_str()));
        }
    }
    assert!(held.release().await.unwrap());
    let (_, got) = timeout(SLACK, rx.recv())
        .await
        .expect("the waiter got the lock at the real release")
        .unwrap();
    assert!(got.unwrap().release().await.unwrap());
    assert_gone_from(set.nodes(), &key).await;
}

/// FIFO holds after an expiry: a holder vanished (here a stranger's key
/// with no release to announce its end), a waiter is in line, and the keys
/// expire. A newcomer's first round (a plain `SET NX` on every node) must
/// not take the free keys ahead of the waiter: the waiter gets the lock
/// first (at once: the newcomer gives the keys back, which reserves them
/// for the first in line and announces its turn; its own re-check is 10 s
/// away), and the newcomer gets it at the waiter's release.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_newcomer_does_not_overtake_the_line_after_an_expiry() {
    let set = start_set();
    let name = lock_name("expiry-fifo");
    let newcomer = RedlockLock::connect(config(&set)).await.unwrap();
    let key = newcomer.key_of(&name);
    let line = format!("{{{key}}} line");
    let ttl = Duration::from_secs(30);
    for n in set.nodes() {
        set_foreign(n, &key, "0123456789abcdef0123456789abcdef");
    }
    let (mut rx, _) = waiters(&set, &name, ttl, 1, &line).await;
    for n in set.nodes() {
        tokio::task::block_in_place(|| n.expire_now(&key)).unwrap();
    }
    let late = {
        let name = name.clone();
        tokio::spawn(async move { newcomer.acquire(&name, &opts(ttl)).await })
    };
    let (_, first) = timeout(SLACK, rx.recv())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the waiter in line got nothing within {SLACK:?} (newcomer done: {})",
                late.is_finished()
            )
        })
        .unwrap();
    let first = first.expect("the waiter's acquire");
    assert!(first.is_held());
    sleep(Duration::from_millis(200)).await;
    assert!(
        !late.is_finished(),
        "the newcomer got the lock while the waiter holds it"
    );
    assert!(first.release().await.unwrap());
    let second = timeout(SLACK, late)
        .await
        .expect("the newcomer got the lock at the waiter's release")
        .unwrap()
        .expect("the newcomer's acquire");
    assert!(second.release().await.unwrap());
    assert_gone_from(set.nodes(), &key).await;
    assert_no_place_in(set.nodes(), &line).await;
}
