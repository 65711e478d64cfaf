//! `distlock`: run a command while holding a distributed lock, or show a lock's state.
//!
//! See `distlock --help` and the `distlock` crate docs (section "The
//! `distlock` command") for usage and exit statuses.

pub mod exit_code;

use std::ffi::OsString;
use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use distlock::{
    AcquireOptions, GuardState, LockError, LockErrorKind, LockGuard, LockName, LockService, LockUrl,
};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::time::Instant;

const EXIT_STATUS_HELP: &str = "\
Exit status:
  run      CMD's own status while the lock was held throughout
           (128+N if CMD died of signal N, e.g. 143 after a forwarded SIGTERM)
  status   0 when the state was read (held or free)
  64       bad command line: malformed URL, unknown URL option, invalid lock name
  69       lock service unreachable or not answering in time
  70       internal error or an answer distlock does not understand
  75       lock held by someone else (one attempt, or --wait elapsed): CMD not run
           (change it with --conflict-exit-code)
  77       credentials rejected
  79       lock lost while CMD ran: CMD got SIGTERM, then SIGKILL after --grace
  126/127  CMD could not be executed / was not found

URLs:
  memory://                                   in-process only (for trying things out)
  redis://[:PASSWORD@]HOST[:PORT][/DB]        one Redis server
  redlock://HOST:PORT,HOST:PORT,HOST:PORT     Redlock over independent Redis servers
  etcd://HOST:PORT[,HOST:PORT...][/PREFIX]    etcd cluster
  zk://HOST:PORT[,HOST:PORT...][/BASE]        ZooKeeper ensemble
  Connection options go in the query, e.g. redis://127.0.0.1:6379?connect_timeout=500ms
  (see the distlock crate docs for every option).

Environment given to CMD:
  DISTLOCK_NAME            the lock name
  DISTLOCK_FENCING_TOKEN   the fencing token of this grant (unset when the backend has none)

Example: run a nightly batch on exactly one of N machines (crontab line on each):
  0 3 * * *  distlock run --url redis://locks:6379 --conflict-exit-code 0 nightly-batch -- /opt/batch/run.sh";

/// Run a command while holding a distributed lock, or show a lock's state.
#[derive(Debug, Parser)]
#[command(name = "distlock", version, about, after_help = EXIT_STATUS_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Acquire NAME, run CMD while holding it (renewing it every TTL/3), release it when CMD exits.
    ///
    /// If the lock is held elsewhere, CMD is not run (exit 75). If the lock is
    /// lost while CMD runs, CMD gets SIGTERM (SIGKILL after --grace) and
    /// distlock exits 79. SIGINT, SIGTERM, SIGHUP and SIGQUIT received by
    /// distlock are forwarded to CMD.
    #[command(after_help = EXIT_STATUS_HELP)]
    Run(RunArgs),
    /// Show whether NAME is held, its fencing token and remaining TTL where the backend can tell.
    ///
    /// Prints `key=value` lines: name, backend, state (held|free), and where
    /// the backend can tell: token (the holder's fencing token), last_token
    /// (the last one issued, when free), ttl_remaining_ms, waiters.
    #[command(after_help = EXIT_STATUS_HELP)]
    Status(StatusArgs),
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Lock service URL (memory://, redis://, redlock://, etcd://, zk://).
    #[arg(long, env = "DISTLOCK_URL", value_name = "URL")]
    url: String,
    /// Lease TTL: how long the lock outlives a distlock that can no longer renew it (crash, pause, partition).
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = duration_arg)]
    ttl: Duration,
    /// How long to wait for a lock held elsewhere. Default: one attempt, no waiting.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    wait: Option<Duration>,
    /// After a lost lock: how long CMD has between SIGTERM and SIGKILL.
    #[arg(long, default_value = "5s", value_name = "DURATION", value_parser = duration_arg)]
    grace: Duration,
    /// Exit status when the lock is held elsewhere and CMD is not run.
    #[arg(long, default_value_t = 75, value_name = "CODE")]
    conflict_exit_code: u8,
    /// Keep CMD in distlock's process group (for interactive commands that read the terminal).
    /// By default CMD gets a process group of its own and signals go to the whole group.
    #[arg(long)]
    foreground: bool,
    /// Lock name: 1-200 bytes, no whitespace or control characters, '/'-separated segments.
    #[arg(value_name = "NAME")]
    name: String,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

