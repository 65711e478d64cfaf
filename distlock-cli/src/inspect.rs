//! `distlock status` and `distlock list`: what the lock service says about
//! its locks, as `key=value` lines or JSON; `distlock release --force`, the
//! operator's eviction of a lock's holders.

use distlock::{ForceReleased, LockName, LockService, LockStatus};
use serde_json::{json, Value};

use crate::args::{ListArgs, ReleaseArgs, StatusArgs};
use crate::exit_code;
use crate::report::{fail, fail_error, warn};
use crate::signals::Signals;
use crate::target::{lock_name, open, OnCommandLine, Opened};

/// Runs `distlock status`: exit 0 when the lock is held, 3 when it is free.
pub async fn status(args: StatusArgs, url_cli: OnCommandLine) -> i32 {
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
    let status = tokio::select! {
        result = locks.inspect(&name) => match result {
            Ok(status) => status,
            Err(err) => return fail_error(&format!("cannot read lock {name}"), &err),
        },
        sig = signals.recv() => return Signals::interrupted(sig, &format!("reading lock {name}")),
    };
    let backend = locks.capabilities().backend;
    if args.json {
        println!("{}", status_json(&name, backend, &status));
    } else {
        print!("{}", status_lines(&name, backend, &status));
    }
    if status.held {
        exit_code::HELD
    } else {
        exit_code::FREE
    }
}

