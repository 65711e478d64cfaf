//! Start-up of the full set: 5 Redis + 3 etcd + 3 ZooKeeper, in parallel.

use std::time::{Duration, Instant};

use lock_testbed::{pid_alive, EtcdCluster, RedisSet, RespValue, ZkEnsemble};

/// All eleven servers start in parallel well within 30 s, answer, and are gone after drop.
#[test]
fn full_set_starts_in_parallel() {
    let started = Instant::now();
    let (redis, etcd, zk) = std::thread::scope(|s| {
        let redis = s.spawn(|| {
            let t = Instant::now();
            (RedisSet::start(5), t.elapsed())
        });
        let etcd = s.spawn(|| {
            let t = Instant::now();
            (EtcdCluster::start(3), t.elapsed())
        });
        let zk = s.spawn(|| {
            let t = Instant::now();
            (ZkEnsemble::start(3), t.elapsed())
        });
        (
            redis.join().expect("redis thread"),
            etcd.join().expect("etcd thread"),
            zk.join().expect("zk thread"),
        )
    });
    let total = started.elapsed();
    println!(
        "full set ready in {total:?} (5 Redis {:?}, 3 etcd {:?}, 3 ZooKeeper {:?})",
        redis.1, etcd.1, zk.1
    );
    let (redis, etcd, zk) = (redis.0.unwrap(), etcd.0.unwrap(), zk.0.unwrap());
    assert!(total < Duration::from_secs(30), "start-up took {total:?}");

    for node in redis.nodes() {
        assert_eq!(
            node.cmd(&["PING"]).unwrap(),
            RespValue::Simple("PONG".into())
        );
    }
    let leader = etcd.leader().unwrap();
    etcd.put(leader, "startup", b"ok").unwrap();
    let zk_leader = zk.leader().unwrap();
    assert!(zk.srvr(zk_leader).unwrap().contains("Mode: leader"));

    let mut pids: Vec<u32> = redis.nodes().iter().filter_map(|n| n.pid()).collect();
    pids.extend((0..3).filter_map(|i| etcd.pid(i)));
    pids.extend((0..3).filter_map(|i| zk.pid(i)));
    assert_eq!(pids.len(), 11);
    assert!(pids.iter().all(|&p| pid_alive(p)));
    let dirs = [
        etcd.dir().unwrap().to_path_buf(),
        zk.dir().unwrap().to_path_buf(),
    ];
    drop((redis, etcd, zk));
    for pid in pids {
        assert!(!pid_alive(pid), "pid {pid} alive after drop");
    }
    for dir in dirs {
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}
