//! Helpers shared by the lock-redlock integration tests.
// Each test binary uses a subset of them.
#![allow(dead_code)]

pub mod conformance;

use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockGuard, LockName};
use lock_redlock::{RedlockConfig, RedlockLock};
use lock_testbed::{unique_name, Proxy, RedisServer, RedisSet};
use tokio::time::{sleep, Instant};

/// Extra time allowed on top of every bound checked here (a loaded 2-core machine).
pub const SLACK: Duration = Duration::from_millis(500);

/// The per-node timeout of these tests: three times the default 50 ms,
/// because other builds load this 2-core machine and a healthy node then
/// sometimes answers after 50 ms (a timing fault the tests do not mean).
pub const NODE_TIMEOUT: Duration = Duration::from_millis(150);

pub fn start_set() -> RedisSet {
    RedisSet::start(5).unwrap_or_else(|e| panic!("five Redis servers did not start: {e}"))
}

pub fn config(set: &RedisSet) -> RedlockConfig {
    RedlockConfig::new(set.urls()).node_timeout(NODE_TIMEOUT)
}

/// One pass-through proxy in front of each node of `set`.
pub fn proxies_for(set: &RedisSet) -> Vec<Proxy> {
    set.addrs()
        .into_iter()
        .map(|a| Proxy::start(a).unwrap_or_else(|e| panic!("proxy for {a}: {e}")))
        .collect()
}

/// A client of `proxies`, with `node_timeout` and no retry of slow rounds.
pub async fn through(proxies: &[Proxy], node_timeout: Duration) -> RedlockLock {
    let cfg = RedlockConfig::new(proxies.iter().map(Proxy::redis_url))
        .node_timeout(node_timeout)
        .retry_count(0);
    RedlockLock::connect(cfg)
        .await
        .expect("connect through the proxies")
}

pub fn lock_name(prefix: &str) -> LockName {
    LockName::new(unique_name(prefix)).expect("testbed names are valid lock names")
}

/// `GET key` on one (running, not paused) node.
pub fn get(node: &RedisServer, key: &str) -> Option<String> {
    tokio::task::block_in_place(|| {
        let v = node
            .cmd(&["GET", key])
            .unwrap_or_else(|e| panic!("GET {key} on {}: {e}", node.addr()));
        v.as_str().map(str::to_string)
    })
}

pub fn set_foreign(node: &RedisServer, key: &str, value: &str) {
    tokio::task::block_in_place(|| {
        let v = node
            .cmd(&["SET", key, value, "PX", "60000"])
            .unwrap_or_else(|e| panic!("SET {key} on {}: {e}", node.addr()));
        assert_eq!(v.as_str(), Some("OK"));
    })
}

/// Asserts that `key` is gone from every node of `nodes` within [`SLACK`].
pub async fn assert_gone_from(nodes: &[RedisServer], key: &str) {
    for n in nodes {
        assert!(gone_within(n, key, SLACK).await, "key left on {}", n.addr());
    }
}

/// Waits up to `within` for `key` to be absent from `node`; false if it stayed.
pub async fn gone_within(node: &RedisServer, key: &str, within: Duration) -> bool {
    value_within(node, key, None, within).await
}

/// Waits up to `within` for `key` on `node` to be `want` (`None`: absent);
/// false if it was not.
pub async fn value_within(
    node: &RedisServer,
    key: &str,
    want: Option<&str>,
    within: Duration,
) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if get(node, key).as_deref() == want {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        sleep(Duration::from_millis(10)).await;
    }
}

/// Waits up to [`SLACK`] for the waiter `reserved` (`line:<wait id>`) to
/// hold `key` on `node`, and says how: true by that reservation, false by
/// a token of its own from a round (any value that is neither a
/// reservation nor the `released` holder's token: the test's only other
/// clients hold nothing there). Fails naming the value and the line.
pub async fn held_by_reservation(
    node: &RedisServer,
    key: &str,
    reserved: &str,
    released: &str,
    line: &str,
) -> bool {
    let deadline = Instant::now() + SLACK;
    loop {
        let now = get(node, key);
        if now.as_deref() == Some(reserved) {
            return true;
        }
        if now
            .as_deref()
            .is_some_and(|v| v != released && !v.starts_with("line:"))
        {
            return false;
        }
        assert!(
            Instant::now() < deadline,
            "on {}: {now:?}, not the waiter's (reservation {reserved}; line {:?})",
            node.addr(),
            scores(node, line)
        );
        sleep(Duration::from_millis(10)).await;
    }
}

