//! The semaphore, node-compatible with Apache Curator's
//! `InterProcessSemaphoreV2`: leases are ephemeral-sequential nodes
//! `<name>/leases/_c_<uuid>-lease-<seq>`, and a lease is taken under the
//! mutex `<name>/locks` (Curator's `InterProcessMutex` layout).
//!
//! An acquirer first holds the `locks` mutex (FIFO, each waiting for its
//! predecessor only), then creates its lease node and counts the leases; at
//! most `permits` (its own included) it holds a permit, otherwise it waits,
//! still holding the mutex, for a lease to go (a watch on the children of
//! `leases`: the only watcher there is the mutex holder, so no herd). Then
//! it releases the mutex. Since only the mutex holder ever has a lease node
//! that does not hold a permit, and it counts that node, there are never
//! more than `permits` holders; Curator's clients do the same on the same
//! nodes, so both count each other.

use std::sync::Arc;

use lock_core::backend::{Lease, LeaseRequest};
use lock_core::Result;
use tokio::time::Instant;

use crate::error::{lock_error, Failure};
use crate::lease;
use crate::node::{self, Marker, LEASES, LOCKS};
use crate::queue::{vanished, Contender, Listing, Look, Nodes, Pending, Recipe, Turn};
use crate::session::Session;

/// One permit of `permits` on `req.name`, waiting until `deadline` (`None`:
/// one attempt).
///
/// `dir` is the lock's znode, `session` the session to take it in, `until`
/// the bound of every request.
pub(crate) async fn acquire(
    nodes: &Arc<Nodes>,
    session: Arc<Session>,
    dir: &str,
    until: Instant,
    req: &LeaseRequest,
    permits: u32,
    deadline: Option<Instant>,
) -> Result<Option<Lease>> {
    let leases = format!("{dir}/{LEASES}");
    let permits = usize::try_from(permits).unwrap_or(usize::MAX);
    if deadline.is_none() {
        // Every permit taken (or one of ours waiting for it): `None` without
        // a write.
        match session.list(&leases, until).await {
            Ok(children) if count(&children) >= permits => return Ok(None),
            Ok(_) => {}
            Err(f) if f.is_no_node() => {}
            Err(f) => return Err(lock_error(&format!("listing {leases}"), f)),
        }
    }
    let data = nodes.data_for(req.holder.as_ref());
    let gate = Arc::new(Contender::new(
        session.clone(),
        format!("{dir}/{LOCKS}"),
        Marker::CuratorLock,
        data.clone(),
    ));
    let gate_node = Pending::new(gate.clone());
    let lease = Arc::new(Contender::new(
        session.clone(),
        leases,
        Marker::CuratorLease,
        data,
    ));
    let lease_node = Pending::new(lease.clone());
    let outcome = permit(
        nodes, &session, &gate, &lease, req, permits, deadline, until,
    )
    .await;
    match outcome {
        Ok(Some(_)) => lease_node.keep(),
        _ => lease_node.remove(until).await,
    }
    gate_node.remove(until).await;
    outcome
}

/// The lease nodes among `children`.
fn count(children: &[String]) -> usize {
    children
        .iter()
        .filter(|c| node::parse(c).is_some_and(|(_, m)| node::is_lease(m)))
        .count()
}

/// The protocol of [`acquire`], with the clean-up of both nodes left to it.
#[allow(clippy::too_many_arguments)]
async fn permit(
    nodes: &Arc<Nodes>,
    session: &Arc<Session>,
    gate: &Contender,
    lease: &Contender,
    req: &LeaseRequest,
    permits: usize,
    deadline: Option<Instant>,
    until: Instant,
) -> Result<Option<Lease>> {
    // The mutex first. One attempt still waits a little for it: it is held
    // only while its holder counts the leases, unless every permit is taken
    // (seen above).
    let gate_deadline = deadline.unwrap_or_else(|| {
        let now = Instant::now();
        now + until.saturating_duration_since(now) / 2
    });
    let created = nodes.create(gate, Look::Count, until).await?;
    let turn = gate
        .wait_turn(
            &created.path,
            Recipe::Mutex,
            created.listing,
            Some(gate_deadline),
            until,
        )
        .await?;
    let Turn::Granted { mut contended, .. } = turn else {
        return Ok(None);
    };
    // Our lease, counted with the others in the same round trip.
    let mut created = nodes.create(lease, Look::List, until).await?;
    let ours = created
        .path
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let mut listing = created.listing.take();
    loop {
        let (
            Listing {
                looked, children, ..
            },
            watcher,
        ) = match listing.take() {
            Some(listing) => (listing, None),
            None => {
                let looked = Instant::now();
                match session.watch_children(&lease.dir, until).await {
                    Ok((children, watcher)) => (
                        Listing {
                            looked,
                            children,
                            pzxid: None,
                        },
                        Some(watcher),
                    ),
                    Err(f) => return Err(lock_error(&format!("listing {}", lease.dir), f)),
                }
            }
        };
        if !children.contains(&ours) {
            return Err(vanished(&created.path));
        }
        if count(&children) <= permits {
            let lease = lease::grant(
                session,
                nodes,
                &lease.data,
                &created,
                req.ttl,
                looked,
                None,
                until,
            )
            .await?;
            return Ok(Some(lease.with_contended(contended)));
        }
        contended = true;
        let Some(deadline) = deadline else {
            return Ok(None);
        };
        let Some(watcher) = watcher else {
            // Set the watch with the next listing.
            continue;
        };
        tokio::select! {
            _ = watcher.changed() => {}
            _ = tokio::time::sleep_until(deadline) => return Ok(None),
            cause = session.ended() => {
                return Err(lock_error(&format!("waiting for a lease under {}", lease.dir), Failure::Retired(cause)));
            }
        }
    }
}