/// Runs `distlock list`: exit 0 when listed, 78 when the backend cannot list.
pub async fn list(args: ListArgs, url_cli: OnCommandLine) -> i32 {
    let Opened {
        locks, mut signals, ..
    } = match open(&args.conn, url_cli).await {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    let listed = tokio::select! {
        result = held(&*locks, &args.prefix, args.limit) => result,
        sig = signals.recv() => return Signals::interrupted(sig, "listing locks"),
    };
    let backend = locks.capabilities().backend;
    let locks = match listed {
        Ok(locks) => locks,
        Err(err) if err.kind() == distlock::LockErrorKind::Unsupported => {
            return fail(
                exit_code::UNSUPPORTED,
                format!("the {backend} backend cannot list its locks (unsupported): use `distlock status NAME` for one lock"),
            )
        }
        Err(err) => return fail_error("cannot list locks", &err),
    };
    let truncated = args.limit > 0 && locks.len() >= args.limit;
    if args.json {
        println!("{}", list_json(backend, &args.prefix, &locks, truncated));
    } else {
        for (name, status) in &locks {
            println!("{}", list_line(name, status));
        }
    }
    if truncated {
        warn(format!(
            "showing the first {} locks; there may be more (raise --limit)",
            args.limit
        ));
    }
    exit_code::HELD
}

/// Runs `distlock release --force`: exit 0 when a holder was removed, 3
/// when nothing was held, 64 without `--force`, 78 when the backend cannot.
pub async fn release(args: ReleaseArgs, url_cli: OnCommandLine) -> i32 {
    let name = match lock_name(&args.name) {
        Ok(name) => name,
        Err(code) => return code,
    };
    if !args.force {
        return fail(
            exit_code::USAGE,
            format!(
                "a lock is released by its holder (`distlock run` releases when CMD exits); `distlock release --force {name}` evicts whoever holds it now, and their process may still be working: see `distlock release --help`"
            ),
        );
    }
    let Opened {
        locks, mut signals, ..
    } = match open(&args.conn, url_cli).await {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    let backend = locks.capabilities().backend;
    let removed = tokio::select! {
        result = locks.force_release(&name) => match result {
            Ok(removed) => removed,
            Err(err) if err.kind() == distlock::LockErrorKind::Unsupported => {
                return fail(
                    exit_code::UNSUPPORTED,
                    format!("the {backend} backend cannot force the release of lock {name} (unsupported): {err}"),
                )
            }
            Err(err) => return fail_error(&format!("cannot force the release of lock {name} (some holders may have been removed; run it again)"), &err),
        },
        sig = signals.recv() => return Signals::interrupted(sig, &format!("forcing the release of lock {name}")),
    };
    if args.json {
        println!("{}", released_json(&name, backend, &removed));
    } else {
        print!("{}", released_lines(&name, backend, &removed));
    }
    if removed.removed_any() {
        warn(format!(
            "evicted {} holder(s) of lock {name}; they may still be working until they notice: only fencing tokens checked by the storage keep their late writes out",
            removed.total()
        ));
        exit_code::HELD
    } else {
        exit_code::FREE
    }
}

/// The fields of a force release, in output order.
fn released_fields(removed: &ForceReleased) -> [(&'static str, String); 5] {
    [
        (
            "state",
            if removed.removed_any() {
                "released"
            } else {
                "free"
            }
            .to_string(),
        ),
        ("removed", removed.total().to_string()),
        ("removed_mutex", removed.mutex.to_string()),
        ("removed_read_write", removed.read_write.to_string()),
        ("removed_permits", removed.permits.to_string()),
    ]
}

/// `release --force`'s `key=value` lines.
pub fn released_lines(name: &LockName, backend: &str, removed: &ForceReleased) -> String {
    let mut out = format!("name={name}\nbackend={backend}\n");
    for (key, value) in released_fields(removed) {
        out.push_str(&format!("{key}={value}\n"));
    }
    out
}

/// `release --force`'s JSON object.
pub fn released_json(name: &LockName, backend: &str, removed: &ForceReleased) -> Value {
    json!({
        "name": name.as_str(),
        "backend": backend,
        "state": if removed.removed_any() { "released" } else { "free" },
        "removed": removed.total(),
        "removed_mutex": removed.mutex,
        "removed_read_write": removed.read_write,
        "removed_permits": removed.permits,
    })
}

async fn held(
    locks: &dyn LockService,
    prefix: &str,
    limit: usize,
) -> distlock::Result<Vec<(LockName, LockStatus)>> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    locks.list(prefix, limit).await
}

/// The fields the backend could tell, in output order (`state` first).
fn fields(status: &LockStatus) -> Vec<(&'static str, String)> {
    let mut out = vec![(
        "state",
        if status.held { "held" } else { "free" }.to_string(),
    )];
    match (status.token, status.held) {
        (Some(token), true) => out.push(("token", token.to_string())),
        (Some(token), false) => out.push(("last_token", token.to_string())),
        (None, _) => {}
    }
    if let Some(owner) = &status.owner {
        out.push(("owner", owner.clone()));
    }
    if let Some(holder) = &status.holder {
        if let Some(host) = &holder.host {
            out.push(("holder_host", host.clone()));
        }
        if let Some(pid) = holder.pid {
            out.push(("holder_pid", pid.to_string()));
        }
        if let Some(note) = &holder.note {
            out.push(("holder_note", note.clone()));
        }
    }
    if let Some(ttl) = status.ttl_remaining {
        out.push(("ttl_remaining_ms", ttl.as_millis().to_string()));
    }
    if let Some(waiters) = status.waiters {
        out.push(("waiters", waiters.to_string()));
    }
    out
}

/// `status`'s `key=value` lines.
pub fn status_lines(name: &LockName, backend: &str, status: &LockStatus) -> String {
    let mut out = format!("name={name}\nbackend={backend}\n");
    for (key, value) in fields(status) {
        out.push_str(&format!("{key}={}\n", one_word(&value)));
    }
    out
}

/// One line of `list`: the name, then the fields.
pub fn list_line(name: &LockName, status: &LockStatus) -> String {
    let mut line = name.to_string();
    for (key, value) in fields(status) {
        line.push_str(&format!(" {key}={}", one_word(&value)));
    }
    line
}

/// A status as JSON: every field present, `null` where the backend cannot tell.
pub fn status_json(name: &LockName, backend: &str, status: &LockStatus) -> Value {
    let token = status.token.map(u64::from);
    let holder = status.holder.as_ref();
    json!({
        "name": name.as_str(),
        "backend": backend,
        "state": if status.held { "held" } else { "free" },
        "token": token.filter(|_| status.held),
        "last_token": token.filter(|_| !status.held),
        "owner": status.owner,
        "holder_host": holder.and_then(|h| h.host.as_deref()),
        "holder_pid": holder.and_then(|h| h.pid),
        "holder_note": holder.and_then(|h| h.note.as_deref()),
        "ttl_remaining_ms": status.ttl_remaining.map(|d| d.as_millis() as u64),
        "waiters": status.waiters,
    })
}

/// `list --json`: the backend, the prefix, the locks, and whether the limit cut the list.
pub fn list_json(
    backend: &str,
    prefix: &str,
    locks: &[(LockName, LockStatus)],
    truncated: bool,
) -> Value {
    let locks: Vec<Value> = locks
        .iter()
        .map(|(name, status)| status_json(name, backend, status))
        .collect();
    json!({
        "backend": backend,
        "prefix": prefix,
        "locks": locks,
        "truncated": truncated,
    })
}

/// A value with its whitespace and control characters replaced, so that
/// one field stays one word on one line (a holder's note, or a host name
/// another client stored, can hold any text).
fn one_word(value: &str) -> String {
    value.replace(|c: char| c.is_whitespace() || c.is_control(), "_")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use distlock::{AcquireOptions, MemoryLock};

    use super::*;

    fn n(s: &str) -> LockName {
        LockName::new(s).unwrap()
    }

    /// The memory backend tells everything: token, owner, TTL, waiters.
    #[tokio::test]
    async fn status_of_a_held_lock_has_every_field() {
        let locks: Arc<dyn LockService> = Arc::new(MemoryLock::new());
        let name = n("jobs/nightly");
        let opts = AcquireOptions::new()
            .ttl(Duration::from_secs(10))
            .note("nightly run 7");
        let guard = locks.acquire(&name, &opts).await.unwrap();
        let status = locks.inspect(&name).await.unwrap();
        let v = status_json(&name, "memory", &status);
        assert_eq!(v["name"], "jobs/nightly");
        assert_eq!(v["backend"], "memory");
        assert_eq!(v["state"], "held");
        assert_eq!(v["token"], u64::from(guard.fencing_token().unwrap()));
        assert!(v["last_token"].is_null());
        assert!(v["owner"].as_str().is_some_and(|o| !o.is_empty()), "{v}");
        let ttl = v["ttl_remaining_ms"].as_u64().unwrap();
        assert!(ttl > 0 && ttl <= 10_000, "{v}");
        assert_eq!(v["waiters"], 0);
        assert_eq!(v["holder_pid"], std::process::id());
        assert!(
            v["holder_host"].as_str().is_some_and(|h| !h.is_empty()),
            "{v}"
        );
        assert_eq!(v["holder_note"], "nightly run 7");

        let text = status_lines(&name, "memory", &status);
        assert!(
            text.starts_with("name=jobs/nightly\nbackend=memory\nstate=held\ntoken="),
            "{text}"
        );
        assert!(text.contains("\nowner="), "{text}");
        assert!(text.contains("\nholder_note=nightly_run_7\n"), "{text}");
        let pid = format!("\nholder_pid={}\n", std::process::id());
        assert!(text.contains(&pid), "{text}");
        assert!(text.contains("\nholder_host="), "{text}");

        let token = guard.fencing_token().unwrap();
        guard.release().await.unwrap();
        let free = locks.inspect(&name).await.unwrap();
        let v = status_json(&name, "memory", &free);
        assert_eq!(v["state"], "free");
        assert!(v["token"].is_null());
        assert_eq!(v["last_token"], u64::from(token));
        assert!(v["owner"].is_null());
        assert!(v["ttl_remaining_ms"].is_null());
        for field in ["holder_host", "holder_pid", "holder_note"] {
            assert!(v[field].is_null(), "{v}");
        }
        assert!(!status_lines(&name, "memory", &free).contains("holder_"));
    }

    /// `list` shows the held mutexes under the prefix, sorted, one line each.
    #[tokio::test]
    async fn list_shows_held_locks_by_prefix() {
        let locks: Arc<dyn LockService> = Arc::new(MemoryLock::new());
        let opts = AcquireOptions::new();
        let mut guards = Vec::new();
        for name in ["jobs/b", "jobs/a", "other"] {
            guards.push(locks.acquire(&n(name), &opts).await.unwrap());
        }
        let listed = held(&*locks, "jobs/", 10).await.unwrap();
        let lines: Vec<String> = listed.iter().map(|(n, s)| list_line(n, s)).collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("jobs/a state=held token="),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("jobs/b state=held token="),
            "{lines:?}"
        );
        let v = list_json("memory", "jobs/", &listed, false);
        assert_eq!(v["locks"].as_array().unwrap().len(), 2);
        assert_eq!(v["locks"][1]["name"], "jobs/b");
        assert_eq!(v["truncated"], false);
        assert_eq!(held(&*locks, "", 1).await.unwrap().len(), 1);
        assert!(held(&*locks, "", 0).await.unwrap().is_empty());
    }
}
