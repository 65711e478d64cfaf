//! The command line: every subcommand, flag and environment variable.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{Args, Parser, Subcommand, ValueHint};

/// The text after `--help` of every subcommand: exit statuses, URLs,
/// environment, an example.
const AFTER_HELP: &str = "\
Exit status:
  run      CMD's own status while the lock was held throughout
           (128+N if CMD died of signal N, e.g. 143 after a forwarded SIGTERM)
  status   0 held, 3 free
  list     0 when the locks were listed (none is fine)
  release  0 a holder was removed (--force), 3 nothing was held
  elect    CMD's own status when it exits while leading (a lost term stops CMD
           and campaigns again; it never ends by itself)
  leader   0 someone leads, 3 nobody does (--watch: 0 when interrupted)
  64       bad command line: malformed URL, unknown URL option, invalid lock name, bad duration
  69       lock service unreachable or not answering in time
  70       internal error or an answer distlock does not understand
  75       lock held by someone else (one attempt, or --wait elapsed): CMD not run
           (change it with --conflict-exit-code; --quiet keeps it silent)
  77       credentials rejected
  78       the backend does not offer this (read-write locks, permits, list, force release,
           elections)
  79       lock lost while CMD ran: CMD got SIGTERM, then SIGKILL after --grace
  126/127  CMD could not be executed / was not found

URLs (--url, --url-file, DISTLOCK_URL, DISTLOCK_URL_FILE):
  memory://                                   in-process only (for trying things out)
  redis://[:PASSWORD@]HOST[:PORT][/DB]        one Redis server
  redis+sentinel://S1:PORT,S2,S3/MASTER[/DB]  Redis behind Sentinel, failovers followed
  redis+cluster://N1:PORT,N2:PORT,N3:PORT     Redis Cluster, slot moves and failovers followed
  redlock://HOST:PORT,HOST:PORT,HOST:PORT     Redlock over independent Redis servers
  etcd://HOST:PORT[,HOST:PORT...][/PREFIX]    etcd cluster
  zk://HOST:PORT[,HOST:PORT...][/BASE]        ZooKeeper ensemble
  Connection options go in the query, e.g. redis://127.0.0.1:6379?connect_timeout=500ms
  (see the distlock crate docs for every option). A URL with a password belongs in
  --url-file or DISTLOCK_URL, never on the command line where every user sees it.

Durations: 500ms, 30s, 1m30s, 2h (at most 1 day); --wait also takes `forever`.
Every option can also come from its DISTLOCK_* environment variable (shown with
each option); an option on the command line wins over the environment.

Environment given to CMD:
  DISTLOCK_LOCK_NAME   the lock name (several: space-separated, in acquisition order)
  DISTLOCK_TOKEN       the fencing token of each grant, in the same order
                       (unset when the backend has none)
  DISTLOCK_LOCK_KEY    where each lock lives on the server, in the same order
                       (unset when the backend does not tell)
  ETCD_LOCK_KEY, ETCD_LOCK_REV   on etcd with one name, as `etcdctl lock` gives them

Example: run a nightly batch on exactly one of N machines (crontab line on each):
  0 3 * * *  DISTLOCK_URL_FILE=/etc/distlock/url distlock run --quiet --conflict-exit-code 0 nightly-batch -- /opt/batch/run.sh";

