//! `lock_redis::kit::cluster::ClusterConn` on a real Redis Cluster
//! (`lock_testbed::RedisClusterSet`): lock-redis's script calls reach the
//! owner of their slot, follow MOVED, ASK and TRYAGAIN through a slot
//! migration (transactions: MOVED), and a call whose reply was lost is
//! never sent again — not to the same node, not to a new primary after a
//! failover.

mod support;

use std::time::{Duration, Instant};

use lock_core::TlsConfig;
use lock_redis::kit::call::{Lua, ScriptCall};
use lock_redis::kit::cluster::{client_builder, ClusterConn, ClusterSettings, ClusterTarget};
use lock_redis::kit::layout::Keys;
use lock_testbed::{Proxy, RedisClusterSet, RedisServer};
use support::name_on_primary;

/// A lock name whose slot belongs to primary `owner` of a fresh cluster.
fn name_on(owner: usize, tag: &str) -> String {
    name_on_primary(owner, &format!("conn:{tag}:"))
}

fn settings(request_timeout: Duration) -> ClusterSettings {
    ClusterSettings {
        connect_timeout: Duration::from_secs(1),
        request_timeout,
        address_map: Vec::new(),
    }
}

async fn connect(url: &str, settings: &ClusterSettings) -> ClusterConn {
    let target = ClusterTarget::parse(url).unwrap().unwrap();
    let builder = client_builder(&target, &TlsConfig::default(), settings).unwrap();
    ClusterConn::connect(builder).await.unwrap()
}

/// Like an acquisition: the lock key set, the counter incremented, and
/// two more keys of the name named, which usually do not exist (as the
/// queue and holder keys of lock-redis's scripts).
const ACQUIRE_LIKE: &str = "redis.call('SET', KEYS[1], ARGV[1]) \
     redis.call('PEXPIRE', KEYS[1], 60000) \
     redis.call('GET', KEYS[3]) \
     redis.call('GET', KEYS[4]) \
     return redis.call('INCR', KEYS[2])";

fn fresh(body: &str) -> Lua {
    Lua::new(format!(
        "-- {}\n{body}",
        lock_redis::kit::layout::owner_token()
    ))
}

async fn acquire_like(conn: &mut ClusterConn, script: &Lua, name: &str) -> redis::RedisResult<i64> {
    let k = Keys::new("", name);
    let mut call = ScriptCall::new(script, &[k.lock(), k.fencing(), k.queue(), k.holder()]);
    call.arg("token");
    call.invoke_async(conn).await
}

fn evalsha(node: &RedisServer) -> u64 {
    node.calls("evalsha").unwrap_or(0)
}

fn counter(node: &RedisServer, key: &str) -> i64 {
    node.cmd(&["GET", key])
        .unwrap()
        .as_str()
        .map_or(0, |s| s.parse().unwrap())
}

/// Calls reach the owner of their slot on each primary, run as `EVAL` of
/// the source there on NOSCRIPT (no `SCRIPT LOAD` anywhere), follow MOVED
/// after a migration; `slots()` reads the map.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_reach_the_owner_and_follow_moved() {
    let cluster = RedisClusterSet::start().unwrap();
    let mut conn = connect(&cluster.url(), &settings(Duration::from_secs(2))).await;
    let slots = conn.slots().await.unwrap();
    let addrs: Vec<String> = (0..3).map(|i| cluster.node(i).addr().to_string()).collect();
    assert_eq!(
        slots,
        [
            (0, 5460, addrs[0].clone()),
            (5461, 10922, addrs[1].clone()),
            (10923, 16383, addrs[2].clone())
        ]
    );
    let script = fresh(ACQUIRE_LIKE);
    for owner in 0..3 {
        let name = name_on(owner, "owner");
        let before = evalsha(cluster.node(owner));
        assert_eq!(acquire_like(&mut conn, &script, &name).await.unwrap(), 1);
        assert!(evalsha(cluster.node(owner)) > before, "ran on node {owner}");
        assert_eq!(
            cluster.node(owner).calls("eval").unwrap_or(0),
            1,
            "EVAL on node {owner}"
        );
    }
    for i in 0..6 {
        assert_eq!(
            cluster.node(i).calls("script|load").unwrap_or(0),
            0,
            "node {i}"
        );
    }
    let name = name_on(0, "owner");
    let slot = RedisClusterSet::slot_of(&name);
    cluster.migrate_slot(slot, 0, 2).unwrap();
    let before = evalsha(cluster.node(2));
    assert_eq!(acquire_like(&mut conn, &script, &name).await.unwrap(), 2);
    assert_eq!(
        evalsha(cluster.node(2)),
        before + 1,
        "followed MOVED to node 2"
    );
    assert_eq!(counter(cluster.node(2), Keys::new("", &name).fencing()), 2);
}

