//! `distlock run --wait forever` as a hot standby: the active instance
//! holds the lock, the standby waits, the Redis server goes down for longer
//! than the TTL and comes back; the standby takes the lock and runs its
//! command (before, it exited 69 at its first failed check).

use std::process::Child;
use std::time::{Duration, Instant};

use distlock_cli::exit_code;
use lock_testbed::{unique_name, RedisServer};

mod support;
use support::{distlock, exit_within, spawn_quiet, wait_for_file};

/// `distlock run --url URL --ttl 3s EXTRA... NAME -- sh -c SCRIPT`.
fn run_sh(url: &str, extra: &[&str], name: &str, script: &str) -> Child {
    let mut args = vec!["run", "--url", url, "--ttl", "3s"];
    args.extend(extra);
    args.extend([name, "--", "sh", "-c", script]);
    spawn_quiet(distlock(&args))
}

#[test]
fn a_standby_rides_out_a_redis_restart_and_runs_its_command() {
    let mut server = RedisServer::start().expect("starting Redis");
    let url = format!("redis://{}?connect_timeout=1s", server.addr());
    let name = unique_name("standby");
    let dir = tempfile::tempdir().expect("a temp dir");
    let (started, stop, ran) = (
        dir.path().join("started"),
        dir.path().join("stop"),
        dir.path().join("ran"),
    );
    let mut active = run_sh(
        &url,
        &[],
        &name,
        &format!(
            "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done",
            started.display(),
            stop.display()
        ),
    );
    wait_for_file(&started, Duration::from_secs(20));
    let mut standby = run_sh(
        &url,
        &["--wait", "forever"],
        &name,
        &format!("touch '{}'", ran.display()),
    );
    std::thread::sleep(Duration::from_secs(1));
    server.kill().expect("stopping Redis");
    // Down for twice the TTL: the active instance loses its lock, the
    // standby's checks all fail meanwhile.
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        standby.try_wait().expect("polling the standby").is_none(),
        "the standby gave up while Redis was down"
    );
    server.restart().expect("starting Redis again");
    let back = Instant::now();
    // The longest backoff (5 s), one TTL, and slack for a busy machine.
    let code = exit_within(&mut standby, Duration::from_secs(20), "the standby");
    assert_eq!(code, 0, "the standby's exit code");
    assert!(ran.exists(), "the standby did not run its command");
    assert!(
        back.elapsed() <= Duration::from_secs(5 + 3 + 5),
        "the standby took {:?} after Redis was back",
        back.elapsed()
    );
    std::fs::write(&stop, b"").expect("stop file");
    let active_code = exit_within(&mut active, Duration::from_secs(20), "the active instance");
    assert_eq!(
        active_code,
        exit_code::LOST,
        "the active instance's lock expired while Redis was down"
    );
}
