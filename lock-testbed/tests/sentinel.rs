//! Real Redis Sentinel: a primary, two replicas, three sentinels; failover
//! after a kill, a lagging replica promoted without the writes it missed, a
//! second failover, a graceful one, and the same over TLS.

use std::time::{Duration, Instant};

use lock_testbed::{
    pid_alive, unique_name, Proxy, RespConnection, RespValue, SentinelOptions, SentinelSet,
    TestbedError,
};

fn bulk(s: &str) -> RespValue {
    RespValue::Bulk(Some(s.as_bytes().to_vec()))
}

fn ok() -> RespValue {
    RespValue::Simple("OK".into())
}

/// Slack on top of the configured timeouts: the machine has two busy cores.
const SLACK: Duration = Duration::from_secs(15);

/// How long a failover may take: the primary is down after `down_after`,
/// the sentinels agree and elect a leader, which promotes a replica.
fn failover_bound(opts: &SentinelOptions) -> Duration {
    opts.down_after + opts.failover_timeout + SLACK
}

/// How long a failover that follows another one may take: as long as the
/// first, and room for one failed attempt, which the sentinels repeat after
/// twice the failover timeout.
fn second_failover_bound(opts: &SentinelOptions) -> Duration {
    opts.down_after + 3 * opts.failover_timeout + Duration::from_secs(1) + SLACK
}

