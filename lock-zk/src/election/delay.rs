//! The lock-delay of an election, without TTL nodes (which servers rarely
//! enable) and without polling.
//!
//! While a term with a lock-delay leads, a PERSISTENT child of the
//! election's znode, [`LOCK_DELAY`], says so: its data is
//! `<delay in ms> <the term's candidate node name>`. It is created in the
//! same transaction that checks the term's node (so only a candidate that
//! is first in line writes it), and deleted by a resignation, in a
//! transaction that checks our node is still there, before the node. A term
//! that ends without a resignation (its session expired, or its guard gave
//! it up: `release_after_loss`) leaves it behind.
//!
//! A candidate that comes first in line and finds the marker of another
//! term waits the marker's delay, counted from the moment it learned it is
//! first (right after it saw its predecessor's node go, or now when it did
//! not see it go: later than the end of that term, so never too early),
//! then in one transaction checks its own node, deletes the marker (by its
//! version) and creates its own if it has a lock-delay. A marker never
//! delays a term by more than its delay after the end of the marker's term,
//! plus the time the next candidate took to notice that end.
//!
//! The delay written is the term's lock-delay plus the drift allowance of
//! its TTL: a guard gives its lease up that much before the TTL it asked
//! for, and the lock-delay counts from the end of the TTL, as on a server
//! that keeps leases.

use std::time::Duration;

use lock_core::backend::{add_saturating, drift, LeaseRequest};
use lock_core::{LockError, Result};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{lock_error, Failure};
use crate::node::LOCK_DELAY;
use crate::queue::{vanished, Contender, Nodes};
use crate::session::Session;

/// How many times the marker is looked at again when it changed between
/// the look and the transaction (or the transaction's reply was lost).
const ATTEMPTS: usize = 8;

/// What [`start`] found.
pub(crate) enum Start {
    /// Another term's lock-delay runs past the deadline (or there was none).
    Held,
    /// The term starts.
    Leads {
        /// Taken before the transaction that proved our node still there,
        /// when there was one (after a wait).
        looked: Option<Instant>,
        /// Our marker's path, if the term keeps one.
        marker: Option<String>,
    },
}

/// The marker's data: the delay to wait after the term ends, and the name
/// of its candidate node.
fn describe(delay: Duration, node: &str) -> String {
    format!("{} {node}", delay.as_millis())
}

/// [`describe`] read back; an unreadable marker (not written by us) has no
/// delay.
fn parse(data: &[u8]) -> (Duration, String) {
    let text = String::from_utf8_lossy(data);
    match text
        .split_once(' ')
        .and_then(|(ms, node)| Some((ms.parse::<u64>().ok()?, node)))
    {
        Some((ms, node)) => (Duration::from_millis(ms), node.to_string()),
        None => {
            tracing::warn!(data = %text, "lock-zk: an unreadable lock-delay marker; taken as no delay");
            (Duration::ZERO, String::new())
        }
    }
}

/// The start of the term of our node `path` (first in line): waits out
/// another term's marker (until `deadline`; `None`: no wait), then
/// replaces it with ours, or removes it.
pub(crate) async fn start(
    c: &Contender,
    nodes: &Nodes,
    path: &str,
    req: &LeaseRequest,
    deadline: Option<Instant>,
    until: Instant,
) -> Result<Start> {
    let first = Instant::now();
    let marker = format!("{}/{LOCK_DELAY}", c.dir);
    let ours = path.rsplit('/').next().unwrap_or_default();
    let kept = (!req.lock_delay.is_zero())
        .then(|| describe(req.lock_delay.saturating_add(drift(req.ttl)), ours));
    let what = || format!("the lock-delay marker {marker}");
    for _ in 0..ATTEMPTS {
        let found = c
            .session
            .get(&marker, until)
            .await
            .map_err(|f| lock_error(&format!("reading {}", what()), f))?;
        let version = match found {
            None if kept.is_none() => {
                return Ok(Start::Leads {
                    looked: None,
                    marker: None,
                })
            }
            None => None,
            Some((data, stat)) => {
                let (delay, node) = parse(&data);
                if node == ours {
                    // Ours, from a transaction whose reply was lost.
                    return Ok(Start::Leads {
                        looked: None,
                        marker: Some(marker),
                    });
                }
                let end = add_saturating(first, delay);
                if !wait(c, end, deadline).await? {
                    return Ok(Start::Held);
                }
                Some(stat.version)
            }
        };
        let looked = Instant::now();
        let acls = nodes.acls.clone();
        let outcome = c
            .session
            .commit("lock-delay", until, |txn| {
                txn.add_check_version(path, -1)?;
                if let Some(version) = version {
                    txn.add_delete(&marker, Some(version))?;
                }
                if let Some(data) = &kept {
                    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acls));
                    txn.add_create(&marker, data.as_bytes(), &options)?;
                }
                Ok(())
            })
            .await;
        match outcome {
            Ok(Ok(_)) => {
                return Ok(Start::Leads {
                    looked: Some(looked),
                    marker: kept.map(|_| marker),
                })
            }
            Ok(Err((0, zk::Error::NoNode))) => return Err(vanished(path)),
            // The marker changed between our look and the transaction.
            Ok(Err((_, zk::Error::NoNode | zk::Error::NodeExists | zk::Error::BadVersion))) => {}
            Ok(Err((_, err))) => return Err(lock_error(&what(), Failure::Zk(err))),
            // Applied or not: the next look tells.
            Err(f) if f.may_have_applied() => {}
            Err(f) => return Err(lock_error(&what(), f)),
        }
    }
    Err(LockError::unavailable(format!(
        "{} kept changing while our term started",
        what()
    )))
}

/// Waits until `end` (another term's lock-delay): `false` when `deadline`
/// comes first (or no wait was asked for); an error when our session ends
/// meanwhile (our node with it).
async fn wait(c: &Contender, end: Instant, deadline: Option<Instant>) -> Result<bool> {
    if Instant::now() >= end {
        return Ok(true);
    }
    let Some(deadline) = deadline else {
        return Ok(false);
    };
    tokio::select! {
        _ = tokio::time::sleep_until(end.min(deadline)) => Ok(end <= deadline),
        cause = c.session.ended() => Err(lock_error(
            &format!("waiting out a lock-delay under {}", c.dir),
            Failure::Retired(cause),
        )),
    }
}

/// A resignation's first step: deletes our `marker` if our node `path` is
/// still there (one transaction). Best effort: a marker left behind only
/// makes the next term wait its delay.
pub(crate) async fn resign(session: &Session, path: &str, marker: &str) {
    let outcome = session
        .commit("resign", session.bound(), |txn| {
            txn.add_check_version(path, -1)?;
            txn.add_delete(marker, None)
        })
        .await;
    match outcome {
        Ok(Ok(_)) | Ok(Err((_, zk::Error::NoNode))) | Err(Failure::Retired(_)) => {}
        Ok(Err((_, err))) => {
            tracing::warn!(%marker, error = %err, "lock-zk: a resignation could not delete its lock-delay marker; the next term waits its delay");
        }
        Err(f) => {
            tracing::warn!(%marker, error = %lock_error("deleting the lock-delay marker", f), "lock-zk: a resignation could not delete its lock-delay marker; the next term waits its delay");
        }
    }
}
