//! What `list` and `inspect` tell about held mutexes: a walk of the znodes
//! under the base path, level by level, and the status of a lock from its
//! first contender.

use futures::future::join_all;
use lock_core::{FencingToken, Holder, LockError, LockErrorKind, LockName, LockStatus, Result};
use tokio::time::Instant;

use crate::error::lock_error;
use crate::node::{self, Contender};
use crate::session::Session;

/// The status of a mutex whose contenders, in lock order, are `order`
/// (under `dir`): held by the first, whose czxid is the token, whose
/// session the owner and whose data the holder's description (when it is
/// one: a Curator or kazoo node's data is not), the others waiting. `None` when the first left
/// between the listing and this look (look again).
pub(crate) async fn status(
    session: &Session,
    dir: &str,
    order: &[Contender],
    until: Instant,
) -> Result<Option<LockStatus>> {
    let Some(first) = order.first() else {
        return Ok(Some(LockStatus::new(false).with_waiters(Some(0))));
    };
    let path = format!("{dir}/{}", first.name);
    match session.get(&path, until).await {
        Ok(Some((data, stat))) => Ok(Some(
            LockStatus::new(true)
                .with_token(u64::try_from(stat.czxid).ok().map(FencingToken::new))
                .with_waiters(Some(order.len() - 1))
                .with_owner(Some(format!("{:#x}", stat.ephemeral_owner)))
                .with_holder(Holder::from_json(&data)),
        )),
        Ok(None) => Ok(None),
        Err(f) => Err(lock_error(&format!("reading {path}"), f)),
    }
}

/// What the server says about the mutex under `dir` now.
pub(crate) async fn inspect(session: &Session, dir: &str, until: Instant) -> Result<LockStatus> {
    // The holder may leave between the listing and the stat: look again.
    for _ in 0..5 {
        let children = match session.list(dir, until).await {
            Ok(children) => children,
            Err(f) if f.is_no_node() => Vec::new(),
            Err(f) => return Err(lock_error(&format!("listing {dir}"), f)),
        };
        let order = node::contenders(children, node::is_mutex);
        if let Some(status) = status(session, dir, &order, until).await? {
            return Ok(status);
        }
    }
    Err(LockError::new(
        LockErrorKind::Unavailable,
        format!("{dir}: the holder kept changing while inspecting"),
    ))
}

/// The held mutexes under `root` whose names start with `prefix`, sorted,
/// at most `limit`. Every znode under the prefix is listed, one level at a
/// time (the listings of a level sent together), then the first contender
/// of each held lock is read (all together).
pub(crate) async fn held(
    session: &Session,
    root: &str,
    prefix: &str,
    limit: usize,
    until: Instant,
) -> Result<Vec<(LockName, LockStatus)>> {
    let (head, tail) = prefix.rsplit_once('/').unwrap_or(("", prefix));
    if !head.is_empty() && LockName::new(head).is_err() {
        // No lock name starts with it.
        return Ok(Vec::new());
    }
    let start = if head.is_empty() {
        root.to_string()
    } else {
        format!("{root}/{head}")
    };
    let mut level = vec![(start, head.to_string())];
    let mut locks: Vec<(LockName, String, Vec<Contender>)> = Vec::new();
    let mut first = true;
    while !level.is_empty() {
        let listings = join_all(level.iter().map(|(dir, _)| session.list(dir, until))).await;
        let mut next = Vec::new();
        for ((dir, name), listed) in level.into_iter().zip(listings) {
            let children = match listed {
                Ok(children) => children,
                Err(f) if f.is_no_node() => continue,
                Err(f) => return Err(lock_error(&format!("listing {dir}"), f)),
            };
            let order = node::contenders(children.iter().map(String::as_str), node::is_mutex);
            if !order.is_empty() && !first {
                if let Ok(lock) = LockName::new(name.clone()) {
                    locks.push((lock, dir.clone(), order));
                }
            }
            for child in children {
                if node::parse(&child).is_some()
                    || child == node::LOCK_DELAY
                    || (first && !child.starts_with(tail))
                {
                    continue;
                }
                let child_name = if name.is_empty() {
                    child.clone()
                } else {
                    format!("{name}/{child}")
                };
                next.push((format!("{dir}/{child}"), child_name));
            }
        }
        level = next;
        first = false;
    }
    locks.retain(|(lock, _, _)| lock.as_str().starts_with(prefix));
    locks.sort_by(|a, b| a.0.cmp(&b.0));
    locks.truncate(limit);
    let statuses = join_all(
        locks
            .iter()
            .map(|(_, dir, order)| status(session, dir, order, until)),
    )
    .await;
    let mut out = Vec::with_capacity(locks.len());
    for ((lock, _, _), status) in locks.into_iter().zip(statuses) {
        // A holder that left meanwhile: no longer held.
        if let Some(status) = status? {
            out.push((lock, status));
        }
    }
    Ok(out)
}
