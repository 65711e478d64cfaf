//! `distlock elect` and `distlock leader` on one process's election
//! (`memory://`), and on a backend without elections.

use std::process::{Command, Output, Stdio};

use distlock_cli::exit_code;
use lock_testbed::{shared_redis_set, unique_name, Cluster};

const BIN: &str = env!("CARGO_BIN_EXE_distlock");

/// `distlock ARGS` with no `DISTLOCK_*` variable from the test's environment.
fn distlock(args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("DISTLOCK_") {
            cmd.env_remove(var);
        }
    }
    cmd.stdin(Stdio::null()).output().expect("running distlock")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
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
fn a_backend_without_elections_exits_78() {
    let set = shared_redis_set().expect("starting 5 Redis for Redlock");
    let url = Cluster::url(set, "connect_timeout=2s");
    let name = unique_name("no-elections");
    let out = distlock(&["leader", "--url", &url, &name]);
    assert_eq!(
        out.status.code(),
        Some(exit_code::UNSUPPORTED),
        "{}",
        text(&out.stderr)
    );
    let out = distlock(&["leader", "--url", &url, "--watch", &name]);
    assert_eq!(out.status.code(), Some(exit_code::UNSUPPORTED));
    let out = distlock(&["elect", "--url", &url, &name, "--", "true"]);
    assert_eq!(
        out.status.code(),
        Some(exit_code::UNSUPPORTED),
        "{}",
        text(&out.stderr)
    );
}
