//! `distlock leader`: who leads an election (its value, epoch and start),
//! once or as it changes (`--watch`).

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use distlock::{LeaderInfo, LockErrorKind, LockName};
use futures::StreamExt;
use serde_json::{json, Value};

use crate::args::LeaderArgs;
use crate::exit_code;
use crate::report::{fail, fail_error};
use crate::signals::Signals;
use crate::target::{lock_name, open, OnCommandLine, Opened};

/// Runs `distlock leader`: exit 0 when someone leads, 3 when nobody does;
/// with `--watch`, prints every change until a signal (exit 0) or until
/// the lock service can no longer follow the election (exit 69).
pub async fn leader(args: LeaderArgs, url_cli: OnCommandLine) -> i32 {
    let name = match lock_name(&args.name) {
        Ok(name) => name,
        Err(code) => return code,
    };
    let Opened {
        locks, mut signals, ..
    } = match open(&args.conn, url_cli).await {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    let backend = locks.capabilities().backend;
    let unsupported = |err: &distlock::LockError| {
        fail(
            exit_code::UNSUPPORTED,
            format!("the {backend} backend has no leader elections (unsupported): {err}"),
        )
    };
    if !args.watch {
        let leader = tokio::select! {
            result = locks.leader(&name) => match result {
                Ok(leader) => leader,
                Err(err) if err.kind() == LockErrorKind::Unsupported => return unsupported(&err),
                Err(err) => return fail_error(&format!("cannot read election {name}"), &err),
            },
            sig = signals.recv() => return Signals::interrupted(sig, &format!("reading election {name}")),
        };
        show(&name, backend, &leader, args.json);
        return if leader.is_some() {
            exit_code::HELD
        } else {
            exit_code::FREE
        };
    }
    let mut changes = tokio::select! {
        result = locks.observe(&name) => match result {
            Ok(changes) => changes,
            Err(err) if err.kind() == LockErrorKind::Unsupported => return unsupported(&err),
            Err(err) => return fail_error(&format!("cannot follow election {name}"), &err),
        },
        sig = signals.recv() => return Signals::interrupted(sig, &format!("following election {name}")),
    };
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(Ok(leader)) => show(&name, backend, &leader, args.json),
                Some(Err(err)) => return fail_error(&format!("stopped following election {name}"), &err),
                None => return fail(exit_code::UNAVAILABLE, format!("the lock service stopped telling the changes of election {name}")),
            },
            _ = signals.recv() => return exit_code::HELD,
        }
    }
}

/// Prints who leads: `key=value` fields on one line, or one JSON object.
fn show(name: &LockName, backend: &str, leader: &Option<LeaderInfo>, json: bool) {
    let mut out = std::io::stdout().lock();
    let _ = if json {
        writeln!(out, "{}", leader_json(name, backend, leader))
    } else {
        writeln!(out, "{}", leader_line(name, backend, leader))
    };
    let _ = out.flush();
}

/// The milliseconds since the Unix epoch of `t`.
fn unix_ms(t: SystemTime) -> Option<u128> {
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_millis())
}

/// `name=... backend=... state=leader value=... epoch=... since_unix_ms=...`
/// (`state=none` when nobody leads); whitespace and control characters in
/// the value shown as `_` (`--json` has the exact text).
fn leader_line(name: &LockName, backend: &str, leader: &Option<LeaderInfo>) -> String {
    let mut fields = vec![format!("name={name}"), format!("backend={backend}")];
    match leader {
        None => fields.push("state=none".into()),
        Some(l) => {
            fields.push("state=leader".into());
            let value: String = l
                .value
                .chars()
                .map(|c| {
                    if c.is_whitespace() || c.is_control() {
                        '_'
                    } else {
                        c
                    }
                })
                .collect();
            fields.push(format!("value={value}"));
            if let Some(epoch) = l.epoch {
                fields.push(format!("epoch={epoch}"));
            }
            if let Some(ms) = l.since.and_then(unix_ms) {
                fields.push(format!("since_unix_ms={ms}"));
            }
        }
    }
    fields.join(" ")
}

/// One JSON object: name, backend, state, and the leader's value, epoch
/// and start (null where unknown).
fn leader_json(name: &LockName, backend: &str, leader: &Option<LeaderInfo>) -> Value {
    match leader {
        None => json!({"name": name.as_str(), "backend": backend, "state": "none"}),
        Some(l) => json!({
            "name": name.as_str(),
            "backend": backend,
            "state": "leader",
            "value": l.value,
            "epoch": l.epoch.map(|e| e.get()),
            "since_unix_ms": l.since.and_then(unix_ms).map(|ms| ms as u64),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_is_one_line_or_one_object() {
        let name = LockName::new("scheduler").unwrap();
        assert_eq!(
            leader_line(&name, "memory", &None),
            "name=scheduler backend=memory state=none"
        );
        let l = LeaderInfo::new("10.0.0.7 8080", Some(distlock::FencingToken::new(42)))
            .with_since(UNIX_EPOCH + std::time::Duration::from_millis(1500));
        assert_eq!(
            leader_line(&name, "etcd", &Some(l.clone())),
            "name=scheduler backend=etcd state=leader value=10.0.0.7_8080 epoch=42 since_unix_ms=1500"
        );
        let j = leader_json(&name, "etcd", &Some(l));
        assert_eq!(j["value"], "10.0.0.7 8080");
        assert_eq!(j["epoch"], 42);
        assert_eq!(j["since_unix_ms"], 1500);
        assert_eq!(leader_json(&name, "etcd", &None)["state"], "none");
    }
}
