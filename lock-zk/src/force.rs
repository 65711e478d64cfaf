//! An operator's force release: the holders' nodes of a name are deleted,
//! whoever's session owns them. The waiters already watch the nodes ahead
//! of theirs, so they go on as after their holders' releases; the evicted
//! guards see their nodes' deletion.
//!
//! Which nodes hold: the first mutex contender; the read-write contenders
//! that nothing ahead blocks ([`Recipe::blocker`]: the read nodes before the
//! first write node, or that write node alone); every semaphore lease except
//! one made by the holder of the semaphore's `locks` mutex after it took
//! that mutex (Curator's `InterProcessSemaphoreV2`: only the mutex holder
//! ever has a lease that may still wait for its permit, and it is left
//! alone).

use lock_core::{ForceReleased, Result};
use tokio::time::Instant;

use crate::error::lock_error;
use crate::node::{self, Contender, LEASES, LOCKS};
use crate::queue::Recipe;
use crate::session::Session;

/// Deletes the holders of the mutex, read-write lock and semaphore whose
/// znode is `dir`, every request by `until`.
pub(crate) async fn force_release(
    session: &Session,
    dir: &str,
    until: Instant,
) -> Result<ForceReleased> {
    let children = children(session, dir, until).await?;
    let mutex = node::contenders(children.iter().cloned(), node::is_mutex);
    let mut removed = ForceReleased::none();
    if let Some(first) = mutex.first() {
        removed = removed.with_mutex(delete(session, dir, first, until).await?);
    }
    let queue = node::contenders(children, node::is_read_write);
    let mut readers_or_writer = 0;
    for pos in 0..queue.len() {
        let recipe = if node::is_write(queue[pos].marker) {
            Recipe::Write
        } else {
            Recipe::Read
        };
        if recipe.blocker(&queue, pos).is_some() {
            // Everyone behind a blocked contender is blocked too.
            break;
        }
        if mutex.first().is_some_and(|m| m.name == queue[pos].name) {
            // A kazoo lock node stands in both queues: removed above.
            continue;
        }
        readers_or_writer += delete(session, dir, &queue[pos], until).await?;
    }
    removed = removed.with_read_write(readers_or_writer);
    Ok(removed.with_permits(permits(session, dir, until).await?))
}

/// Deletes the semaphore's leases that hold a permit (see the module docs).
async fn permits(session: &Session, dir: &str, until: Instant) -> Result<usize> {
    let leases_dir = format!("{dir}/{LEASES}");
    let leases = node::contenders(children(session, &leases_dir, until).await?, node::is_lease);
    if leases.is_empty() {
        return Ok(0);
    }
    let locks_dir = format!("{dir}/{LOCKS}");
    let gate = node::contenders(children(session, &locks_dir, until).await?, node::is_mutex);
    let gate = match gate.first() {
        Some(g) => stat(session, &format!("{locks_dir}/{}", g.name), until).await?,
        None => None,
    };
    let mut removed = 0;
    for lease in &leases {
        let path = format!("{leases_dir}/{}", lease.name);
        if let Some(gate) = &gate {
            let Some(stat) = stat(session, &path, until).await? else {
                continue;
            };
            if stat.ephemeral_owner == gate.ephemeral_owner && stat.czxid > gate.czxid {
                // The mutex holder's own lease: it may still wait for its permit.
                continue;
            }
        }
        removed += delete(session, &leases_dir, lease, until).await?;
    }
    Ok(removed)
}

/// The children of `dir`, none if it does not exist.
async fn children(session: &Session, dir: &str, until: Instant) -> Result<Vec<String>> {
    match session.list(dir, until).await {
        Ok(children) => Ok(children),
        Err(f) if f.is_no_node() => Ok(Vec::new()),
        Err(f) => Err(lock_error(&format!("force release: listing {dir}"), f)),
    }
}

/// The stat of `path`, `None` if it is gone.
async fn stat(
    session: &Session,
    path: &str,
    until: Instant,
) -> Result<Option<zookeeper_client::Stat>> {
    session
        .stat(path, until)
        .await
        .map_err(|f| lock_error(&format!("force release: reading {path}"), f))
}

/// Deletes the contender `c` under `dir`: 1 if it was there, 0 if it was
/// already gone (its holder released meanwhile).
async fn delete(session: &Session, dir: &str, c: &Contender, until: Instant) -> Result<usize> {
    let path = format!("{dir}/{}", c.name);
    match session.delete(&path, until).await {
        Ok(()) => Ok(1),
        Err(f) if f.is_no_node() => Ok(0),
        Err(f) => Err(lock_error(&format!("force release: deleting {path}"), f)),
    }
}
