//! End-to-end tests of the `distlock` command: the built binary, run as real
//! processes, against real servers started by `lock-testbed` (Redis, 5 Redis
//! for Redlock, etcd, ZooKeeper) and the in-process memory backend.
//!
//! A test that needs a server and cannot start it fails (the testbed's error
//! names the package to install); nothing is skipped.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use distlock_cli::exit_code;
use lock_testbed::{
    pid_alive, shared_etcd, shared_redis, shared_redis_set, shared_zk, unique_name, Proxy,
};

const BIN: &str = env!("CARGO_BIN_EXE_distlock");

/// Upper bound on any single distlock run in these tests (a hang fails the test).
const HANG: Duration = Duration::from_secs(60);
/// Allowed lateness of a timed event (process start-up, loaded 2-core machine).
const SLACK: Duration = Duration::from_millis(2500);

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

/// One backend under test: its URL and what it promises.
#[derive(Clone, Debug)]
struct Backend {
    url: String,
    fencing: bool,
}

fn expect<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

fn memory() -> Backend {
    Backend {
        url: "memory://".into(),
        fencing: true,
    }
}

fn redis() -> Backend {
    let server = expect("starting Redis", shared_redis());
    Backend {
        url: format!("redis://{}?connect_timeout=2s", server.addr()),
        fencing: true,
    }
}

fn redlock() -> Backend {
    let set = expect("starting 5 Redis for Redlock", shared_redis_set());
    let nodes: Vec<String> = set.addrs().iter().map(|a| a.to_string()).collect();
    Backend {
        url: format!("redlock://{}?connect_timeout=2s", nodes.join(",")),
        fencing: false,
    }
}

fn etcd() -> Backend {
    let cluster = expect("starting etcd", shared_etcd());
    Backend {
        url: format!("etcd://{}?lease_ttl=3s", cluster.endpoints().join(",")),
        fencing: true,
    }
}

fn zk() -> Backend {
    let ensemble = expect("starting ZooKeeper", shared_zk());
    Backend {
        url: format!("zk://{}?session_timeout=2s", ensemble.connect_string()),
        fencing: true,
    }
}

/// `distlock ARGS` with a clean environment for the variables it reads.
fn distlock(args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("DISTLOCK_URL")
        .env_remove("DISTLOCK_FENCING_TOKEN")
        .env_remove("DISTLOCK_NAME")
        .env_remove("DISTLOCK_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// What a finished distlock process did.
#[derive(Debug)]
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Out {
    /// Asserts the run failed with `code` and exactly one line `distlock: ...` on stderr.
    fn one_line_error(&self, code: i32) {
        assert_eq!(self.code, code, "{self:#?}");
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "expected a one-line error: {self:#?}");
        assert!(lines[0].starts_with("distlock: "), "{self:#?}");
        assert!(!self.stderr.contains("panicked"), "{self:#?}");
    }

    /// `key=value` lines of `distlock status`.
    fn field(&self, key: &str) -> Option<String> {
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(str::to_string)
    }
}

/// A started distlock process whose output is collected.
struct Running {
    child: Child,
    started: Instant,
}

impl Running {
    fn start(mut cmd: Command) -> Running {
        let started = Instant::now();
        let child = expect("spawning distlock", cmd.spawn());
        Running { child, started }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `limit` for the process to exit; kills it and panics past that.
    fn finish(mut self, limit: Duration) -> Out {
        let mut stdout = self.child.stdout.take().expect("piped stdout");
        let mut stderr = self.child.stderr.take().expect("piped stderr");
        let out_reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s);
            s
        });
        let err_reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        let deadline = self.started + limit;
        let status = loop {
            if let Some(status) = expect("waiting for distlock", self.child.try_wait()) {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let stderr = err_reader.join().unwrap_or_default();
                panic!("distlock did not exit within {limit:?}; stderr: {stderr}");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let elapsed = self.started.elapsed();
        use std::os::unix::process::ExitStatusExt;
        let code = status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        Out {
            code,
            stdout: out_reader.join().unwrap_or_default(),
            stderr: err_reader.join().unwrap_or_default(),
            elapsed,
        }
    }
}

fn run_to_end(cmd: Command) -> Out {
    Running::start(cmd).finish(HANG)
}

/// `distlock run --url URL EXTRA... NAME -- sh -c SCRIPT`.
fn run_sh(url: &str, extra: &[&str], name: &str, script: &str) -> Command {
    let mut args = vec!["run", "--url", url];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[name, "--", "sh", "-c", script]);
    distlock(&args)
}