/// Run a command while holding a distributed lock, or show the locks of a lock service.
#[derive(Debug, Parser)]
#[command(
    name = "distlock",
    version,
    propagate_version = true,
    about = "Run a command while holding a distributed lock (Redis, Redlock, etcd, ZooKeeper), or show the locks of a lock service.",
    after_help = AFTER_HELP
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Cmd,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Acquire NAME (or every NAME, all or nothing), run CMD while holding it, release it when CMD exits.
    ///
    /// The lock is renewed every TTL/3 while CMD runs. Without --read,
    /// --write or --permits it is a mutex. Several names are taken in one
    /// global order (sorted), all or nothing, so that two commands needing
    /// overlapping sets never wait for each other in a cycle.
    ///
    /// If the lock is held elsewhere, CMD is not run (exit 75). If the lock
    /// (any of them) is lost while CMD runs, CMD gets SIGTERM (SIGKILL after
    /// --grace) and distlock exits 79. SIGINT, SIGTERM, SIGHUP and SIGQUIT
    /// received by distlock are forwarded to CMD.
    #[command(after_help = AFTER_HELP)]
    Run(RunArgs),
    /// Show whether NAME is held: its fencing token, holder, remaining TTL and waiters where the backend can tell.
    ///
    /// Prints `key=value` lines (or one JSON object with --json): name,
    /// backend, state (held|free), and where the backend can tell: token
    /// (the holder's fencing token), last_token (the last one issued, when
    /// free), owner (an identifier of the holder), holder_host, holder_pid
    /// and holder_note (who holds it: its machine's host name, its process
    /// id and the note given at acquire, e.g. with `distlock run --note`;
    /// shown for a mutex held by a distlock client on memory, Redis, etcd
    /// and ZooKeeper), ttl_remaining_ms, waiters. In `key=value` lines,
    /// whitespace and control characters in a value are shown as `_`;
    /// --json has the exact text. Exits 0 when the lock is held, 3 when it
    /// is free.
    #[command(after_help = AFTER_HELP)]
    Status(StatusArgs),
    /// List the held locks whose names start with PREFIX (every held lock without it).
    ///
    /// One line per lock: its name, then `key=value` fields as `status`
    /// prints them (or one JSON object with --json). A backend that cannot
    /// list its locks exits 78.
    #[command(after_help = AFTER_HELP)]
    List(ListArgs),
    /// Remove whoever holds NAME now (needs --force): an operator's way to free a lock whose holder is stuck.
    ///
    /// A lock is released by its holder; this evicts the holder instead:
    /// the mutex's holder, every holder of NAME's read-write lock and every
    /// permit of its semaphore. The next waiter gets the lock as after a
    /// normal release, with a larger fencing token.
    ///
    /// The evicted process is NOT stopped. Its guard finds out at its next
    /// renewal or server event (a `distlock run` holding it then kills its
    /// CMD and exits 79), but until then it may still be working in its
    /// critical section while the next holder works in its own. Only a
    /// store that checks fencing tokens (lock-fence) refuses its late
    /// writes once the next holder has written; without one, two processes
    /// may act at once. Use it when the holder is known to be gone or hung.
    ///
    /// Prints `key=value` lines (or one JSON object with --json): name,
    /// backend, state (released|free), removed (holders removed in all),
    /// removed_mutex, removed_read_write, removed_permits. Exits 0 when a
    /// holder was removed, 3 when nothing was held, 64 without --force, 78
    /// when the backend cannot force a release. --force has no environment
    /// variable: it is asked for on the command line each time.
    #[command(after_help = AFTER_HELP)]
    Release(ReleaseArgs),
    /// Campaign for the election NAME; run CMD while leading; if leadership is lost, stop CMD and campaign again.
    ///
    /// A standby: it waits to lead however long it takes, riding out the
    /// lock service's restarts and failovers. While it leads, the term is
    /// renewed every TTL/3 and `distlock leader NAME` shows --value. If
    /// the term is lost while CMD runs, CMD gets SIGTERM (SIGKILL after
    /// --grace) and distlock campaigns again; when CMD exits by itself,
    /// distlock resigns (the next candidate leads at once) and exits with
    /// CMD's status. SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to
    /// CMD while it runs, and end the campaign otherwise. CMD gets
    /// DISTLOCK_ELECTION, DISTLOCK_EPOCH (the term's fencing token, higher
    /// than every earlier term's), DISTLOCK_LEADER_VALUE and
    /// DISTLOCK_LOCK_KEY.
    #[command(after_help = AFTER_HELP)]
    Elect(ElectArgs),
    /// Show who leads the election NAME: its value, epoch and since when; with --watch, every change.
    ///
    /// Prints `key=value` fields on one line (or one JSON object with
    /// --json): name, backend, state (leader|none), and for a leader value,
    /// epoch and since_unix_ms where the backend tells. With --watch, one
    /// line per change (a new term, a proclaimed value, nobody leading),
    /// starting with who leads now, until interrupted. Exits 0 when someone
    /// leads, 3 when nobody does, 78 when the backend has no elections.
    #[command(after_help = AFTER_HELP)]
    Leader(LeaderArgs),
    /// Print the completion script of a shell, e.g. `distlock completions bash > /etc/bash_completion.d/distlock`.
    Completions(CompletionsArgs),
    /// Print the man page (roff), or write every page (distlock.1, distlock-run.1, ...) into a directory.
    #[command(hide = true)]
    Man(ManArgs),
}

/// Where the lock service is.
#[derive(Debug, Args)]
pub struct Connection {
    /// Lock service URL (memory://, redis://, redis+sentinel://, redis+cluster://, redlock://, etcd://, zk://).
    /// Every user of the machine can read a command line: put a URL with a
    /// password in --url-file or DISTLOCK_URL instead.
    #[arg(long, env = "DISTLOCK_URL", hide_env_values = true, value_name = "URL")]
    pub url: Option<String>,
    /// A file holding the lock service URL (surrounding whitespace ignored),
    /// which keeps a password out of the command line and the environment.
    #[arg(long, env = "DISTLOCK_URL_FILE", value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub url_file: Option<PathBuf>,
}

