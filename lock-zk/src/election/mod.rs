//! Leader elections in the layout of Curator's `LeaderLatch` (by
//! default), or of its `LeaderSelector` ([`crate::ElectionRecipe`]).
//!
//! A candidate for the election `N` creates an ephemeral-sequential child
//! of `N`'s znode named `_c_<uuid>-latch-<seq>` (Curator's protection
//! prefix and `LeaderLatch`'s `LOCK_NAME`), whose data is the value it
//! publishes; the candidate whose node sorts first (by the sequence text
//! after `latch-`, as Curator's `fixForSorting` does) leads, every other
//! one watches the node just before its own (the queue of [`Recipe::Leader`],
//! shared with the mutex). So Curator's `LeaderLatch` on the same path and
//! ours stand in one line, and Curator's `getLeader` reads our value.
//! `LeaderSelector`'s leader is the holder of the path's
//! `InterProcessMutex`: in its layout a candidate's node is a mutex node,
//! `_c_<uuid>-lock-<seq>`, holding the value (its participant id), in the
//! line of the name's mutex; everything below is the same.
//!
//! - the term's epoch is the czxid of the leader's node (as a mutex's
//!   token), `since` its ctime;
//! - a proclaim sets the data of our own node (any version: nobody else
//!   writes a candidate's node, and a node deleted under us answers
//!   `NoNode`, so another leader's value is never overwritten); in
//!   `LeaderLatch`'s layout it is refused while a Curator candidate waits
//!   right behind us (its watch would be used up);
//! - a resignation deletes our node; the lock-delay is [`delay`]'s;
//! - followers read and watch the first node ([`follow`]).
//!
//! [`Recipe::Leader`]: crate::queue::Recipe::Leader

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{Lease, LeaseHandle, LeaseRequest, Renewal};
use lock_core::{LockError, LockErrorKind, Result};
use tokio::time::Instant;

use crate::error::{lock_error, Failure};
use crate::lease;
use crate::node;
use crate::queue::{Contender, Created, Nodes};
use crate::session::Session;

pub(crate) mod delay;
pub(crate) mod follow;

/// Starts the term of our candidate node `created`, first in line since a
/// listing sent at `looked`: waits out another term's lock-delay (until
/// `deadline`: `None` when it runs past it), keeps our own marker while we
/// lead with a lock-delay, and grants the lease (its token the node's
/// czxid).
pub(crate) async fn begin(
    c: &Contender,
    nodes: &Arc<Nodes>,
    created: &Created,
    req: &LeaseRequest,
    looked: Instant,
    deadline: Option<Instant>,
    until: Instant,
) -> Result<Option<Lease>> {
    let start = delay::start(c, nodes, &created.path, req, deadline, until).await?;
    let (looked, marker) = match start {
        delay::Start::Held => return Ok(None),
        delay::Start::Leads {
            looked: proven,
            marker,
        } => (proven.unwrap_or(looked), marker),
    };
    let lease = lease::grant(
        &c.session, nodes, &c.data, created, req.ttl, looked, None, until,
    )
    .await?;
    let Lease {
        token,
        valid_until,
        session_until,
        contended,
        handle,
        events,
        key,
        ..
    } = lease;
    let handle = TermLease {
        inner: handle,
        session: c.session.clone(),
        path: created.path.clone(),
        marker,
        latch: c.prefix.ends_with(node::Marker::CuratorLatch.text()),
    };
    let mut lease = Lease::new(Box::new(handle), valid_until)
        .with_token(token)
        .with_contended(contended);
    if let Some(until) = session_until {
        lease = lease.with_session_until(until);
    }
    if let Some(key) = key {
        lease = lease.with_key(key);
    }
    if let Some(events) = events {
        lease = lease.with_events(events);
    }
    Ok(Some(lease))
}

/// The lease of a term: the candidate node's lease, plus the lock-delay
/// marker it keeps (deleted by a resignation only) and proclaims.
struct TermLease {
    inner: Box<dyn LeaseHandle>,
    session: Arc<Session>,
    /// Our candidate node.
    path: String,
    /// Our lock-delay marker, if the term keeps one.
    marker: Option<String>,
    /// Whether the term is in `LeaderLatch`'s layout (see
    /// [`TermLease::check_latch_follower`]).
    latch: bool,
}

impl TermLease {
    /// In `LeaderLatch`'s layout, a proclaim is refused (`Unsupported`)
    /// while the candidate right behind our node is not lock-zk's (see
    /// [`node::is_ours`]): Curator's `LeaderLatch` watches the node ahead of
    /// its own with a one-shot data watch and looks again only when that
    /// node is deleted, so a change of our data would use up its watch and
    /// it would never notice our node go (it would never lead, nor would
    /// anyone behind it). Our own candidates look again on any event. A
    /// Curator candidate that joins between this listing and our write
    /// (one round trip) can still lose its watch so.
    async fn check_latch_follower(&self, until: Instant) -> Result<()> {
        let Some((dir, ours)) = self.path.rsplit_once('/') else {
            return Ok(());
        };
        let children = match self.session.list(dir, until).await {
            Ok(children) => children,
            Err(f) if f.is_no_node() => return Ok(()),
            Err(f) => return Err(lock_error(&format!("listing {dir}"), f)),
        };
        let order = node::contenders(children, node::is_latch);
        let behind = order
            .iter()
            .position(|c| c.name == ours)
            .and_then(|pos| order.get(pos + 1));
        match behind {
            Some(next) if !node::is_ours(&next.name) => Err(LockError::new(
                LockErrorKind::Unsupported,
                format!(
                    "proclaiming on {}: the candidate right behind it ({}) is not lock-zk's (a Curator \
                     LeaderLatch participant?); LeaderLatch looks again only when the node ahead of it is \
                     deleted, so a new value would use up its watch and it would never lead. Use \
                     ElectionRecipe::LeaderSelector to proclaim beside Curator's candidates",
                    self.path, next.name
                ),
            )),
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl LeaseHandle for TermLease {
    async fn renew(&self, ttl: Duration) -> Result<Renewal> {
        self.inner.renew(ttl).await
    }

    /// A resignation: deletes our lock-delay marker (only while our node
    /// is there, in one transaction), then our node.
    async fn release(&self) -> Result<bool> {
        if let Some(marker) = &self.marker {
            delay::resign(&self.session, &self.path, marker).await;
        }
        self.inner.release().await
    }

    /// The end of a term that was not resigned: our node goes, the marker
    /// stays, so the next term waits out our lock-delay.
    async fn release_after_loss(&self) -> Result<bool> {
        self.inner.release().await
    }

    /// Sets our own node's data: `NoNode` (deleted under us, or with our
    /// session) is `Ok(false)`, nothing written. In `LeaderLatch`'s layout,
    /// refused while a Curator candidate waits right behind us
    /// ([`TermLease::check_latch_follower`]).
    async fn proclaim(&self, value: &str) -> Result<bool> {
        let until = self.session.bound();
        if self.latch {
            self.check_latch_follower(until).await?;
        }
        match self
            .session
            .set_data(&self.path, value.as_bytes(), until)
            .await
        {
            Ok(_) => Ok(true),
            Err(f) if f.is_no_node() => Ok(false),
            Err(Failure::Retired(_)) => Ok(false),
            Err(f) => Err(lock_error(&format!("proclaiming on {}", self.path), f)),
        }
    }
}
