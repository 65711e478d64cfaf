//! `distlock run`: take the locks, run CMD while they are held, stop CMD
//! when one is lost, release them when CMD exits.

use std::io::ErrorKind;
use std::time::Duration;

use distlock::{AcquireOptions, LockMode, LockName, MultiGuard};

use crate::args::{RunArgs, Wait};
use crate::child_env::lock_env;
use crate::exit_code;
use crate::report::{fail, warn};
use crate::signals::Signals;
use crate::supervise::{spawn, status_code, supervise, Cmd, Supervised};
use crate::take::{take, NotTaken};
use crate::target::{lock_name, open, OnCommandLine, Opened};

/// Where each mode flag came from: `true` = the command line.
#[derive(Clone, Copy, Debug, Default)]
pub struct ModeOnCommandLine {
    /// `--read`.
    pub read: bool,
    /// `--write`.
    pub write: bool,
    /// `--permits`.
    pub permits: bool,
}

/// Runs `distlock run` and returns its exit status.
pub async fn run(args: RunArgs, url_cli: OnCommandLine, mode_cli: ModeOnCommandLine) -> i32 {
    let names = match args
        .names
        .iter()
        .map(|n| lock_name(n))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(names) => names,
        Err(code) => return code,
    };
    let mode = match mode(&args, mode_cli) {
        Ok(mode) => mode,
        Err(code) => return code,
    };
    let wait = args.wait.unwrap_or(Wait::For(Duration::ZERO));
    // A wait rides out the server restarting or failing over: it ends with
    // the lock, or when it runs out (with the last error if the servers
    // were still out of reach).
    let mut opts = AcquireOptions::new().ttl(args.ttl).retry_errors(true);
    if let Some(note) = &args.note {
        opts = opts.note(note.as_str());
    }
    if let Err(err) = opts.clone().wait(wait_value(wait)).validate() {
        return fail(exit_code::USAGE, err.message());
    }
    let Opened {
        url,
        locks,
        mut signals,
    } = match open(&args.conn, url_cli).await {
        Ok(opened) => opened,
        Err(code) => return code,
    };

    let what = describe(&names, mode);
    let taken = tokio::select! {
        taken = take(&*locks, mode, &names, &opts, wait) => taken,
        sig = signals.recv() => return Signals::interrupted(sig, &format!("acquiring {what}")),
    };
    let all = match taken {
        Ok(all) => all,
        Err(not_taken) => return refused(&args, wait, &what, not_taken),
    };

    let env = lock_env(&all, url.scheme());
    let mut child = match spawn(&args.command, args.foreground, env) {
        Ok(child) => child,
        Err(err) => {
            let code = match err.kind() {
                ErrorKind::NotFound => exit_code::NOT_FOUND,
                _ => exit_code::CANNOT_EXECUTE,
            };
            release(all, &what).await;
            return fail(code, format!("cannot run {:?}: {err}", args.command[0]));
        }
    };
    let states = all
        .guards()
        .iter()
        .map(|g| (g.name().clone(), g.subscribe()))
        .collect();
    let cmd = Cmd {
        foreground: args.foreground,
        grace: args.grace,
    };
    let status = match supervise(&mut child, cmd, &mut signals, all.lost(), states).await {
        Supervised::Exited(status) => status,
        Supervised::Lost => {
            drop(all);
            return exit_code::LOST;
        }
    };
    let status = match status {
        Ok(status) => status,
        Err(err) => {
            release(all, &what).await;
            return fail(
                exit_code::SOFTWARE,
                format!("waiting for the command failed: {err}"),
            );
        }
    };
    release(all, &what).await;
    status_code(status)
}

