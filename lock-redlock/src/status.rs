//! What an operator sees and does: the status of one lock (held when one
//! owner token is on a quorum of nodes), the names held under a prefix, and
//! the force release of a lock, decided by quorum as a release is.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::StreamExt;
use lock_core::backend::add_saturating;
use lock_core::{ForceReleased, LockError, LockName, LockStatus, Result};
use lock_redis::kit::layout::RESERVED_FOR;
use tokio::time::Instant;

use crate::fan_out::{decide, fan_out, release_vote, silent};
use crate::inner::Inner;
use crate::tally::Tally;

impl Inner {
    /// Lock `name`'s status: held when one token is on a quorum of the
    /// nodes, read on every node in parallel within the node timeout;
    /// `Unavailable` when fewer than a quorum answered.
    pub(crate) async fn inspect(self: &Arc<Self>, name: &LockName) -> Result<LockStatus> {
        let inner = self;
        let key = inner.keys(name).key.clone();
        let mut pending = fan_out(inner, inner.all(), inner.config.node_timeout, {
            let key = key.clone();
            move |inner, i| {
                let key = key.clone();
                async move { inner.nodes[i].peek(&key).await }
            }
        });
        let mut tally = Tally::new(inner.nodes.len(), inner.quorum);
        let mut peeks = Vec::new();
        let mut failures = Vec::new();
        while let Some((i, r)) = pending.next().await {
            match r {
                Ok(p) => {
                    tally.said_yes(i);
                    peeks.push(p);
                }
                Err(f) => {
                    tally.failed(i);
                    failures.push(f);
                }
            }
        }
        if !tally.reached() {
            return Err(LockError::unavailable(format!(
                "redlock: only {} of {} nodes answered for {key}; a quorum of {} is needed",
                tally.yes(),
                inner.nodes.len(),
                inner.quorum
            ))
            .with_nodes(failures));
        }
        // Held if one token is on a quorum of nodes.
        let mut best: Option<(&str, usize, Option<Duration>)> = None;
        for p in &peeks {
            // A key reserved for the first in line is that waiter's lock
            // (it holds by the reservations, or takes the key at its next
            // round).
            let Some(v) = p.value.as_deref() else {
                continue;
            };
            if best.is_some_and(|(b, _, _)| b == v) {
                continue;
            }
            let same: Vec<_> = peeks
                .iter()
                .filter(|q| q.value.as_deref() == Some(v))
                .collect();
            let min_pttl = same.iter().filter_map(|q| q.pttl).min();
            if best.is_none_or(|(_, c, _)| same.len() > c) {
                best = Some((v, same.len(), min_pttl));
            }
        }
        Ok(match best {
            Some((token, count, ttl)) if count >= inner.quorum => LockStatus::new(true)
                .with_ttl_remaining(ttl)
                .with_owner(Some(owner_hint(token))),
            _ => LockStatus::new(false),
        })
    }

    /// The force release of lock `name`: the `RELEASE` script with the
    /// owner not compared on every node in parallel, decided by quorum
    /// within its requests' bound, `Inner::background_bound`, as a
    /// release is (removed on a quorum: it was held; nothing on so many
    /// nodes that no quorum can have held it: it was free; otherwise
    /// `Unavailable`), returning as soon as that is known; slower nodes
    /// get it in the background. A removal has no validity to keep, so
    /// waiting for a late answer weakens nothing.
    pub(crate) async fn force_release(self: &Arc<Self>, name: &LockName) -> Result<ForceReleased> {
        let inner = self;
        let n = inner.nodes.len();
        let keys = inner.keys(name);
        let decide_by = add_saturating(Instant::now(), inner.background_bound());
        let pending = fan_out(inner, inner.all(), inner.background_bound(), {
            let keys = keys.clone();
            move |inner, i| {
                let keys = keys.clone();
                async move { inner.nodes[i].force_release(&inner.scripts, &keys).await }
            }
        });
        let mut tally = Tally::new(n, inner.quorum);
        let mut failures = Vec::new();
        let removed = decide(pending, decide_by, &mut tally, &mut failures, release_vote);
        match removed.await {
            Some(true) => return Ok(ForceReleased::none().with_mutex(1)),
            Some(false) => return Ok(ForceReleased::none()),
            None => {}
        }
        failures.extend(silent(inner, &tally, inner.background_bound()));
        let (removed, free) = (tally.yes(), tally.no());
        Err(LockError::unavailable(format!(
            "redlock: the force release of {} removed a key on {removed} of {n} nodes ({free} held nothing, {} \
             failed or did not answer); a quorum of {} is needed to tell whether it was held; the keys left expire \
             with their TTL",
            keys.key,
            n - removed - free,
            inner.quorum
        ))
        .with_nodes(failures))
    }

    /// The names under `prefix` held on a quorum of nodes (the same owner
    /// token on at least a quorum), at most `limit` of them in name order,
    /// by `SCAN` on every node in parallel; `Unavailable` when fewer than a
    /// quorum answered.
    pub(crate) async fn list(
        self: &Arc<Self>,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(LockName, LockStatus)>> {
        let inner = self;
        let name_prefix: Arc<str> = prefix.into();
        let mut pending = fan_out(
            inner,
            inner.all(),
            inner.background_bound(),
            move |inner, i| {
                let name_prefix = name_prefix.clone();
                async move {
                    inner.nodes[i]
                        .list(&inner.scripts, &inner.config.key_prefix, &name_prefix)
                        .await
                }
            },
        );
        let mut seen: std::collections::HashMap<(String, String), (usize, u64)> =
            std::collections::HashMap::new();
        let mut tally = Tally::new(inner.nodes.len(), inner.quorum);
        let mut failures = Vec::new();
        while let Some((i, r)) = pending.next().await {
            match r {
                Ok(found) => {
                    tally.said_yes(i);
                    for l in found {
                        let e = seen.entry((l.key, l.token)).or_insert((0, u64::MAX));
                        e.0 += 1;
                        e.1 = e.1.min(l.pttl);
                    }
                }
                Err(f) => {
                    tally.failed(i);
                    failures.push(f);
                }
            }
        }
        if !tally.reached() {
            return Err(LockError::unavailable(format!(
                "redlock: only {} of {} nodes answered the listing; a quorum of {} is needed",
                tally.yes(),
                inner.nodes.len(),
                inner.quorum
            ))
            .with_nodes(failures));
        }
        let mut out: Vec<(LockName, LockStatus)> = seen
            .into_iter()
            .filter(|(_, (count, _))| *count >= inner.quorum)
            .filter_map(|((key, token), (_, pttl))| {
                let name =
                    LockName::new(key.strip_prefix(inner.config.key_prefix.as_str())?).ok()?;
                let status = LockStatus::new(true)
                    .with_ttl_remaining(Some(Duration::from_millis(pttl)))
                    .with_owner(Some(owner_hint(&token)));
                Some((name, status))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.truncate(limit);
        Ok(out)
    }
}

/// What an operator sees of an owner token: its first 8 digits (the whole
/// token would let anyone release the lock).
fn owner_hint(token: &str) -> String {
    let token = token.strip_prefix(RESERVED_FOR).unwrap_or(token);
    format!("{}…", token.get(..8).unwrap_or(token))
}
