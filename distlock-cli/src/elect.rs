//! `distlock elect`: a standby that campaigns for an election, runs CMD
//! while it leads, stops CMD when leadership is lost and campaigns again.

use std::io::ErrorKind;

use distlock::{CampaignOptions, LeaderElection, Leadership, LockErrorKind, LockName};

use crate::args::ElectArgs;
use crate::child_env::election_env;
use crate::exit_code;
use crate::report::{fail, fail_error, warn};
use crate::signals::Signals;
use crate::supervise::{spawn, status_code, supervise, Cmd, Supervised};
use crate::target::{lock_name, open, OnCommandLine, Opened};

/// Runs `distlock elect` and returns its exit status: CMD's own once it
/// exits while this candidate leads, or distlock's when it cannot go on.
pub async fn elect(args: ElectArgs, url_cli: OnCommandLine) -> i32 {
    let name = match lock_name(&args.name) {
        Ok(name) => name,
        Err(code) => return code,
    };
    let value = args.value.clone().unwrap_or_else(default_value);
    let opts = CampaignOptions::new()
        .ttl(args.ttl)
        .lock_delay(args.lock_delay);
    if let Err(err) = opts.acquire_options().validate() {
        return fail(exit_code::USAGE, err.message());
    }
    let Opened {
        locks, mut signals, ..
    } = match open(&args.conn, url_cli).await {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    let cmd = Cmd {
        foreground: args.foreground,
        grace: args.grace,
    };
    loop {
        let term = match campaign(&*locks, &name, &value, &opts, &mut signals).await {
            Ok(term) => term,
            Err(code) => return code,
        };
        eprintln!(
            "distlock: leading {name}{}; running the command",
            term.epoch()
                .map_or(String::new(), |e| format!(" (epoch {e})"))
        );
        match lead(&args, &term, cmd, &mut signals).await {
            Led::Exited(code) => {
                resign(term, &name).await;
                return code;
            }
            Led::Lost => {
                drop(term);
                eprintln!("distlock: campaigning for {name} again");
            }
        }
    }
}

/// The value a candidate publishes when `--value` is not given: this
/// machine's host name and distlock's process id.
fn default_value() -> String {
    let host = distlock::Holder::this_process();
    format!(
        "{}:{}",
        host.host.as_deref().unwrap_or("unknown-host"),
        std::process::id()
    )
}

/// Waits until this candidate leads (riding out the server's retryable
/// errors), or a signal interrupts it.
async fn campaign(
    locks: &dyn LeaderElection,
    name: &LockName,
    value: &str,
    opts: &CampaignOptions,
    signals: &mut Signals,
) -> Result<Leadership, i32> {
    tokio::select! {
        result = locks.campaign(name, value, opts) => result.map_err(|err| match err.kind() {
            LockErrorKind::Unsupported => fail(
                exit_code::UNSUPPORTED,
                format!("cannot campaign for {name}: {err}"),
            ),
            _ => fail_error(&format!("cannot campaign for {name}"), &err),
        }),
        sig = signals.recv() => Err(Signals::interrupted(sig, &format!("campaigning for {name}"))),
    }
}

/// How a term ended for CMD.
enum Led {
    /// CMD exited by itself (or could not be started): distlock's status.
    Exited(i32),
    /// The term was lost and CMD stopped.
    Lost,
}

/// Runs CMD while `term` leads.
async fn lead(args: &ElectArgs, term: &Leadership, cmd: Cmd, signals: &mut Signals) -> Led {
    let mut child = match spawn(&args.command, args.foreground, election_env(term)) {
        Ok(child) => child,
        Err(err) => {
            let code = match err.kind() {
                ErrorKind::NotFound => exit_code::NOT_FOUND,
                _ => exit_code::CANNOT_EXECUTE,
            };
            return Led::Exited(fail(
                code,
                format!("cannot run {:?}: {err}", args.command[0]),
            ));
        }
    };
    let name = term.name().clone();
    let lost = {
        let lost = term.lost();
        let name = name.clone();
        async move { (name, lost.await) }
    };
    let states = vec![(name, term.subscribe())];
    match supervise(&mut child, cmd, signals, lost, states).await {
        Supervised::Exited(Ok(status)) => Led::Exited(status_code(status)),
        Supervised::Exited(Err(err)) => Led::Exited(fail(
            exit_code::SOFTWARE,
            format!("waiting for the command failed: {err}"),
        )),
        Supervised::Lost => Led::Lost,
    }
}

/// Ends the term after CMD; a failure is reported but does not change the status.
async fn resign(term: Leadership, name: &LockName) {
    match term.resign().await {
        Ok(true) => {}
        Ok(false) => warn(format!(
            "leadership of {name} was no longer held when the command ended"
        )),
        Err(err) => warn(format!(
            "resigning {name} failed ({err}); the term ends with its TTL"
        )),
    }
}