#[derive(Debug, Args)]
struct StatusArgs {
    /// Lock service URL (memory://, redis://, redlock://, etcd://, zk://).
    #[arg(long, env = "DISTLOCK_URL", value_name = "URL")]
    url: String,
    /// Lock name.
    #[arg(value_name = "NAME")]
    name: String,
}

fn duration_arg(text: &str) -> Result<Duration, String> {
    distlock::parse_duration(text).map_err(|e| e.message().to_string())
}

/// Runs the command with the process's arguments and exits with its status.
pub fn main() -> ! {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            std::process::exit(if err.use_stderr() {
                exit_code::USAGE
            } else {
                0
            });
        }
    };
    init_logging();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("distlock: cannot start the async runtime: {err}");
            std::process::exit(exit_code::SOFTWARE);
        }
    };
    let code = runtime.block_on(async {
        match cli.command {
            Cmd::Run(args) => run(args).await,
            Cmd::Status(args) => status(args).await,
        }
    });
    // Let background clean-up finish (the release of a dropped guard, the
    // removal of an abandoned waiter's contender key or node), but never wait
    // long: whatever is left expires with its TTL or session on the server.
    runtime.block_on(drain(DRAIN_LIMIT));
    runtime.shutdown_timeout(Duration::from_millis(100));
    std::process::exit(code);
}

/// The longest distlock waits at exit for background clean-up tasks.
const DRAIN_LIMIT: Duration = Duration::from_secs(1);

