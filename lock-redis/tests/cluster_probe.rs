//! Probes of redis-rs 1.8's async cluster client (`cluster_async`) on a real
//! Redis Cluster (redis-server 7, three primaries and three replicas on
//! loopback, `lock_testbed::RedisClusterSet`): the evidence behind
//! CLUSTER-DESIGN.md at the root of the workspace. Each test prints what it
//! found on `PROBE` lines (run with `--nocapture` to read them) and asserts
//! it, so that a change of behaviour in a later redis-rs or redis-server
//! shows as a failure here.
//!
//! Every test starts a cluster of its own (six processes, a few seconds).

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lock_redis::kit::layout::Keys;
use lock_redis::kit::renew::RENEW_BATCH;
use lock_testbed::{Proxy, RedisClusterSet, RedisServer, RespConnection, RespValue};
use redis::cluster::{ClusterClientBuilder, NodeAddress};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{ErrorKind, PushInfo, PushKind, RedisError, Script, ServerErrorKind, Value};
use support::{initial_owner, name_on_primary};
use tokio::sync::mpsc;

/// A lock name whose slot belongs to primary `owner` of a fresh cluster.
fn name_on(owner: usize, tag: &str) -> String {
    name_on_primary(owner, &format!("probe:{tag}:"))
}

/// `n` lock names in `n` different slots, all owned by primary `owner`.
fn names_on(owner: usize, tag: &str, n: usize) -> Vec<String> {
    let mut slots = Vec::new();
    let mut names = Vec::new();
    for i in 0.. {
        let name = format!("probe:{tag}:{i}");
        let slot = RedisClusterSet::slot_of(&name);
        if initial_owner(slot) == owner && !slots.contains(&slot) {
            slots.push(slot);
            names.push(name);
            if names.len() == n {
                break;
            }
        }
    }
    names
}

fn seeds(cluster: &RedisClusterSet) -> Vec<String> {
    cluster
        .primaries()
        .iter()
        .map(|a| format!("redis://{a}"))
        .collect()
}

fn builder(cluster: &RedisClusterSet) -> ClusterClientBuilder {
    ClusterClientBuilder::new(seeds(cluster))
        .connection_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(2))
}

async fn connect(builder: ClusterClientBuilder) -> ClusterConnection {
    builder
        .build()
        .expect("cluster client")
        .get_async_connection()
        .await
        .expect("cluster connection")
}

/// redis-rs's own invocation of `script` on `keys` (`EVALSHA`, and on
/// `NOSCRIPT` a `SCRIPT LOAD` through the same connection, then `EVALSHA`
/// again): what these probes observe, whatever lock-redis's own calls do.
fn invocation<'a>(script: &'a Script, keys: &[&str]) -> redis::ScriptInvocation<'a> {
    let mut call = script.prepare_invoke();
    for key in keys {
        call.key(*key);
    }
    call
}

/// A script that was never loaded anywhere (its text is unique).
fn fresh_script(body: &str) -> Script {
    Script::new(&format!(
        "-- {}\n{body}",
        lock_redis::kit::layout::owner_token()
    ))
}

/// Sets the lock key, increments the fencing counter, sets the holder key;
/// returns the counter.
const ACQUIRE_LIKE: &str = "redis.call('SET', KEYS[1], ARGV[1]) \
     local n = redis.call('INCR', KEYS[2]) \
     redis.call('SET', KEYS[3], ARGV[1]) \
     return n";

fn three_keys(name: &str) -> [String; 3] {
    let k = Keys::new("", name);
    [
        k.lock().to_string(),
        k.fencing().to_string(),
        k.holder().to_string(),
    ]
}

async fn call_three(
    conn: &mut ClusterConnection,
    script: &Script,
    name: &str,
) -> redis::RedisResult<i64> {
    let keys = three_keys(name);
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let mut call = invocation(script, &refs);
    call.arg("tok");
    call.invoke_async(conn).await
}

fn calls(node: &RedisServer, command: &str) -> u64 {
    node.calls(command).unwrap_or(0)
}

/// `errorstat_<code>:count=N` of `INFO errorstats` (0 if absent).
fn errorstat(node: &RedisServer, code: &str) -> u64 {
    let info = node.cmd(&["INFO", "errorstats"]).expect("INFO errorstats");
    let text = info.as_str().unwrap_or_default();
    let prefix = format!("errorstat_{code}:count=");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

fn get(node: &RedisServer, key: &str) -> RespValue {
    node.cmd(&["GET", key]).expect("GET")
}

fn evalsha_per_node(cluster: &RedisClusterSet) -> Vec<u64> {
    (0..6).map(|i| calls(cluster.node(i), "evalsha")).collect()
}

fn kind(e: &RedisError) -> String {
    format!("{:?} / {:?} / {e}", e.kind(), e.retry_method())
}

// ---------------------------------------------------------------------------
// Question 1: EVALSHA through the cluster connection
// ---------------------------------------------------------------------------

/// redis-rs's script invocation takes a `ClusterConnection` as it is (it is a
/// `redis::aio::ConnectionLike`); the EVALSHA is routed by its first key
/// to the slot's primary; the first call's NOSCRIPT makes the invocation
/// send `SCRIPT LOAD` through the cluster connection, which redis-rs fans
/// out to every PRIMARY (not the replicas: a promoted replica answers
/// NOSCRIPT once more), then the EVALSHA again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q1_evalsha_reaches_the_slot_owner_and_noscript_loads_everywhere() {
    let cluster = RedisClusterSet::start().unwrap();
    let mut conn = connect(builder(&cluster)).await;
    let script = fresh_script(ACQUIRE_LIKE);
    let name = name_on(1, "owner");
    assert_eq!(call_three(&mut conn, &script, &name).await.unwrap(), 1);
    assert_eq!(call_three(&mut conn, &script, &name).await.unwrap(), 2);
    let evalsha = evalsha_per_node(&cluster);
    let loads: Vec<u64> = (0..6)
        .map(|i| calls(cluster.node(i), "script|load"))
        .collect();
    let noscript: Vec<u64> = (0..6)
        .map(|i| errorstat(cluster.node(i), "NOSCRIPT"))
        .collect();
    println!("PROBE q1 owner: evalsha per node {evalsha:?}, SCRIPT LOAD per node {loads:?}, NOSCRIPT per node {noscript:?}");
    assert_eq!(
        evalsha,
        vec![0, 3, 0, 0, 0, 0],
        "1 NOSCRIPT + 2 runs, all on node 1"
    );
    assert_eq!(noscript, vec![0, 1, 0, 0, 0, 0]);
    assert_eq!(
        loads,
        vec![1, 1, 1, 0, 0, 0],
        "SCRIPT LOAD is fanned out to the three primaries (not the replicas)"
    );
    assert_eq!(
        get(cluster.node(1), &three_keys(&name)[1]).as_str(),
        Some("2")
    );
}