pub fn opts(ttl: Duration) -> AcquireOptions {
    AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(5))
}

pub fn addr(node: &RedisServer) -> String {
    node.addr().to_string()
}

/// Starts `n` clients waiting for `name`, each one in `line` before the
/// next starts; each reports `(its index, its acquire's outcome)` on the
/// channel returned with their wait ids in arrival order. They wait 300 s,
/// longer than a place lasts (twice the TTL): each of their rounds moves
/// their place's lapse time on to its own time + 2 x `ttl`.
pub async fn waiters(
    set: &RedisSet,
    name: &LockName,
    ttl: Duration,
    n: usize,
    line: &str,
) -> (
    tokio::sync::mpsc::UnboundedReceiver<(usize, lock_core::Result<LockGuard>)>,
    Vec<String>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..n {
        let client = RedlockLock::connect(config(set)).await.unwrap();
        let (name, tx) = (name.clone(), tx.clone());
        tokio::spawn(async move {
            let o = opts(ttl).wait(Duration::from_secs(300));
            let got = client.acquire(&name, &o).await;
            let _ = tx.send((i, got));
        });
        // Each one waits (subscribed, in line) before the next starts.
        sleep(Duration::from_millis(300)).await;
    }
    let ids = waiters_in_line(set, line);
    assert_eq!(ids.len(), n, "waiters in line: {ids:?}");
    (rx, ids)
}

/// The wait ids in the line `line` in arrival order (the line's score, the
/// same on every node; a round decided by a quorum may miss a node).
pub fn waiters_in_line(set: &RedisSet, line: &str) -> Vec<String> {
    let mut arrivals: Vec<(f64, String)> = Vec::new();
    for node in set.nodes() {
        for (id, arrival) in scores(node, line) {
            if !arrivals.iter().any(|(_, seen)| *seen == id) {
                arrivals.push((arrival.parse().unwrap(), id));
            }
        }
    }
    arrivals.sort_by(|a, b| a.0.total_cmp(&b.0));
    arrivals.into_iter().map(|(_, id)| id).collect()
}

/// Whether a client listens on `channel` on `node` (`PUBSUB NUMSUB`).
pub fn subscribed(node: &RedisServer, channel: &str) -> bool {
    let reply = tokio::task::block_in_place(|| node.cmd(&["PUBSUB", "NUMSUB", channel]))
        .unwrap_or_else(|e| panic!("PUBSUB NUMSUB on {}: {e}", node.addr()));
    let lock_testbed::RespValue::Array(Some(items)) = reply else {
        panic!("PUBSUB NUMSUB on {}: {reply:?}", node.addr());
    };
    items.get(1).and_then(lock_testbed::RespValue::as_int) > Some(0)
}

/// Asserts that the line `line` holds no place on any of `nodes` within
/// [`SLACK`]: a release returns once a quorum of nodes answered, and on a
/// busy machine the other nodes' releases may still be on their way.
pub async fn assert_no_place_in(nodes: &[RedisServer], line: &str) {
    for n in nodes {
        let deadline = Instant::now() + SLACK;
        while !scores(n, line).is_empty() {
            assert!(Instant::now() < deadline, "a place is left on {}", n.addr());
            sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The members of sorted set `key` on `node` with their scores.
pub fn scores(node: &RedisServer, key: &str) -> Vec<(String, String)> {
    let reply = tokio::task::block_in_place(|| node.cmd(&["ZRANGE", key, "0", "-1", "WITHSCORES"]))
        .unwrap_or_else(|e| panic!("ZRANGE on {}: {e}", node.addr()));
    let lock_testbed::RespValue::Array(Some(items)) = reply else {
        panic!("ZRANGE {key} on {}: {reply:?}", node.addr());
    };
    let text: Vec<String> = items
        .iter()
        .map(|v| v.as_str().expect("a bulk string").to_string())
        .collect();
    text.chunks(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect()
}
