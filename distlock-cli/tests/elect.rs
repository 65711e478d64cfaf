//! `distlock elect` and `distlock leader`: on one process's election
//! (`memory://`), and a standby taking over from a leader killed on Redis,
//! Redlock, etcd and ZooKeeper.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use distlock_cli::exit_code;
use lock_testbed::{shared_redis, unique_name, Cluster, Kind};

mod support;
use support::{exit_within, spawn_quiet, wait_for_file, BIN};

/// `distlock ARGS`, run to its end.
fn distlock(args: &[&str]) -> Output {
    support::distlock(args).output().expect("running distlock")
}

/// `distlock elect --url URL --value VALUE EXTRA... NAME -- sh -c SCRIPT`, running.
fn elect(url: &str, value: &str, extra: &[&str], name: &str, script: &str) -> Child {
    let mut args = vec!["elect", "--url", url, "--value", value];
    args.extend(extra);
    args.extend([name, "--", "sh", "-c", script]);
    spawn_quiet(support::distlock(&args))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `distlock leader --json`: the exit status and the object.
fn leader_json(url: &str, name: &str) -> (Option<i32>, serde_json::Value) {
    let out = distlock(&["leader", "--url", url, "--json", name]);
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {:?} {}", out.stdout, text(&out.stderr)));
    (out.status.code(), json)
}

/// A leader's distlock is killed (SIGKILL: no resignation); the standby
/// leads once the term's TTL (etcd: its lease, ZooKeeper: its session) and
/// the lock-delay have passed, with a higher epoch (Redlock's terms have
/// none), and `leader` shows it;
/// when its command exits it resigns and nobody leads.
fn a_standby_takes_over_from_a_killed_leader(kind: Kind, options: &str, ttl: Duration) {
    let servers = kind.shared().expect("starting the servers");
    let url = servers.url(options);
    let name = unique_name("elect-standby");
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = |f: &str| dir.path().join(f);
    let hold = |me: &str| {
        format!(
            "echo $DISTLOCK_EPOCH > '{}'; while [ ! -e '{}' ]; do sleep 0.05; done",
            file(&format!("epoch-{me}")).display(),
            file(&format!("stop-{me}")).display()
        )
    };
    let delay = Duration::from_secs(1);
    let (ttl_arg, delay_arg) = (format!("{}ms", ttl.as_millis()), "1s");
    let extra = ["--ttl", &ttl_arg, "--lock-delay", delay_arg];
    let watch = Command::new(BIN)
        .args(["leader", "--url", &url, "--watch", &name])
        .env_remove("DISTLOCK_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning distlock leader --watch");
    std::thread::sleep(Duration::from_millis(500));
    let mut a = elect(&url, "a", &extra, &name, &hold("a"));
    wait_for_file(&file("epoch-a"), Duration::from_secs(20));
    let (code, shown) = leader_json(&url, &name);
    assert_eq!(code, Some(exit_code::HELD));
    assert_eq!(shown["value"], "a");
    // Every backend's terms have epochs but Redlock's.
    let epoch_a = shown["epoch"].as_u64();
    assert_eq!(epoch_a.is_some(), kind != Kind::Redlock, "{shown}");

    let mut b = elect(&url, "b", &extra, &name, &hold("b"));
    std::thread::sleep(Duration::from_secs(1));
    assert!(!file("epoch-b").exists(), "b led beside a");
    a.kill().expect("killing a's distlock");
    let killed = Instant::now();
    a.wait().expect("reaping a");
    // The term's TTL, the lock-delay, and slack for a busy machine.
    wait_for_file(&file("epoch-b"), ttl + delay + Duration::from_secs(10));
    let took = killed.elapsed();
    assert!(
        took >= delay,
        "b led {took:?} after a was killed, within the lock-delay"
    );
    let (code, shown) = leader_json(&url, &name);
    assert_eq!(code, Some(exit_code::HELD));
    assert_eq!(shown["value"], "b");
    let epoch_b = shown["epoch"].as_u64();
    assert_eq!(epoch_b.is_some(), epoch_a.is_some(), "{shown}");
    if let (Some(epoch_a), Some(epoch_b)) = (epoch_a, epoch_b) {
        assert!(epoch_b > epoch_a, "epoch {epoch_b} after {epoch_a}");
    }
    std::thread::sleep(Duration::from_millis(100));
    let written = std::fs::read_to_string(file("epoch-b")).expect("b's epoch");
    assert_eq!(
        written.trim(),
        epoch_b.map_or(String::new(), |e| e.to_string())
    );

    std::fs::write(file("stop-b"), b"").expect("stop b");
    assert_eq!(exit_within(&mut b, Duration::from_secs(20), "b"), 0);
    let (code, shown) = leader_json(&url, &name);
    assert_eq!(code, Some(exit_code::FREE), "{shown}");

    // The follower saw nobody, a, b, then nobody, in that order (with
    // possibly a moment of nobody between the terms, and b's renewals
    // never shown as changes).
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(watch.id() as i32, libc::SIGTERM) };
    let out = watch.wait_with_output().expect("the follower's output");
    assert_eq!(out.status.code(), Some(0));
    let seen: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| {
            l.split(' ')
                .find_map(|f| f.strip_prefix("value="))
                .unwrap_or("-")
                .to_string()
        })
        .collect();
    let mut distinct = seen.clone();
    distinct.dedup();
    distinct.retain(|v| v != "-");
    assert_eq!(seen.first().map(String::as_str), Some("-"), "{seen:?}");
    assert_eq!(seen.last().map(String::as_str), Some("-"), "{seen:?}");
    assert_eq!(distinct, ["a", "b"], "{seen:?}");
}