/// The primitive the flags ask for. Flags on the command line win over
/// the environment; two at the same level are a usage error.
fn mode(args: &RunArgs, cli: ModeOnCommandLine) -> Result<LockMode, i32> {
    let all = [
        (args.read, cli.read, "--read", LockMode::Read),
        (args.write, cli.write, "--write", LockMode::Write),
        (
            args.permits.is_some(),
            cli.permits,
            "--permits",
            LockMode::Permit {
                permits: args.permits.unwrap_or(0),
            },
        ),
    ];
    let on_cli: Vec<_> = all.iter().filter(|(set, cli, ..)| *set && *cli).collect();
    let chosen: Vec<_> = if on_cli.is_empty() {
        all.iter().filter(|(set, ..)| *set).collect()
    } else {
        on_cli
    };
    match chosen.as_slice() {
        [] => Ok(LockMode::Exclusive),
        [(_, _, _, mode)] => Ok(*mode),
        several => {
            let flags: Vec<&str> = several.iter().map(|(_, _, flag, _)| *flag).collect();
            Err(fail(
                exit_code::USAGE,
                format!(
                    "{} cannot be used together: a lock is taken in one mode",
                    flags.join(" and ")
                ),
            ))
        }
    }
}

fn wait_value(wait: Wait) -> Duration {
    match wait {
        Wait::For(d) => d,
        Wait::Forever => Duration::ZERO,
    }
}

/// "lock a", "locks a, b", "read lock a", "a permit of 3 of lock a".
fn describe(names: &[LockName], mode: LockMode) -> String {
    let list: Vec<&str> = names.iter().map(LockName::as_str).collect();
    let noun = if names.len() == 1 { "lock" } else { "locks" };
    let list = list.join(", ");
    match mode {
        LockMode::Read => format!("the read side of {noun} {list}"),
        LockMode::Write => format!("the write side of {noun} {list}"),
        LockMode::Permit { permits } => format!("a permit (of {permits}) of {noun} {list}"),
        _ => format!("{noun} {list}"),
    }
}

/// The message and status when the locks were not taken.
fn refused(args: &RunArgs, wait: Wait, what: &str, not_taken: NotTaken) -> i32 {
    match not_taken {
        NotTaken::Held { name } => {
            let conflict = i32::from(args.conflict_exit_code);
            if args.quiet {
                return conflict;
            }
            let held = match &name {
                Some(name) if args.names.len() > 1 => {
                    format!("lock {name} is held by another owner (none of {what} taken)")
                }
                Some(name) => format!("lock {name} is held by another owner"),
                None => format!("{what}: held by another owner"),
            };
            let waited = match wait {
                Wait::For(d) if !d.is_zero() => {
                    format!("; gave up waiting after {}", humantime::format_duration(d))
                }
                _ => String::new(),
            };
            fail(conflict, format!("{held}{waited}; not running the command"))
        }
        NotTaken::Failed {
            name,
            kind,
            message,
        } => {
            let context = match name {
                Some(name) if args.names.len() > 1 => {
                    format!("cannot acquire lock {name} (none of {what} taken)")
                }
                Some(name) => format!("cannot acquire lock {name}"),
                None => format!("cannot acquire {what}"),
            };
            fail(exit_code::for_error(kind), format!("{context}: {message}"))
        }
    }
}

/// Releases the locks after CMD; a failure is reported but does not change the status.
async fn release(all: MultiGuard, what: &str) {
    let was_lost = all.first_lost().is_some();
    match all.release().await {
        Ok(true) => {}
        Ok(false) if was_lost => warn(format!("{what} was lost just as the command ended")),
        Ok(false) => warn(format!("{what} was no longer held when the command ended")),
        Err(err) => warn(format!(
            "releasing {what} failed ({err}); it expires with its TTL"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> LockName {
        LockName::new(s).unwrap()
    }

    #[test]
    fn descriptions_name_the_mode_and_every_lock() {
        assert_eq!(describe(&[n("a")], LockMode::Exclusive), "lock a");
        assert_eq!(
            describe(&[n("a"), n("b")], LockMode::Exclusive),
            "locks a, b"
        );
        assert_eq!(
            describe(&[n("a")], LockMode::Read),
            "the read side of lock a"
        );
        assert_eq!(
            describe(&[n("a")], LockMode::Permit { permits: 3 }),
            "a permit (of 3) of lock a"
        );
    }
}