/// With one primary down (killed, not failed over yet), the NOSCRIPT path
/// of the invocation still works for the other primaries' slots (the
/// fan-out skips the node whose connection broke), and so does an `EVAL`
/// of the same source, routed by key like the EVALSHA. An `EVAL` of the same source,
/// routed by key like the EVALSHA, works (and caches the script on the
/// node that ran it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q1_noscript_reload_with_a_primary_down() {
    let mut cluster = RedisClusterSet::start().unwrap();
    let mut conn = connect(builder(&cluster)).await;
    // Kill primary 2; node 0, whose slot the call is for, is fine.
    cluster.kill_node(2).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let script = fresh_script(ACQUIRE_LIKE);
    let name = name_on(0, "noscript");
    let started = Instant::now();
    let loaded = call_three(&mut conn, &script, &name).await;
    println!(
        "PROBE q1 noscript with primary 2 down: invocation -> {:?} after {:?}",
        loaded.as_ref().map_err(kind),
        started.elapsed()
    );
    let keys = three_keys(&name);
    let mut eval = redis::cmd("EVAL");
    eval.arg(format!("-- eval\n{ACQUIRE_LIKE}"))
        .arg(3)
        .arg(&keys[0])
        .arg(&keys[1])
        .arg(&keys[2])
        .arg("tok");
    let started = Instant::now();
    let by_eval: redis::RedisResult<i64> = eval.query_async(&mut conn).await;
    println!(
        "PROBE q1 noscript with primary 2 down: EVAL -> {:?} after {:?}",
        by_eval.as_ref().map_err(kind),
        started.elapsed()
    );
    assert!(loaded.is_ok());
    assert!(by_eval.is_ok());
}

/// After `migrate_slot` the old owner answers MOVED; redis-rs follows it
/// (and refreshes its slot map): the call runs on the new owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q1_moved_after_a_migration_is_followed() {
    let cluster = RedisClusterSet::start().unwrap();
    let mut conn = connect(builder(&cluster)).await;
    let script = fresh_script(ACQUIRE_LIKE);
    let name = name_on(0, "moved");
    let slot = RedisClusterSet::slot_of(&name);
    assert_eq!(call_three(&mut conn, &script, &name).await.unwrap(), 1);
    let moved = cluster.migrate_slot(slot, 0, 1).unwrap();
    let before = evalsha_per_node(&cluster);
    let started = Instant::now();
    let n = call_three(&mut conn, &script, &name).await.unwrap();
    let after = evalsha_per_node(&cluster);
    println!(
        "PROBE q1 moved: {moved} keys moved; call -> {n} in {:?}; evalsha per node before {before:?} after {after:?}; MOVED answered by node 0: {}",
        started.elapsed(),
        errorstat(cluster.node(0), "MOVED")
    );
    assert_eq!(n, 2);
    assert_eq!(after[1], before[1] + 1, "ran on the new owner");
    assert_eq!(errorstat(cluster.node(0), "MOVED"), 1);
    // Once the map is refreshed, no more MOVED.
    assert_eq!(call_three(&mut conn, &script, &name).await.unwrap(), 3);
    assert_eq!(errorstat(cluster.node(0), "MOVED"), 1);
}

