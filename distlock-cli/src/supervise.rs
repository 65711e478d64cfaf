//! CMD under a lock: started in its own process group, signals forwarded
//! to it, stopped (SIGTERM, SIGKILL after a grace) when a lock is lost,
//! and the lock's suspensions reported, for `distlock run` and `distlock
//! elect`.

use std::ffi::OsString;
use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use distlock::{GuardState, GuardStates, LockName, LossCause};
use futures::future::select_all;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::exit_code;
use crate::signals::Signals;

/// How CMD is run.
#[derive(Clone, Copy, Debug)]
pub struct Cmd {
    /// CMD stays in distlock's process group (signals go to it alone).
    pub foreground: bool,
    /// After a lost lock: how long CMD has between SIGTERM and SIGKILL.
    pub grace: Duration,
}

/// How a supervised CMD ended.
pub enum Supervised {
    /// CMD exited by itself (or waiting for it failed) while the locks held.
    Exited(std::io::Result<ExitStatus>),
    /// A lock was lost; CMD was stopped.
    Lost,
}

/// Waits for CMD while the locks hold: forwards the `signals` to it,
/// reports each lock's suspension and confirmation (`states`), and when
/// `lost` resolves stops CMD (SIGTERM to its group, SIGKILL after the
/// grace) and returns [`Supervised::Lost`].
pub async fn supervise(
    child: &mut Child,
    cmd: Cmd,
    signals: &mut Signals,
    lost: impl Future<Output = (LockName, LossCause)>,
    mut states: Vec<(LockName, GuardStates)>,
) -> Supervised {
    let pid = child.id().map(|p| p as i32);
    let target = |pid: i32| if cmd.foreground { pid } else { -pid };
    tokio::pin!(lost);
    let mut suspended = vec![false; states.len()];
    loop {
        tokio::select! {
            status = child.wait() => return Supervised::Exited(status),
            (name, cause) = &mut lost => {
                eprintln!("distlock: lock {name} lost ({cause}); stopping the command (SIGTERM, SIGKILL after {})", humantime::format_duration(cmd.grace));
                if let Some(pid) = pid {
                    terminate(child, target(pid), cmd.grace).await;
                }
                return Supervised::Lost;
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
    }
}

/// Starts CMD (`command`: the program and its arguments) with `env` set
/// (`Some`) or removed (`None`), in a process group of its own unless
/// `foreground`; on Linux it dies with distlock.
pub fn spawn(
    command: &[OsString],
    foreground: bool,
    env: Vec<(&'static str, Option<String>)>,
) -> std::io::Result<Child> {
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]);
    for (var, value) in env {
        match value {
            Some(value) => cmd.env(var, value),
            None => cmd.env_remove(var),
        };
    }
    if !foreground {
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

/// The next change of any guard's state: its index, and `false` if that
/// guard's state can no longer change.
async fn next_change(states: &mut [(LockName, GuardStates)]) -> (usize, bool) {
    let changes = states
        .iter_mut()
        .map(|(_, rx)| Box::pin(async move { rx.changed().await.is_ok() }));
    let (changed, i, _) = select_all(changes).await;
    (i, changed)
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

/// CMD's exit status as distlock's: its code, or 128 + signal.
pub fn status_code(status: ExitStatus) -> i32 {
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
