//! Runs the examples (`examples/*.rs`, built by `cargo test` alongside this
//! test) against real servers from `lock-testbed`, so that they stay correct,
//! not just compiling.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lock_testbed::{shared_etcd, shared_redis, shared_redis_set, shared_zk};

fn expect<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// `target/<profile>/examples/<name>`, next to this test's `deps/` directory.
fn example(name: &str) -> PathBuf {
    let exe = expect("current_exe", std::env::current_exe());
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binary lives in target/<profile>/deps");
    let path = profile_dir.join("examples").join(name);
    assert!(
        path.exists(),
        "example {name} not built at {} (run through `cargo test`)",
        path.display()
    );
    path
}

/// Runs example `name` with `url` as its argument; returns its stdout.
fn run(name: &str, url: &str) -> String {
    let mut child = expect(
        "spawning the example",
        Command::new(example(name))
            .arg(url)
            .env_remove("DISTLOCK_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while expect("try_wait", child.try_wait()).is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("example {name} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = expect("output", child.wait_with_output());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "example {name} failed: {}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The fenced-write story every fencing backend's example tells.
fn assert_fenced(name: &str, out: &str) {
    assert!(out.contains("worker-a: holds"), "{name}: {out}");
    assert!(out.contains("worker-b: holds"), "{name}: {out}");
    assert!(out.contains("fenced write true"), "{name}: {out}");
    assert!(out.contains("stale write refused"), "{name}: {out}");
    assert!(out.contains("balance 100"), "{name}: {out}");
}

#[test]
fn memory_example() {
    assert_fenced("memory", &run("memory", "memory://"));
}

#[test]
fn redis_example() {
    let server = expect("starting Redis", shared_redis());
    assert_fenced(
        "redis",
        &run("redis", &format!("redis://{}", server.addr())),
    );
}

#[test]
fn redlock_example() {
    let set = expect("starting 5 Redis", shared_redis_set());
    let nodes: Vec<String> = set.addrs().iter().map(|a| a.to_string()).collect();
    let out = run("redlock", &format!("redlock://{}", nodes.join(",")));
    assert!(out.contains("without a fencing token"), "{out}");
    assert!(!out.contains("stale write"), "{out}");
}

#[test]
fn etcd_example() {
    let cluster = expect("starting etcd", shared_etcd());
    assert_fenced(
        "etcd",
        &run("etcd", &format!("etcd://{}", cluster.endpoints().join(","))),
    );
}

#[test]
fn zk_example() {
    let ensemble = expect("starting ZooKeeper", shared_zk());
    assert_fenced(
        "zk",
        &run("zk", &format!("zk://{}", ensemble.connect_string())),
    );
}