/// Polls `probe` until it returns true, at most `within`.
fn eventually(within: Duration, what: &str, mut probe: impl FnMut() -> bool) {
    let started = Instant::now();
    while !probe() {
        assert!(started.elapsed() < within, "{what}: not after {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `ROLE`'s first element on node `i`.
fn role(set: &SentinelSet, i: usize) -> String {
    match set.node(i).cmd(&["ROLE"]).unwrap() {
        RespValue::Array(Some(parts)) => parts[0].as_str().unwrap().to_string(),
        other => panic!("ROLE answered {other:?}"),
    }
}

/// The port node `i` replicates from (`ROLE` of a replica).
fn follows(set: &SentinelSet, i: usize) -> Option<u16> {
    match set.node(i).cmd(&["ROLE"]).ok()? {
        RespValue::Array(Some(parts)) if parts[0].as_str() == Some("slave") => {
            parts[2].as_int().map(|p| p as u16)
        }
        _ => None,
    }
}

/// Writes `key` on node `primary` and waits until `n` replicas acknowledged
/// it (`WAIT` on the connection that wrote).
fn set_replicated(set: &SentinelSet, primary: usize, key: &str, value: &str, n: i64) {
    let mut conn =
        RespConnection::connect(set.node(primary).addr(), Duration::from_secs(10)).unwrap();
    assert_eq!(conn.cmd(&["SET", key, value]).unwrap(), ok());
    let acked = conn.cmd(&["WAIT", &n.to_string(), "5000"]).unwrap();
    assert_eq!(acked, RespValue::Int(n), "replicas acknowledging {key}");
}

/// The set starts ready: node 0 is the primary, both replicas follow it, every
/// sentinel knows the whole set, a write reaches the replicas; drop stops
/// every process and removes every dir.
#[test]
fn sentinel_set_starts_ready_and_replicates() {
    let started = Instant::now();
    let set = SentinelSet::start().unwrap();
    println!("sentinel set ready in {:?}", started.elapsed());

    assert_eq!(set.master_name(), "distlock");
    let sentinels = set.sentinel_addrs();
    assert_eq!(sentinels.len(), 3);
    let hosts: Vec<String> = sentinels.iter().map(|a| a.to_string()).collect();
    assert_eq!(
        set.url(),
        format!("redis+sentinel://{}/distlock", hosts.join(","))
    );
    assert!(set.url().starts_with("redis+sentinel://127.0.0.1:"));
    assert_eq!(set.tls_url(), None);
    assert_eq!(set.data_addrs().len(), 3);
    assert_eq!(set.primary().unwrap(), 0);
    assert_eq!(role(&set, 0), "master");
    for i in [1, 2] {
        assert_eq!(role(&set, i), "slave");
        assert_eq!(follows(&set, i), Some(set.node(0).addr().port()));
    }
    for s in set.sentinels() {
        let named = s
            .cmd(&["SENTINEL", "get-master-addr-by-name", "distlock"])
            .unwrap();
        assert_eq!(
            named,
            RespValue::Array(Some(vec![
                bulk("127.0.0.1"),
                bulk(&set.node(0).addr().port().to_string())
            ]))
        );
        let ckquorum = s.cmd(&["SENTINEL", "CKQUORUM", "distlock"]).unwrap();
        assert!(
            ckquorum
                .as_str()
                .unwrap()
                .starts_with("OK 3 usable Sentinels"),
            "{ckquorum:?}"
        );
    }

    let key = unique_name("replicated");
    set_replicated(&set, 0, &key, "v", 2);
    for i in [1, 2] {
        assert_eq!(set.node(i).cmd(&["GET", &key]).unwrap(), bulk("v"));
        // Replicas are read-only.
        let refused = set.node(i).cmd(&["SET", &key, "w"]).unwrap();
        assert!(matches!(refused, RespValue::Error(e) if e.starts_with("READONLY")));
    }

    // Wrong indices are errors, not panics.
    assert!(matches!(
        set.lag_replica(3).unwrap_err(),
        TestbedError::NoSuchMember { index: 3, .. }
    ));
    // The primary has no replication link to cut.
    assert!(set.lag_replica(0).is_err());

    let mut pids: Vec<u32> = set.nodes().iter().filter_map(|n| n.pid()).collect();
    pids.extend(set.sentinels().iter().filter_map(|s| s.pid()));
    assert_eq!(pids.len(), 6);
    let mut dirs: Vec<_> = set
        .nodes()
        .iter()
        .map(|n| n.dir().unwrap().to_path_buf())
        .collect();
    dirs.extend(set.sentinels().iter().map(|s| s.dir().to_path_buf()));
    assert!(dirs[3].join("sentinel.conf").exists());
    drop(set);
    for pid in pids {
        assert!(!pid_alive(pid), "pid {pid} alive after drop");
    }
    for dir in dirs {
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}

/// Killing the primary makes the sentinels promote a replica, which has the
/// replicated data; the old primary, restarted, follows the new one and gets
/// the data back from it.
#[test]
fn killed_primary_fails_over_and_returns_as_a_replica() {
    let mut set = SentinelSet::start().unwrap();
    let opts = set.options();
    let key = unique_name("before-kill");
    set_replicated(&set, 0, &key, "v", 2);

    let killed_at = Instant::now();
    let old = set.kill_primary().unwrap();
    assert_eq!(old, 0);
    assert!(set
        .node(0)
        .cmd(&["PING"])
        .unwrap_err()
        .is_connection_error());
    let new = set.wait_for_failover(old, failover_bound(&opts)).unwrap();
    println!(
        "failover: kill to new primary {new} in {:?}",
        killed_at.elapsed()
    );
    assert_ne!(new, old);
    assert_eq!(set.primary().unwrap(), new);
    assert_eq!(role(&set, new), "master");
    assert_eq!(set.node(new).cmd(&["GET", &key]).unwrap(), bulk("v"));
    let after = unique_name("after-failover");
    assert_eq!(set.node(new).cmd(&["SET", &after, "w"]).unwrap(), ok());

    let restarted_at = Instant::now();
    set.restart_node(old).unwrap();
    println!(
        "old primary back as a replica in {:?}",
        restarted_at.elapsed()
    );
    assert_eq!(role(&set, old), "slave");
    assert_eq!(follows(&set, old), Some(set.node(new).addr().port()));
    assert_eq!(set.primary().unwrap(), new);
    eventually(Duration::from_secs(10), "the old primary syncs", || {
        set.node(old).cmd(&["GET", &after]).unwrap() == bulk("w")
    });
    // The third node follows the new primary too.
    let third = 3 - old - new;
    eventually(SLACK, "the other replica follows the new primary", || {
        follows(&set, third) == Some(set.node(new).addr().port())
    });
}

/// A replica cut off from its primary misses the writes made meanwhile; made
/// the only promotable replica, it is promoted when the primary dies, and the
/// write it missed is gone from the new primary (and, once it resyncs, from
/// the other replica too).
#[test]
fn lagging_preferred_replica_is_promoted_without_the_missed_write() {
    let mut set = SentinelSet::start().unwrap();
    let opts = set.options();
    let before = unique_name("before-lag");
    set_replicated(&set, 0, &before, "v", 2);
    set.prefer(1).unwrap();

    set.lag_replica(1).unwrap();
    let frozen = set.repl_offset(1).unwrap();
    let during = unique_name("during-lag");
    let mut conn = RespConnection::connect(set.node(0).addr(), Duration::from_secs(10)).unwrap();
    assert_eq!(conn.cmd(&["SET", &during, "lost"]).unwrap(), ok());
    // Only the healthy replica acknowledges the write.
    assert_eq!(conn.cmd(&["WAIT", "2", "300"]).unwrap(), RespValue::Int(1));
    assert_eq!(set.node(2).cmd(&["GET", &during]).unwrap(), bulk("lost"));
    assert_eq!(
        set.node(1).cmd(&["GET", &during]).unwrap(),
        RespValue::Bulk(None)
    );
    assert_eq!(
        set.repl_offset(1).unwrap(),
        frozen,
        "the lagging offset moved"
    );
    assert!(set.repl_offset(0).unwrap() > frozen);
    let info = set.node(1).cmd(&["INFO", "replication"]).unwrap();
    assert!(info.as_str().unwrap().contains("master_link_status:down"));

    let killed_at = Instant::now();
    assert_eq!(set.kill_primary().unwrap(), 0);
    let new = set.wait_for_failover(0, failover_bound(&opts)).unwrap();
    println!(
        "failover to the lagging replica in {:?}",
        killed_at.elapsed()
    );
    assert_eq!(new, 1, "the preferred (lagging) replica was not promoted");
    assert_eq!(set.node(1).cmd(&["GET", &before]).unwrap(), bulk("v"));
    assert_eq!(
        set.node(1).cmd(&["GET", &during]).unwrap(),
        RespValue::Bulk(None),
        "the new primary has a write it never received"
    );
    // The other replica follows the new primary and drops what it had more.
    eventually(SLACK, "node 2 resyncs from the new primary", || {
        follows(&set, 2) == Some(set.node(1).addr().port())
            && set.node(2).cmd(&["GET", &during]).ok() == Some(RespValue::Bulk(None))
    });
    // Healing a node that was promoted meanwhile only clears the lag.
    set.heal_replica(1).unwrap();
    assert_eq!(set.primary().unwrap(), 1);
}

/// A lag that is healed catches up: the replica gets the writes it missed.
#[test]
fn healed_replica_catches_up() {
    let set = SentinelSet::start().unwrap();
    set.lag_replica(2).unwrap();
    let key = unique_name("missed");
    set_replicated(&set, 0, &key, "v", 1);
    let frozen = set.repl_offset(2).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(set.repl_offset(2).unwrap(), frozen);
    assert_eq!(
        set.node(2).cmd(&["GET", &key]).unwrap(),
        RespValue::Bulk(None)
    );
    set.heal_replica(2).unwrap();
    set_replicated(&set, 0, &unique_name("after-heal"), "w", 2);
    assert_eq!(set.node(2).cmd(&["GET", &key]).unwrap(), bulk("v"));
    assert!(set.repl_offset(2).unwrap() > frozen);
}

/// Two failovers by kill in one set, then a graceful one: each promotes
/// another node, and data written before each survives it.
#[test]
fn second_failover_and_graceful_failover_in_the_same_set() {
    let mut set = SentinelSet::start().unwrap();
    let opts = set.options();

    let first_key = unique_name("first");
    set_replicated(&set, 0, &first_key, "1", 2);
    let t = Instant::now();
    let a = set.kill_primary().unwrap();
    let b = set.wait_for_failover(a, failover_bound(&opts)).unwrap();
    println!("first failover {a} -> {b} in {:?}", t.elapsed());
    set.restart_node(a).unwrap();

    let second_key = unique_name("second");
    set_replicated(&set, b, &second_key, "2", 2);
    let t = Instant::now();
    assert_eq!(set.kill_primary().unwrap(), b);
    let c = set
        .wait_for_failover(b, second_failover_bound(&opts))
        .unwrap();
    println!("second failover {b} -> {c} in {:?}", t.elapsed());
    assert_ne!(c, b);
    for key in [&first_key, &second_key] {
        assert!(set.node(c).cmd(&["GET", key]).unwrap().as_bytes().is_some());
    }
    set.restart_node(b).unwrap();
    assert_eq!(set.primary().unwrap(), c);

    let third_key = unique_name("third");
    set_replicated(&set, c, &third_key, "3", 2);
    let t = Instant::now();
    let d = set.failover().unwrap();
    println!("graceful failover {c} -> {d} in {:?}", t.elapsed());
    assert_ne!(d, c);
    assert_eq!(set.primary().unwrap(), d);
    assert_eq!(role(&set, c), "slave");
    assert_eq!(follows(&set, c), Some(set.node(d).addr().port()));
    assert_eq!(set.node(d).cmd(&["GET", &third_key]).unwrap(), bulk("3"));
    // Exactly one primary.
    let masters = (0..3).filter(|&i| role(&set, i) == "master").count();
    assert_eq!(masters, 1);
}

/// A sentinel killed and restarted comes back from its rewritten config and
/// names the primary; with one sentinel down the others still fail over.
#[test]
fn sentinel_restarts_from_its_config_and_two_suffice() {
    let mut set = SentinelSet::start().unwrap();
    let opts = set.options();
    let pid = set.sentinel(2).pid().unwrap();
    set.sentinel_mut(2).kill();
    assert!(!pid_alive(pid));
    assert_eq!(set.primary().unwrap(), 0);
    let old = set.kill_primary().unwrap();
    let new = set.wait_for_failover(old, failover_bound(&opts)).unwrap();
    set.sentinel_mut(2).restart().unwrap();
    let port = set.node(new).addr().port().to_string();
    eventually(
        SLACK,
        "the restarted sentinel names the new primary",
        || {
            set.sentinel(2)
                .cmd(&["SENTINEL", "get-master-addr-by-name", "distlock"])
                .ok()
                == Some(RespValue::Array(Some(vec![bulk("127.0.0.1"), bulk(&port)])))
        },
    );
}

/// With TLS the sentinels and the nodes listen on TLS ports too, replicate
/// and talk over TLS, name the TLS ports, and still fail over.
#[test]
fn tls_sentinel_set_fails_over() {
    let opts = SentinelOptions {
        tls: true,
        ..SentinelOptions::default()
    };
    let started = Instant::now();
    let mut set = SentinelSet::start_with(opts).unwrap();
    println!("TLS sentinel set ready in {:?}", started.elapsed());
    let tls_url = set.tls_url().unwrap();
    let hosts: Vec<String> = set
        .sentinels()
        .iter()
        .map(|s| s.tls_addr().unwrap().to_string())
        .collect();
    assert_eq!(
        tls_url,
        format!("rediss+sentinel://{}/distlock", hosts.join(","))
    );
    let primary_tls = set.node(0).tls_addr().unwrap().port();
    let named = set
        .sentinel(0)
        .cmd(&["SENTINEL", "get-master-addr-by-name", "distlock"])
        .unwrap();
    assert_eq!(
        named,
        RespValue::Array(Some(vec![
            bulk("127.0.0.1"),
            bulk(&primary_tls.to_string())
        ]))
    );
    for i in [1, 2] {
        assert_eq!(follows(&set, i), Some(primary_tls));
    }
    // The sentinels know each other (connected) by their TLS ports.
    let others = set
        .sentinel(0)
        .cmd(&["SENTINEL", "sentinels", "distlock"])
        .unwrap();
    let RespValue::Array(Some(others)) = others else {
        panic!("SENTINEL sentinels answered {others:?}");
    };
    let mut ports: Vec<String> = others
        .iter()
        .map(|record| {
            let RespValue::Array(Some(fields)) = record else {
                panic!("{record:?}");
            };
            let at = fields
                .iter()
                .position(|f| f.as_str() == Some("port"))
                .unwrap();
            fields[at + 1].as_str().unwrap().to_string()
        })
        .collect();
    ports.sort();
    let mut tls_ports: Vec<String> = set.sentinels()[1..]
        .iter()
        .map(|s| s.tls_addr().unwrap().port().to_string())
        .collect();
    tls_ports.sort();
    assert_eq!(ports, tls_ports);
    let key = unique_name("tls");
    set_replicated(&set, 0, &key, "v", 2);

    let t = Instant::now();
    let old = set.kill_primary().unwrap();
    let new = set.wait_for_failover(old, failover_bound(&opts)).unwrap();
    println!("TLS failover {old} -> {new} in {:?}", t.elapsed());
    assert_eq!(set.node(new).cmd(&["GET", &key]).unwrap(), bulk("v"));
    set.restart_node(old).unwrap();
    assert_eq!(
        follows(&set, old),
        Some(set.node(new).tls_addr().unwrap().port())
    );
}

/// Why `lag_replica` does not put a proxy on the replication link: the
/// sentinels point a replica that follows another address than the
/// primary's at the primary itself (`+fix-slave-config`) within the failover
/// timeout, so a proxied link would not stay proxied.
#[test]
fn sentinels_repoint_a_replica_that_follows_a_proxy() {
    let set = SentinelSet::start().unwrap();
    let opts = set.options();
    let proxy = Proxy::start(set.node(0).addr()).unwrap();
    let port = proxy.addr().port();
    assert_eq!(
        set.node(2)
            .cmd(&["REPLICAOF", "127.0.0.1", &port.to_string()])
            .unwrap(),
        ok()
    );
    eventually(SLACK, "node 2 follows the proxy", || {
        follows(&set, 2) == Some(port)
    });
    let t = Instant::now();
    eventually(
        opts.failover_timeout + SLACK,
        "the sentinels repoint node 2 at the primary",
        || follows(&set, 2) == Some(set.node(0).addr().port()),
    );
    println!("replica repointed from the proxy after {:?}", t.elapsed());
    assert!(set
        .sentinels()
        .iter()
        .any(|s| s.log_tail(200).contains("+fix-slave-config")));
}