/// In the middle of a migration (`begin_migration` .. `finish_migration`):
/// keys not moved yet -> the source runs the script; every key moved ->
/// the source answers ASK and redis-rs sends ASKING + EVALSHA to the
/// target; some keys of the script present and some absent -> TRYAGAIN
/// (from the source while some are still there, from the target after
/// ASKING when not all exist), which redis-rs retries after a sleep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q1_ask_and_tryagain_in_the_middle_of_a_migration() {
    let cluster = RedisClusterSet::start().unwrap();
    let mut conn = connect(builder(&cluster)).await;
    let script = fresh_script(ACQUIRE_LIKE);
    let name = name_on(0, "ask");
    let slot = RedisClusterSet::slot_of(&name);
    assert_eq!(call_three(&mut conn, &script, &name).await.unwrap(), 1);

    cluster.begin_migration(slot, 0, 1).unwrap();
    // (a) All three keys exist on the source: it runs the script.
    let before = evalsha_per_node(&cluster);
    let n = call_three(&mut conn, &script, &name).await.unwrap();
    let after = evalsha_per_node(&cluster);
    println!(
        "PROBE q1 migrating, keys not moved: -> {n}, evalsha before {before:?} after {after:?}"
    );
    assert_eq!(n, 2);
    assert_eq!(after[0], before[0] + 1);

    // (b) A script over the same keys and one that does not exist: TRYAGAIN
    // from the source (some keys here, some not).
    let four =
        fresh_script("redis.call('SET', KEYS[1], ARGV[1]) return redis.call('INCR', KEYS[2])");
    let keys = three_keys(&name);
    let queue = Keys::new("", &name).queue().to_string();
    let started = Instant::now();
    let mut call = invocation(&four, &[keys[0].as_str(), keys[1].as_str(), queue.as_str()]);
    call.arg("tok");
    let r: redis::RedisResult<i64> = call.invoke_async(&mut conn).await;
    println!(
        "PROBE q1 migrating, keys not moved, a script with an absent key: -> {:?} after {:?}; TRYAGAIN answered by node 0: {}",
        r.as_ref().map_err(kind),
        started.elapsed(),
        errorstat(cluster.node(0), "TRYAGAIN")
    );
    let tryagain_source = errorstat(cluster.node(0), "TRYAGAIN");

    // (c) Every key moved: ASK, then ASKING + EVALSHA on the target.
    let moved = cluster.move_keys(slot, 0, 1).unwrap();
    let before = evalsha_per_node(&cluster);
    let started = Instant::now();
    let n = call_three(&mut conn, &script, &name).await;
    let after = evalsha_per_node(&cluster);
    println!(
        "PROBE q1 migrating, {moved} keys moved: -> {:?} in {:?}, evalsha before {before:?} after {after:?}, ASK from node 0: {}, asking on node 1: {}",
        n.as_ref().map_err(kind),
        started.elapsed(),
        errorstat(cluster.node(0), "ASK"),
        calls(cluster.node(1), "asking")
    );
    assert_eq!(n.unwrap(), 3);
    assert_eq!(after[1], before[1] + 1, "ran on the target after ASKING");

    // (d) A script never loaded, first used now: ASK, then NOSCRIPT from the
    // target, SCRIPT LOAD everywhere, EVALSHA again (ASK, ASKING, run).
    let other = fresh_script(ACQUIRE_LIKE);
    let started = Instant::now();
    let n = call_three(&mut conn, &other, &name).await;
    println!(
        "PROBE q1 migrating, keys moved, a fresh script: -> {:?} in {:?}; NOSCRIPT from node 1: {}",
        n.as_ref().map_err(kind),
        started.elapsed(),
        errorstat(cluster.node(1), "NOSCRIPT")
    );
    assert_eq!(n.unwrap(), 4);

    // (e) Keys moved and one absent: the target answers TRYAGAIN to ASKING.
    let started = Instant::now();
    let r: redis::RedisResult<i64> = call.invoke_async(&mut conn).await;
    println!(
        "PROBE q1 migrating, keys moved, a script with an absent key: -> {:?} after {:?}; TRYAGAIN from node 1: {}",
        r.as_ref().map_err(kind),
        started.elapsed(),
        errorstat(cluster.node(1), "TRYAGAIN")
    );
    // (f) A brand-new name in the same slot (no key exists anywhere):
    // ASK from the source, TRYAGAIN from the target (several keys, missing).
    let fresh_name = (0..)
        .map(|i| format!("probe:new:{i}"))
        .find(|n| RedisClusterSet::slot_of(n) == slot)
        .unwrap();
    let fk = three_keys(&fresh_name);
    let same_slot = fk.iter().all(|k| RedisClusterSet::slot_of(k) == slot);
    let started = Instant::now();
    let r = call_three(&mut conn, &script, &fresh_name).await;
    println!(
        "PROBE q1 migrating, a new name in the slot (keys in one slot: {same_slot}): -> {:?} after {:?}",
        r.as_ref().map_err(kind),
        started.elapsed()
    );

    // With a short retry wait the TRYAGAIN is retried until the migration
    // ends. The default 16 retries of 20-100 ms each (jittered) can run out
    // in under 700 ms, before the migration is finished below; 100 retries
    // last seconds, and the overall timeout still bounds the call.
    let mut quick = connect(
        builder(&cluster)
            .response_timeout(Duration::from_millis(500))
            .overall_response_timeout(Some(Duration::from_secs(10)))
            .retries(100)
            .min_retry_wait(20)
            .max_retry_wait(100),
    )
    .await;
    let pending = tokio::spawn(async move {
        let started = Instant::now();
        let mut call = invocation(&four, &[keys[0].as_str(), keys[1].as_str(), queue.as_str()]);
        call.arg("tok");
        let r: redis::RedisResult<i64> = call.invoke_async(&mut quick).await;
        (r, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    let finishing = Instant::now();
    tokio::task::block_in_place(|| cluster.finish_migration(slot, 1).unwrap());
    let (r, took) = pending.await.unwrap();
    println!(
        "PROBE q1 TRYAGAIN retried with min/max wait 20/100 ms: -> {:?} after {took:?} (migration finished {:?} after the call began)",
        r.as_ref().map_err(kind),
        took.saturating_sub(finishing.elapsed())
    );
    assert!(tryagain_source >= 1);
    assert_eq!(r.unwrap(), 5);
}

/// Bounding a call: `response_timeout` bounds each attempt,
/// `overall_response_timeout` (default: the response timeout) the whole
/// call with its retries. A script whose reply is lost (a proxy drops the
/// replies; the server ran it) times out; redis-rs then queues it to be
/// sent AGAIN (a timeout is `RetryImmediately`) -- but its queue of
/// retries is only looked at when something else wakes the connection's
/// task: with no other request in between, the retry waits until the
/// overall timeout drops it; with other requests flowing (as in any busy
/// client), it is sent again, and runs again. `retries(0)`: exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q1_a_timed_out_script_is_resent_unless_retries_are_zero() {
    let cluster = RedisClusterSet::start().unwrap();
    let proxies: Vec<Proxy> = (0..6)
        .map(|i| Proxy::start(cluster.node(i).addr()).unwrap())
        .collect();
    let map = proxy_map(&cluster, &proxies);
    let proxied_seeds: Vec<String> = (0..3)
        .map(|i| format!("redis://{}", proxies[i].addr()))
        .collect();
    let base = || {
        ClusterClientBuilder::new(proxied_seeds.clone())
            .node_address_map(map.clone())
            .connection_timeout(Duration::from_secs(1))
            .response_timeout(Duration::from_millis(300))
    };
    let name = name_on(0, "timeout");
    let counter = Keys::aux(&name, "counter");
    let elsewhere = name_on(1, "traffic");
    let incr = fresh_script("return redis.call('INCR', KEYS[1])");

    let run = |label: &'static str, b: ClusterClientBuilder, traffic: bool| {
        let (proxy, node, counter, incr, elsewhere) = (
            &proxies[0],
            cluster.node(0),
            counter.clone(),
            incr.clone(),
            elsewhere.clone(),
        );
        async move {
            let mut conn = connect(b).await;
            // Loaded and connected first.
            let _: i64 = invocation(&incr, &[counter.as_str()])
                .invoke_async(&mut conn)
                .await
                .unwrap();
            let before: i64 = get(node, &counter).as_str().unwrap().parse().unwrap();
            // Other requests through the same connection, to node 1 (not
            // behind the faulty proxy), every 50 ms.
            let mut other = conn.clone();
            let busy = tokio::spawn(async move {
                if !traffic {
                    return;
                }
                loop {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let _: redis::RedisResult<Option<String>> = redis::cmd("GET")
                        .arg(&elsewhere)
                        .query_async(&mut other)
                        .await;
                }
            });
            proxy.drop_replies();
            let started = Instant::now();
            let r: redis::RedisResult<i64> = invocation(&incr, &[counter.as_str()])
                .invoke_async(&mut conn)
                .await;
            let took = started.elapsed();
            busy.abort();
            tokio::time::sleep(Duration::from_millis(300)).await;
            proxy.heal();
            let after: i64 = get(node, &counter).as_str().unwrap().parse().unwrap();
            println!(
                "PROBE q1 timeout [{label}]: -> {:?} after {took:?}; the one call ran {} time(s)",
                r.as_ref().map_err(kind),
                after - before
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
            (took, after - before)
        }
    };
    let (took, ran) = run(
        "response 300 ms, overall = response (default), retries 16 (default), other traffic",
        base(),
        true,
    )
    .await;
    assert!(took < Duration::from_millis(600));
    assert_eq!(ran, 1);
    let (took, ran) = run(
        "response 300 ms, overall 2 s, retries 16 (default), no other traffic",
        base().overall_response_timeout(Some(Duration::from_secs(2))),
        false,
    )
    .await;
    assert!(took >= Duration::from_millis(1900), "{took:?}");
    assert_eq!(ran, 1, "the retry waited for a wake-up that never came");
    let (took, ran) = run(
        "response 300 ms, overall 2 s, retries 16 (default), other traffic",
        base().overall_response_timeout(Some(Duration::from_secs(2))),
        true,
    )
    .await;
    assert!(took >= Duration::from_millis(1900), "{took:?}");
    assert!(
        ran > 1,
        "redis-rs sent the timed-out script again: ran {ran} times"
    );
    let (took, ran) = run(
        "response 300 ms, overall 2 s, retries 0, other traffic",
        base()
            .overall_response_timeout(Some(Duration::from_secs(2)))
            .retries(0),
        true,
    )
    .await;
    assert!(took < Duration::from_millis(600), "{took:?}");
    assert_eq!(ran, 1);
}

fn proxy_map(cluster: &RedisClusterSet, proxies: &[Proxy]) -> HashMap<NodeAddress, NodeAddress> {
    (0..6)
        .map(|i| {
            let real = cluster.node(i).addr();
            let via = proxies[i].addr();
            (
                NodeAddress::new(real.ip().to_string(), real.port()),
                NodeAddress::new(via.ip().to_string(), via.port()),
            )
        })
        .collect()
}

/// The worst case: the reply of a script is lost, the primary dies and
/// its replica takes over; redis-rs, retrying on its own, sends the SAME
/// call to the new primary (its routing is reset to the slot, and the slot
/// map refreshed), where it runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn q1_a_timed_out_script_is_resent_to_the_new_primary_after_a_failover() {
    let mut cluster = RedisClusterSet::start().unwrap();
    let proxies: Vec<Proxy> = (0..6)
        .map(|i| Proxy::start(cluster.node(i).addr()).unwrap())
        .collect();
    let map = proxy_map(&cluster, &proxies);
    let proxied_seeds: Vec<String> = (0..3)
        .map(|i| format!("redis://{}", proxies[i].addr()))
        .collect();
    let mut conn = connect(
        ClusterClientBuilder::new(proxied_seeds)
            .node_address_map(map)
            .connection_timeout(Duration::from_millis(500))
            .response_timeout(Duration::from_millis(500))
            .overall_response_timeout(Some(Duration::from_secs(30)))
            // Every attempt on the dead node fails at once (connection
            // reset): enough of them to last until the failover.
            .retries(1000)
            .min_retry_wait(50)
            .max_retry_wait(500),
    )
    .await;
    let name = name_on(0, "failover");
    let counter = Keys::aux(&name, "counter");
    let incr = fresh_script("return redis.call('INCR', KEYS[1])");
    let _: i64 = invocation(&incr, &[counter.as_str()])
        .invoke_async(&mut conn)
        .await
        .unwrap();
    proxies[0].drop_replies();
    let started = Instant::now();
    let incr2 = incr.clone();
    let counter2 = counter.clone();
    let pending = tokio::spawn(async move {
        let r: redis::RedisResult<i64> = invocation(&incr2, &[counter2.as_str()])
            .invoke_async(&mut conn)
            .await;
        r
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The first attempt ran on node 0 and its reply is lost; kill node 0.
    let ran_on_old: i64 = get(cluster.node(0), &counter)
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    tokio::task::block_in_place(|| {
        cluster.kill_node(0).unwrap();
        cluster
            .wait_for_failover(0, Duration::from_secs(20))
            .unwrap()
    });
    let r = pending.await.unwrap();
    let on_new: i64 = get(cluster.node(3), &counter)
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    println!(
        "PROBE q1 failover: the call -> {:?} after {:?}; counter on node 0 before the kill: {ran_on_old}; on node 3 (promoted): {on_new}; evalsha run by node 3: {}",
        r.as_ref().map_err(kind),
        started.elapsed(),
        calls(cluster.node(3), "evalsha")
    );
    // One logical call; counter started at 1.
    assert!(ran_on_old >= 2, "the first attempt ran on the old primary");
    assert!(
        calls(cluster.node(3), "evalsha") >= 1,
        "the call was sent again to the new primary"
    );
    assert!(on_new > ran_on_old.min(2), "and ran there again");
}

// ---------------------------------------------------------------------------
// Question 2: one command to one node; cross-slot scripts; the slot map
// ---------------------------------------------------------------------------

/// A renewal batch over keys of three slots that node 1 owns, sent to
/// node 1 with `route_command(.., ByAddress)`. Declared as KEYS, the keys
/// are refused (CROSSSLOT) even with `#!lua flags=allow-cross-slot-keys`:
/// on 7.0 the flag lets a script TOUCH keys of other slots of the node,
/// not declare them. So: declare the first key (or none) and pass the
/// others as arguments. When one key's slot has moved away, only that
/// key's `redis.call` fails (caught by `pcall`: the others renew). When
/// the FIRST (declared) key's slot moved, the node answers MOVED for the
/// whole call, and redis-rs follows it even for a `ByAddress` route: the
/// batch runs on the other node, where the others are not local.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q2_a_cross_slot_renewal_batch_to_one_node() {
    let cluster = RedisClusterSet::start().unwrap();
    let mut conn = connect(builder(&cluster)).await;
    let names = names_on(1, "batch", 3);
    for n in &names {
        let r = cluster
            .node(1)
            .cmd(&["SET", n, "tok", "PX", "60000"])
            .unwrap();
        assert_eq!(r.as_str(), Some("OK"));
    }
    let node1 = cluster.node(1).addr();
    let by_addr = || {
        RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
            host: node1.ip().to_string(),
            port: node1.port(),
        })
    };
    // (a) RENEW_BATCH with the flag, every key declared.
    let flagged_renew = format!("#!lua flags=allow-cross-slot-keys\n{RENEW_BATCH}");
    let flagged = Script::new(&flagged_renew);
    let mut load = redis::cmd("SCRIPT");
    load.arg("LOAD").arg(&flagged_renew);
    conn.route_command(load, by_addr()).await.unwrap();
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(flagged.get_hash()).arg(names.len());
    for n in &names {
        cmd.arg(n);
    }
    for _ in &names {
        cmd.arg("m").arg("tok").arg(30_000);
    }
    let declared = conn.route_command(cmd, by_addr()).await;
    println!("PROBE q2 RENEW_BATCH with allow-cross-slot-keys, 3 slots declared: {declared:?}");
    assert!(matches!(declared, Ok(Value::ServerError(_)) | Err(_)));

    // (b)/(c) The first key declared (or none), every key in ARGV.
    let code = "#!lua flags=allow-cross-slot-keys\n\
        local out = {}\n\
        for i = 1, #ARGV do\n\
          local ok, r = pcall(redis.call, 'PEXPIRE', ARGV[i], 30000)\n\
          if ok then out[i] = r elseif type(r) == 'table' then out[i] = tostring(r.err) else out[i] = tostring(r) end\n\
        end\n\
        return out";
    let renew = Script::new(code);
    let mut load = redis::cmd("SCRIPT");
    load.arg("LOAD").arg(code);
    conn.route_command(load, by_addr()).await.unwrap();
    let batch = |declared: usize| {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(renew.get_hash()).arg(declared);
        for n in &names[..declared] {
            cmd.arg(n);
        }
        for n in &names {
            cmd.arg(n);
        }
        cmd
    };
    for declared in [1, 0] {
        let r = conn.route_command(batch(declared), by_addr()).await;
        println!("PROBE q2 cross-slot batch, {declared} key(s) declared, keys in ARGV: {r:?}");
        assert_eq!(
            r.unwrap(),
            Value::Array(vec![Value::Int(1), Value::Int(1), Value::Int(1)])
        );
    }

    // The last key's slot moves to node 2.
    let last = RedisClusterSet::slot_of(&names[2]);
    cluster.migrate_slot(last, 1, 2).unwrap();
    let partly = conn.route_command(batch(1), by_addr()).await;
    println!("PROBE q2 the last key's slot moved away: {partly:?}");
    match partly.unwrap() {
        Value::Array(v) => {
            assert_eq!(v[..2], [Value::Int(1), Value::Int(1)]);
            assert!(!matches!(v[2], Value::Int(_)), "{:?}", v[2]);
        }
        other => panic!("{other:?}"),
    }
    // The first key's slot moves to node 2 as well.
    let first = RedisClusterSet::slot_of(&names[0]);
    cluster.migrate_slot(first, 1, 2).unwrap();
    let before = evalsha_per_node(&cluster);
    let moved = conn.route_command(batch(1), by_addr()).await;
    let after = evalsha_per_node(&cluster);
    println!(
        "PROBE q2 the FIRST (declared) key's slot moved away: {:?}; MOVED from node 1: {}; evalsha per node before {before:?} after {after:?}",
        moved.as_ref().map_err(kind),
        errorstat(cluster.node(1), "MOVED")
    );
    let undeclared = conn.route_command(batch(0), by_addr()).await;
    println!("PROBE q2 the same with no key declared: {undeclared:?}");
    // With retries(0) the MOVED comes back to the caller instead.
    let mut strict = connect(builder(&cluster).retries(0)).await;
    let moved = strict.route_command(batch(1), by_addr()).await;
    println!(
        "PROBE q2 the same with retries(0): {:?}",
        moved
            .as_ref()
            .map_err(|e| (kind(e), e.redirect_node().map(|(a, s)| (a.to_string(), s))))
    );
    let e = moved.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Server(ServerErrorKind::Moved));
}