fn status(url: &str, name: &str) -> Out {
    run_to_end(distlock(&["status", "--url", url, name]))
}

/// Waits until `path` exists (a CMD signals that it started); panics after `limit`.
fn wait_for_file(path: &Path, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} did not appear within {limit:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Let the writer finish its line.
    std::thread::sleep(Duration::from_millis(20));
}

fn read(path: &Path) -> String {
    expect(
        &format!("reading {}", path.display()),
        std::fs::read_to_string(path),
    )
}

fn wait_for_pid_file(path: &Path) -> u32 {
    wait_for_file(path, Duration::from_secs(20));
    expect("pid file", read(path).trim().parse::<u32>())
}

fn tempdir() -> tempfile::TempDir {
    expect("temp dir", tempfile::tempdir())
}

fn p(dir: &tempfile::TempDir, file: &str) -> PathBuf {
    dir.path().join(file)
}

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

// ---------------------------------------------------------------------------
// Checks shared by the backends
// ---------------------------------------------------------------------------

/// `run`: CMD sees DISTLOCK_NAME and DISTLOCK_FENCING_TOKEN (unset without
/// fencing), its exit status passes through, and the lock is free afterwards.
fn check_run(b: &Backend) {
    let name = unique_name("cli-run");
    let out = run_to_end(run_sh(
        &b.url,
        &[],
        &name,
        r#"printf '%s\n%s\n' "$DISTLOCK_NAME" "${DISTLOCK_FENCING_TOKEN-unset}"; exit 7"#,
    ));
    assert_eq!(out.code, 7, "{out:#?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{out:#?}");
    assert_eq!(lines[0], name);
    if b.fencing {
        let token: u64 = lines[1]
            .parse()
            .unwrap_or_else(|_| panic!("token {:?} is not a number: {out:#?}", lines[1]));
        assert!(token > 0);
    } else {
        assert_eq!(
            lines[1], "unset",
            "a backend without fencing must not set DISTLOCK_FENCING_TOKEN"
        );
    }
    assert!(out.stderr.is_empty(), "{out:#?}");

    // Exit 0 passes through too, and the lock was released: it can be taken again at once.
    let again = run_to_end(run_sh(&b.url, &[], &name, "exit 0"));
    assert_eq!(again.code, 0, "{again:#?}");
}

/// Two or more `distlock run --wait 0` on one name at once: exactly one runs
/// CMD, the others exit with the not-acquired status without running it.
fn check_exactly_once(b: &Backend) {
    let dir = tempdir();
    let marker = p(&dir, "ran");
    let name = unique_name("cli-once");
    let script = format!("echo $$ >> '{}'; sleep 3", s(&marker));
    let runs: Vec<Running> = (0..3)
        .map(|_| Running::start(run_sh(&b.url, &["--wait", "0"], &name, &script)))
        .collect();
    let outs: Vec<Out> = runs.into_iter().map(|r| r.finish(HANG)).collect();
    let ran = outs.iter().filter(|o| o.code == 0).count();
    let refused = outs
        .iter()
        .filter(|o| o.code == exit_code::NOT_ACQUIRED)
        .count();
    assert_eq!((ran, refused), (1, 2), "{outs:#?}");
    assert_eq!(
        read(&marker).lines().count(),
        1,
        "CMD must run exactly once"
    );
    for o in outs.iter().filter(|o| o.code == exit_code::NOT_ACQUIRED) {
        o.one_line_error(exit_code::NOT_ACQUIRED);
        assert!(o.stderr.contains("held by another owner"), "{o:#?}");
    }
}

