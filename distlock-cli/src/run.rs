//! `distlock run`: take the locks, run CMD while they are held, stop CMD
//! when one is lost, release them when CMD exits.

use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use distlock::{AcquireOptions, GuardState, GuardStates, LockMode, LockName, MultiGuard, Scheme};
use futures::future::select_all;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::args::{RunArgs, Wait};
use crate::child_env::lock_env;
use crate::exit_code;
use crate::report::{fail, warn};
use crate::signals::Signals;
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

    let mut child = match spawn(&args, &all, url.scheme()) {
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
    let pid = child.id().map(|p| p as i32);
    let target = |pid: i32| if args.foreground { pid } else { -pid };

    let lost = all.lost();
    tokio::pin!(lost);
    let mut states: Vec<(LockName, GuardStates)> = all
        .guards()
        .iter()
        .map(|g| (g.name().clone(), g.subscribe()))
        .collect();
    let mut suspended = vec![false; states.len()];
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            (name, cause) = &mut lost => {
                eprintln!("distlock: lock {name} lost ({cause}); stopping the command (SIGTERM, SIGKILL after {})", humantime::format_duration(args.grace));
                if let Some(pid) = pid {
                    terminate(&mut child, target(pid), args.grace).await;
                }
                drop(all);
                return exit_code::LOST;
            }
            sig = signals.recv() => {
                if let Some(pid) = pid {
                    // SAFETY: kill(2) has no memory-safety preconditions.
                    unsafe { libc::kill(target(pid), sig) };
                }
            }
            (i, changed) = next_change(&mut states), if !states.is_empty() => {
                if !changed {
                    // That guard's keeper is gone; `lost` still resolves by validity.
                    states.remove(i);
                    suspended.remove(i);
                    continue;
                }
                let (name, rx) = &mut states[i];
                let state = rx.borrow_and_update().clone();
                match state {
                    GuardState::Suspended { reason, valid_until } if !suspended[i] => {
                        suspended[i] = true;
                        let left = valid_until.saturating_duration_since(Instant::now());
                        eprintln!(
                            "distlock: lock {name} suspended ({}); still valid for {}, CMD keeps running",
                            reason.replace('\n', " "),
                            humantime::format_duration(round_ms(left))
                        );
                    }
                    GuardState::Held { .. } if suspended[i] => {
                        suspended[i] = false;
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

/// The next change of any guard's state: its index, and `false` if that
/// guard's state can no longer change.
async fn next_change(states: &mut [(LockName, GuardStates)]) -> (usize, bool) {
    let changes = states
        .iter_mut()
        .map(|(_, rx)| Box::pin(async move { rx.changed().await.is_ok() }));
    let (changed, i, _) = select_all(changes).await;
    (i, changed)
}

fn spawn(args: &RunArgs, all: &MultiGuard, scheme: Scheme) -> std::io::Result<Child> {
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    for (var, value) in lock_env(all, scheme) {
        match value {
            Some(value) => cmd.env(var, value),
            None => cmd.env_remove(var),
        };
    }
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

/// CMD's exit status as distlock's: its code, or 128 + signal.
fn status_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => exit_code::SIGNAL_BASE + sig,
        (None, None) => exit_code::SOFTWARE,
    }
}

/// `d` rounded to whole milliseconds, for messages.
fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
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
