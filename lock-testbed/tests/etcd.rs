//! Real etcd: one member and a 3-member cluster under leader failure.

use std::process::Command;
use std::time::{Duration, Instant};

use lock_testbed::{etcdctl_path, pid_alive, shared_etcd, unique_name, EtcdCluster, TestbedError};

/// A single member reports itself leader and serves put/get through the gateway.
#[test]
fn single_member_starts_and_serves() {
    let etcd = EtcdCluster::start(1).unwrap();
    assert_eq!(etcd.endpoints().len(), 1);
    assert!(etcd.endpoint(0).starts_with("127.0.0.1:"));
    assert_eq!(
        etcd.client_urls()[0],
        format!("http://{}", etcd.endpoint(0))
    );
    assert_eq!(etcd.leader().unwrap(), 0);
    let key = unique_name("k");
    etcd.put(0, &key, b"hello").unwrap();
    assert_eq!(etcd.get(0, &key).unwrap().as_deref(), Some(&b"hello"[..]));
    assert_eq!(etcd.get(0, &unique_name("missing")).unwrap(), None);
    let pid = etcd.pid(0).unwrap();
    assert!(pid_alive(pid));
    drop(etcd);
    assert!(!pid_alive(pid), "etcd pid {pid} alive after drop");
}

/// The shared etcd is one member and serves.
#[test]
fn shared_etcd_serves() {
    let etcd = shared_etcd().unwrap();
    let key = unique_name("shared");
    etcd.put(0, &key, b"1").unwrap();
    assert_eq!(etcd.get(0, &key).unwrap().as_deref(), Some(&b"1"[..]));
    assert!(std::ptr::eq(etcd, shared_etcd().unwrap()));
}

fn put_with_retry(etcd: &EtcdCluster, member: usize, key: &str, value: &[u8]) -> Duration {
    let started = Instant::now();
    loop {
        match etcd.put(member, key, value) {
            Ok(()) => return started.elapsed(),
            Err(e) if started.elapsed() < Duration::from_secs(10) => {
                eprintln!("put via member {member} failed, retrying: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("put via member {member} still failing after 10 s: {e}"),
        }
    }
}

/// Kill the leader of a 3-member cluster: a new leader is elected among the others,
/// puts succeed (gateway and etcdctl), and the restarted member catches up.
#[test]
fn three_member_cluster_keeps_serving_with_leader_killed() {
    let started = Instant::now();
    let mut etcd = EtcdCluster::start(3).unwrap();
    eprintln!("3-member etcd ready in {:?}", started.elapsed());
    let old = etcd.leader().unwrap();
    let key = unique_name("before");
    etcd.put(old, &key, b"1").unwrap();

    let old_pid = etcd.pid(old).unwrap();
    etcd.kill(old).unwrap();
    assert_eq!(etcd.pid(old), None);
    assert!(!pid_alive(old_pid));
    // A request in flight to the dead leader hangs ~5 s in etcd ("request timed out,
    // possibly due to previous leader failure"): wait for the new leader first.
    let killed = Instant::now();
    let new = etcd.leader().unwrap();
    eprintln!("new etcd leader after {:?}", killed.elapsed());
    assert_ne!(new, old);
    let survivor = 3 - old - new;
    let key2 = unique_name("after");
    let took = put_with_retry(&etcd, survivor, &key2, b"2");
    eprintln!("first put via a follower after the election took {took:?}");
    assert_eq!(etcd.get(new, &key).unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(etcd.get(new, &key2).unwrap().as_deref(), Some(&b"2"[..]));

    // etcdctl against all endpoints (one dead) also succeeds.
    let etcdctl = etcdctl_path().unwrap();
    let out = Command::new(etcdctl)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", etcd.endpoints().join(",")))
        .args(["--dial-timeout=2s", "--command-timeout=5s", "put"])
        .arg(unique_name("ctl"))
        .arg("v")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "etcdctl put failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("OK"));

    // The killed member comes back on the same port and data dir and catches up.
    etcd.restart(old).unwrap();
    assert!(etcd.pid(old).is_some());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match etcd.get(old, &key2) {
            Ok(Some(v)) => {
                assert_eq!(v, b"2");
                break;
            }
            other if Instant::now() < deadline => {
                eprintln!("restarted member not caught up yet: {other:?}");
                std::thread::sleep(Duration::from_millis(100));
            }
            other => panic!("restarted member never caught up: {other:?}"),
        }
    }
}

/// A paused leader is replaced; after resume it serves again as a member.
#[test]
fn paused_leader_is_replaced_and_rejoins() {
    let etcd = EtcdCluster::start(3).unwrap();
    let old = etcd.leader().unwrap();
    etcd.pause(old).unwrap();
    let started = Instant::now();
    let new = etcd.leader().unwrap();
    eprintln!(
        "new leader after pausing the old one in {:?}",
        started.elapsed()
    );
    assert_ne!(new, old);
    let key = unique_name("paused");
    put_with_retry(&etcd, new, &key, b"x");
    etcd.resume(old).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match etcd.get(old, &key) {
            Ok(Some(v)) => {
                assert_eq!(v, b"x");
                break;
            }
            other if Instant::now() < deadline => {
                eprintln!("resumed member not serving yet: {other:?}");
                std::thread::sleep(Duration::from_millis(100));
            }
            other => panic!("resumed member never served: {other:?}"),
        }
    }
    let err = etcd.pause(7).unwrap_err();
    assert!(
        matches!(
            err,
            TestbedError::NoSuchMember {
                index: 7,
                members: 3
            }
        ),
        "{err}"
    );
}