/// A transaction (what `inspect` sends: MULTI ... EXEC) reaches the owner
/// of its slot and follows MOVED after the slot's migration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_follows_moved() {
    let cluster = RedisClusterSet::start().unwrap();
    let mut conn = connect(&cluster.url(), &settings(Duration::from_secs(2))).await;
    let name = name_on(0, "transaction");
    let k = Keys::new("", &name);
    let script = fresh(ACQUIRE_LIKE);
    assert_eq!(acquire_like(&mut conn, &script, &name).await.unwrap(), 1);
    let read = |conn: &mut ClusterConn| {
        let mut conn = conn.clone();
        let (lock, fencing) = (k.lock().to_string(), k.fencing().to_string());
        async move {
            let mut pipe = redis::pipe();
            pipe.atomic().cmd("GET").arg(&lock).cmd("GET").arg(&fencing);
            pipe.query_async::<(Option<String>, Option<i64>)>(&mut conn)
                .await
        }
    };
    let expected = (Some("token".to_string()), Some(1));
    let exec = |node: usize| cluster.node(node).calls("exec").unwrap_or(0);
    let before = exec(0);
    assert_eq!(read(&mut conn).await.unwrap(), expected);
    assert_eq!(exec(0), before + 1, "ran on the owner, node 0");
    cluster
        .migrate_slot(RedisClusterSet::slot_of(&name), 0, 2)
        .unwrap();
    let before = exec(2);
    assert_eq!(read(&mut conn).await.unwrap(), expected);
    assert_eq!(exec(2), before + 1, "followed MOVED to node 2");
}

/// A slot migration in the middle of calls: keys not moved (TRYAGAIN: some
/// of the script's keys absent), keys moved (ASK, then TRYAGAIN from the
/// target), migration finished (MOVED): a call made at the start of the
/// migration completes once it ends, and ran exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_rides_out_a_slot_migration() {
    let cluster = RedisClusterSet::start().unwrap();
    let mut conn = connect(&cluster.url(), &settings(Duration::from_secs(2))).await;
    let script = fresh(ACQUIRE_LIKE);
    let name = name_on(1, "migrate");
    let slot = RedisClusterSet::slot_of(&name);
    assert_eq!(acquire_like(&mut conn, &script, &name).await.unwrap(), 1);

    // Every key of the script exists on the source: ASK once moved.
    let k = Keys::new("", &name);
    let existing = fresh("redis.call('SET', KEYS[1], ARGV[1]) return redis.call('INCR', KEYS[2])");
    let both = |conn: &mut ClusterConn| {
        let mut conn = conn.clone();
        let (existing, lock, fencing) = (
            existing.clone(),
            k.lock().to_string(),
            k.fencing().to_string(),
        );
        async move {
            let mut call = ScriptCall::new(&existing, &[lock.as_str(), fencing.as_str()]);
            call.arg("token");
            call.invoke_async::<i64>(&mut conn).await
        }
    };
    cluster.begin_migration(slot, 1, 0).unwrap();
    assert_eq!(
        both(&mut conn).await.unwrap(),
        2,
        "not moved yet: runs on the source"
    );
    cluster.move_keys(slot, 1, 0).unwrap();
    let before = evalsha(cluster.node(0));
    assert_eq!(
        both(&mut conn).await.unwrap(),
        3,
        "moved: ASK to the target"
    );
    assert!(evalsha(cluster.node(0)) > before);

    // A call with absent keys gets TRYAGAIN until the migration ends.
    let mut waiting = conn.clone();
    let (script2, name2) = (script.clone(), name.clone());
    let pending = tokio::spawn(async move {
        let started = Instant::now();
        let r = tokio::time::timeout(
            Duration::from_secs(10),
            acquire_like(&mut waiting, &script2, &name2),
        )
        .await;
        (r, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!pending.is_finished(), "refused (TRYAGAIN) while migrating");
    tokio::task::block_in_place(|| cluster.finish_migration(slot, 0).unwrap());
    let (r, took) = pending.await.unwrap();
    println!("a call with absent keys, made during the migration: {r:?} after {took:?}");
    assert_eq!(r.unwrap().unwrap(), 4, "ran once, after the migration");
    assert_eq!(counter(cluster.node(0), k.fencing()), 4);
}

fn proxies_for(cluster: &RedisClusterSet) -> (Vec<Proxy>, Vec<(String, String)>, String) {
    let proxies: Vec<Proxy> = (0..6)
        .map(|i| Proxy::start(cluster.node(i).addr()).unwrap())
        .collect();
    let map = (0..6)
        .map(|i| {
            (
                cluster.node(i).addr().to_string(),
                proxies[i].addr().to_string(),
            )
        })
        .collect();
    let seeds: Vec<String> = (0..3).map(|i| proxies[i].addr().to_string()).collect();
    (proxies, map, format!("redis+cluster://{}", seeds.join(",")))
}

/// The reply of a script is lost (the node ran it): the call fails within
/// the request timeout and is NOT sent again, though other requests keep
/// the connection busy (redis-rs with its default retries ran it 7 times in
/// the same set-up: see cluster_probe.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_reply_was_lost_runs_once() {
    let cluster = RedisClusterSet::start().unwrap();
    let (proxies, map, url) = proxies_for(&cluster);
    let mut s = settings(Duration::from_millis(300));
    s.address_map = map;
    let mut conn = connect(&url, &s).await;
    let name = name_on(0, "lost");
    let key = Keys::aux(&name, "counter");
    let incr = fresh("return redis.call('INCR', KEYS[1])");
    let _: i64 = ScriptCall::new(&incr, &[key.as_str()])
        .invoke_async(&mut conn)
        .await
        .unwrap();
    let mut other = conn.clone();
    let elsewhere = name_on(1, "busy");
    let busy = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _: redis::RedisResult<Option<String>> = redis::cmd("GET")
                .arg(&elsewhere)
                .query_async(&mut other)
                .await;
        }
    });
    proxies[0].drop_replies();
    let started = Instant::now();
    let r: redis::RedisResult<i64> = ScriptCall::new(&incr, &[key.as_str()])
        .invoke_async(&mut conn)
        .await;
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    busy.abort();
    proxies[0].heal();
    println!(
        "lost reply: {r:?} after {took:?}; counter {}",
        counter(cluster.node(0), &key)
    );
    assert!(r.unwrap_err().is_timeout());
    assert!(took < Duration::from_millis(800), "{took:?}");
    assert_eq!(
        counter(cluster.node(0), &key),
        2,
        "ran once more, not again"
    );
}