/// The slot -> node map is not exposed by redis-rs 1.8's cluster client;
/// `CLUSTER SHARDS` (Redis 7) and `CLUSTER SLOTS` can be asked through it
/// (`route_command`, any node) and parsed by the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q2_the_slot_map_from_cluster_shards() {
    let cluster = RedisClusterSet::start().unwrap();
    let mut conn = connect(builder(&cluster)).await;
    let shards = conn
        .route_command(
            redis::cmd("CLUSTER").arg("SHARDS").clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
        )
        .await
        .unwrap();
    let slots = conn
        .route_command(
            redis::cmd("CLUSTER").arg("SLOTS").clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
        )
        .await
        .unwrap();
    let text = format!("{shards:?}");
    println!("PROBE q2 CLUSTER SHARDS: {}", &text[..text.len().min(900)]);
    let text = format!("{slots:?}");
    println!("PROBE q2 CLUSTER SLOTS: {}", &text[..text.len().min(600)]);
    let parsed = parse_cluster_slots(&slots);
    println!("PROBE q2 parsed: {parsed:?}");
    assert_eq!(parsed.len(), 3);
    assert_eq!(parsed[0].0, 0);
}

/// `(first, last, "host:port" of the primary)` of a `CLUSTER SLOTS` reply.
fn parse_cluster_slots(v: &Value) -> Vec<(u16, u16, String)> {
    let Value::Array(ranges) = v else {
        return Vec::new();
    };
    let mut out: Vec<(u16, u16, String)> = ranges
        .iter()
        .filter_map(|r| {
            let Value::Array(parts) = r else { return None };
            let (Value::Int(a), Value::Int(b), Value::Array(primary)) =
                (parts.first()?, parts.get(1)?, parts.get(2)?)
            else {
                return None;
            };
            let host = match primary.first()? {
                Value::BulkString(h) => String::from_utf8_lossy(h).into_owned(),
                _ => return None,
            };
            let Value::Int(port) = primary.get(1)? else {
                return None;
            };
            Some((*a as u16, *b as u16, format!("{host}:{port}")))
        })
        .collect();
    out.sort();
    out
}

