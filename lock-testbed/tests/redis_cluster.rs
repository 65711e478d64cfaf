//! Real Redis Cluster: three primaries and three replicas; slots, MOVED,
//! a slot migration with ASK in the middle, a primary's failover.

use std::time::{Duration, Instant};

use lock_testbed::{
    pid_alive, unique_name, ClusterOptions, RedisClusterSet, RedisOptions, RedisServer,
    RespConnection, RespValue, TestbedError,
};

fn bulk(s: &str) -> RespValue {
    RespValue::Bulk(Some(s.as_bytes().to_vec()))
}

fn ok() -> RespValue {
    RespValue::Simple("OK".into())
}

/// Slack on top of the configured timeouts: the machine has two busy cores.
const SLACK: Duration = Duration::from_secs(15);

/// The error text of a redirection, e.g. `MOVED 1234 127.0.0.1:5678`.
fn redirect(reply: RespValue) -> String {
    match reply {
        RespValue::Error(e) => e,
        other => panic!("expected a redirection, got {other:?}"),
    }
}

/// `ROLE`'s first element on node `i`.
fn role(cluster: &RedisClusterSet, i: usize) -> String {
    match cluster.node(i).cmd(&["ROLE"]).unwrap() {
        RespValue::Array(Some(parts)) => parts[0].as_str().unwrap().to_string(),
        other => panic!("ROLE answered {other:?}"),
    }
}

/// The cluster starts ready: six nodes, three primaries owning every slot,
/// one replica each; drop stops every process and removes every dir.
#[test]
fn cluster_starts_ready() {
    let started = Instant::now();
    let cluster = RedisClusterSet::start().unwrap();
    println!("redis cluster ready in {:?}", started.elapsed());
    assert_eq!(cluster.options(), ClusterOptions::default());
    assert_eq!(cluster.nodes().len(), 6);
    let primaries = cluster.primaries();
    assert_eq!(primaries.len(), 3);
    let hosts: Vec<String> = primaries.iter().map(|a| a.to_string()).collect();
    assert_eq!(
        cluster.url(),
        format!("redis+cluster://{}", hosts.join(","))
    );
    assert!(cluster.url().starts_with("redis+cluster://127.0.0.1:"));
    assert_eq!(cluster.current_primaries().unwrap(), vec![0, 1, 2]);
    for i in 0..6 {
        let info = cluster.node(i).cmd(&["CLUSTER", "INFO"]).unwrap();
        let info = info.as_str().unwrap();
        assert!(info.contains("cluster_state:ok"), "node {i}: {info}");
        assert!(info.contains("cluster_known_nodes:6"), "node {i}: {info}");
        assert!(
            info.contains("cluster_slots_assigned:16384"),
            "node {i}: {info}"
        );
        assert_eq!(role(&cluster, i), if i < 3 { "master" } else { "slave" });
    }
    let mut ids: Vec<&str> = (0..6).map(|i| cluster.node_id(i)).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 6);
    assert_eq!(cluster.owner_of_slot(0).unwrap(), 0);
    assert_eq!(cluster.owner_of_slot(5461).unwrap(), 1);
    assert_eq!(cluster.owner_of_slot(16383).unwrap(), 2);
    assert!(cluster.owner_of_slot(16384).is_err());

    let pids: Vec<u32> = cluster.nodes().iter().filter_map(|n| n.pid()).collect();
    assert_eq!(pids.len(), 6);
    let dirs: Vec<_> = cluster
        .nodes()
        .iter()
        .map(|n| n.dir().unwrap().to_path_buf())
        .collect();
    assert!(dirs.iter().all(|d| d.join("nodes.conf").exists()));
    drop(cluster);
    for pid in pids {
        assert!(!pid_alive(pid), "pid {pid} alive after drop");
    }
    for dir in dirs {
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}