/// `status` while a `run` holds the lock: held, with the same token CMD saw;
/// after it ends: free.
fn check_status(b: &Backend) {
    let dir = tempdir();
    let token_file = p(&dir, "token");
    let stop = p(&dir, "stop");
    let name = unique_name("cli-status");
    let free = status(&b.url, &name);
    assert_eq!(free.code, 0, "{free:#?}");
    assert_eq!(free.field("state").as_deref(), Some("free"), "{free:#?}");
    assert_eq!(free.field("name").as_deref(), Some(name.as_str()));

    let script = format!(
        r#"echo "${{DISTLOCK_FENCING_TOKEN-unset}}" > '{tmp}'; mv '{tmp}' '{tok}'; while [ ! -e '{stop}' ]; do sleep 0.05; done"#,
        tmp = s(&p(&dir, "token.tmp")),
        tok = s(&token_file),
        stop = s(&stop)
    );
    let holder = Running::start(run_sh(&b.url, &["--ttl", "10s"], &name, &script));
    wait_for_file(&token_file, Duration::from_secs(20));
    let seen = read(&token_file).trim().to_string();

    let held = status(&b.url, &name);
    assert_eq!(held.code, 0, "{held:#?}");
    assert_eq!(held.field("state").as_deref(), Some("held"), "{held:#?}");
    if b.fencing {
        assert_eq!(
            held.field("token"),
            Some(seen),
            "status must show the holder's token: {held:#?}"
        );
    } else {
        assert_eq!(seen, "unset");
        assert_eq!(held.field("token"), None, "{held:#?}");
    }
    if let Some(ms) = held.field("ttl_remaining_ms") {
        let ms: u64 = expect("ttl_remaining_ms", ms.parse());
        assert!(ms <= 10_000, "{held:#?}");
    }

    expect("stop file", std::fs::write(&stop, b""));
    let out = holder.finish(HANG);
    assert_eq!(out.code, 0, "{out:#?}");
    let after = status(&b.url, &name);
    assert_eq!(
        after.field("state").as_deref(),
        Some("free"),
        "released after CMD: {after:#?}"
    );
}

/// `--wait D` on a held lock: gives up after D with the not-acquired status
/// and does not run CMD; a longer wait gets the lock once the holder ends.
fn check_wait(b: &Backend) {
    let dir = tempdir();
    let started = p(&dir, "started");
    let ran_short = p(&dir, "ran-short");
    let ran_long = p(&dir, "ran-long");
    let name = unique_name("cli-wait");
    let holder = Running::start(run_sh(
        &b.url,
        &["--ttl", "10s"],
        &name,
        &format!("touch '{}'; sleep 4", s(&started)),
    ));
    wait_for_file(&started, Duration::from_secs(20));
    let held_since = Instant::now();

    let short = run_to_end(run_sh(
        &b.url,
        &["--wait", "1s"],
        &name,
        &format!("touch '{}'", s(&ran_short)),
    ));
    short.one_line_error(exit_code::NOT_ACQUIRED);
    assert!(
        short.stderr.contains("gave up waiting after 1s"),
        "{short:#?}"
    );
    assert!(short.elapsed >= Duration::from_secs(1), "{short:#?}");
    assert!(short.elapsed < Duration::from_secs(1) + SLACK, "{short:#?}");
    assert!(!ran_short.exists(), "CMD must not run without the lock");

    let long = run_to_end(run_sh(
        &b.url,
        &["--wait", "30s"],
        &name,
        &format!("touch '{}'", s(&ran_long)),
    ));
    assert_eq!(long.code, 0, "{long:#?}");
    assert!(ran_long.exists());
    // It got the lock when the holder released it, not at the end of its wait.
    assert!(
        held_since.elapsed() < Duration::from_secs(4) + SLACK + SLACK,
        "{long:#?}"
    );
    let holder = holder.finish(HANG);
    assert_eq!(holder.code, 0, "{holder:#?}");
}