// ---------------------------------------------------------------------------
// Question 3: sharded pub/sub
// ---------------------------------------------------------------------------

async fn next_push(
    rx: &mut mpsc::UnboundedReceiver<PushInfo>,
    within: Duration,
) -> Option<PushInfo> {
    tokio::time::timeout(within, rx.recv()).await.ok().flatten()
}

fn push_text(p: &PushInfo) -> String {
    let data: Vec<String> = p
        .data
        .iter()
        .map(|v| match v {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            other => format!("{other:?}"),
        })
        .collect();
    format!("{:?} {data:?}", p.kind)
}

/// Drains the pushes that arrive within `within`.
async fn drain(rx: &mut mpsc::UnboundedReceiver<PushInfo>, within: Duration) -> Vec<String> {
    let mut out = Vec::new();
    let until = tokio::time::Instant::now() + within;
    while let Ok(Some(p)) = tokio::time::timeout_at(until, rx.recv()).await {
        out.push(push_text(&p));
    }
    out
}

/// A script whose keys are `K` and `{K} fencing` SPUBLISHes on
/// `{K} released` (not among its keys, computed in the script, and also
/// passed as a key); a RESP3 cluster connection with a push sender
/// SSUBSCRIBEs to it and gets the `smessage`. A plain RESP3 connection to
/// the slot's owner can SSUBSCRIBE with a raw command too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q3_spublish_in_a_script_reaches_ssubscribe() {
    let cluster = RedisClusterSet::start().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut sub = connect(
        builder(&cluster)
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(tx),
    )
    .await;
    let mut conn = connect(builder(&cluster)).await;
    let name = name_on(2, "spub");
    let keys = Keys::new("", &name);
    sub.ssubscribe(keys.released()).await.unwrap();
    let confirm = next_push(&mut rx, Duration::from_secs(1)).await;
    println!(
        "PROBE q3 ssubscribe confirmation: {:?}",
        confirm.as_ref().map(push_text)
    );

    let computed = fresh_script(
        "redis.call('INCR', KEYS[2]) \
         return redis.call('SPUBLISH', '{' .. KEYS[1] .. '} released', ARGV[1])",
    );
    let mut call = invocation(&computed, &[keys.lock(), keys.fencing()]);
    call.arg("computed");
    let r: redis::RedisResult<i64> = call.invoke_async(&mut conn).await;
    let got = next_push(&mut rx, Duration::from_secs(2)).await;
    println!(
        "PROBE q3 SPUBLISH to a channel computed in the script: -> {:?}; subscriber got {:?}",
        r.as_ref().map_err(kind),
        got.as_ref().map(push_text)
    );
    assert_eq!(r.unwrap(), 1, "one subscriber");
    assert_eq!(got.unwrap().kind, PushKind::SMessage);

    let as_key = fresh_script("return redis.call('SPUBLISH', KEYS[3], ARGV[1])");
    let mut call = invocation(&as_key, &[keys.lock(), keys.fencing(), keys.released()]);
    call.arg("as-key");
    let r: redis::RedisResult<i64> = call.invoke_async(&mut conn).await;
    let got = next_push(&mut rx, Duration::from_secs(2)).await;
    println!(
        "PROBE q3 SPUBLISH to a channel passed as a key: -> {:?}; subscriber got {:?}",
        r.as_ref().map_err(kind),
        got.as_ref().map(push_text)
    );
    assert_eq!(r.unwrap(), 1);

    // Another slot's channel from the same script: refused.
    let other = fresh_script("return redis.call('SPUBLISH', ARGV[1], 'x')");
    let mut call = invocation(&other, &[keys.lock()]);
    call.arg("{some-other-slot} released");
    let r: redis::RedisResult<i64> = call.invoke_async(&mut conn).await;
    println!(
        "PROBE q3 SPUBLISH to another slot's channel from a script: -> {:?}",
        r.as_ref().map_err(kind)
    );

    // A plain RESP3 multiplexed connection to the owner, raw SSUBSCRIBE.
    let (ptx, mut prx) = mpsc::unbounded_channel();
    let client =
        redis::Client::open(format!("redis://{}/?protocol=3", cluster.node(2).addr())).unwrap();
    let mut plain = client
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new()
                .set_response_timeout(Some(Duration::from_secs(2)))
                .set_push_sender(ptx),
        )
        .await
        .unwrap();
    let r: redis::RedisResult<Value> = redis::cmd("SSUBSCRIBE")
        .arg(keys.released())
        .query_async(&mut plain)
        .await;
    println!("PROBE q3 raw SSUBSCRIBE on a plain RESP3 connection: -> {r:?}");
    let mut call = invocation(&as_key, &[keys.lock(), keys.fencing(), keys.released()]);
    call.arg("to-plain");
    let n: i64 = call.invoke_async(&mut conn).await.unwrap();
    let pushes = drain(&mut prx, Duration::from_millis(500)).await;
    println!("PROBE q3 plain RESP3 subscriber, {n} subscribers, pushes: {pushes:?}");
    assert!(pushes.iter().any(|p| p.starts_with("SMessage")));
}

