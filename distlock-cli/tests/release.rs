//! `distlock release --force`, end to end: the built binary against real
//! servers started by `lock-testbed`. A `distlock run` holds the lock, a
//! second one waits for it, an operator forces the release: the waiter's
//! CMD runs with a larger token, the evicted run's CMD is stopped (exit 79),
//! and a second force release finds nothing held (exit 3).

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use distlock_cli::exit_code;
use lock_testbed::{shared_etcd, shared_redis, shared_zk, unique_name};

const BIN: &str = env!("CARGO_BIN_EXE_distlock");
/// Upper bound on any single distlock run in these tests (a hang fails the test).
const HANG: Duration = Duration::from_secs(60);
/// Allowed lateness of a timed event (process start-up, loaded 2-core machine).
const SLACK: Duration = Duration::from_millis(2500);
/// The holder's TTL: it renews every third of it, when a backend without
/// loss events notices the eviction at the latest.
const TTL: Duration = Duration::from_secs(6);

fn expect<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// `distlock ARGS` with no `DISTLOCK_*` variable from the test's environment.
fn distlock(args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    for (var, _) in std::env::vars_os() {
        let var = var.to_string_lossy();
        if var.starts_with("DISTLOCK_") {
            cmd.env_remove(&*var);
        }
    }
    cmd.stdin(Stdio::null())
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
    /// When it exited.
    ended: Instant,
}

impl Out {
    fn field(&self, key: &str) -> Option<String> {
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(str::to_string)
    }
}

/// Starts `cmd`; `finish` collects it.
struct Running {
    child: Child,
    started: Instant,
}

impl Running {
    fn start(mut cmd: Command) -> Self {
        Self {
            child: expect("spawning distlock", cmd.spawn()),
            started: Instant::now(),
        }
    }

    fn finish(mut self, limit: Duration) -> Out {
        let mut stdout = self.child.stdout.take().expect("piped stdout");
        let mut stderr = self.child.stderr.take().expect("piped stderr");
        let out = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s);
            s
        });
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        let status = loop {
            if let Some(status) = expect("waiting for distlock", self.child.try_wait()) {
                break status;
            }
            if self.started.elapsed() >= limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "distlock did not exit within {limit:?}; stderr: {}",
                    err.join().unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let ended = Instant::now();
        use std::os::unix::process::ExitStatusExt;
        Out {
            code: status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
            stdout: out.join().unwrap_or_default(),
            stderr: err.join().unwrap_or_default(),
            ended,
        }
    }
}

fn run_to_end(cmd: Command) -> Out {
    Running::start(cmd).finish(HANG)
}

/// Waits until `path` exists; panics after `limit`.
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
    std::thread::sleep(Duration::from_millis(20));
}

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

