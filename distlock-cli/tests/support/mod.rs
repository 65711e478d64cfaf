//! Helpers shared by the `distlock` command's integration tests that start
//! it as a child process.
// Each test binary uses a subset of them.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `distlock` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_distlock");

/// `distlock ARGS` without any `DISTLOCK_*` variable of the test's
/// environment, stdin closed.
pub fn distlock(args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("DISTLOCK_") {
            cmd.env_remove(var);
        }
    }
    cmd.stdin(Stdio::null());
    cmd
}

/// `cmd` started in the background, its output discarded but for stderr
/// (piped, for messages on failure).
pub fn spawn_quiet(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning distlock")
}

/// The exit code of `child` within `limit`; kills it and panics past that.
pub fn exit_within(child: &mut Child, limit: Duration, what: &str) -> i32 {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("waiting for distlock") {
            return status.code().unwrap_or(-1);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `path` to appear; panics after `limit`.
pub fn wait_for_file(path: &Path, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A failover's bound on a busy machine (the failure detection of about
/// 1 s, the vote, the promotion), with slack.
pub const FAILOVER: Duration = Duration::from_secs(15);

/// `distlock run --url url NAME` across a failover: CMD runs with the
/// lock (a TTL that outlasts the failover) and a standby waits behind it;
/// `fail_over` kills the primary that holds the lock and returns once
/// another took over. CMD runs to its end with the lock held, the standby
/// takes the lock afterwards from the new primary with a larger token, and
/// both exit 0.
pub fn run_keeps_working_across(url: &str, name: &str, fail_over: impl FnOnce()) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = |f: &str| dir.path().join(f);
    let (started, stop, first, second) =
        (file("started"), file("stop"), file("first"), file("second"));
    // The TTL outlasts the failover: the guard follows the primary.
    let mut active = spawn_quiet(distlock(&[
        "run",
        "--url",
        url,
        "--ttl",
        "20s",
        name,
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
        url,
        "--ttl",
        "20s",
        "--wait",
        "90s",
        name,
        "--",
        "sh",
        "-c",
        &format!("echo \"$DISTLOCK_TOKEN\" > '{}'", second.display()),
    ]));
    std::thread::sleep(Duration::from_millis(500));
    fail_over();
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