/// How long to wait for a lock held elsewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Up to this long (zero: one attempt).
    For(Duration),
    /// Until the lock is free, however long that takes (a hot standby).
    Forever,
}

/// `distlock run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Where the lock service is.
    #[command(flatten)]
    pub conn: Connection,
    /// Take the read side of a read-write lock: shared with other readers, never with a writer.
    #[arg(long, env = "DISTLOCK_READ", value_parser = BoolishValueParser::new())]
    pub read: bool,
    /// Take the write side of a read-write lock: alone, and ahead of readers that come after it.
    #[arg(long, env = "DISTLOCK_WRITE", value_parser = BoolishValueParser::new())]
    pub write: bool,
    /// Take one of N permits of a semaphore: at most N holders at once (every holder must use the same N).
    #[arg(long, env = "DISTLOCK_PERMITS", value_name = "N", value_parser = permits_arg)]
    pub permits: Option<u32>,
    /// Lease TTL: how long the lock outlives a distlock that can no longer renew it (crash, pause, partition).
    #[arg(long, env = "DISTLOCK_TTL", default_value = "30s", value_name = "DURATION", value_parser = duration_arg)]
    pub ttl: Duration,
    /// How long to wait for a lock held elsewhere (`forever` for a hot standby). Default: one attempt, no waiting.
    #[arg(long, env = "DISTLOCK_WAIT", value_name = "DURATION", value_parser = wait_arg)]
    pub wait: Option<Wait>,
    /// After a lost lock: how long CMD has between SIGTERM and SIGKILL.
    #[arg(long, env = "DISTLOCK_GRACE", default_value = "5s", value_name = "DURATION", value_parser = duration_arg)]
    pub grace: Duration,
    /// A note stored with the lock while CMD runs, which `distlock status` and `list` show beside this machine's host name and distlock's process id (at most 256 bytes, one line; readable by anyone who can read the lock).
    #[arg(long, env = "DISTLOCK_NOTE", value_name = "TEXT")]
    pub note: Option<String>,
    /// Exit status when the lock is held elsewhere and CMD is not run.
    #[arg(
        long,
        env = "DISTLOCK_CONFLICT_EXIT_CODE",
        default_value_t = 75,
        value_name = "CODE"
    )]
    pub conflict_exit_code: u8,
    /// Print nothing when the lock is held elsewhere (the exit status still says so), e.g. for cron on many machines.
    #[arg(short, long, env = "DISTLOCK_QUIET", value_parser = BoolishValueParser::new())]
    pub quiet: bool,
    /// Keep CMD in distlock's process group (for interactive commands that read the terminal).
    /// By default CMD gets a process group of its own and signals go to the whole group.
    #[arg(long, env = "DISTLOCK_FOREGROUND", value_parser = BoolishValueParser::new())]
    pub foreground: bool,
    /// Lock name(s): 1-200 bytes, no whitespace or control characters, '/'-separated segments.
    #[arg(value_name = "NAME", required = true, num_args = 1..)]
    pub names: Vec<String>,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "CMD", value_hint = ValueHint::CommandWithArguments)]
    pub command: Vec<OsString>,
}

/// `distlock elect`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    /// Where the lock service is.
    #[command(flatten)]
    pub conn: Connection,
    /// The value published while this candidate leads (who it is, where to reach it), at most 64 KiB. Default: this machine's host name and distlock's process id.
    #[arg(long, env = "DISTLOCK_VALUE", value_name = "TEXT")]
    pub value: Option<String>,
    /// Lease TTL of a term: how long leadership outlives a distlock that can no longer renew it.
    #[arg(long, env = "DISTLOCK_TTL", default_value = "30s", value_name = "DURATION", value_parser = duration_arg)]
    pub ttl: Duration,
    /// After a term that ended without a resignation (a crash, a pause, a partition), no new term starts for this long.
    #[arg(long, env = "DISTLOCK_LOCK_DELAY", default_value = "0s", value_name = "DURATION", value_parser = duration_arg)]
    pub lock_delay: Duration,
    /// After a lost term: how long CMD has between SIGTERM and SIGKILL.
    #[arg(long, env = "DISTLOCK_GRACE", default_value = "5s", value_name = "DURATION", value_parser = duration_arg)]
    pub grace: Duration,
    /// Keep CMD in distlock's process group (for interactive commands that read the terminal).
    #[arg(long, env = "DISTLOCK_FOREGROUND", value_parser = BoolishValueParser::new())]
    pub foreground: bool,
    /// Election name: 1-200 bytes, no whitespace or control characters, '/'-separated segments.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The command to run while leading, after `--`.
    #[arg(last = true, required = true, value_name = "CMD", value_hint = ValueHint::CommandWithArguments)]
    pub command: Vec<OsString>,
}

