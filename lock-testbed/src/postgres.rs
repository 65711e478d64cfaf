//! PostgreSQL: one server (`initdb` + `postgres`) in its own temp dir, run as a
//! non-root system user when the tests run as root (PostgreSQL refuses root).

use std::ffi::CString;
use std::fmt;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::bins;
use crate::process::{
    children_of, log_says_addr_in_use, log_tail, pid_alive, ManagedChild, ManagedDir,
};
use crate::util::{free_port, loopback};
use crate::TestbedError;

/// The database superuser `initdb` creates; it logs in without a password
/// (`trust`, loopback only).
pub const POSTGRES_USER: &str = "distlock";
/// The database every server has from the start.
pub const POSTGRES_DATABASE: &str = "postgres";
/// Env var: the system user the server runs as when the tests run as root.
pub const ENV_POSTGRES_USER: &str = "DISTLOCK_POSTGRES_USER";
/// The default of [`ENV_POSTGRES_USER`]: the user Debian's `postgresql` package creates.
const OS_USER_DEFAULT: &str = "postgres";

/// How long `initdb` may take.
const INITDB_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the server may take to accept connections after spawn.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an immediate shutdown (SIGQUIT) may take before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// How long the server's worker processes may take to exit after the postmaster.
const WORKERS_EXIT: Duration = Duration::from_secs(5);
const START_ATTEMPTS: usize = 3;

/// One PostgreSQL server on `127.0.0.1:<free port>`, its data dir in a fresh
/// temp dir.
///
/// `initdb` (superuser [`POSTGRES_USER`], `trust` authentication, UTF-8, C
/// locale, no fsync) then `postgres` listening on loopback TCP only (no Unix
/// socket), `fsync=off` (a killed server keeps its data; only a machine crash
/// would lose it). When the tests run as root, both run as the system user
/// `postgres` (or [`ENV_POSTGRES_USER`]), which owns the temp dir.
///
/// Dropping it asks for an immediate shutdown (SIGQUIT: the server stops its
/// worker processes at once), SIGKILLs it if it is still there after 3 s, waits
/// for its workers and removes the temp dir.
pub struct PostgresServer {
    addr: SocketAddr,
    // Declared before the dir: stopped before the dir is removed.
    child: Option<ManagedChild>,
    dir: ManagedDir,
    bin_dir: PathBuf,
    run_as: Option<(u32, u32)>,
}

impl fmt::Debug for PostgresServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresServer")
            .field("addr", &self.addr)
            .field("pid", &self.pid())
            .field("dir", &self.dir.path())
            .finish()
    }
}