/// `slot_of` agrees with `CLUSTER KEYSLOT` of a real cluster node, hash tags
/// included.
#[test]
fn slot_of_matches_cluster_keyslot() {
    let node = RedisServer::start_with(RedisOptions {
        cluster_node_timeout: Some(Duration::from_secs(1)),
        ..RedisOptions::default()
    })
    .unwrap();
    let mut keys: Vec<String> = [
        "",
        "a",
        "foo",
        "123456789",
        "{user1000}.following",
        "{user1000}.followers",
        "foo{}{bar}",
        "foo{{bar}}zap",
        "foo{bar}{zap}",
        "{}",
        "{",
        "}",
        "}{",
        "{a}{b}",
        "x{}y{z}",
        "lock:{orders}:1",
        "distlock:ünïcode",
    ]
    .iter()
    .map(|k| k.to_string())
    .collect();
    keys.extend((0..300).map(|i| unique_name(&format!("k{i}"))));
    keys.extend((0..50).map(|i| format!("{{tag{i}}}:{}", unique_name("v"))));
    for key in &keys {
        let real = node.cmd(&["CLUSTER", "KEYSLOT", key]).unwrap();
        assert_eq!(
            real,
            RespValue::Int(i64::from(RedisClusterSet::slot_of(key))),
            "slot of {key:?}"
        );
    }
}

/// A key lands on the node that owns its slot; every other node, primary or
/// replica, answers MOVED to that node.
#[test]
fn key_lands_on_its_owner_and_others_answer_moved() {
    let cluster = RedisClusterSet::start().unwrap();
    for n in 0..6 {
        let key = unique_name(&format!("moved{n}"));
        let slot = RedisClusterSet::slot_of(&key);
        let owner = cluster.owner_of_slot(slot).unwrap();
        assert!(owner < 3);
        let owner_addr = cluster.node(owner).addr();
        assert_eq!(cluster.node(owner).cmd(&["SET", &key, "v"]).unwrap(), ok());
        assert_eq!(cluster.node(owner).cmd(&["GET", &key]).unwrap(), bulk("v"));
        for i in (0..6).filter(|&i| i != owner) {
            let moved = redirect(cluster.node(i).cmd(&["GET", &key]).unwrap());
            assert_eq!(moved, format!("MOVED {slot} {owner_addr}"), "node {i}");
        }
    }
}

/// Moving a slot: between begin_migration and finish_migration the source
/// answers ASK for a key it no longer holds and the target serves it after
/// ASKING (and MOVED without); afterwards the source answers MOVED to the
/// target. migrate_slot moves it back in one call.
#[test]
fn migrate_slot_answers_ask_mid_migration() {
    let cluster = RedisClusterSet::start().unwrap();
    let tag = unique_name("mig");
    let (k1, k2) = (format!("{{{tag}}}:1"), format!("{{{tag}}}:2"));
    let slot = RedisClusterSet::slot_of(&k1);
    assert_eq!(RedisClusterSet::slot_of(&k2), slot);
    let from = cluster.owner_of_slot(slot).unwrap();
    let to = (from + 1) % 3;
    let (from_addr, to_addr) = (cluster.node(from).addr(), cluster.node(to).addr());
    for k in [&k1, &k2] {
        assert_eq!(cluster.node(from).cmd(&["SET", k, "v"]).unwrap(), ok());
    }
    // Only the owner may give a slot away.
    assert!(cluster.begin_migration(slot, to, from).is_err());

    cluster.begin_migration(slot, from, to).unwrap();
    // The keys are still on the source: it serves them.
    assert_eq!(cluster.node(from).cmd(&["GET", &k1]).unwrap(), bulk("v"));
    // A key of the slot that does not exist on the source: ASK.
    let absent = format!("{{{tag}}}:absent");
    let ask = redirect(cluster.node(from).cmd(&["GET", &absent]).unwrap());
    assert_eq!(ask, format!("ASK {slot} {to_addr}"));

    assert_eq!(cluster.move_keys(slot, from, to).unwrap(), 2);
    assert_eq!(
        cluster.owner_of_slot(slot).unwrap(),
        from,
        "not finished yet"
    );
    let ask = redirect(cluster.node(from).cmd(&["GET", &k1]).unwrap());
    assert_eq!(ask, format!("ASK {slot} {to_addr}"));
    // Without ASKING the target sends the client back to the owner.
    let moved = redirect(cluster.node(to).cmd(&["GET", &k1]).unwrap());
    assert_eq!(moved, format!("MOVED {slot} {from_addr}"));
    let mut conn = RespConnection::connect(to_addr, Duration::from_secs(2)).unwrap();
    assert_eq!(conn.cmd(&["ASKING"]).unwrap(), ok());
    assert_eq!(conn.cmd(&["GET", &k1]).unwrap(), bulk("v"));
    // ASKING holds for one command only.
    let moved = redirect(conn.cmd(&["GET", &k2]).unwrap());
    assert_eq!(moved, format!("MOVED {slot} {from_addr}"));

    cluster.finish_migration(slot, to).unwrap();
    assert_eq!(cluster.owner_of_slot(slot).unwrap(), to);
    let moved = redirect(cluster.node(from).cmd(&["GET", &k1]).unwrap());
    assert_eq!(moved, format!("MOVED {slot} {to_addr}"));
    assert_eq!(cluster.node(to).cmd(&["GET", &k2]).unwrap(), bulk("v"));

    // And back in one call.
    assert_eq!(cluster.migrate_slot(slot, to, from).unwrap(), 2);
    assert_eq!(cluster.owner_of_slot(slot).unwrap(), from);
    assert_eq!(cluster.node(from).cmd(&["GET", &k1]).unwrap(), bulk("v"));
    let moved = redirect(cluster.node(to).cmd(&["GET", &k1]).unwrap());
    assert_eq!(moved, format!("MOVED {slot} {from_addr}"));
}

