#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod args;
mod assets;
mod child_env;
mod elect;
pub mod exit_code;
mod inspect;
mod leader;
mod report;
mod run;
mod signals;
mod supervise;
mod take;
mod target;

use std::time::Duration;

use clap::error::{ContextKind, ContextValue};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};
use tokio::time::Instant;

use crate::args::{Cli, Cmd};
use crate::report::fail;
use crate::run::ModeOnCommandLine;
use crate::target::OnCommandLine;

/// The whole command line of `distlock` (for completions, man pages and docs).
pub fn command() -> clap::Command {
    Cli::command()
}

/// Runs `distlock` with the process's arguments and exits with its status.
pub fn main() -> ! {
    let matches = match command().try_get_matches() {
        Ok(m) => m,
        Err(err) => exit_for_clap(err),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => exit_for_clap(err),
    };
    let sub = matches.subcommand().map(|(_, m)| m);
    let url_cli = OnCommandLine {
        url: on_command_line(sub, "url"),
        url_file: on_command_line(sub, "url_file"),
    };
    let code = match cli.command {
        Cmd::Completions(args) => assets::completions(args),
        Cmd::Man(args) => assets::man(args),
        Cmd::Run(args) => {
            let modes = ModeOnCommandLine {
                read: on_command_line(sub, "read"),
                write: on_command_line(sub, "write"),
                permits: on_command_line(sub, "permits"),
            };
            with_runtime(run::run(args, url_cli, modes))
        }
        Cmd::Status(args) => with_runtime(inspect::status(args, url_cli)),
        Cmd::List(args) => with_runtime(inspect::list(args, url_cli)),
        Cmd::Release(args) => with_runtime(inspect::release(args, url_cli)),
        Cmd::Elect(args) => with_runtime(elect::elect(args, url_cli)),
        Cmd::Leader(args) => with_runtime(leader::leader(args, url_cli)),
    };
    std::process::exit(code);
}

/// clap's own message (usage errors exit 64; `--help` and `--version` 0),
/// naming the environment variable when a bad value came from one.
fn exit_for_clap(err: clap::Error) -> ! {
    let _ = err.print();
    if !err.use_stderr() {
        std::process::exit(0);
    }
    if let Some(var) = bad_value_from_env(&err) {
        eprintln!("distlock: that value comes from the environment variable {var}");
    }
    std::process::exit(exit_code::USAGE);
}

/// The environment variable that gave the invalid value `err` is about, if
/// the option was not on the command line.
fn bad_value_from_env(err: &clap::Error) -> Option<String> {
    let ContextValue::String(arg) = err.get(ContextKind::InvalidArg)? else {
        return None;
    };
    let long = arg.strip_prefix("--")?.split([' ', '=']).next()?;
    let flag = format!("--{long}");
    let on_command_line = std::env::args_os().any(|a| {
        let a = a.to_string_lossy();
        a == flag || a.starts_with(&format!("{flag}="))
    });
    if on_command_line {
        return None;
    }
    let cmd = command();
    let var = std::iter::once(&cmd)
        .chain(cmd.get_subcommands())
        .flat_map(|c| c.get_arguments())
        .filter(|a| a.get_long() == Some(long))
        .filter_map(|a| a.get_env())
        .map(|var| var.to_string_lossy().into_owned())
        .find(|var| std::env::var_os(var).is_some());
    var
}

/// Whether the argument `id` of the subcommand was given on the command
/// line (not from the environment, not by default).
fn on_command_line(sub: Option<&ArgMatches>, id: &str) -> bool {
    sub.and_then(|m| m.try_get_raw(id).ok().flatten().map(|_| m.value_source(id)))
        .flatten()
        == Some(ValueSource::CommandLine)
}

/// The longest distlock waits at exit for background clean-up tasks.
const DRAIN_LIMIT: Duration = Duration::from_secs(1);

/// Runs `command` on a single-threaded runtime, then lets background
/// clean-up finish (the release of a dropped guard, the removal of an
/// abandoned waiter's contender key or node), but never waits long:
/// whatever is left expires with its TTL or session on the server.
fn with_runtime(command: impl std::future::Future<Output = i32>) -> i32 {
    init_logging();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            return fail(
                exit_code::SOFTWARE,
                format!("cannot start the async runtime: {err}"),
            )
        }
    };
    let code = runtime.block_on(command);
    runtime.block_on(drain(DRAIN_LIMIT));
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}

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