/// `distlock leader`.
#[derive(Debug, Args)]
pub struct LeaderArgs {
    /// Where the lock service is.
    #[command(flatten)]
    pub conn: Connection,
    /// Print every change until interrupted.
    #[arg(long, env = "DISTLOCK_WATCH", value_parser = BoolishValueParser::new())]
    pub watch: bool,
    /// Print JSON objects instead of `key=value` lines.
    #[arg(long, env = "DISTLOCK_JSON", value_parser = BoolishValueParser::new())]
    pub json: bool,
    /// Election name.
    #[arg(value_name = "NAME")]
    pub name: String,
}

/// `distlock status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Where the lock service is.
    #[command(flatten)]
    pub conn: Connection,
    /// Print one JSON object instead of `key=value` lines.
    #[arg(long, env = "DISTLOCK_JSON", value_parser = BoolishValueParser::new())]
    pub json: bool,
    /// Lock name.
    #[arg(value_name = "NAME")]
    pub name: String,
}

/// `distlock release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// Where the lock service is.
    #[command(flatten)]
    pub conn: Connection,
    /// Evict whoever holds NAME now (required: a lock is otherwise released by its holder).
    #[arg(long)]
    pub force: bool,
    /// Print one JSON object instead of `key=value` lines.
    #[arg(long, env = "DISTLOCK_JSON", value_parser = BoolishValueParser::new())]
    pub json: bool,
    /// Lock name.
    #[arg(value_name = "NAME")]
    pub name: String,
}

/// `distlock list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Where the lock service is.
    #[command(flatten)]
    pub conn: Connection,
    /// Print one JSON object instead of one line per lock.
    #[arg(long, env = "DISTLOCK_JSON", value_parser = BoolishValueParser::new())]
    pub json: bool,
    /// List at most this many locks (the first ones by name).
    #[arg(long, env = "DISTLOCK_LIMIT", default_value_t = 1000, value_name = "N")]
    pub limit: usize,
    /// Only the locks whose names start with this (as text: `jobs/` lists `jobs/a` and `jobs/b/c`).
    #[arg(value_name = "PREFIX", default_value = "")]
    pub prefix: String,
}

/// `distlock completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// `distlock man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write every page into this directory instead of printing the main page.
    #[arg(long, value_name = "DIR", value_hint = ValueHint::DirPath)]
    pub out: Option<PathBuf>,
}

fn duration_arg(text: &str) -> Result<Duration, String> {
    distlock::parse_duration(text).map_err(|e| e.message().to_string())
}

fn permits_arg(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(n) if (1..=distlock::MAX_PERMITS).contains(&n) => Ok(n),
        _ => Err(format!(
            "a semaphore has 1 to {} permits",
            distlock::MAX_PERMITS
        )),
    }
}

fn wait_arg(text: &str) -> Result<Wait, String> {
    if text.trim().eq_ignore_ascii_case("forever") {
        return Ok(Wait::Forever);
    }
    duration_arg(text).map(Wait::For)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn waits_parse() {
        assert_eq!(wait_arg("forever"), Ok(Wait::Forever));
        assert_eq!(wait_arg("FOREVER"), Ok(Wait::Forever));
        assert_eq!(wait_arg("1m30s"), Ok(Wait::For(Duration::from_secs(90))));
        assert_eq!(wait_arg("0"), Ok(Wait::For(Duration::ZERO)));
        assert!(wait_arg("soon").is_err());
        assert!(wait_arg("2d").is_err());
    }

    #[test]
    fn several_names_before_the_command() {
        let cli = Cli::try_parse_from([
            "distlock",
            "run",
            "--url",
            "memory://",
            "--read",
            "b",
            "a",
            "--",
            "sh",
            "-c",
            "true",
        ])
        .unwrap();
        let Cmd::Run(args) = cli.command else {
            panic!("not run")
        };
        assert_eq!(args.names, ["b", "a"]);
        assert_eq!(args.command, ["sh", "-c", "true"]);
        assert!(args.read && !args.write);
    }
}
