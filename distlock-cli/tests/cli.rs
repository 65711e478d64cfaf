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
    pid_alive, shared_etcd, shared_redis, shared_redis_set, shared_zk, unique_name, Kind, Proxy,
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

/// The backend `kind` on the servers lock-testbed shares with every test of
/// this process, its URL with these tests' options.
fn shared(kind: Kind) -> Backend {
    let options = match kind {
        Kind::Redis | Kind::Redlock => "connect_timeout=2s",
        Kind::Etcd => "lease_ttl=3s",
        Kind::Zk => "session_timeout=2s",
    };
    let servers = expect(&format!("starting {}", kind.name()), kind.shared());
    Backend {
        url: servers.url(options),
        fencing: kind.fencing(),
    }
}

fn redis() -> Backend {
    shared(Kind::Redis)
}

fn redlock() -> Backend {
    shared(Kind::Redlock)
}

fn etcd() -> Backend {
    shared(Kind::Etcd)
}

fn zk() -> Backend {
    shared(Kind::Zk)
}

/// `distlock ARGS` with a clean environment for the variables it reads or
/// sets (every `DISTLOCK_*`, and etcdctl's `ETCD_LOCK_*`).
fn distlock(args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    for (var, _) in std::env::vars_os() {
        let var = var.to_string_lossy();
        if var.starts_with("DISTLOCK_") || var.starts_with("ETCD_LOCK_") {
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
    run_sh_all(url, extra, &[name], script)
}

/// `distlock run --url URL EXTRA... NAME... -- sh -c SCRIPT`.
fn run_sh_all(url: &str, extra: &[&str], names: &[&str], script: &str) -> Command {
    let mut args = vec!["run", "--url", url];
    args.extend_from_slice(extra);
    args.extend_from_slice(names);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    distlock(&args)
}

/// `distlock status --url URL NAME`: exit 0 when held, 3 when free.
fn status(url: &str, name: &str) -> Out {
    let out = run_to_end(distlock(&["status", "--url", url, name]));
    let expected = match out.field("state").as_deref() {
        Some("held") => exit_code::HELD,
        Some("free") => exit_code::FREE,
        _ => panic!("status printed no state: {out:#?}"),
    };
    assert_eq!(out.code, expected, "{out:#?}");
    out
}

/// `distlock status --json --url URL NAME`, parsed.
fn status_json(url: &str, name: &str) -> (Out, serde_json::Value) {
    let out = run_to_end(distlock(&["status", "--json", "--url", url, name]));
    let value: serde_json::Value =
        expect("status --json output", serde_json::from_str(&out.stdout));
    (out, value)
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

/// `run`: CMD sees DISTLOCK_LOCK_NAME, DISTLOCK_TOKEN (unset without
/// fencing) and DISTLOCK_LOCK_KEY (where the backend tells the key: it
/// names the lock), its exit status passes through, and the lock is free
/// afterwards.
fn check_run(b: &Backend) {
    let name = unique_name("cli-run");
    let out = run_to_end(run_sh(
        &b.url,
        &[],
        &name,
        r#"printf '%s\n%s\n%s\n' "$DISTLOCK_LOCK_NAME" "${DISTLOCK_TOKEN-unset}" "${DISTLOCK_LOCK_KEY-unset}"; exit 7"#,
    ));
    assert_eq!(out.code, 7, "{out:#?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{out:#?}");
    assert_eq!(lines[0], name);
    assert!(
        lines[2] == "unset" || (lines[2].contains(&name) && !lines[2].contains(' ')),
        "DISTLOCK_LOCK_KEY is unset or the server key of the lock: {out:#?}"
    );
    if b.fencing {
        let token: u64 = lines[1]
            .parse()
            .unwrap_or_else(|_| panic!("token {:?} is not a number: {out:#?}", lines[1]));
        assert!(token > 0);
    } else {
        assert_eq!(
            lines[1], "unset",
            "a backend without fencing must not set DISTLOCK_TOKEN"
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
    assert_eq!(free.code, exit_code::FREE, "{free:#?}");
    assert_eq!(free.field("state").as_deref(), Some("free"), "{free:#?}");
    assert_eq!(free.field("name").as_deref(), Some(name.as_str()));

    // A note too long (or of several lines) is a bad command line: CMD never runs.
    let long = "n".repeat(distlock::MAX_NOTE_LEN + 1);
    let ran = p(&dir, "ran");
    for note in [long.as_str(), "two\nlines"] {
        let script = format!("touch '{}'", s(&ran));
        let out = run_to_end(run_sh(&b.url, &["--note", note], &name, &script));
        assert_eq!(out.code, exit_code::USAGE, "{out:#?}");
        assert!(out.stderr.contains("note"), "{out:#?}");
        assert!(!ran.exists(), "CMD ran with a bad note");
    }

    // CMD writes its token and its parent's pid (distlock's) before the token file appears.
    let pid_file = p(&dir, "pid");
    let script = format!(
        r#"echo "$PPID" > '{pid}'; echo "${{DISTLOCK_TOKEN-unset}}" > '{tmp}'; mv '{tmp}' '{tok}'; while [ ! -e '{stop}' ]; do sleep 0.05; done"#,
        pid = s(&pid_file),
        tmp = s(&p(&dir, "token.tmp")),
        tok = s(&token_file),
        stop = s(&stop)
    );
    let note = "nightly batch 7";
    let holder = Running::start(run_sh(
        &b.url,
        &["--ttl", "10s", "--note", note],
        &name,
        &script,
    ));
    wait_for_file(&token_file, Duration::from_secs(20));
    let seen = read(&token_file).trim().to_string();
    let pid = read(&pid_file).trim().to_string();
    let host = distlock::Holder::this_process().host.expect("a host name");
    let describes = capabilities(&b.url).describes_holder;

    let held = status(&b.url, &name);
    assert_eq!(held.code, exit_code::HELD, "{held:#?}");
    assert_eq!(held.field("state").as_deref(), Some("held"), "{held:#?}");
    if b.fencing {
        assert_eq!(
            held.field("token"),
            Some(seen.clone()),
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
    // Who holds it: this machine, the distlock process, the note (spaces as `_`).
    if describes {
        assert_eq!(held.field("holder_host"), Some(host.clone()), "{held:#?}");
        assert_eq!(held.field("holder_pid"), Some(pid.clone()), "{held:#?}");
        assert_eq!(
            held.field("holder_note").as_deref(),
            Some("nightly_batch_7"),
            "{held:#?}"
        );
    } else {
        for field in ["holder_host", "holder_pid", "holder_note"] {
            assert_eq!(held.field(field), None, "{held:#?}");
        }
    }

    // The same as one JSON object, with every key (null where unknown).
    let (out, v) = status_json(&b.url, &name);
    assert_eq!(out.code, exit_code::HELD, "{out:#?}");
    assert_eq!(v["state"], "held", "{v}");
    assert_eq!(v["name"], name.as_str(), "{v}");
    assert!(v["backend"].is_string(), "{v}");
    if b.fencing {
        assert_eq!(v["token"].to_string(), seen, "{v}");
    } else {
        assert!(v["token"].is_null(), "{v}");
    }
    assert!(v["last_token"].is_null(), "{v}");
    assert!(
        v["owner"].is_null() || v["owner"].as_str().is_some_and(|o| !o.is_empty()),
        "owner is null or the holder's id: {v}"
    );
    assert!(
        v["ttl_remaining_ms"].is_null()
            || v["ttl_remaining_ms"]
                .as_u64()
                .is_some_and(|ms| ms <= 10_000),
        "{v}"
    );
    assert!(v["waiters"].is_null() || v["waiters"].is_u64(), "{v}");
    if describes {
        assert_eq!(v["holder_host"], host.as_str(), "{v}");
        assert_eq!(v["holder_pid"].to_string(), pid, "{v}");
        assert_eq!(v["holder_note"], note, "{v}");
    } else {
        for field in ["holder_host", "holder_pid", "holder_note"] {
            assert!(v[field].is_null(), "{v}");
        }
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
    let (out, v) = status_json(&b.url, &name);
    assert_eq!(out.code, exit_code::FREE, "{out:#?}");
    assert_eq!(v["state"], "free", "{v}");
    assert!(v["token"].is_null() && v["owner"].is_null(), "{v}");
    assert!(
        v["holder_pid"].is_null() && v["holder_note"].is_null(),
        "{v}"
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
    check_lost_member(url, &[name], name, detect, make_lost);
}

/// [`check_lost`] for a run holding `names`, of which `make_lost` loses `lost`.
fn check_lost_member(
    url: &str,
    names: &[&str],
    lost: &str,
    detect: Duration,
    make_lost: impl FnOnce(),
) {
    let dir = tempdir();
    let pid_file = p(&dir, "pid");
    let tmp = p(&dir, "pid.tmp");
    let script = format!(
        "echo $$ > '{}'; mv '{}' '{}'; exec sleep 30",
        s(&tmp),
        s(&tmp),
        s(&pid_file)
    );
    let run = Running::start(run_sh_all(
        url,
        &["--ttl", "3s", "--grace", "2s"],
        names,
        &script,
    ));
    let cmd_pid = wait_for_pid_file(&pid_file);
    assert!(pid_alive(cmd_pid));
    let lost_at = Instant::now();
    make_lost();
    let out = run.finish(HANG);
    assert_eq!(out.code, exit_code::LOST, "{out:#?}");
    assert!(
        out.stderr.contains(&format!("lock {lost} lost")),
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

/// `distlock run --wait 200ms` against servers that accept connections but
/// never answer, with the backend's default timeouts: exit 69 within 2.2 s
/// (the wait plus at most one default request or connect timeout of 2 s).
fn check_hung_with_defaults(url: &str) {
    let name = unique_name("cli-hung");
    let dir = tempdir();
    let ran = p(&dir, "ran");
    let out = run_to_end(run_sh(
        url,
        &["--wait", "200ms"],
        &name,
        &format!("touch '{}'", s(&ran)),
    ));
    out.one_line_error(exit_code::UNAVAILABLE);
    assert!(
        out.elapsed <= Duration::from_millis(2200),
        "distlock run --wait 200ms against a hung server took {:?}: {out:#?}",
        out.elapsed
    );
    assert!(!ran.exists());
}

/// What the backend behind `url` offers (read-write locks, semaphores, ...).
fn capabilities(url: &str) -> distlock::Capabilities {
    let rt = expect(
        "runtime",
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
    );
    rt.block_on(async { expect("connect", distlock::connect(url).await).capabilities() })
}

/// A `run` of `flags` that holds `name` until `stop` exists, after touching `started`.
fn hold_until(url: &str, flags: &[&str], name: &str, started: &Path, stop: &Path) -> Running {
    Running::start(run_sh(
        url,
        flags,
        name,
        &format!(
            "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done",
            s(started),
            s(stop)
        ),
    ))
}

/// `--read` / `--write`: two readers hold at once, a writer is refused while
/// they do and gets the lock after them; a backend without read-write locks
/// refuses both flags with the unsupported status.
fn check_read_write(b: &Backend) {
    let name = unique_name("cli-rw");
    if !capabilities(&b.url).read_write {
        for flag in ["--read", "--write"] {
            let out = run_to_end(run_sh(&b.url, &[flag], &name, "exit 0"));
            out.one_line_error(exit_code::UNSUPPORTED);
            assert!(out.stderr.contains("unsupported"), "{out:#?}");
        }
        return;
    }
    let dir = tempdir();
    let stop = p(&dir, "stop");
    let readers: Vec<Running> = (0..2)
        .map(|i| {
            hold_until(
                &b.url,
                &["--read", "--ttl", "10s"],
                &name,
                &p(&dir, &format!("reader-{i}")),
                &stop,
            )
        })
        .collect();
    for i in 0..2 {
        wait_for_file(&p(&dir, &format!("reader-{i}")), Duration::from_secs(20));
    }
    let writer = run_to_end(run_sh(&b.url, &["--write"], &name, "exit 0"));
    writer.one_line_error(exit_code::NOT_ACQUIRED);
    assert!(
        writer.stderr.contains("held by another owner"),
        "{writer:#?}"
    );
    expect("stop file", std::fs::write(&stop, b""));
    for r in readers {
        let out = r.finish(HANG);
        assert_eq!(out.code, 0, "{out:#?}");
    }
    let writer = run_to_end(run_sh(
        &b.url,
        &["--write", "--wait", "10s"],
        &name,
        "exit 0",
    ));
    assert_eq!(writer.code, 0, "{writer:#?}");
}

/// `--permits 2`: two holders at once, a third refused; a backend without
/// semaphores refuses with the unsupported status.
fn check_permits(b: &Backend) {
    let name = unique_name("cli-permits");
    if !capabilities(&b.url).semaphore {
        let out = run_to_end(run_sh(&b.url, &["--permits", "2"], &name, "exit 0"));
        out.one_line_error(exit_code::UNSUPPORTED);
        assert!(out.stderr.contains("unsupported"), "{out:#?}");
        return;
    }
    let dir = tempdir();
    let stop = p(&dir, "stop");
    let holders: Vec<Running> = (0..2)
        .map(|i| {
            hold_until(
                &b.url,
                &["--permits", "2", "--ttl", "10s"],
                &name,
                &p(&dir, &format!("holder-{i}")),
                &stop,
            )
        })
        .collect();
    for i in 0..2 {
        wait_for_file(&p(&dir, &format!("holder-{i}")), Duration::from_secs(20));
    }
    let third = run_to_end(run_sh(&b.url, &["--permits", "2"], &name, "exit 0"));
    third.one_line_error(exit_code::NOT_ACQUIRED);
    expect("stop file", std::fs::write(&stop, b""));
    for h in holders {
        assert_eq!(h.finish(HANG).code, 0);
    }
}

/// Several names: all or nothing. With one of them held elsewhere the run is
/// refused, names the held one, and leaves the other free; once free, CMD
/// gets every name (sorted) and one token per name.
fn check_several_names(b: &Backend) {
    let first = unique_name("cli-multi-a");
    let second = unique_name("cli-multi-b");
    let dir = tempdir();
    let started = p(&dir, "started");
    let stop = p(&dir, "stop");
    let holder = hold_until(&b.url, &["--ttl", "10s"], &second, &started, &stop);
    wait_for_file(&started, Duration::from_secs(20));

    let out = run_to_end(run_sh_all(&b.url, &[], &[&second, &first], "exit 0"));
    out.one_line_error(exit_code::NOT_ACQUIRED);
    assert!(
        out.stderr.contains(&format!("lock {second} is held")),
        "{out:#?}"
    );
    let free = status(&b.url, &first);
    assert_eq!(
        free.field("state").as_deref(),
        Some("free"),
        "all or nothing: {first} must not stay taken: {free:#?}"
    );
    expect("stop file", std::fs::write(&stop, b""));
    assert_eq!(holder.finish(HANG).code, 0);

    let out = run_to_end(run_sh_all(
        &b.url,
        &[],
        &[&second, &first],
        r#"printf '%s\n%s\n' "$DISTLOCK_LOCK_NAME" "${DISTLOCK_TOKEN-unset}""#,
    ));
    assert_eq!(out.code, 0, "{out:#?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], format!("{first} {second}"), "{out:#?}");
    if b.fencing {
        let tokens: Vec<u64> = lines[1]
            .split(' ')
            .map(|t| expect("token", t.parse()))
            .collect();
        assert_eq!(tokens.len(), 2, "{out:#?}");
    } else {
        assert_eq!(lines[1], "unset", "{out:#?}");
    }
}

/// `list PREFIX` while a lock under it is held: a line for it (and JSON), or,
/// on a backend that cannot list, a one-line error with the unsupported status.
fn check_list(b: &Backend) {
    let prefix = format!("{}/", unique_name("cli-list"));
    let name = format!("{prefix}job");
    let dir = tempdir();
    let started = p(&dir, "started");
    let stop = p(&dir, "stop");
    let holder = hold_until(
        &b.url,
        &["--ttl", "10s", "--note", "listed job"],
        &name,
        &started,
        &stop,
    );
    wait_for_file(&started, Duration::from_secs(20));
    let describes = capabilities(&b.url).describes_holder;
    let out = run_to_end(distlock(&["list", "--url", &b.url, &prefix]));
    if out.code == exit_code::UNSUPPORTED {
        out.one_line_error(exit_code::UNSUPPORTED);
        assert!(out.stderr.contains("cannot list its locks"), "{out:#?}");
    } else {
        assert_eq!(out.code, 0, "{out:#?}");
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines.len(), 1, "{out:#?}");
        assert!(
            lines[0].starts_with(&format!("{name} state=held")),
            "{out:#?}"
        );
        assert_eq!(
            lines[0].contains(" holder_note=listed_job"),
            describes,
            "{out:#?}"
        );
        assert_eq!(lines[0].contains(" holder_pid="), describes, "{out:#?}");
        assert_eq!(lines[0].contains(" holder_host="), describes, "{out:#?}");
        let json = run_to_end(distlock(&["list", "--json", "--url", &b.url, &prefix]));
        let v: serde_json::Value = expect("list --json", serde_json::from_str(&json.stdout));
        assert_eq!(v["locks"][0]["name"], name.as_str(), "{v}");
        if describes {
            assert_eq!(v["locks"][0]["holder_note"], "listed job", "{v}");
            assert!(v["locks"][0]["holder_pid"].is_u64(), "{v}");
        } else {
            assert!(v["locks"][0]["holder_note"].is_null(), "{v}");
        }
        assert_eq!(v["truncated"], false, "{v}");
    }
    expect("stop file", std::fs::write(&stop, b""));
    assert_eq!(holder.finish(HANG).code, 0);
}

/// The checks every remote backend runs. Those of the read-write lock, the
/// semaphore and `list` assert the full behaviour where the backend offers
/// it, and the unsupported status (78) where it does not.
macro_rules! common_checks {
    ($backend:expr) => {
        #[test]
        fn run_passes_env_and_exit_status() {
            check_run(&$backend);
        }

        #[test]
        fn exactly_once() {
            check_exactly_once(&$backend);
        }

        #[test]
        fn status_shows_the_holder() {
            check_status(&$backend);
        }

        #[test]
        fn wait_times_out_then_succeeds() {
            check_wait(&$backend);
        }

        #[test]
        fn read_write_locks() {
            check_read_write(&$backend);
        }

        #[test]
        fn permits() {
            check_permits(&$backend);
        }

        #[test]
        fn several_names_all_or_nothing() {
            check_several_names(&$backend);
        }

        #[test]
        fn list_held_locks() {
            check_list(&$backend);
        }
    };
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
        assert_eq!(out.code, exit_code::FREE, "{out:#?}");
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

    /// Every mode runs CMD on the memory backend (which offers them all),
    /// and CMD learns each name; several names come sorted.
    #[test]
    fn every_mode_and_several_names() {
        for flags in [
            &[][..],
            &["--read"][..],
            &["--write"][..],
            &["--permits", "3"][..],
        ] {
            let out = run_to_end(run_sh_all(
                "memory://",
                flags,
                &["jobs/b", "jobs/a"],
                r#"echo "$DISTLOCK_LOCK_NAME""#,
            ));
            assert_eq!(out.code, 0, "{flags:?}: {out:#?}");
            assert_eq!(out.stdout.trim(), "jobs/a jobs/b", "{flags:?}: {out:#?}");
        }
    }

    /// `list` on the memory backend: nothing is held in a new process.
    #[test]
    fn list_is_empty() {
        let out = run_to_end(distlock(&["list", "--url", "memory://"]));
        assert_eq!(out.code, 0, "{out:#?}");
        assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:#?}");
        let out = run_to_end(distlock(&["list", "--json", "--url", "memory://", "jobs/"]));
        assert_eq!(out.code, 0, "{out:#?}");
        let v: serde_json::Value = expect("list --json", serde_json::from_str(&out.stdout));
        assert_eq!(v["backend"], "memory");
        assert_eq!(v["prefix"], "jobs/");
        assert_eq!(v["locks"], serde_json::json!([]));
    }

    /// `status --json` of a free lock: exit 3, every key present.
    #[test]
    fn status_json_of_a_free_lock() {
        let (out, v) = status_json("memory://", "jobs/nightly");
        assert_eq!(out.code, exit_code::FREE, "{out:#?}");
        assert_eq!(v["state"], "free");
        for key in [
            "name",
            "backend",
            "token",
            "last_token",
            "owner",
            "ttl_remaining_ms",
            "waiters",
        ] {
            assert!(v.get(key).is_some(), "{key} missing: {v}");
        }
    }

    /// The URL from `--url-file` and `DISTLOCK_URL_FILE` (whitespace around
    /// it ignored); the command line wins over the environment.
    #[test]
    fn url_from_a_file() {
        let dir = tempdir();
        let file = p(&dir, "url");
        expect("write", std::fs::write(&file, "  memory://\n"));
        let out = run_to_end(distlock(&[
            "run",
            "--url-file",
            s(&file),
            "x",
            "--",
            "sh",
            "-c",
            "exit 4",
        ]));
        assert_eq!(out.code, 4, "{out:#?}");

        let mut cmd = distlock(&["run", "x", "--", "sh", "-c", "exit 5"]);
        cmd.env("DISTLOCK_URL_FILE", &file);
        assert_eq!(run_to_end(cmd).code, 5);

        // --url-file on the command line beats DISTLOCK_URL (a refused port).
        let refused = format!("redis://127.0.0.1:{}", lock_testbed::free_port());
        let mut cmd = distlock(&[
            "run",
            "--url-file",
            s(&file),
            "x",
            "--",
            "sh",
            "-c",
            "exit 6",
        ]);
        cmd.env("DISTLOCK_URL", &refused);
        assert_eq!(run_to_end(cmd).code, 6);
        // ... and --url beats DISTLOCK_URL_FILE.
        let mut cmd = distlock(&["run", "--url", "memory://", "x", "--", "true"]);
        cmd.env("DISTLOCK_URL_FILE", "/nonexistent/url");
        assert_eq!(run_to_end(cmd).code, 0);
    }

    /// Options from the environment: the wait, the conflict status and the
    /// modes; the command line wins over them.
    #[test]
    fn options_from_the_environment() {
        let mut cmd = distlock(&["run", "--url", "memory://", "--write", "x", "--", "true"]);
        cmd.env("DISTLOCK_READ", "1").env("DISTLOCK_TTL", "1m30s");
        let out = run_to_end(cmd);
        assert_eq!(out.code, 0, "the command line's --write wins: {out:#?}");

        let mut cmd = distlock(&["run", "--url", "memory://", "x", "--", "true"]);
        cmd.env("DISTLOCK_READ", "yes").env("DISTLOCK_WRITE", "on");
        run_to_end(cmd).one_line_error(exit_code::USAGE);

        for (var, value) in [
            ("DISTLOCK_TTL", "5"),
            ("DISTLOCK_WAIT", "soon"),
            ("DISTLOCK_PERMITS", "0"),
            ("DISTLOCK_QUIET", "maybe"),
        ] {
            let mut cmd = distlock(&["run", "--url", "memory://", "x", "--", "true"]);
            cmd.env(var, value);
            let out = run_to_end(cmd);
            assert_eq!(out.code, exit_code::USAGE, "{var}={value}: {out:#?}");
            assert!(out.stderr.contains(var), "names the variable: {out:#?}");
        }
    }

    /// `distlock completions SHELL` and the man page.
    #[test]
    fn completions_and_man_page() {
        for (shell, needle) in [
            ("bash", "_distlock()"),
            ("zsh", "#compdef distlock"),
            ("fish", "complete -c distlock"),
        ] {
            let out = run_to_end(distlock(&["completions", shell]));
            assert_eq!(out.code, 0, "{out:#?}");
            assert!(out.stdout.contains(needle), "{shell}: {}", out.stdout);
            assert!(out.stdout.contains("url-file"), "{shell}");
        }
        let out = run_to_end(distlock(&["man"]));
        assert_eq!(out.code, 0, "{out:#?}");
        assert!(
            out.stdout.starts_with(".ie") || out.stdout.contains(".TH distlock"),
            "{}",
            out.stdout
        );
        let out = run_to_end(distlock(&["completions", "tcsh"]));
        assert_eq!(out.code, exit_code::USAGE, "{out:#?}");
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
    fn bad_mode_and_names_exit_64() {
        for args in [
            &[
                "run",
                "--url",
                "memory://",
                "--read",
                "--write",
                "x",
                "--",
                "true",
            ][..],
            &[
                "run",
                "--url",
                "memory://",
                "--read",
                "--permits",
                "2",
                "x",
                "--",
                "true",
            ][..],
            &["run", "--url", "memory://", "a", "a", "--", "true"][..],
            &["run", "--url", "memory://", "ok", "a//b", "--", "true"][..],
            &["run", "x", "--", "true"][..],
        ] {
            let out = run_to_end(distlock(args));
            out.one_line_error(exit_code::USAGE);
        }
        for args in [
            &[
                "run",
                "--url",
                "memory://",
                "--permits",
                "0",
                "x",
                "--",
                "true",
            ][..],
            &[
                "run",
                "--url",
                "memory://",
                "--permits",
                "100001",
                "x",
                "--",
                "true",
            ][..],
            &[
                "run",
                "--url",
                "memory://",
                "--wait",
                "2d",
                "x",
                "--",
                "true",
            ][..],
        ] {
            let out = run_to_end(distlock(args));
            assert_eq!(out.code, exit_code::USAGE, "{args:?}: {out:#?}");
        }
        let out = run_to_end(distlock(&[
            "run",
            "--url",
            "memory://",
            "--url-file",
            "/etc/hostname",
            "x",
            "--",
            "true",
        ]));
        out.one_line_error(exit_code::USAGE);
        let out = run_to_end(distlock(&["status", "--url-file", "/nonexistent/url", "x"]));
        out.one_line_error(exit_code::USAGE);
        assert!(out.stderr.contains("/nonexistent/url"), "{out:#?}");
    }

    /// A password never reaches distlock's output, whether the URL comes
    /// from a file, the environment (also not in `--help`) or the command
    /// line (which earns a warning).
    #[test]
    fn passwords_are_never_printed() {
        let secret = "s3cret-Pw";
        let url = format!(
            "redis://:{secret}@127.0.0.1:{}?connect_timeout=1s",
            lock_testbed::free_port()
        );
        let dir = tempdir();
        let file = p(&dir, "url");
        expect("write", std::fs::write(&file, &url));
        let out = run_to_end(distlock(&["status", "--url-file", s(&file), "x"]));
        out.one_line_error(exit_code::UNAVAILABLE);
        assert!(!out.stderr.contains(secret), "{out:#?}");

        let mut cmd = distlock(&["run", "x", "--", "true"]);
        cmd.env("DISTLOCK_URL", &url);
        let out = run_to_end(cmd);
        out.one_line_error(exit_code::UNAVAILABLE);
        assert!(!out.stderr.contains(secret), "{out:#?}");

        let mut cmd = distlock(&["run", "--help"]);
        cmd.env("DISTLOCK_URL", &url);
        let out = run_to_end(cmd);
        assert_eq!(out.code, 0);
        assert!(!out.stdout.contains(secret), "--help shows no env value");

        let out = run_to_end(distlock(&["status", "--url", &url, "x"]));
        assert_eq!(out.code, exit_code::UNAVAILABLE, "{out:#?}");
        assert!(
            out.stderr
                .contains("warning: the URL on the command line holds a password"),
            "{out:#?}"
        );
        assert!(!out.stderr.contains(secret), "{out:#?}");
        assert_eq!(out.stderr.lines().count(), 2, "{out:#?}");
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
            "DISTLOCK_TOKEN",
            "DISTLOCK_LOCK_NAME",
            "ETCD_LOCK_REV",
            "DISTLOCK_TTL",
            "--url-file",
            "--quiet",
            "--permits",
            "forever",
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

    common_checks!(redis());

    /// One member of a multi-lock deleted behind distlock's back: CMD is
    /// stopped and the message names that member.
    #[test]
    fn lost_member_terminates_cmd() {
        let b = redis();
        let server = expect("redis", shared_redis());
        let first = unique_name("cli-lost-a");
        let second = unique_name("cli-lost-b");
        check_lost_member(
            &b.url,
            &[&first, &second],
            &second,
            Duration::from_secs(1) + Duration::from_secs(2),
            || {
                expect("DEL", server.cmd(&["DEL", &second]));
            },
        );
    }

    /// `--quiet` (or DISTLOCK_QUIET): a conflict prints nothing, and the
    /// status still says it (or the one asked for).
    #[test]
    fn quiet_conflict_prints_nothing() {
        let b = redis();
        let dir = tempdir();
        let (started, stop) = (p(&dir, "started"), p(&dir, "stop"));
        let name = unique_name("cli-quiet");
        let holder = hold_until(&b.url, &["--ttl", "10s"], &name, &started, &stop);
        wait_for_file(&started, Duration::from_secs(20));
        let ran = p(&dir, "ran");
        let touch = format!("touch '{}'", s(&ran));
        let out = run_to_end(run_sh(&b.url, &["--quiet"], &name, &touch));
        assert_eq!(out.code, exit_code::NOT_ACQUIRED, "{out:#?}");
        assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:#?}");
        let out = run_to_end(run_sh(&b.url, &["-q", "--wait", "300ms"], &name, &touch));
        assert_eq!(out.code, exit_code::NOT_ACQUIRED, "{out:#?}");
        assert!(out.stderr.is_empty(), "{out:#?}");
        let mut cmd = run_sh(&b.url, &["--conflict-exit-code", "0"], &name, &touch);
        cmd.env("DISTLOCK_QUIET", "true");
        let out = run_to_end(cmd);
        assert_eq!(out.code, 0, "{out:#?}");
        assert!(out.stderr.is_empty(), "{out:#?}");
        assert!(!ran.exists(), "CMD must not run without the lock");
        // Without --quiet the conflict is reported, as before.
        run_to_end(run_sh(&b.url, &[], &name, &touch)).one_line_error(exit_code::NOT_ACQUIRED);
        expect("stop file", std::fs::write(&stop, b""));
        assert_eq!(holder.finish(HANG).code, 0);
    }

    /// DISTLOCK_TTL (a human duration) reaches the server: the lock's TTL
    /// is 90 s, not the default 30 s; DISTLOCK_WAIT and
    /// DISTLOCK_CONFLICT_EXIT_CODE apply to a contender.
    #[test]
    fn options_from_the_environment() {
        let b = redis();
        let dir = tempdir();
        let (started, stop) = (p(&dir, "started"), p(&dir, "stop"));
        let name = unique_name("cli-env");
        let mut holder_cmd = run_sh(
            &b.url,
            &[],
            &name,
            &format!(
                "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done",
                s(&started),
                s(&stop)
            ),
        );
        holder_cmd.env("DISTLOCK_TTL", "1m30s");
        let holder = Running::start(holder_cmd);
        wait_for_file(&started, Duration::from_secs(20));
        let held = status(&b.url, &name);
        let ttl: u64 = expect(
            "ttl_remaining_ms",
            held.field("ttl_remaining_ms").unwrap_or_default().parse(),
        );
        assert!(
            ttl > 60_000 && ttl <= 90_000,
            "TTL from DISTLOCK_TTL: {held:#?}"
        );

        let mut cmd = run_sh(&b.url, &[], &name, "exit 0");
        cmd.env("DISTLOCK_WAIT", "1s")
            .env("DISTLOCK_CONFLICT_EXIT_CODE", "42");
        let out = run_to_end(cmd);
        out.one_line_error(42);
        assert!(out.stderr.contains("gave up waiting after 1s"), "{out:#?}");
        assert!(out.elapsed >= Duration::from_secs(1), "{out:#?}");
        expect("stop file", std::fs::write(&stop, b""));
        assert_eq!(holder.finish(HANG).code, 0);
    }

    /// `--wait forever`: a hot standby gets the lock when the holder ends,
    /// and runs CMD only then.
    #[test]
    fn wait_forever_takes_over() {
        let b = redis();
        let dir = tempdir();
        let (started, stop, ended) = (p(&dir, "started"), p(&dir, "stop"), p(&dir, "ended"));
        let name = unique_name("cli-forever");
        let holder = Running::start(run_sh(
            &b.url,
            &["--ttl", "10s"],
            &name,
            &format!(
                "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done; touch '{}'",
                s(&started),
                s(&stop),
                s(&ended)
            ),
        ));
        wait_for_file(&started, Duration::from_secs(20));
        let standby = Running::start(run_sh(
            &b.url,
            &["--wait", "forever"],
            &name,
            &format!("[ -e '{}' ]", s(&ended)),
        ));
        std::thread::sleep(Duration::from_millis(1500));
        expect("stop file", std::fs::write(&stop, b""));
        assert_eq!(holder.finish(HANG).code, 0);
        let out = standby.finish(HANG);
        assert_eq!(
            out.code, 0,
            "the standby ran CMD after the holder: {out:#?}"
        );
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
        check_hung_with_defaults(&format!("redis://{}", proxy.addr()));
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

    // Redlock offers no read-write locks or semaphores (permits counted on a
    // majority of independent nodes would not keep their count): the checks
    // then expect the unsupported status.
    common_checks!(redlock());

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
        check_hung_with_defaults(&format!("redlock://{}", nodes.join(",")));
    }
}

// ---------------------------------------------------------------------------
// etcd://
// ---------------------------------------------------------------------------

mod etcd {
    use super::*;

    common_checks!(etcd());

    /// CMD gets `ETCD_LOCK_REV` (the create revision, = DISTLOCK_TOKEN) and,
    /// where the backend tells the key, `ETCD_LOCK_KEY` = DISTLOCK_LOCK_KEY,
    /// as `etcdctl lock NAME CMD` gives them.
    #[test]
    fn etcdctl_lock_variables() {
        let b = etcd();
        let name = unique_name("cli-etcdctl");
        let out = run_to_end(run_sh(
            &b.url,
            &[],
            &name,
            r#"printf '%s\n%s\n%s\n%s\n' "$DISTLOCK_TOKEN" "${ETCD_LOCK_REV-unset}" "${DISTLOCK_LOCK_KEY-unset}" "${ETCD_LOCK_KEY-unset}""#,
        ));
        assert_eq!(out.code, 0, "{out:#?}");
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines.len(), 4, "{out:#?}");
        assert_eq!(lines[1], lines[0], "ETCD_LOCK_REV is the token: {out:#?}");
        assert!(lines[1].parse::<u64>().is_ok(), "{out:#?}");
        assert_eq!(lines[3], lines[2], "ETCD_LOCK_KEY is the key: {out:#?}");
        assert!(
            lines[3] == "unset" || lines[3].contains(&format!("{name}/")),
            "{out:#?}"
        );
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
        check_hung_with_defaults(&format!("etcd://{}", proxy.addr()));
    }
}

// ---------------------------------------------------------------------------
// zk://
// ---------------------------------------------------------------------------

mod zk {
    use super::*;

    common_checks!(zk());

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
        check_hung_with_defaults(&format!("zk://{}", proxy.addr()));
    }
}
