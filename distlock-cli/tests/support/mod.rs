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