#[test]
fn a_standby_takes_over_from_a_killed_leader_on_redis() {
    a_standby_takes_over_from_a_killed_leader(
        Kind::Redis,
        "connect_timeout=2s",
        Duration::from_secs(2),
    );
}

#[test]
fn a_standby_takes_over_from_a_killed_leader_on_etcd() {
    a_standby_takes_over_from_a_killed_leader(Kind::Etcd, "lease_ttl=3s", Duration::from_secs(3));
}

#[test]
fn a_standby_takes_over_from_a_killed_leader_on_zookeeper() {
    a_standby_takes_over_from_a_killed_leader(
        Kind::Zk,
        "session_timeout=2s",
        Duration::from_secs(2),
    );
}

/// A leader whose term is removed behind its back (as an operator deleting
/// its keys would) has its command stopped (SIGTERM) and campaigns again:
/// the command runs a second time, in a term with a higher epoch.
#[test]
fn a_lost_term_stops_the_command_and_campaigns_again() {
    let server = shared_redis().expect("starting Redis");
    let url = Cluster::url(server, "connect_timeout=2s");
    let name = unique_name("elect-lost");
    let dir = tempfile::tempdir().expect("a temp dir");
    let (epochs, stop) = (dir.path().join("epochs"), dir.path().join("stop"));
    let script = format!(
        "echo $DISTLOCK_EPOCH >> '{}'; while [ ! -e '{}' ]; do sleep 0.05; done",
        epochs.display(),
        stop.display()
    );
    let mut leader = elect(&url, "a", &["--ttl", "3s", "--grace", "1s"], &name, &script);
    wait_for_file(&epochs, Duration::from_secs(20));
    // The term's keys, as the layout documents them.
    let key = format!("{{{name}}} leader");
    let info = format!("{{{name}}} leader info");
    server
        .cmd(&["DEL", &key, &info])
        .expect("deleting the term");
    // Found at the next renewal (every TTL/3), the command stopped, a new
    // term: within one TTL and slack for a busy machine.
    let deadline = Instant::now() + Duration::from_secs(3 + 10);
    let runs = loop {
        let runs: Vec<u64> = std::fs::read_to_string(&epochs)
            .expect("the epochs")
            .lines()
            .map(|l| l.trim().parse().expect("an epoch"))
            .collect();
        if runs.len() >= 2 {
            break runs;
        }
        assert!(Instant::now() < deadline, "the command never ran again");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(runs[1] > runs[0], "epochs {runs:?}");
    std::fs::write(&stop, b"").expect("stop");
    assert_eq!(
        exit_within(&mut leader, Duration::from_secs(20), "the leader"),
        0
    );
}

#[test]
fn elect_runs_the_command_as_leader_and_exits_with_its_status() {
    let name = unique_name("elect");
    let out = distlock(&[
        "elect",
        "--url",
        "memory://",
        "--value",
        "node-1 at 10.0.0.7",
        &name,
        "--",
        "sh",
        "-c",
        "echo \"$DISTLOCK_ELECTION|$DISTLOCK_EPOCH|$DISTLOCK_LEADER_VALUE|${DISTLOCK_TOKEN-unset}\"; exit 7",
    ]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("{name}|1|node-1 at 10.0.0.7|unset\n")
    );
    assert!(
        text(&out.stderr).contains(&format!("leading {name} (epoch 1)")),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn elect_without_a_command_or_with_a_bad_name_is_a_usage_error() {
    let out = distlock(&["elect", "--url", "memory://", "x"]);
    assert_eq!(out.status.code(), Some(exit_code::USAGE));
    let out = distlock(&["elect", "--url", "memory://", "bad name", "--", "true"]);
    assert_eq!(out.status.code(), Some(exit_code::USAGE));
    let out = distlock(&[
        "elect",
        "--url",
        "memory://",
        "--ttl",
        "0s",
        "x",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(exit_code::USAGE));
}

#[test]
fn a_missing_command_exits_127_without_leading_on() {
    let out = distlock(&[
        "elect",
        "--url",
        "memory://",
        "x",
        "--",
        "/nonexistent/distlock-test-command",
    ]);
    assert_eq!(out.status.code(), Some(exit_code::NOT_FOUND));
}

#[test]
fn leader_of_an_election_nobody_runs_says_none() {
    let name = unique_name("leader");
    let out = distlock(&["leader", "--url", "memory://", &name]);
    assert_eq!(out.status.code(), Some(exit_code::FREE));
    assert_eq!(
        text(&out.stdout),
        format!("name={name} backend=memory state=none\n")
    );
    let out = distlock(&["leader", "--url", "memory://", "--json", &name]);
    assert_eq!(out.status.code(), Some(exit_code::FREE));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(json["state"], "none");
    assert_eq!(json["name"], name.as_str());
}

#[test]
fn a_standby_takes_over_from_a_killed_leader_on_redlock() {
    a_standby_takes_over_from_a_killed_leader(
        Kind::Redlock,
        "connect_timeout=2s",
        Duration::from_secs(2),
    );
}
