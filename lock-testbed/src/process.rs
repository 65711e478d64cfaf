//! Child processes: one long-lived spawner thread, a global PID registry, and the
//! clean-up that runs at process exit.
//!
//! Architecture invariants:
//! - Every server process is forked by the spawner thread, which lives as long as the
//!   test process. `PR_SET_PDEATHSIG` fires when the *forking thread* ends, so forking
//!   from a libtest test thread would kill shared servers when that test finished.
//! - Every live child PID is in [`REGISTRY`] from the moment it is spawned until it has
//!   been SIGKILLed and reaped. Killing and reaping happen under the registry lock, so
//!   the exit handler never signals a PID that was already reaped (and maybe reused).
//! - A `libc::atexit` handler SIGKILLs and reaps every registered PID and removes every
//!   registered temp dir: shared servers live in statics that are never dropped.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use crate::TestbedError;

#[derive(Default)]
struct Registry {
    pids: HashSet<u32>,
    dirs: HashMap<u64, PathBuf>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);
static NEXT_DIR_ID: AtomicU64 = AtomicU64::new(1);

fn registry() -> MutexGuard<'static, Option<Registry>> {
    REGISTRY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn with_registry<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    let mut guard = registry();
    f(guard.get_or_insert_with(Registry::default))
}

struct SpawnRequest {
    command: Command,
    reply: mpsc::Sender<io::Result<Child>>,
}

static SPAWNER: Mutex<Option<mpsc::Sender<SpawnRequest>>> = Mutex::new(None);
static ATEXIT: OnceLock<()> = OnceLock::new();

fn spawner() -> Result<mpsc::Sender<SpawnRequest>, TestbedError> {
    ATEXIT.get_or_init(|| {
        // SAFETY: registering a plain `extern "C" fn()` with no captured state.
        let rc = unsafe { libc::atexit(cleanup_at_exit) };
        if rc != 0 {
            tracing::warn!("lock-testbed: atexit registration failed; relying on PDEATHSIG");
        }
    });
    let mut slot = SPAWNER.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(tx) = slot.as_ref() {
        return Ok(tx.clone());
    }
    let (tx, rx) = mpsc::channel::<SpawnRequest>();
    std::thread::Builder::new()
        .name("lock-testbed-spawner".into())
        .spawn(move || {
            // Lives until the process ends: the sender stays in SPAWNER forever.
            for request in rx {
                let result = spawn_here(request.command);
                if let Err(Ok(mut child)) = request.reply.send(result).map_err(|e| e.0) {
                    // The requester is gone: do not leak the process.
                    reap_registered(&mut child);
                }
            }
        })
        .map_err(|e| TestbedError::io("starting the lock-testbed spawner thread", e))?;
    *slot = Some(tx.clone());
    Ok(tx)
}

fn spawn_here(mut command: Command) -> io::Result<Child> {
    // SAFETY: getpid is async-signal-safe and has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure only calls async-signal-safe functions (prctl, getppid) and
    // builds io::Errors from raw OS codes, which does not allocate.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    // Hold the registry lock across spawn + insert so the exit handler sees the PID.
    let mut guard = registry();
    let child = command.spawn()?;
    guard
        .get_or_insert_with(Registry::default)
        .pids
        .insert(child.id());
    Ok(child)
}

/// SIGKILL + reap under the registry lock, then forget the PID.
fn reap_registered(child: &mut Child) {
    let mut guard = registry();
    let pid = child.id();
    let _ = child.kill();
    let _ = child.wait();
    if let Some(reg) = guard.as_mut() {
        reg.pids.remove(&pid);
    }
}