impl PostgresServer {
    /// Run `initdb`, start the server and wait until it accepts connections
    /// (at most 20 s after `initdb`).
    pub fn start() -> Result<PostgresServer, TestbedError> {
        let mut last_err = None;
        for _ in 0..START_ATTEMPTS {
            let mut server = PostgresServer::launch()?;
            match server.wait_ready(Instant::now() + READY_TIMEOUT) {
                Ok(()) => return Ok(server),
                Err(e) if server.port_was_taken() => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err
            .unwrap_or_else(|| TestbedError::protocol("starting PostgreSQL", "no attempt made")))
    }

    fn launch() -> Result<PostgresServer, TestbedError> {
        let bin_dir = bins::postgres_bin_dir()?;
        let run_as = run_as()?;
        let dir = ManagedDir::new("pg")?;
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).map_err(|e| {
                TestbedError::io(format!("handing {} to uid {uid}", dir.path().display()), e)
            })?;
        }
        let mut server = PostgresServer {
            addr: loopback(free_port()),
            child: None,
            dir,
            bin_dir,
            run_as,
        };
        server.initdb()?;
        server.spawn_process()?;
        Ok(server)
    }

    fn what(&self) -> String {
        format!("PostgreSQL on {}", self.addr)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    /// A command of the server's programs, as the server's user, output to `log`.
    fn command(&self, program: &str, log: &Path) -> Result<Command, TestbedError> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| TestbedError::io(format!("creating {}", log.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| TestbedError::io(format!("creating {}", log.display()), e))?;
        let mut cmd = Command::new(self.bin_dir.join(program));
        if let Some((uid, gid)) = self.run_as {
            // std applies these before the spawner's pre_exec hook, so the
            // parent-death signal set there survives the change of user.
            cmd.uid(uid).gid(gid);
        }
        cmd.current_dir(self.dir.path())
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        Ok(cmd)
    }

    fn initdb(&mut self) -> Result<(), TestbedError> {
        let log = self.dir.path().join("initdb.log");
        let mut cmd = self.command("initdb", &log)?;
        cmd.arg("-D")
            .arg(self.data_dir())
            .args(["-U", POSTGRES_USER, "--auth=trust", "--no-sync"])
            .args(["-E", "UTF8", "--locale=C"]);
        let what = format!("initdb for {}", self.what());
        let mut child = ManagedChild::spawn(cmd, &what)?;
        let started = Instant::now();
        loop {
            if let Some(status) = child.exited() {
                if status.success() {
                    return Ok(());
                }
                return Err(TestbedError::NotReady {
                    what,
                    waited: started.elapsed(),
                    detail: format!("initdb failed: {status}"),
                    log_tail: log_tail(&log, 20),
                });
            }
            if started.elapsed() > INITDB_TIMEOUT {
                return Err(TestbedError::NotReady {
                    what,
                    waited: started.elapsed(),
                    detail: "initdb did not finish".into(),
                    log_tail: log_tail(&log, 20),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn spawn_process(&mut self) -> Result<(), TestbedError> {
        let mut cmd = self.command("postgres", &self.log_path())?;
        cmd.arg("-D")
            .arg(self.data_dir())
            .args(["-p", &self.addr.port().to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "unix_socket_directories="])
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .args(["-c", "shared_buffers=32MB", "-c", "max_connections=200"])
            .args(["-c", "logging_collector=off"]);
        self.child = Some(ManagedChild::spawn(cmd, &self.what())?);
        Ok(())
    }

    fn port_was_taken(&self) -> bool {
        log_says_addr_in_use(&self.log_path())
    }

    /// Ready when `postmaster.pid` says `ready` (what `pg_ctl -w` waits for)
    /// and the port accepts a TCP connection.
    fn wait_ready(&mut self, deadline: Instant) -> Result<(), TestbedError> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.as_mut().and_then(ManagedChild::exited) {
                self.child = None;
                return Err(self.not_ready(started, format!("exited during start-up: {status}")));
            }
            let status = std::fs::read_to_string(self.data_dir().join("postmaster.pid"))
                .ok()
                .and_then(|pid_file| pid_file.lines().nth(7).map(|l| l.trim().to_string()));
            let detail = match status.as_deref() {
                Some("ready") => {
                    match TcpStream::connect_timeout(&self.addr, Duration::from_millis(500)) {
                        Ok(_) => return Ok(()),
                        Err(e) => format!("postmaster.pid says ready, but connecting failed: {e}"),
                    }
                }
                Some(other) => format!("postmaster.pid says {other:?}"),
                None => "no server status in postmaster.pid yet".into(),
            };
            if Instant::now() >= deadline {
                return Err(self.not_ready(started, detail));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn not_ready(&self, started: Instant, detail: String) -> TestbedError {
        TestbedError::NotReady {
            what: self.what(),
            waited: started.elapsed(),
            detail,
            log_tail: log_tail(&self.log_path(), 20),
        }
    }

    /// Stops the postmaster (SIGQUIT first when `graceful`, else SIGKILL while
    /// it is stopped, so it forks nothing more), then waits until its worker
    /// processes are gone: they exit by themselves once it is.
    fn stop_processes(&mut self, graceful: bool) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let workers = if graceful {
            let workers = children_of(child.pid());
            child.stop(libc::SIGQUIT, STOP_GRACE);
            workers
        } else {
            let _ = child.signal(libc::SIGSTOP, &self.what());
            let workers = children_of(child.pid());
            child.kill();
            workers
        };
        let deadline = Instant::now() + WORKERS_EXIT;
        while workers.iter().any(|&p| pid_alive(p)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `postgres://distlock@127.0.0.1:<port>/postgres` (no password: `trust`).
    pub fn url(&self) -> String {
        format!(
            "postgres://{POSTGRES_USER}@{}/{POSTGRES_DATABASE}",
            self.addr
        )
    }

    /// The postmaster's PID; `None` when killed.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(ManagedChild::pid)
    }

    /// The PIDs of the server's worker processes (one per connection, plus
    /// its background workers), for tests that check they are gone.
    pub fn worker_pids(&self) -> Vec<u32> {
        self.pid().map(children_of).unwrap_or_default()
    }

    /// The temp dir holding the data dir (`data/`) and the log (`postgres.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A crash: SIGKILL the postmaster, reap it and wait until its worker
    /// processes have exited (they notice the postmaster's death), so that
    /// [`restart`](Self::restart) can use the data dir again. Idempotent.
    pub fn kill(&mut self) {
        self.stop_processes(false);
    }

    /// Kill if running, then start again on the same port and data dir (crash
    /// recovery replays the log) and wait until it accepts connections.
    pub fn restart(&mut self) -> Result<(), TestbedError> {
        self.kill();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            self.spawn_process()?;
            match self.wait_ready(deadline) {
                Ok(()) => return Ok(()),
                // The old socket may linger briefly: retry on the same port.
                Err(e) if self.port_was_taken() && Instant::now() < deadline => {
                    tracing::debug!(error = %e, "lock-testbed: PostgreSQL port busy, retrying");
                    self.kill();
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop_processes(true);
    }
}

/// The uid and gid to run PostgreSQL as: `None` when we are not root (run as
/// ourselves), else the system user [`ENV_POSTGRES_USER`] (default `postgres`).
fn run_as() -> Result<Option<(u32, u32)>, TestbedError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let name = bins::env_var(ENV_POSTGRES_USER).unwrap_or_else(|| OS_USER_DEFAULT.to_string());
    let not_found = |looked_at: String| TestbedError::NotInstalled {
        what: format!("the system user `{name}` to run PostgreSQL as (it refuses root)"),
        looked_at,
        package: bins::POSTGRES_PACKAGE,
        env: ENV_POSTGRES_USER,
    };
    let Some((uid, gid)) = user_ids(&name) else {
        return Err(not_found("the password database".into()));
    };
    if uid == 0 {
        return Err(not_found(format!("`{name}` is root")));
    }
    Ok(Some((uid, gid)))
}

/// The uid and primary gid of the user `name` (getpwnam_r: thread-safe).
fn user_ids(name: &str) -> Option<(u32, u32)> {
    let cname = CString::new(name).ok()?;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: zeroed passwd is a valid out-parameter; getpwnam_r writes it and
    // points its strings into `buf`, which outlives every use here.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the sizes given.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    (rc == 0 && !result.is_null()).then_some((pwd.pw_uid, pwd.pw_gid))
}