/// A slot migrates away from the node a client SSUBSCRIBEd at: the node
/// unsubscribes the client itself (a `sunsubscribe` push, the connection
/// stays open). redis-rs's cluster connection takes that push as a
/// confirmation and drops the channel from the subscriptions it tracks,
/// so it does not subscribe again at the new owner: a message published
/// there is never received. A raw RESP2 connection sees the same
/// `sunsubscribe`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q3_ssubscribe_when_the_slot_migrates_away() {
    let cluster = RedisClusterSet::start().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut sub = connect(
        builder(&cluster)
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(tx),
    )
    .await;
    let mut conn = connect(builder(&cluster)).await;
    let name = name_on(0, "smigrate");
    let slot = RedisClusterSet::slot_of(&name);
    let keys = Keys::new("", &name);
    sub.ssubscribe(keys.released()).await.unwrap();
    let _ = drain(&mut rx, Duration::from_millis(300)).await;
    let mut raw = RespConnection::connect(cluster.node(0).addr(), Duration::from_secs(2)).unwrap();
    let confirm = raw.cmd(&["SSUBSCRIBE", keys.released()]).unwrap();
    println!("PROBE q3 raw RESP2 SSUBSCRIBE: {confirm:?}");

    let publish = fresh_script("return redis.call('SPUBLISH', KEYS[2], ARGV[1])");
    let mut call = invocation(&publish, &[keys.lock(), keys.released()]);
    call.arg("before");
    let n: i64 = call.invoke_async(&mut conn).await.unwrap();
    let before = drain(&mut rx, Duration::from_millis(300)).await;
    println!("PROBE q3 before the migration: {n} subscribers; pushes {before:?}");
    assert_eq!(n, 2);
    let _ = raw.read_reply().unwrap();

    tokio::task::block_in_place(|| cluster.migrate_slot(slot, 0, 1).unwrap());
    let at_migration = drain(&mut rx, Duration::from_millis(500)).await;
    raw.set_timeout(Duration::from_millis(500)).unwrap();
    let raw_push = raw.read_reply();
    println!("PROBE q3 pushes when the slot left node 0: cluster connection {at_migration:?}; raw RESP2 connection {raw_push:?}");
    let ping = raw.cmd(&["PING"]);
    println!("PROBE q3 the raw connection after that: PING -> {ping:?}");

    // Publish at the new owner (the script follows MOVED; the client's slot
    // map is refreshed, which is when redis-rs resubscribes what it tracks).
    let mut call = invocation(&publish, &[keys.lock(), keys.released()]);
    call.arg("after");
    let n1: i64 = call.invoke_async(&mut conn).await.unwrap();
    // Make the subscriber's connection see a MOVED too (refreshes its map).
    let _: Option<String> = redis::cmd("GET")
        .arg(keys.lock())
        .query_async(&mut sub)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let n2: i64 = call.invoke_async(&mut conn).await.unwrap();
    let after = drain(&mut rx, Duration::from_millis(700)).await;
    println!("PROBE q3 after the migration: SPUBLISH at the new owner reached {n1} then (after a refresh) {n2} subscriber(s); pushes {after:?}");
    assert!(at_migration.iter().any(|p| p.starts_with("SUnsubscribe")));
    // Subscribing again by hand works.
    sub.ssubscribe(keys.released()).await.unwrap();
    let n3: i64 = call.invoke_async(&mut conn).await.unwrap();
    let again = drain(&mut rx, Duration::from_millis(500)).await;
    println!("PROBE q3 after SSUBSCRIBE again: {n3} subscriber(s); pushes {again:?}");
    assert_eq!(n3, 1);
}