/// Waits until every spawned task has ended (the clients were dropped, so
/// their connection tasks end too), or `limit` passes.
async fn drain(limit: Duration) {
    let metrics = tokio::runtime::Handle::current().metrics();
    let deadline = Instant::now() + limit;
    while metrics.num_alive_tasks() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Logs of the libraries go to stderr only when `DISTLOCK_LOG` is set
/// (e.g. `DISTLOCK_LOG=debug`), so that errors stay one line by default.
fn init_logging() {
    let Ok(filter) = std::env::var("DISTLOCK_LOG") else {
        return;
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Prints `distlock: <message>` on one line and returns `code`.
fn fail(code: i32, message: impl std::fmt::Display) -> i32 {
    let line = message.to_string().replace(['\n', '\r'], " ");
    eprintln!("distlock: {line}");
    code
}

fn fail_error(context: &str, err: &LockError) -> i32 {
    fail(
        exit_code::for_error(err.kind()),
        format!("{context}: {err}"),
    )
}

/// Parses the name and URL (exit 64 on a bad one).
fn parse_target(url: &str, name: &str) -> Result<(LockUrl, LockName), i32> {
    let name = LockName::new(name).map_err(|e| {
        fail(
            exit_code::USAGE,
            format!("invalid lock name {name:?}: {}", e.message()),
        )
    })?;
    let url = LockUrl::parse(url).map_err(|e| fail(exit_code::USAGE, e.message()))?;
    Ok((url, name))
}

/// The signals distlock forwards to CMD (and that interrupt it before CMD starts).
struct Signals {
    streams: Vec<(i32, Signal)>,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        let mut streams = Vec::new();
        for (num, kind) in [
            (libc::SIGINT, SignalKind::interrupt()),
            (libc::SIGTERM, SignalKind::terminate()),
            (libc::SIGHUP, SignalKind::hangup()),
            (libc::SIGQUIT, SignalKind::quit()),
        ] {
            streams.push((num, signal(kind)?));
        }
        Ok(Signals { streams })
    }

    /// The next signal received.
    async fn recv(&mut self) -> i32 {
        let waits = self.streams.iter_mut().map(|(num, s)| {
            let num = *num;
            Box::pin(async move {
                s.recv().await;
                num
            })
        });
        futures::future::select_all(waits).await.0
    }
}

/// `distlock connect` with an interruption by signal: `Err(exit status)`.
async fn connect(url: &LockUrl, signals: &mut Signals) -> Result<Arc<dyn LockService>, i32> {
    tokio::select! {
        result = url.connect() => result.map_err(|e| fail_error(&format!("cannot use {url}"), &e)),
        sig = signals.recv() => Err(fail(exit_code::SIGNAL_BASE + sig, format!("interrupted by signal {sig} while connecting"))),
    }
}

async fn status(args: StatusArgs) -> i32 {
    let (url, name) = match parse_target(&args.url, &args.name) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let mut signals = match Signals::install() {
        Ok(s) => s,
        Err(err) => {
            return fail(
                exit_code::SOFTWARE,
                format!("cannot install signal handlers: {err}"),
            )
        }
    };
    let locks = match connect(&url, &mut signals).await {
        Ok(l) => l,
        Err(code) => return code,
    };
    let status = tokio::select! {
        result = locks.inspect(&name) => match result {
            Ok(status) => status,
            Err(err) => return fail_error(&format!("cannot read lock {name}"), &err),
        },
        sig = signals.recv() => return fail(exit_code::SIGNAL_BASE + sig, format!("interrupted by signal {sig}")),
    };
    let mut out = format!(
        "name={name}\nbackend={}\nstate={}\n",
        locks.capabilities().backend,
        if status.held { "held" } else { "free" }
    );
    match (status.token, status.held) {
        (Some(token), true) => out.push_str(&format!("token={token}\n")),
        (Some(token), false) => out.push_str(&format!("last_token={token}\n")),
        (None, _) => {}
    }
    if let Some(ttl) = status.ttl_remaining {
        out.push_str(&format!("ttl_remaining_ms={}\n", ttl.as_millis()));
    }
    if let Some(waiters) = status.waiters {
        out.push_str(&format!("waiters={waiters}\n"));
    }
    print!("{out}");
    0
}

async fn run(args: RunArgs) -> i32 {
    let (url, name) = match parse_target(&args.url, &args.name) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let one_attempt = args.wait.is_none_or(|w| w.is_zero());
    let opts = AcquireOptions::new()
        .ttl(args.ttl)
        .wait(args.wait.unwrap_or_default());
    if let Err(err) = opts.validate() {
        return fail(exit_code::USAGE, err.message());
    }
    let mut signals = match Signals::install() {
        Ok(s) => s,
        Err(err) => {
            return fail(
                exit_code::SOFTWARE,
                format!("cannot install signal handlers: {err}"),
            )
        }
    };
    let locks = match connect(&url, &mut signals).await {
        Ok(l) => l,
        Err(code) => return code,
    };

    let acquired = tokio::select! {
        result = async {
            if one_attempt {
                locks.try_acquire(&name, &opts).await
            } else {
                locks.acquire(&name, &opts).await.map(Some)
            }
        } => result,
        sig = signals.recv() => {
            return fail(exit_code::SIGNAL_BASE + sig, format!("interrupted by signal {sig} while acquiring lock {name}"));
        }
    };
    let conflict = i32::from(args.conflict_exit_code);
    let guard = match acquired {
        Ok(Some(guard)) => guard,
        Ok(None) => {
            return fail(
                conflict,
                format!("lock {name} is held by another owner; not running the command"),
            )
        }
        Err(err) if err.kind() == LockErrorKind::Timeout => {
            return fail(conflict, format!("lock {name} is held by another owner; gave up waiting after {}; not running the command",
                humanize(args.wait.unwrap_or_default())));
        }
        Err(err) => return fail_error(&format!("cannot acquire lock {name}"), &err),
    };

    let mut child = match spawn(&args, &name, &guard) {
        Ok(child) => child,
        Err(err) => {
            let code = match err.kind() {
                ErrorKind::NotFound => exit_code::NOT_FOUND,
                _ => exit_code::CANNOT_EXECUTE,
            };
            release(guard, &name).await;
            return fail(code, format!("cannot run {:?}: {err}", args.command[0]));
        }
    };
    let pid = child.id().map(|p| p as i32);
    let target = |pid: i32| if args.foreground { pid } else { -pid };

    let lost = guard.lost();
    tokio::pin!(lost);
    let mut states = guard.subscribe();
    let mut watching = true;
    let mut suspended = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            cause = &mut lost => {
                eprintln!("distlock: lock {name} lost ({cause}); stopping the command (SIGTERM, SIGKILL after {})", humanize(args.grace));
                if let Some(pid) = pid {
                    terminate(&mut child, target(pid), args.grace).await;
                }
                drop(guard);
                return exit_code::LOST;
            }
            sig = signals.recv() => {
                if let Some(pid) = pid {
                    // SAFETY: kill(2) has no memory-safety preconditions.
                    unsafe { libc::kill(target(pid), sig) };
                }
            }
            changed = states.changed(), if watching => {
                if changed.is_err() {
                    // The keeper is gone; `lost` still resolves by validity.
                    watching = false;
                    continue;
                }
                let state = states.borrow_and_update().clone();
                match state {
                    GuardState::Suspended { reason, valid_until } if !suspended => {
                        suspended = true;
                        let left = valid_until.saturating_duration_since(Instant::now());
                        eprintln!(
                            "distlock: lock {name} suspended ({}); still valid for {}, CMD keeps running",
                            reason.replace('\n', " "),
                            humanize(left)
                        );
                    }
                    GuardState::Held { .. } if suspended => {
                        suspended = false;
                        eprintln!("distlock: lock {name} confirmed held again");
                    }
                    _ => {}
                }
            }
        }
    };
    let status = match status {
        Ok(status) => status,
        Err(err) => {
            release(guard, &name).await;
            return fail(
                exit_code::SOFTWARE,
                format!("waiting for the command failed: {err}"),
            );
        }
    };
    release(guard, &name).await;
    status_code(status)
}

