//! `distlock run --url redis+cluster://...` across a failover: the
//! primary that owns the lock name's slot is killed while CMD runs and its
//! replica takes over; CMD runs to its end with the lock held (its TTL
//! outlasts the failover), a standby waiting behind it takes the lock
//! afterwards from the new primary with a larger token, and both exit 0.

use std::time::Duration;

use lock_testbed::{unique_name, RedisClusterSet};

mod support;
use support::{distlock, exit_within, spawn_quiet, wait_for_file};

/// A failover's bound on a busy machine (the node timeout of 1 s, the
/// replicas' election, the promotion), with slack.
const FAILOVER: Duration = Duration::from_secs(15);

#[test]
fn run_keeps_working_across_a_failover() {
    let mut set = RedisClusterSet::start().expect("starting a Redis Cluster");
    let url = format!("{}?connect_timeout=2s&request_timeout=300ms", set.url());
    let name = unique_name("cluster-run");
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = |f: &str| dir.path().join(f);
    let (started, stop, first, second) =
        (file("started"), file("stop"), file("first"), file("second"));
    // The TTL outlasts the failover: the guard follows the primary.
    let mut active = spawn_quiet(distlock(&[
        "run",
        "--url",
        &url,
        "--ttl",
        "20s",
        &name,
        "--",
        "sh",
        "-c",
        &format!(
            "echo \"$DISTLOCK_TOKEN\" > '{}'; touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done",
            first.display(),
            started.display(),
            stop.display()
        ),
    ]));
    wait_for_file(&started, Duration::from_secs(20));
    let mut standby = spawn_quiet(distlock(&[
        "run",
        "--url",
        &url,
        "--ttl",
        "20s",
        "--wait",
        "90s",
        &name,
        "--",
        "sh",
        "-c",
        &format!("echo \"$DISTLOCK_TOKEN\" > '{}'", second.display()),
    ]));
    std::thread::sleep(Duration::from_millis(500));
    let old = set
        .owner_of_slot(RedisClusterSet::slot_of(&name))
        .expect("the owner of the name's slot");
    set.kill_node(old).expect("kill the name's primary");
    let new = set
        .wait_for_failover(old, FAILOVER)
        .expect("a replica takes over");
    assert_ne!(old, new);
    // A renewal on the new primary (every TTL/3) proves the lock followed.
    std::thread::sleep(Duration::from_secs(8));
    assert!(
        active.try_wait().expect("polling the active run").is_none(),
        "the active run ended during the failover (its lock lost?)"
    );
    assert!(!second.exists(), "the standby ran while the lock was held");
    std::fs::write(&stop, b"").expect("stop file");
    assert_eq!(
        exit_within(&mut active, Duration::from_secs(20), "the active run"),
        0
    );
    assert_eq!(exit_within(&mut standby, FAILOVER, "the standby"), 0);
    let token = |path: &std::path::Path| -> u64 {
        let text = std::fs::read_to_string(path).expect("a token file");
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("token {text:?} is no number"))
    };
    let (a, b) = (token(&first), token(&second));
    assert!(b > a, "the standby's token {b} after the first's {a}");
}