/// Loses the lock behind distlock's back with `make_lost` while CMD (`sleep
/// 30`) runs: CMD is terminated and distlock exits with the lost status
/// within `detect` (+ slack).
fn check_lost(url: &str, name: &str, detect: Duration, make_lost: impl FnOnce()) {
    let dir = tempdir();
    let pid_file = p(&dir, "pid");
    let tmp = p(&dir, "pid.tmp");
    let script = format!(
        "echo $$ > '{}'; mv '{}' '{}'; exec sleep 30",
        s(&tmp),
        s(&tmp),
        s(&pid_file)
    );
    let run = Running::start(run_sh(
        url,
        &["--ttl", "3s", "--grace", "2s"],
        name,
        &script,
    ));
    let cmd_pid = wait_for_pid_file(&pid_file);
    assert!(pid_alive(cmd_pid));
    let lost_at = Instant::now();
    make_lost();
    let out = run.finish(HANG);
    assert_eq!(out.code, exit_code::LOST, "{out:#?}");
    assert!(
        out.stderr.contains(&format!("lock {name} lost")),
        "{out:#?}"
    );
    assert!(!out.stderr.contains("panicked"), "{out:#?}");
    assert!(
        lost_at.elapsed() < detect + SLACK,
        "loss took {:?}: {out:#?}",
        lost_at.elapsed()
    );
    assert!(
        !pid_alive(cmd_pid),
        "CMD (pid {cmd_pid}) must be terminated after the loss"
    );
}

/// A server that swallows every byte: connect and status fail with the
/// unavailable status and a one-line message within connect_timeout + slack.
fn check_unreachable(url: &str, connect_timeout: Duration) {
    let name = unique_name("cli-unreachable");
    let out = run_to_end(distlock(&["status", "--url", url, &name]));
    out.one_line_error(exit_code::UNAVAILABLE);
    assert!(
        out.elapsed < connect_timeout + Duration::from_secs(2) + SLACK,
        "{out:#?}"
    );

    let dir = tempdir();
    let ran = p(&dir, "ran");
    let out = run_to_end(run_sh(url, &[], &name, &format!("touch '{}'", s(&ran))));
    out.one_line_error(exit_code::UNAVAILABLE);
    assert!(
        out.elapsed < connect_timeout + Duration::from_secs(2) + SLACK,
        "{out:#?}"
    );
    assert!(!ran.exists());
}

fn blackholed_proxy(upstream: &str) -> Proxy {
    let addr = expect("upstream address", upstream.parse());
    let proxy = expect("starting proxy", Proxy::start(addr));
    proxy.blackhole();
    proxy
}

// ---------------------------------------------------------------------------
// memory:// (in-process: each distlock process has its own locks, so
// cross-process exclusion does not apply to it)
// ---------------------------------------------------------------------------

mod memory {
    use super::*;

    #[test]
    fn run_passes_env_and_exit_status() {
        check_run(&memory());
    }

    /// Every new process has its own memory backend: the lock is free.
    #[test]
    fn status_is_free() {
        let out = status("memory://", "jobs/nightly");
        assert_eq!(out.code, 0, "{out:#?}");
        assert_eq!(out.field("state").as_deref(), Some("free"));
        assert_eq!(out.field("backend").as_deref(), Some("memory"));
    }

    /// CMD killed by a signal: 128 + N.
    #[test]
    fn signal_death_is_128_plus_signal() {
        let out = run_to_end(run_sh("memory://", &[], "sig", "kill -KILL $$"));
        assert_eq!(out.code, 128 + 9, "{out:#?}");
    }