fn spawn(args: &RunArgs, name: &LockName, guard: &LockGuard) -> std::io::Result<Child> {
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env("DISTLOCK_NAME", name.as_str());
    match guard.fencing_token() {
        Some(token) => cmd.env("DISTLOCK_FENCING_TOKEN", token.to_string()),
        None => cmd.env_remove("DISTLOCK_FENCING_TOKEN"),
    };
    if !args.foreground {
        cmd.process_group(0);
    }
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id();
        // SAFETY: the closure runs in the child between fork and exec and
        // calls only async-signal-safe functions (prctl, getppid, _exit).
        unsafe {
            cmd.pre_exec(move || {
                // If distlock dies (even by SIGKILL), nobody renews the lock
                // any more: CMD must not run on without it.
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() as u32 != parent {
                    libc::_exit(exit_code::LOST);
                }
                Ok(())
            });
        }
    }
    cmd.kill_on_drop(false).spawn()
}

/// SIGTERM to `target` (the group, or the process), SIGKILL after `grace`, then reap.
async fn terminate(child: &mut Child, target: i32, grace: Duration) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(target, libc::SIGTERM) };
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        // SAFETY: as above.
        unsafe { libc::kill(target, libc::SIGKILL) };
        let _ = child.wait().await;
    }
}

/// Releases the lock after CMD; a failure is reported but does not change the status.
async fn release(guard: LockGuard, name: &LockName) {
    let was_lost = matches!(guard.state(), GuardState::Lost { .. });
    match guard.release().await {
        Ok(true) => {}
        Ok(false) => {
            if !was_lost {
                eprintln!(
                    "distlock: warning: lock {name} was no longer held when the command ended"
                );
            } else {
                eprintln!("distlock: warning: lock {name} was lost just as the command ended");
            }
        }
        Err(err) => eprintln!(
            "distlock: warning: releasing lock {name} failed ({err}); it expires with its TTL"
        ),
    }
}

/// CMD's exit status as distlock's: its code, or 128 + signal.
fn status_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => exit_code::SIGNAL_BASE + sig,
        (None, None) => exit_code::SOFTWARE,
    }
}

fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}