extern "C" fn cleanup_at_exit() {
    // Never block process exit for long: another thread may hold the lock.
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut guard = loop {
        match REGISTRY.try_lock() {
            Ok(g) => break g,
            Err(TryLockError::Poisoned(p)) => break p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                if Instant::now() > deadline {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    };
    let Some(reg) = guard.as_mut() else { return };
    let pids: Vec<u32> = reg.pids.drain().collect();
    for &pid in &pids {
        // SAFETY: plain syscall; the PID is an unreaped child of ours, so not reused.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut pending: Vec<u32> = pids;
    while !pending.is_empty() && Instant::now() < deadline {
        pending.retain(|&pid| {
            let mut status = 0;
            // SAFETY: plain syscall on our own child.
            let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
            rc == 0
        });
        if !pending.is_empty() {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    for (_, dir) in reg.dirs.drain() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A server process: killed with SIGKILL and reaped when dropped.
pub(crate) struct ManagedChild {
    child: Child,
    pid: u32,
    reaped: bool,
}

impl ManagedChild {
    /// Spawn `command` on the spawner thread (stdin null; caller sets stdout/stderr).
    pub(crate) fn spawn(command: Command, what: &str) -> Result<ManagedChild, TestbedError> {
        let tx = spawner()?;
        let (reply_tx, reply_rx) = mpsc::channel();
        let spawn_err = |e: io::Error| TestbedError::Spawn {
            what: what.to_string(),
            source: e,
        };
        tx.send(SpawnRequest {
            command,
            reply: reply_tx,
        })
        .map_err(|_| spawn_err(io::Error::other("the lock-testbed spawner thread is gone")))?;
        let child = reply_rx
            .recv()
            .map_err(|_| spawn_err(io::Error::other("the lock-testbed spawner thread is gone")))?
            .map_err(spawn_err)?;
        let pid = child.id();
        tracing::debug!(pid, what, "lock-testbed: spawned");
        Ok(ManagedChild {
            child,
            pid,
            reaped: false,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The exit status if the process has already exited (it is reaped then).
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        if self.reaped {
            return None;
        }
        let mut guard = registry();
        match self.child.try_wait() {
            Ok(Some(status)) => {
                if let Some(reg) = guard.as_mut() {
                    reg.pids.remove(&self.pid);
                }
                Some(status)
            }
            _ => None,
        }
    }

    /// Send a signal (SIGSTOP, SIGCONT, ...). The PID is still ours: it has not been reaped.
    ///
    /// SIGSTOP and SIGCONT take effect asynchronously, thread by thread; for those two
    /// this waits (up to [`SIGNAL_SETTLE`]) until every thread of the process is
    /// stopped / running, so a paused server cannot answer one more request after
    /// `pause()` returned.
    pub(crate) fn signal(&self, sig: libc::c_int, what: &str) -> Result<(), TestbedError> {
        // SAFETY: plain syscall; the PID belongs to our unreaped child.
        let rc = unsafe { libc::kill(self.pid as libc::pid_t, sig) };
        if rc != 0 {
            return Err(TestbedError::io(
                format!("sending signal {sig} to {what} (pid {})", self.pid),
                io::Error::last_os_error(),
            ));
        }
        let want_stopped = match sig {
            libc::SIGSTOP => true,
            libc::SIGCONT => false,
            _ => return Ok(()),
        };
        let deadline = Instant::now() + SIGNAL_SETTLE;
        loop {
            match all_threads_stopped(self.pid) {
                Some(stopped) if stopped == want_stopped => return Ok(()),
                None => return Ok(()), // exited: nothing more to wait for
                Some(_) => {}
            }
            if Instant::now() >= deadline {
                return Err(TestbedError::io(
                    format!(
                        "{what} (pid {}) did not {} within {SIGNAL_SETTLE:?} of signal {sig}",
                        self.pid,
                        if want_stopped { "stop" } else { "continue" }
                    ),
                    io::Error::from(io::ErrorKind::TimedOut),
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Send `sig` (a server's own shutdown signal), wait up to `grace` for the
    /// process to exit and reap it; SIGKILL and reap it if it is still there.
    /// Idempotent.
    pub(crate) fn stop(&mut self, sig: libc::c_int, grace: Duration) {
        if self.reaped {
            return;
        }
        // SAFETY: plain syscall; the PID belongs to our unreaped child.
        unsafe { libc::kill(self.pid as libc::pid_t, sig) };
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                self.reaped = true;
                tracing::debug!(pid = self.pid, sig, "lock-testbed: stopped");
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        self.kill();
    }

    /// SIGKILL and reap. Idempotent.
    pub(crate) fn kill(&mut self) {
        if self.reaped {
            return;
        }
        reap_registered(&mut self.child);
        self.reaped = true;
        tracing::debug!(pid = self.pid, "lock-testbed: killed");
    }
}

impl Drop for ManagedChild {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A temp dir that is removed when dropped, and also at process exit if never dropped.
pub(crate) struct ManagedDir {
    dir: Option<tempfile::TempDir>,
    id: u64,
}

/// Where server data dirs go, if not the system's temp dir (see [`set_data_root`]).
static DATA_ROOT: std::sync::RwLock<Option<PathBuf>> = std::sync::RwLock::new(None);

/// Puts the data dirs of servers started from now on under `root` instead of
/// the system's temp dir: e.g. `/dev/shm` (tmpfs), so that etcd's and
/// ZooKeeper's fsync of every write does not depend on a noisy disk (the
/// benchmark does this). `None` goes back to the temp dir.
pub fn set_data_root(root: Option<PathBuf>) {
    *DATA_ROOT.write().unwrap_or_else(|p| p.into_inner()) = root;
}

fn data_root() -> PathBuf {
    DATA_ROOT
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_else(std::env::temp_dir)
}

impl ManagedDir {
    /// A fresh dir `<data root>/distlock-<prefix>-<our pid>-XXXXXX` (the data
    /// root is `$TMPDIR` unless [`set_data_root`] says otherwise).
    pub(crate) fn new(prefix: &str) -> Result<ManagedDir, TestbedError> {
        let root = data_root();
        sweep_stale_dirs(&root);
        let dir = tempfile::Builder::new()
            .prefix(&format!("distlock-{prefix}-{}-", std::process::id()))
            .tempdir_in(&root)
            .map_err(|e| {
                TestbedError::io(format!("creating a temp dir in {}", root.display()), e)
            })?;
        let id = NEXT_DIR_ID.fetch_add(1, Ordering::Relaxed);
        with_registry(|reg| reg.dirs.insert(id, dir.path().to_path_buf()));
        Ok(ManagedDir { dir: Some(dir), id })
    }

    pub(crate) fn path(&self) -> &Path {
        match &self.dir {
            Some(d) => d.path(),
            None => Path::new("/nonexistent"),
        }
    }
}

impl Drop for ManagedDir {
    fn drop(&mut self) {
        with_registry(|reg| reg.dirs.remove(&self.id));
        if let Some(dir) = self.dir.take() {
            let _ = dir.close();
        }
    }
}

/// Remove temp dirs left by test processes that were SIGKILLed (no exit handler ran):
/// `distlock-<kind>-<pid>-*` whose `<pid>` is no longer alive.
fn sweep_stale_dirs(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("distlock-")) else {
            continue;
        };
        let mut parts = rest.splitn(3, '-');
        let (Some(_kind), Some(pid), Some(_random)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if pid != std::process::id() && !pid_alive(pid) {
            tracing::debug!(dir = ?entry.path(), "lock-testbed: removing stale temp dir");
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// True when `pid` names a live process (a zombie counts as dead).
///
/// Useful to check in a test that the servers it started are gone after drop:
/// `assert!(!pid_alive(pid))`.
pub fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks existence and permission.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if rc != 0 {
        return io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(stat_state(&stat), Some('Z' | 'X')),
        Err(_) => false,
    }
}

/// The PIDs whose parent is `pid` (the worker processes a server forked).
pub(crate) fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|stat| stat_ppid(&stat))
                == Some(pid)
        })
        .collect()
}

/// The parent PID of a /proc stat line ("pid (comm) S ppid ...").
fn stat_ppid(stat: &str) -> Option<u32> {
    let i = stat.rfind(')')?;
    stat[i + 1..].split_whitespace().nth(1)?.parse().ok()
}

/// The state letter of a /proc stat line ("pid (comm) S ...").
fn stat_state(stat: &str) -> Option<char> {
    let i = stat.rfind(')')?;
    stat[i + 1..].trim_start().chars().next()
}

/// Some(true) when every thread of `pid` is stopped ('T'), Some(false) when at least
/// one is not, None when the process is gone.
fn all_threads_stopped(pid: u32) -> Option<bool> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut any = false;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue; // the thread just exited
        };
        any = true;
        match stat_state(&stat) {
            Some('T' | 't') => {}
            Some('Z' | 'X') => return None,
            _ => return Some(false),
        }
    }
    any.then_some(true)
}

/// The last `lines` lines of a log file (at most ~8 KiB), for error messages.
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(bytes) = std::fs::read(path) else {
        return String::new();
    };
    let start = bytes.len().saturating_sub(8192);
    let text = String::from_utf8_lossy(&bytes[start..]);
    let all: Vec<&str> = text.lines().collect();
    let from = all.len().saturating_sub(lines);
    all[from..].join("\n")
}

/// Log tails of several files, each headed by its name.
pub(crate) fn log_tails(paths: &[PathBuf], lines: usize) -> String {
    let mut out = String::new();
    for p in paths {
        let tail = log_tail(p, lines);
        if !tail.is_empty() {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&format!("[{}]\n{}", p.display(), tail));
        }
    }
    out
}

/// Whether a log says the port was taken (so a retry on another port may succeed).
pub(crate) fn log_says_addr_in_use(path: &Path) -> bool {
    log_tail(path, 200)
        .to_ascii_lowercase()
        .contains("address already in use")
}

/// How long a SIGSTOP or SIGCONT may take to reach every thread of a
/// server. A thread inside a system call that cannot be interrupted (an
/// fsync on a busy disk) stops only when the call returns: beside two busy
/// processes an etcd member took more than 2 s. The wait ends as soon as
/// every thread is there.
const SIGNAL_SETTLE: Duration = Duration::from_secs(10);
