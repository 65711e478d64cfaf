//! A granted lease ([`RedlockLease`]): the key and owner token on every
//! node, renewed by a quorum of compare-and-extends within the new validity,
//! released by a quorum of compare-and-deletes.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{add_saturating, validity, Lease, LeaseHandle, Renewal};
use lock_core::{LockError, LockErrorKind, NodeFailure, NodeFailureReason, Result};
use tokio::sync::SetOnce;
use tokio::time::Instant;

use crate::cleanup::Delete;
use crate::fan_out::{decide, fan_out, finish_in_background, next_by, release_vote, silent};
use crate::inner::Inner;
use crate::node::NameKeys;
use crate::tally::Tally;
use lock_redis::kit::renew::LeaseKind;

/// One granted Redlock lease: the key and token on every node.
pub(crate) struct RedlockLease {
    pub(crate) inner: Arc<Inner>,
    pub(crate) key: Arc<str>,
    pub(crate) token: Arc<str>,
    pub(crate) extensions: AtomicU32,
    /// The acquiring round's requests to its slower nodes, if any were
    /// still on their way when the quorum was reached.
    /// (Set when they are: a guard may live long, so this costs a flag
    /// and a wait list, not the finished task.)
    pub(crate) settled: Option<Arc<SetOnce<()>>>,
    /// The nodes those requests went to.
    pub(crate) late: Box<[usize]>,
}

/// A lease a round (or a quorum's reservations) won, before it is handed
/// to the caller as a [`Lease`].
pub(crate) struct Won {
    pub(crate) handle: RedlockLease,
    /// End of validity (see [`lock_core::backend::validity`]).
    pub(crate) valid_until: Instant,
    /// Whether someone else held the lock when the acquisition began.
    pub(crate) contended: bool,
}

impl Won {
    /// The lease, handed to the caller.
    pub(crate) fn into_lease(self) -> Lease {
        let key = self.handle.key.clone();
        Lease::new(Box::new(self.handle), self.valid_until)
            .with_key(key)
            .with_contended(self.contended)
    }
}

impl RedlockLease {
    /// Waits until the acquiring round's last requests are answered or timed out.
    async fn settle(&self) {
        if let Some(s) = &self.settled {
            s.wait().await;
        }
    }
}

#[async_trait]
impl LeaseHandle for RedlockLease {
    /// Compare-and-`PEXPIRE` on every node in parallel: renewed if a quorum
    /// confirmed within the new validity (`start + ttl - drift`); `Gone` if
    /// so many nodes say "not ours" that no quorum can be; otherwise an
    /// `Unavailable` error naming the nodes (the guard is suspended and
    /// retried until its validity ends).
    async fn renew(&self, ttl: Duration) -> Result<Renewal> {
        self.renew_as(LeaseKind::Mutex, ttl).await
    }

    /// The compare-and-delete of [`RedlockLease::release_keys`].
    async fn release(&self) -> Result<bool> {
        self.release_keys().await
    }
}

impl RedlockLease {
    /// The renewal of [`LeaseHandle::renew`] for a lease of `kind` (a
    /// mutex, or a leader's term: its info and lock-delay marker too).
    pub(crate) async fn renew_as(&self, kind: LeaseKind, ttl: Duration) -> Result<Renewal> {
        let inner = &self.inner;
        if let Some(max) = inner.config.max_extensions {
            if self.extensions.load(Ordering::Relaxed) >= max {
                return Err(LockError::new(
                    LockErrorKind::Lost,
                    format!(
                        "redlock: {} reached its limit of {max} extensions; it stays valid until its current validity ends, then expires",
                        self.key
                    ),
                ));
            }
        }
        self.settle().await;
        let n = inner.nodes.len();
        let start = Instant::now();
        // Each node's renewal waits for its batch (at most `batch_wait`,
        // later only if the machine is too busy to run the batch's timer)
        // before its request goes out, and the node timeout counts from
        // that send: each node's batch gives up `node_timeout` after it was
        // sent (see `node::NodeBatch`), so every node has answered or failed
        // by then. Counting the node timeout from here instead would let a
        // late timer on a loaded machine fail whole batches of healthy
        // renewals. `decide_by` is only a backstop; the validity check below
        // keeps a late quorum from renewing anything. A node that answers
        // late still applies the extension (the request was sent).
        let batch_wait = inner.config.renew_batching.wait_for(ttl);
        let decide_by = add_saturating(start, batch_wait + inner.background_bound());
        let mut pending = {
            let (key, token) = (self.key.clone(), self.token.clone());
            fan_out(
                inner,
                inner.all(),
                batch_wait + inner.background_bound(),
                move |inner, i| {
                    let (key, token) = (key.clone(), token.clone());
                    async move { inner.nodes[i].renew(kind, &key, &token, ttl).await }
                },
            )
        };
        // The earliest send among the nodes that extended: every one of
        // their keys lasts at least `ttl` from it.
        let mut earliest: Option<Instant> = None;
        let mut tally = Tally::new(n, inner.quorum);
        let mut failures = Vec::new();
        while let Some((i, r)) = next_by(&mut pending, decide_by).await {
            match r {
                Ok(Some(sent)) => {
                    tally.said_yes(i);
                    earliest = Some(earliest.map_or(sent, |e| e.min(sent)));
                }
                Ok(None) => {
                    tally.said_no(i);
                    failures.push(NodeFailure {
                        node: inner.nodes[i].addr.clone(),
                        reason: NodeFailureReason::Taken,
                        detail: "key gone or held by another token".into(),
                    });
                }
                Err(f) => {
                    tally.failed(i);
                    failures.push(f);
                }
            }
            if tally.reached() {
                finish_in_background(pending);
                let valid_until = validity(earliest.unwrap_or(start), ttl);
                if Instant::now() < valid_until {
                    self.extensions.fetch_add(1, Ordering::Relaxed);
                    return Ok(Renewal::Renewed { valid_until });
                }
                return Err(LockError::unavailable(format!(
                    "redlock: extending {} took {:?}, past the validity of a {ttl:?} lease",
                    self.key,
                    start.elapsed()
                ))
                .with_nodes(failures));
            }
            if tally.refused() {
                finish_in_background(pending);
                return Ok(Renewal::Gone);
            }
        }
        finish_in_background(pending);
        failures.extend(silent(inner, &tally, inner.config.node_timeout));
        Err(LockError::unavailable(format!(
            "redlock: {} could be extended on only {} of {n} nodes; a quorum of {} is needed",
            self.key,
            tally.yes(),
            inner.quorum
        ))
        .with_nodes(failures))
    }