/// Killing a primary makes its replica take over its slots, with the data;
/// the old primary, restarted, comes back as that node's replica.
#[test]
fn killed_primary_is_replaced_by_its_replica() {
    let mut cluster = RedisClusterSet::start().unwrap();
    let opts = cluster.options();
    let key = unique_name("failover");
    let slot = RedisClusterSet::slot_of(&key);
    let owner = cluster.owner_of_slot(slot).unwrap();
    let mut conn =
        RespConnection::connect(cluster.node(owner).addr(), Duration::from_secs(10)).unwrap();
    assert_eq!(conn.cmd(&["SET", &key, "v"]).unwrap(), ok());
    assert_eq!(conn.cmd(&["WAIT", "1", "5000"]).unwrap(), RespValue::Int(1));
    drop(conn);

    let killed_at = Instant::now();
    cluster.kill_node(owner).unwrap();
    let promoted = cluster
        .wait_for_failover(owner, opts.node_timeout * 2 + SLACK)
        .unwrap();
    println!(
        "cluster failover: kill to node {promoted} owning the slots in {:?}",
        killed_at.elapsed()
    );
    assert_eq!(
        promoted,
        owner + 3,
        "the killed primary's replica took over"
    );
    assert_eq!(cluster.owner_of_slot(slot).unwrap(), promoted);
    assert_eq!(role(&cluster, promoted), "master");
    assert_eq!(
        cluster.node(promoted).cmd(&["GET", &key]).unwrap(),
        bulk("v")
    );
    let mut primaries = cluster.current_primaries().unwrap();
    primaries.sort_unstable();
    let mut expected: Vec<usize> = (0..3).filter(|&p| p != owner).collect();
    expected.push(promoted);
    expected.sort_unstable();
    assert_eq!(primaries, expected);

    let restarted_at = Instant::now();
    cluster.restart_node(owner).unwrap();
    println!(
        "old primary back as a replica in {:?}",
        restarted_at.elapsed()
    );
    assert_eq!(role(&cluster, owner), "slave");
    assert_eq!(cluster.owner_of_slot(slot).unwrap(), promoted);
    let moved = redirect(cluster.node(owner).cmd(&["GET", &key]).unwrap());
    assert_eq!(
        moved,
        format!("MOVED {slot} {}", cluster.node(promoted).addr())
    );

    // A primary killed by hand (not kill_node) fails over too.
    let other = (0..3).find(|&p| p != owner).unwrap();
    let t = Instant::now();
    cluster.node_mut(other).kill().unwrap();
    let took_over = cluster
        .wait_for_failover(other, opts.node_timeout * 2 + SLACK)
        .unwrap();
    println!("second cluster failover in {:?}", t.elapsed());
    assert_eq!(took_over, other + 3);

    // Killing a replica is no failover.
    cluster.kill_node(owner).unwrap();
    let err = cluster
        .wait_for_failover(owner, Duration::from_secs(1))
        .unwrap_err();
    assert!(matches!(err, TestbedError::Protocol { .. }), "{err}");
}
