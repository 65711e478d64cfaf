//! A leader's term on Redlock ([`RedlockTerm`]): the lease of the leader
//! key, renewed with the term's info and lock-delay marker; its proclaims,
//! numbered and decided by quorum; and its end, where the info (and on a
//! resignation the marker) goes before the key is released to the next
//! candidate in line.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{add_saturating, LeaseHandle, Renewal};
use lock_core::{LockError, NodeFailure, NodeFailureReason, Result};
use lock_redis::kit::layout::LeaderKeys;
use lock_redis::kit::renew::LeaseKind;
use tokio::time::Instant;

use crate::fan_out::{decide, fan_out, finish_in_background, next_by, silent, Vote};
use crate::lease::RedlockLease;
use crate::tally::Tally;

/// A leader's term: the leader key's lease and the election's keys.
pub(crate) struct RedlockTerm {
    pub(crate) lease: RedlockLease,
    pub(crate) keys: Arc<LeaderKeys>,
    /// The number of the last proclaim sent (the term's first value is
    /// number 0).
    proclaims: AtomicU64,
}

impl RedlockTerm {
    /// The term held by `lease` on the election of `keys`.
    pub(crate) fn new(lease: RedlockLease, keys: Arc<LeaderKeys>) -> Self {
        Self {
            lease,
            keys,
            proclaims: AtomicU64::new(0),
        }
    }

    /// Ends the term on every node (its info; on a `resign`, its lock-delay
    /// marker), waiting at most one node timeout; slower nodes get it in
    /// the background. Not decided by quorum: a node that misses it keeps
    /// the info no longer than the key it names, which the release
    /// removes or which expires.
    pub(crate) async fn end(&self, resign: bool) {
        let inner = &self.lease.inner;
        let by = add_saturating(Instant::now(), inner.config.node_timeout);
        let mut pending = {
            let (keys, token) = (self.keys.clone(), self.lease.token.clone());
            fan_out(
                inner,
                inner.all(),
                inner.background_bound(),
                move |inner, i| {
                    let (keys, token) = (keys.clone(), token.clone());
                    async move { inner.nodes[i].end_term(&keys, &token, resign).await }
                },
            )
        };
        while let Some((i, r)) = next_by(&mut pending, by).await {
            if let Err(f) = r {
                tracing::debug!(key = %self.keys.leader(), node = i, failure = %f.detail, "redlock: ending a term failed on a node");
            }
        }
        finish_in_background(pending);
    }
}

#[async_trait]
impl LeaseHandle for RedlockTerm {
    /// The leader key by quorum, as a mutex lease is, with the term's info
    /// and marker on every node where they are the term's (announced to
    /// followers).
    async fn renew(&self, ttl: Duration) -> Result<Renewal> {
        self.lease.renew_as(LeaseKind::Leader, ttl).await
    }

    /// A resignation: the term ends with its marker, then the leader key
    /// goes to the first candidate in line.
    async fn release(&self) -> Result<bool> {
        self.end(true).await;
        self.lease.release_keys().await
    }

    /// The clean-up of a term that ended unresigned: its marker is left
    /// to run out (the lock-delay).
    async fn release_after_loss(&self) -> Result<bool> {
        self.end(false).await;
        self.lease.release_keys().await
    }

    /// Every node stores `value` under the next proclaim number, unless it
    /// has a later one (a late copy changes nothing). `true` once a quorum
    /// stored it (every quorum read then shows it); `false` once so many
    /// nodes say the term is not ours that no quorum can; otherwise an
    /// `Unavailable` error, the outcome unknown.
    async fn proclaim(&self, value: &str) -> Result<bool> {
        let inner = &self.lease.inner;
        let n = inner.nodes.len();
        let number = self.proclaims.fetch_add(1, Ordering::Relaxed) + 1;
        let decide_by = add_saturating(Instant::now(), inner.config.node_timeout);
        let pending = {
            let (keys, token) = (self.keys.clone(), self.lease.token.clone());
            let value: Arc<str> = value.into();
            fan_out(
                inner,
                inner.all(),
                inner.background_bound(),
                move |inner, i| {
                    let (keys, token, value) = (keys.clone(), token.clone(), value.clone());
                    async move { inner.nodes[i].proclaim(&keys, &token, number, &value).await }
                },
            )
        };
        let mut tally = Tally::new(n, inner.quorum);
        let mut failures = Vec::new();
        let stored = decide(pending, decide_by, &mut tally, &mut failures, |i, ours| {
            if ours {
                return Vote::Yes;
            }
            Vote::No(Some(NodeFailure {
                node: inner.nodes[i].addr.clone(),
                reason: NodeFailureReason::Taken,
                detail: "the term is not ours here".into(),
            }))
        });
        if let Some(stored) = stored.await {
            return Ok(stored);
        }
        failures.extend(silent(inner, &tally, inner.config.node_timeout));
        Err(LockError::unavailable(format!(
            "redlock: the proclaim on {} was stored by {} of {n} nodes; a quorum of {} is needed",
            self.keys.leader(),
            tally.yes(),
            inner.quorum
        ))
        .with_nodes(failures))
    }
}