/// The primary a client SSUBSCRIBEd at dies and its replica takes over:
/// does redis-rs's cluster connection subscribe again at the new primary?
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn q3_ssubscribe_across_a_failover() {
    let mut cluster = RedisClusterSet::start().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut sub = connect(
        builder(&cluster)
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(tx),
    )
    .await;
    let mut conn = connect(
        builder(&cluster)
            .min_retry_wait(50)
            .max_retry_wait(500)
            .overall_response_timeout(Some(Duration::from_secs(20))),
    )
    .await;
    let name = name_on(1, "sfailover");
    let keys = Keys::new("", &name);
    sub.ssubscribe(keys.released()).await.unwrap();
    let _ = drain(&mut rx, Duration::from_millis(300)).await;
    let publish = fresh_script("return redis.call('SPUBLISH', KEYS[2], ARGV[1])");
    let mut call = invocation(&publish, &[keys.lock(), keys.released()]);
    call.arg("x");
    assert_eq!(call.invoke_async::<i64>(&mut conn).await.unwrap(), 1);
    let _ = drain(&mut rx, Duration::from_millis(300)).await;

    let started = Instant::now();
    let promoted = tokio::task::block_in_place(|| {
        cluster.kill_node(1).unwrap();
        cluster
            .wait_for_failover(1, Duration::from_secs(20))
            .unwrap()
    });
    let failed_over = started.elapsed();
    let mut seen = Vec::new();
    let mut reached = Vec::new();
    for _ in 0..10 {
        let n: i64 = call.invoke_async(&mut conn).await.unwrap_or(-1);
        reached.push(n);
        seen.extend(drain(&mut rx, Duration::from_millis(500)).await);
        if n == 1 {
            break;
        }
    }
    println!(
        "PROBE q3 failover to node {promoted} after {failed_over:?}; SPUBLISH at the new primary reached {reached:?} subscriber(s) (one try every ~0.5 s); pushes {seen:?}"
    );
    // A command through the subscriber's connection for that slot makes it
    // refresh its slot map (the old node is gone), which resubscribes what
    // it tracks at the owners of the map.
    let r: redis::RedisResult<Option<String>> = redis::cmd("GET")
        .arg(keys.lock())
        .query_async(&mut sub)
        .await;
    let mut reached_after = Vec::new();
    let mut seen_after = Vec::new();
    for _ in 0..6 {
        let n: i64 = call.invoke_async(&mut conn).await.unwrap_or(-1);
        reached_after.push(n);
        seen_after.extend(drain(&mut rx, Duration::from_millis(500)).await);
        if n == 1 {
            break;
        }
    }
    println!(
        "PROBE q3 after a GET through the subscriber's connection ({:?}): SPUBLISH reached {reached_after:?}; pushes {seen_after:?}",
        r.map_err(|e| kind(&e))
    );
    assert!(
        reached.iter().all(|&n| n == 0),
        "not resubscribed on its own"
    );
}