/// The reply of a script is lost, and its node dies and fails over: the
/// call fails; the new primary never runs it (redis-rs with its default
/// retries sent it there: see cluster_probe.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_call_whose_reply_was_lost_is_not_resent_after_a_failover() {
    let mut cluster = RedisClusterSet::start().unwrap();
    let (proxies, map, url) = proxies_for(&cluster);
    let mut s = settings(Duration::from_millis(500));
    s.address_map = map;
    let mut conn = connect(&url, &s).await;
    let name = name_on(0, "failover");
    let key = Keys::aux(&name, "counter");
    let incr = fresh("return redis.call('INCR', KEYS[1])");
    let _: i64 = ScriptCall::new(&incr, &[key.as_str()])
        .invoke_async(&mut conn)
        .await
        .unwrap();
    proxies[0].drop_replies();
    let mut calling = conn.clone();
    let (incr2, key2) = (incr.clone(), key.clone());
    let pending = tokio::spawn(async move {
        let started = Instant::now();
        let r: redis::RedisResult<i64> = ScriptCall::new(&incr2, &[key2.as_str()])
            .invoke_async(&mut calling)
            .await;
        (r, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let promoted = tokio::task::block_in_place(|| {
        cluster.kill_node(0).unwrap();
        cluster
            .wait_for_failover(0, Duration::from_secs(20))
            .unwrap()
    });
    let (r, took) = pending.await.unwrap();
    // Requests work again, at the new primary.
    let mut after = None;
    for _ in 0..40 {
        match ScriptCall::new(&incr, &[key.as_str()])
            .invoke_async::<i64>(&mut conn)
            .await
        {
            Ok(n) => {
                after = Some(n);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    println!(
        "lost reply, then a failover to node {promoted}: {r:?} after {took:?}; the next call -> {after:?}; evalsha run by node {promoted}: {}",
        evalsha(cluster.node(promoted))
    );
    assert!(r.is_err());
    // 1 (before) + 1 (the lost call, replicated) + 1 (the next call): the
    // lost call never ran again at the new primary.
    assert_eq!(after, Some(3));
}
