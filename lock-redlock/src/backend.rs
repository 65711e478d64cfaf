//! [`RedlockLock`] behind the `lock-core` seam: what it declares it can do,
//! the single try (one round), and the other calls of the seam handed to
//! the waiting acquire (`wait.rs`) and to the status, the listing and the
//! force release (`status.rs`).

use async_trait::async_trait;
use lock_core::backend::{add_saturating, LeaderStream, Lease, LeaseRequest, LockBackend};
use lock_core::{
    Capabilities, Fencing, ForceReleased, LeaderInfo, LockMode, LockName, LockStatus, Result,
};
use tokio::time::Instant;

use crate::client::RedlockLock;
use crate::lease::Won;
use crate::round::{Ask, Attempt};

/// What [`RedlockLock`] guarantees, as [`lock_core::DistributedLock::capabilities`] reports it.
pub const FAULT_TOLERANCE: &str =
    "a minority of N nodes down or partitioned; unsafe under clock jumps and process pauses";

#[async_trait]
impl LockBackend for RedlockLock {
    fn backend_capabilities(&self) -> Capabilities {
        Capabilities::new("redlock")
            .with_fencing(Fencing::None)
            .with_fifo(true)
            .with_loss_events(false)
            .with_notified_wait(true)
            .with_election(true)
            .with_remote(true)
            .with_fault_tolerance(FAULT_TOLERANCE)
    }

    /// One round, within one node timeout: held by someone else, free but
    /// the turn of a waiter in line, or a split vote between racing clients
    /// is `None`; too few answers or a quorum
    /// past the validity is an error. A failed round that won some nodes
    /// removes its keys from them before returning (within one more node
    /// timeout), so that it leaves nothing for the next try to trip over.
    async fn try_lock(&self, req: &LeaseRequest) -> Result<Option<Lease>> {
        let inner = &self.inner;
        if req.mode == LockMode::Leader {
            return inner.try_campaign(req).await;
        }
        let keys = inner.keys(&req.name);
        let (outcome, deletes) = inner.attempt(&keys, req.ttl, Ask::InLine(None), None).await;
        if let Some(released) = deletes.won {
            released
                .wait(add_saturating(Instant::now(), inner.config.node_timeout))
                .await;
        }
        match outcome {
            Attempt::Acquired(won) => Ok(Some(won.into_lease())),
            Attempt::Held { .. } | Attempt::Split { .. } => Ok(None),
            Attempt::NoQuorum { err, .. } | Attempt::TooSlow(err) => Err(err),
        }
    }

    async fn lock(&self, req: &LeaseRequest, deadline: Instant) -> Result<Option<Lease>> {
        if req.mode == LockMode::Leader {
            return self.inner.campaign(req, deadline).await;
        }
        Ok(self.inner.lock(req, deadline).await?.map(Won::into_lease))
    }

    /// Who leads by a quorum read of every node (see the election's
    /// module): no epoch, as Redlock has no fencing tokens.
    async fn leader(&self, name: &LockName) -> Result<Option<LeaderInfo>> {
        let keys = self.inner.leader_keys(name);
        Ok(crate::election::read::read(&self.inner, &keys)
            .await?
            .leader)
    }

    async fn observe(&self, name: &LockName) -> Result<LeaderStream> {
        crate::election::observe::follow(self.inner.clone(), self.inner.leader_keys(name)).await
    }

    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        self.inner.inspect(name).await
    }

    /// On every node in parallel, the shared `RELEASE` script with the
    /// owner not compared: whatever the key holds is removed and the first
    /// in line gets its turn (the key reserved for it, it alone told), as
    /// on a holder's release. Decided by quorum, as a release is, within its
    /// requests' bound (the longer of the node and connect timeouts),
    /// returning once that is known: the holder was removed once a quorum
    /// of nodes removed a key; nobody held it once so many nodes held
    /// nothing that no quorum can have; otherwise an `Unavailable` error.
    /// Slower nodes still get the request in the background.
    async fn force_release(&self, name: &LockName) -> Result<ForceReleased> {
        self.inner.force_release(name).await
    }

    /// The names held on a quorum of nodes (the same owner token on at
    /// least a quorum), by `SCAN` on every node in parallel, each bounded by
    /// the larger of the connect and node timeouts.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<(LockName, LockStatus)>> {
        self.inner.list(prefix, limit).await
    }
}