/// The whole story on the backend at `url` (`fencing`: it has tokens;
/// `loss_events`: the evicted run hears of it at once rather than at its
/// next renewal).
fn check_force_release(url: &str, fencing: bool, loss_events: bool) {
    let dir = expect("temp dir", tempfile::tempdir());
    let name = unique_name("cli-force");
    let (held_token, got_token) = (dir.path().join("held"), dir.path().join("got"));

    // Without --force: refused, with a message that says why.
    let refused = run_to_end(distlock(&["release", "--url", url, &name]));
    assert_eq!(refused.code, exit_code::USAGE, "{refused:#?}");
    assert!(refused.stderr.contains("--force"), "{refused:#?}");
    assert_eq!(refused.stderr.lines().count(), 1, "{refused:#?}");

    let ttl = format!("{}s", TTL.as_secs());
    let holder = Running::start(distlock(&[
        "run",
        "--url",
        url,
        "--ttl",
        &ttl,
        &name,
        "--",
        "sh",
        "-c",
        &format!(
            "echo \"${{DISTLOCK_TOKEN-unset}}\" > '{t}.tmp'; mv '{t}.tmp' '{t}'; sleep 60",
            t = s(&held_token)
        ),
    ]));
    wait_for_file(&held_token, Duration::from_secs(20));
    let waiter = Running::start(distlock(&[
        "run",
        "--url",
        url,
        "--wait",
        "60s",
        &name,
        "--",
        "sh",
        "-c",
        &format!("echo \"${{DISTLOCK_TOKEN-unset}}\" > '{}'", s(&got_token)),
    ]));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!got_token.exists(), "the waiter ran beside the holder");

    let forced = run_to_end(distlock(&["release", "--force", "--url", url, &name]));
    assert_eq!(forced.code, exit_code::HELD, "{forced:#?}");
    assert_eq!(
        forced.field("state").as_deref(),
        Some("released"),
        "{forced:#?}"
    );
    assert_eq!(
        forced.field("removed_mutex").as_deref(),
        Some("1"),
        "{forced:#?}"
    );
    assert_eq!(forced.field("removed").as_deref(), Some("1"), "{forced:#?}");
    assert_eq!(forced.field("name").as_deref(), Some(name.as_str()));
    assert!(forced.stderr.contains("fencing"), "{forced:#?}");

    // The waiter is handed the lock at once (its wait is far longer).
    let waited = waiter.finish(HANG);
    assert_eq!(waited.code, 0, "{waited:#?}");
    assert!(
        waited.ended - forced.ended < SLACK,
        "the waiter got the lock {:?} after the force release",
        waited.ended - forced.ended
    );
    let held = expect("holder's token", std::fs::read_to_string(&held_token));
    let got = expect("waiter's token", std::fs::read_to_string(&got_token));
    if fencing {
        let (held, got): (u64, u64) = (
            expect("token", held.trim().parse()),
            expect("token", got.trim().parse()),
        );
        assert!(
            got > held,
            "the next token {got} is not above the evicted {held}"
        );
    } else {
        assert_eq!((held.trim(), got.trim()), ("unset", "unset"));
    }

    // The evicted run notices, stops its CMD and says the lock was lost.
    let evicted = holder.finish(HANG);
    assert_eq!(evicted.code, exit_code::LOST, "{evicted:#?}");
    let noticed = evicted.ended - forced.ended;
    let bound = if loss_events { SLACK } else { TTL / 3 + SLACK };
    assert!(noticed < bound, "the evicted run noticed after {noticed:?}");

    // Nothing held now: the same command says so.
    let again = run_to_end(distlock(&[
        "release", "--force", "--json", "--url", url, &name,
    ]));
    assert_eq!(again.code, exit_code::FREE, "{again:#?}");
    let v: serde_json::Value = expect("--json output", serde_json::from_str(&again.stdout));
    assert_eq!(v["state"], "free", "{v}");
    assert_eq!(v["removed"], 0, "{v}");
}

#[test]
fn redis_force_release() {
    let server = expect("starting Redis", shared_redis());
    check_force_release(
        &format!("redis://{}?connect_timeout=2s", server.addr()),
        true,
        false,
    );
}

#[test]
fn etcd_force_release() {
    let cluster = expect("starting etcd", shared_etcd());
    check_force_release(
        &format!("etcd://{}?lease_ttl=3s", cluster.endpoints().join(",")),
        true,
        true,
    );
}

#[test]
fn zk_force_release() {
    let ensemble = expect("starting ZooKeeper", shared_zk());
    check_force_release(
        &format!("zk://{}?session_timeout=2s", ensemble.connect_string()),
        true,
        true,
    );
}

/// `release --force` on `memory://`: a new process holds nothing, so there
/// is nothing to evict (exit 3).
#[test]
fn memory_force_release_finds_nothing() {
    let out = run_to_end(distlock(&[
        "release",
        "--force",
        "--url",
        "memory://",
        "jobs/x",
    ]));
    assert_eq!(out.code, exit_code::FREE, "{out:#?}");
    assert_eq!(out.field("state").as_deref(), Some("free"), "{out:#?}");
}