    #[test]
    fn missing_command_is_127_and_non_executable_is_126() {
        let out = run_to_end(distlock(&[
            "run",
            "--url",
            "memory://",
            "x",
            "--",
            "/nonexistent/cmd",
        ]));
        out.one_line_error(exit_code::NOT_FOUND);
        let dir = tempdir();
        let file = p(&dir, "not-executable");
        expect("write", std::fs::write(&file, b"#!/bin/sh\n"));
        let out = run_to_end(distlock(&[
            "run",
            "--url",
            "memory://",
            "x",
            "--",
            s(&file),
        ]));
        out.one_line_error(exit_code::CANNOT_EXECUTE);
    }

    /// The URL can come from DISTLOCK_URL.
    #[test]
    fn url_from_environment() {
        let mut cmd = distlock(&["run", "x", "--", "sh", "-c", "exit 3"]);
        cmd.env("DISTLOCK_URL", "memory://");
        assert_eq!(run_to_end(cmd).code, 3);
    }

    /// If distlock itself is SIGKILLed, nobody renews the lock any more: CMD
    /// is killed too (parent-death signal), instead of running on unlocked.
    #[test]
    fn cmd_dies_with_distlock() {
        let dir = tempdir();
        let pid_file = p(&dir, "pid");
        let script = format!(
            "echo $$ > '{0}.tmp'; mv '{0}.tmp' '{0}'; exec sleep 30",
            s(&pid_file)
        );
        let run = Running::start(run_sh("memory://", &[], "orphan", &script));
        let cmd_pid = wait_for_pid_file(&pid_file);
        // SAFETY: plain kill(2) of the child we started.
        unsafe { libc::kill(run.pid() as i32, libc::SIGKILL) };
        let out = run.finish(HANG);
        assert_eq!(out.code, 128 + 9);
        let deadline = Instant::now() + Duration::from_secs(5);
        while pid_alive(cmd_pid) {
            assert!(
                Instant::now() < deadline,
                "CMD outlived a SIGKILLed distlock"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

// ---------------------------------------------------------------------------
// Bad input: one line on stderr, a documented status, never a panic or hang.
// ---------------------------------------------------------------------------

mod bad_input {
    use super::*;

    #[test]
    fn bad_urls_exit_64_with_one_line() {
        for url in [
            "",
            "localhost:6379",
            "mysql://h",
            "redis://h:notaport",
            "redis://h:0",
            "redis://a:1,b:2",
            "redis://h/notadb",
            "redis://h?ttl=5s",
            "redis://h?connect_timeout=5",
            "redlock://a:1,a:1",
            "etcd://",
            "zk://z:1/trailing/",
            "memory://host",
        ] {
            for sub in [
                &["status", "--url", url, "name"][..],
                &["run", "--url", url, "name", "--", "true"][..],
            ] {
                let out = run_to_end(distlock(sub));
                out.one_line_error(exit_code::USAGE);
                assert!(out.elapsed < Duration::from_secs(5), "{url:?}: {out:#?}");
            }
        }
    }

    #[test]
    fn bad_names_exit_64_with_one_line() {
        let long = "x".repeat(201);
        for name in ["a//b", "/a", "a/", "a b", "..", "", long.as_str()] {
            let out = run_to_end(distlock(&["run", "--url", "memory://", name, "--", "true"]));
            out.one_line_error(exit_code::USAGE);
            assert!(out.stderr.contains("invalid lock name"), "{out:#?}");
            let out = run_to_end(distlock(&["status", "--url", "memory://", name]));
            out.one_line_error(exit_code::USAGE);
        }
    }

    /// A bad name is refused before any connection is made: no server needed.
    #[test]
    fn bad_name_is_checked_before_connecting() {
        let out = run_to_end(distlock(&[
            "status",
            "--url",
            "redis://127.0.0.1:1",
            "a//b",
        ]));
        out.one_line_error(exit_code::USAGE);
    }

    #[test]
    fn bad_durations_and_ttls_exit_64() {
        for args in [
            &["run", "--url", "memory://", "--ttl", "5", "x", "--", "true"][..],
            &[
                "run",
                "--url",
                "memory://",
                "--wait",
                "soon",
                "x",
                "--",
                "true",
            ][..],
            &[
                "run",
                "--url",
                "memory://",
                "--grace",
                "-1s",
                "x",
                "--",
                "true",
            ][..],
            &["run", "--url", "memory://", "x"][..],
            &["frobnicate"][..],
        ] {
            let out = run_to_end(distlock(args));
            assert_eq!(out.code, exit_code::USAGE, "{args:?}: {out:#?}");
            assert!(!out.stderr.contains("panicked"), "{out:#?}");
        }
        let out = run_to_end(distlock(&[
            "run",
            "--url",
            "memory://",
            "--ttl",
            "0s",
            "x",
            "--",
            "true",
        ]));
        out.one_line_error(exit_code::USAGE);
        assert!(out.stderr.contains("ttl"), "{out:#?}");
    }

    /// Nothing listens on the port: refused at once, one line, status 69.
    #[test]
    fn refused_connection_exits_69() {
        let port = lock_testbed::free_port();
        let out = run_to_end(distlock(&[
            "status",
            "--url",
            &format!("redis://127.0.0.1:{port}?connect_timeout=1s"),
            "x",
        ]));
        out.one_line_error(exit_code::UNAVAILABLE);
        assert!(out.elapsed < Duration::from_secs(1) + SLACK, "{out:#?}");
    }

    #[test]
    fn help_documents_exit_statuses() {
        let out = run_to_end(distlock(&["run", "--help"]));
        assert_eq!(out.code, 0);
        for needle in [
            "75",
            "79",
            "64",
            "69",
            "DISTLOCK_FENCING_TOKEN",
            "--wait",
            "--grace",
        ] {
            assert!(
                out.stdout.contains(needle),
                "--help lacks {needle}: {}",
                out.stdout
            );
        }
    }
}

// ---------------------------------------------------------------------------
// redis://
// ---------------------------------------------------------------------------

mod redis {
    use super::*;

    #[test]
    fn run_passes_env_and_exit_status() {
        check_run(&redis());
    }

    #[test]
    fn exactly_once() {
        check_exactly_once(&redis());
    }

    #[test]
    fn status_shows_holder_token() {
        check_status(&redis());
    }

    #[test]
    fn wait_times_out_then_succeeds() {
        check_wait(&redis());
    }

    /// `DEL` of the lock key behind distlock's back: the next renewal (every
    /// TTL/3 = 1 s) finds it gone.
    #[test]
    fn lost_lock_terminates_cmd() {
        let b = redis();
        let server = expect("redis", shared_redis());
        let name = unique_name("cli-lost");
        check_lost(
            &b.url,
            &name,
            Duration::from_secs(1) + Duration::from_secs(2),
            || {
                expect("DEL", server.cmd(&["DEL", &name]));
            },
        );
    }

    #[test]
    fn unreachable_server() {
        let server = expect("redis", shared_redis());
        let proxy = blackholed_proxy(&server.addr().to_string());
        check_unreachable(
            &format!(
                "redis://{}?connect_timeout=1s&request_timeout=500ms",
                proxy.addr()
            ),
            Duration::from_secs(1),
        );
    }

    #[test]
    fn interrupted_wait() {
        check_interrupted_wait(&redis());
    }

    /// SIGTERM to distlock is forwarded to CMD; distlock exits 128+15 and
    /// releases the lock.
    #[test]
    fn sigterm_is_forwarded_and_lock_released() {
        let b = redis();
        let dir = tempdir();
        let pid_file = p(&dir, "pid");
        let name = unique_name("cli-sigterm");
        let script = format!(
            "echo $$ > '{0}.tmp'; mv '{0}.tmp' '{0}'; exec sleep 30",
            s(&pid_file)
        );
        let run = Running::start(run_sh(&b.url, &["--ttl", "30s"], &name, &script));
        let cmd_pid = wait_for_pid_file(&pid_file);
        // SAFETY: plain kill(2) of the child we started.
        unsafe { libc::kill(run.pid() as i32, libc::SIGTERM) };
        let out = run.finish(HANG);
        assert_eq!(out.code, 128 + libc::SIGTERM, "{out:#?}");
        assert!(!pid_alive(cmd_pid));
        // Released at once (the TTL is 30 s): another run gets it.
        let again = run_to_end(run_sh(&b.url, &[], &name, "exit 0"));
        assert_eq!(again.code, 0, "{again:#?}");
    }
}

/// SIGINT while waiting for a held lock: distlock gives up at once with
/// 128+2, CMD never runs, and the holder is undisturbed.
fn check_interrupted_wait(b: &Backend) {
    let dir = tempdir();
    let started = p(&dir, "started");
    let ran = p(&dir, "ran");
    let stop = p(&dir, "stop");
    let name = unique_name("cli-sigint");
    let holder = Running::start(run_sh(
        &b.url,
        &["--ttl", "10s"],
        &name,
        &format!(
            "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done",
            s(&started),
            s(&stop)
        ),
    ));
    wait_for_file(&started, Duration::from_secs(20));
    let waiter = Running::start(run_sh(
        &b.url,
        &["--wait", "30s"],
        &name,
        &format!("touch '{}'", s(&ran)),
    ));
    std::thread::sleep(Duration::from_millis(700));
    let sent = Instant::now();
    // SAFETY: plain kill(2) of the child we started.
    unsafe { libc::kill(waiter.pid() as i32, libc::SIGINT) };
    let out = waiter.finish(HANG);
    out.one_line_error(128 + libc::SIGINT);
    assert!(sent.elapsed() < SLACK, "{out:#?}");
    assert!(!ran.exists());
    let held = status(&b.url, &name);
    assert_eq!(held.field("state").as_deref(), Some("held"), "{held:#?}");
    // The interrupted waiter removed its contender key / node on the way out.
    if let Some(waiters) = held.field("waiters") {
        assert_eq!(
            waiters, "0",
            "an interrupted waiter must not stay queued: {held:#?}"
        );
    }
    expect("stop file", std::fs::write(&stop, b""));
    assert_eq!(holder.finish(HANG).code, 0);
}

// ---------------------------------------------------------------------------
// redlock://
// ---------------------------------------------------------------------------

mod redlock {
    use super::*;

    #[test]
    fn run_has_no_fencing_token() {
        check_run(&redlock());
    }

    #[test]
    fn exactly_once() {
        check_exactly_once(&redlock());
    }

    #[test]
    fn status_shows_held_and_free() {
        check_status(&redlock());
    }

    #[test]
    fn wait_times_out_then_succeeds() {
        check_wait(&redlock());
    }

    /// The key deleted on every node: the next renewal finds no quorum.
    #[test]
    fn lost_lock_terminates_cmd() {
        let b = redlock();
        let set = expect("redis set", shared_redis_set());
        let name = unique_name("cli-lost");
        check_lost(&b.url, &name, Duration::from_secs(3), || {
            for node in set.nodes() {
                expect("DEL", node.cmd(&["DEL", &name]));
            }
        });
    }

    #[test]
    fn unreachable_servers() {
        let set = expect("redis set", shared_redis_set());
        let proxies: Vec<Proxy> = set
            .addrs()
            .iter()
            .take(3)
            .map(|a| blackholed_proxy(&a.to_string()))
            .collect();
        let nodes: Vec<String> = proxies.iter().map(|p| p.addr().to_string()).collect();
        check_unreachable(
            &format!("redlock://{}?connect_timeout=1s", nodes.join(",")),
            Duration::from_secs(1),
        );
    }
}

// ---------------------------------------------------------------------------
// etcd://
// ---------------------------------------------------------------------------

mod etcd {
    use super::*;

    #[test]
    fn run_passes_env_and_exit_status() {
        check_run(&etcd());
    }

    #[test]
    fn exactly_once() {
        check_exactly_once(&etcd());
    }

    #[test]
    fn status_shows_holder_token() {
        check_status(&etcd());
    }

    #[test]
    fn wait_times_out_then_succeeds() {
        check_wait(&etcd());
    }

    /// `etcdctl del --prefix NAME/` (the contender keys, etcd's own lock
    /// layout) behind distlock's back.
    #[test]
    fn lost_lock_terminates_cmd() {
        let b = etcd();
        let cluster = expect("etcd", shared_etcd());
        let etcdctl = expect("etcdctl", lock_testbed::etcdctl_path());
        let name = unique_name("cli-lost");
        check_lost(&b.url, &name, Duration::from_secs(3), || {
            let out = expect(
                "etcdctl",
                Command::new(&etcdctl)
                    .env("ETCDCTL_API", "3")
                    .args([
                        "--endpoints",
                        &cluster.endpoints().join(","),
                        "del",
                        "--prefix",
                        &format!("{name}/"),
                    ])
                    .output(),
            );
            assert!(out.status.success(), "etcdctl del failed: {out:?}");
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                "1",
                "exactly the holder's key: {out:?}"
            );
        });
    }

    /// A waiter queued behind the holder (a contender key) is interrupted.
    #[test]
    fn interrupted_wait() {
        check_interrupted_wait(&etcd());
    }

    #[test]
    fn unreachable_server() {
        let cluster = expect("etcd", shared_etcd());
        let proxy = blackholed_proxy(&cluster.endpoint(0));
        check_unreachable(
            &format!(
                "etcd://{}?connect_timeout=1s&request_timeout=1s",
                proxy.addr()
            ),
            Duration::from_secs(1),
        );
    }
}

// ---------------------------------------------------------------------------
// zk://
// ---------------------------------------------------------------------------

mod zk {
    use super::*;

    #[test]
    fn run_passes_env_and_exit_status() {
        check_run(&zk());
    }

    #[test]
    fn exactly_once() {
        check_exactly_once(&zk());
    }

    #[test]
    fn status_shows_holder_token() {
        check_status(&zk());
    }

    #[test]
    fn wait_times_out_then_succeeds() {
        check_wait(&zk());
    }

    /// A network partition between distlock and ZooKeeper (blackholed proxy):
    /// the session can no longer be kept alive, the guard's validity (bounded
    /// by the 2 s session timeout) runs out, and CMD is stopped.
    #[test]
    fn lost_lock_terminates_cmd() {
        let ensemble = expect("zk", shared_zk());
        let proxy = expect(
            "proxy",
            Proxy::start(expect("addr", ensemble.endpoint(0).parse())),
        );
        let url = format!(
            "zk://{}?session_timeout=2s&request_timeout=1s&connect_timeout=2s",
            proxy.addr()
        );
        let name = unique_name("cli-lost");
        check_lost(
            &url,
            &name,
            Duration::from_secs(2) + Duration::from_secs(2),
            || proxy.blackhole(),
        );
    }

    /// A waiter queued behind the holder (a contender node) is interrupted.
    #[test]
    fn interrupted_wait() {
        check_interrupted_wait(&zk());
    }

    #[test]
    fn unreachable_server() {
        let ensemble = expect("zk", shared_zk());
        let proxy = blackholed_proxy(&ensemble.endpoint(0));
        check_unreachable(
            &format!(
                "zk://{}?connect_timeout=1s&request_timeout=1s",
                proxy.addr()
            ),
            Duration::from_secs(1),
        );
    }
}