/// A server-sent `sunsubscribe` (the slot left the node) arrives on a
/// RESP3 connection while a request is in flight on it: redis-rs 1.8
/// takes a `sunsubscribe` push for a reply (it expects one for its own
/// SUNSUBSCRIBE), so the request in flight gets the push as its answer,
/// and its own answer goes to the next request. Shown with a BLPOP in
/// flight on the cluster connection's link to node 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q3_a_server_sunsubscribe_is_taken_for_the_reply_of_a_request_in_flight() {
    let cluster = RedisClusterSet::start().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let sub = connect(
        builder(&cluster)
            .response_timeout(Duration::from_secs(10))
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(tx),
    )
    .await;
    let names = names_on(0, "desync", 2);
    let (moving, staying) = (&names[0], &names[1]);
    let channel = Keys::new("", moving).released().to_string();
    let mut s = sub.clone();
    s.ssubscribe(&channel).await.unwrap();
    let _ = drain(&mut rx, Duration::from_millis(300)).await;
    cluster.node(0).cmd(&["SET", staying, "value"]).unwrap();
    let list = Keys::aux(staying, "list");
    let mut b = sub.clone();
    let blpop = tokio::spawn(async move {
        let started = Instant::now();
        let r: redis::RedisResult<Value> = redis::cmd("BLPOP")
            .arg(&list)
            .arg(3)
            .query_async(&mut b)
            .await;
        (r, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let slot = RedisClusterSet::slot_of(moving);
    tokio::task::block_in_place(|| cluster.migrate_slot(slot, 0, 1).unwrap());
    let (r, took) = blpop.await.unwrap();
    println!("PROBE q3 desync: BLPOP (3 s timeout, nothing pushed) -> {r:?} after {took:?}");
    let mut g = sub.clone();
    let next: redis::RedisResult<Value> = redis::cmd("GET").arg(staying).query_async(&mut g).await;
    let next2: redis::RedisResult<Value> = redis::cmd("GET").arg(staying).query_async(&mut g).await;
    println!(
        "PROBE q3 desync: then GET {staying} -> {next:?}, and again -> {next2:?}; pushes {:?}",
        drain(&mut rx, Duration::from_millis(200)).await
    );
}

// ---------------------------------------------------------------------------
// Question 4: addresses
// ---------------------------------------------------------------------------

/// `node_address_map` maps the addresses the nodes announce to proxies:
/// every connection (slot owners, MOVED targets) goes through them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q4_node_address_map_puts_a_proxy_in_front_of_every_node() {
    let cluster = RedisClusterSet::start().unwrap();
    let proxies: Vec<Proxy> = (0..6)
        .map(|i| Proxy::start(cluster.node(i).addr()).unwrap())
        .collect();
    let map = proxy_map(&cluster, &proxies);
    // Seeds: the proxies (a direct seed would be used as it is).
    let proxied_seeds: Vec<String> = (0..3)
        .map(|i| format!("redis://{}", proxies[i].addr()))
        .collect();
    let mut conn = connect(
        ClusterClientBuilder::new(proxied_seeds)
            .node_address_map(map)
            .connection_timeout(Duration::from_millis(500))
            .response_timeout(Duration::from_millis(500)),
    )
    .await;
    let script = fresh_script(ACQUIRE_LIKE);
    for owner in 0..3 {
        let name = name_on(owner, "proxied");
        assert_eq!(call_three(&mut conn, &script, &name).await.unwrap(), 1);
    }
    let via: Vec<usize> = proxies.iter().map(Proxy::connections).collect();
    let direct: Vec<u64> = (0..3)
        .map(|i| {
            let info = cluster.node(i).cmd(&["CLIENT", "LIST"]).unwrap();
            info.as_str().unwrap_or_default().lines().count() as u64
        })
        .collect();
    println!("PROBE q4 connections through each node's proxy: {via:?}; client connections each primary sees: {direct:?}");
    assert!(via[..3].iter().all(|&n| n >= 1));
    // MOVED names the real address; it is mapped too.
    let name = name_on(0, "proxied");
    cluster
        .migrate_slot(RedisClusterSet::slot_of(&name), 0, 1)
        .unwrap();
    assert_eq!(call_three(&mut conn, &script, &name).await.unwrap(), 2);
    // A blackholed proxy: requests for node 1's slots time out.
    proxies[1].blackhole();
    let started = Instant::now();
    let r = call_three(&mut conn, &script, &name).await;
    println!(
        "PROBE q4 node 1's proxy blackholed: -> {:?} after {:?}",
        r.as_ref().map_err(kind),
        started.elapsed()
    );
    assert!(r.is_err());
    proxies[1].heal();
}

// ---------------------------------------------------------------------------
// Question 5: the key layout's slots
// ---------------------------------------------------------------------------

/// The hash tag Redis uses for `key`: the part between the first `{` and
/// the first `}` after it, if not empty; else the whole key.
fn hashed_part(key: &str) -> &str {
    if let Some(open) = key.find('{') {
        if let Some(close) = key[open + 1..].find('}') {
            if close > 0 {
                return &key[open + 1..open + 1 + close];
            }
        }
    }
    key
}

/// Which of a name's keys and channels leave the lock key's slot.
#[test]
fn q5_which_keys_leave_the_lock_keys_slot() {
    let cases = [
        ("", "plain"),
        ("app:", "plain"),
        ("", "a{b}c"),
        ("", "{x}"),
        ("", "{x}y"),
        ("", "x{}y"),
        ("", "a}b"),
        ("", "a{b"),
        ("", "}{"),
        ("", "{a}{b}"),
        ("app{1}:", "n"),
        ("app{:", "n}"),
    ];
    for (prefix, name) in cases {
        let k = Keys::new(prefix, name);
        let lock_slot = RedisClusterSet::slot_of(k.lock());
        let aux = [
            k.fencing(),
            k.released(),
            k.queue(),
            k.rw(),
            k.permits(),
            k.holder(),
        ];
        let off: Vec<&str> = aux
            .iter()
            .copied()
            .filter(|a| RedisClusterSet::slot_of(a) != lock_slot)
            .collect();
        let leader = lock_redis::kit::layout::LeaderKeys::new(prefix, name);
        let leader_off = leader
            .all()
            .iter()
            .filter(|a| RedisClusterSet::slot_of(a) != lock_slot)
            .count();
        println!(
            "PROBE q5 prefix {prefix:?} name {name:?}: lock key {:?} hashes {:?} (slot {lock_slot}); aux keys in another slot: {off:?}; election keys in another slot: {leader_off}/8",
            k.lock(),
            hashed_part(k.lock())
        );
        let has_brace = k.lock().contains('{') || k.lock().contains('}');
        if name == "a{b}c" {
            assert_eq!(off.len(), aux.len(), "every aux key leaves the slot");
        }
        if !has_brace {
            assert!(off.is_empty() && leader_off == 0);
        }
    }
}