    /// Compare-and-delete on every node in parallel (the script publishes
    /// the release to waiters). `true` once a quorum deleted our key (it
    /// was ours: held on a quorum); `false` once so many nodes say "not
    /// ours" that it cannot have been ours on a quorum; otherwise (too few
    /// answers, or too few deletes among them to tell: the silent nodes may
    /// have held ours) an `Unavailable` error. It waits for answers up to
    /// the bound of its requests (the longer of the connect and node
    /// timeouts), returning as soon as the verdict is known; a node whose
    /// acquiring `SET` is still unanswered gets its delete in the background.
    pub(crate) async fn release_keys(&self) -> Result<bool> {
        let inner = &self.inner;
        let n = inner.nodes.len();
        // A release is not a round against the lock's validity (a late
        // answer cannot make it unsafe), so it waits for its deletes' answers
        // as long as the requests themselves may take (`background_bound`:
        // the connect timeout, when longer than the node timeout), not just
        // the node timeout: on a busy machine the deletes land a little late
        // and the caller still learns whether the lock was ours. It returns
        // as soon as the verdict is known (a quorum of deletes, or enough
        // "not ours"), so healthy nodes cost no wait.
        let decide_by = add_saturating(Instant::now(), inner.background_bound());
        // The channel and line, derived from the key (not kept per guard).
        let keys = NameKeys::of(self.key.clone());
        // A node whose acquiring `SET` is still unanswered gets its delete
        // once it is answered (a delete must never overtake its node's
        // `SET`), in the background; the nodes that answered (a quorum, or
        // the lock would not be held) decide now.
        let late: &[usize] = match &self.settled {
            Some(settled) if settled.get().is_none() => {
                let (inner, keys, token) = (inner.clone(), keys.clone(), self.token.clone());
                let (settled, late) = (settled.clone(), self.late.to_vec());
                tokio::spawn(async move {
                    settled.wait().await;
                    let by = add_saturating(Instant::now(), inner.background_bound());
                    inner
                        .start_release(&late, &Delete::of(keys, token), None)
                        .wait(by)
                        .await;
                });
                &self.late
            }
            _ => &[],
        };
        let pending = {
            let token = self.token.clone();
            let now = (0..n).filter(|i| !late.contains(i));
            fan_out(inner, now, inner.background_bound(), move |inner, i| {
                let (keys, token) = (keys.clone(), token.clone());
                async move {
                    inner.nodes[i]
                        .release(&inner.scripts, &keys, &token, true, None)
                        .await
                }
            })
        };
        let mut tally = Tally::new(n, inner.quorum);
        let mut failures = Vec::new();
        // The late nodes are not waited for here.
        for &i in late {
            tally.skipped(i);
        }
        let deleted = decide(pending, decide_by, &mut tally, &mut failures, release_vote);
        if let Some(ours) = deleted.await {
            return Ok(ours);
        }
        failures.extend(silent(inner, &tally, inner.background_bound()));
        // Fewer than a quorum of deletes proves nothing: the lock may have
        // been lost (our key expired or was taken on some nodes) or still
        // ours (on the nodes that did not answer). The silent nodes get the
        // delete when they answer, else their key expires.
        let (deleted, not_ours) = (tally.yes(), tally.no());
        Err(LockError::unavailable(format!(
            "redlock: the release of {} was confirmed by {deleted} of {n} nodes ({not_ours} said the key \
             was not ours, {} failed or did not answer); a quorum of {} deletes is needed to tell whether it was \
             still ours; the rest of the keys expire with their TTL",
            self.key,
            n - deleted - not_ours,
            inner.quorum
        ))
        .with_nodes(failures))
    }
}
