//! One request to every node at once: the fan-out that rounds, renewals,
//! releases and reads send, read as its answers come (by a deadline), and
//! what is left of it finished in the background.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use lock_core::NodeFailure;
use redis::RedisResult;
use tokio::time::Instant;

use crate::inner::Inner;
use crate::node::{self, ReleaseReply};
use crate::tally::Tally;

/// Sends one request to each of the nodes `which` ([`Inner::all`]: every
/// node), all at once, each bounded by `limit`; yields
/// `(node index, outcome)` as they come. The futures own what they use, so
/// what is left of them can finish in the background.
pub(crate) fn fan_out<T, F, Fut>(
    inner: &Arc<Inner>,
    which: impl Iterator<Item = usize>,
    limit: Duration,
    op: F,
) -> FuturesUnordered<
    impl Future<Output = (usize, std::result::Result<T, NodeFailure>)> + Send + 'static,
>
where
    F: Fn(Arc<Inner>, usize) -> Fut,
    Fut: Future<Output = RedisResult<T>> + Send + 'static,
    T: Send + 'static,
{
    which
        .map(|i| {
            let request = op(inner.clone(), i);
            let inner = inner.clone();
            async move {
                let outcome = match tokio::time::timeout(limit, request).await {
                    Ok(Ok(v)) => Ok(v),
                    Ok(Err(e)) => Err(node::failed(&inner.nodes[i], &e)),
                    Err(_) => Err(node::timed_out(&inner.nodes[i], limit)),
                };
                (i, outcome)
            }
        })
        .collect()
}

/// Lets the rest of a fan-out finish in the background (a release or
/// extension already decided must still reach the slow nodes).
pub(crate) fn finish_in_background<F>(mut rest: FuturesUnordered<F>)
where
    F: Future + Send + 'static,
    F::Output: Send,
{
    if !rest.is_empty() {
        tokio::spawn(async move { while rest.next().await.is_some() {} });
    }
}

/// The next outcome of a fan-out, if one comes before `deadline`.
pub(crate) async fn next_by<F: Future>(
    pending: &mut FuturesUnordered<F>,
    deadline: Instant,
) -> Option<F::Output> {
    tokio::time::timeout_at(deadline, pending.next())
        .await
        .ok()
        .flatten()
}

/// One node's answer to a request decided by quorum ([`decide`]); a
/// node that failed to answer counts as failed.
pub(crate) enum Vote {
    Yes,
    /// No, with what to report of it, if anything.
    No(Option<NodeFailure>),
}

/// A node's answer to a release (or a force release) as a [`Vote`]: it
/// deleted the key, or held nothing of ours.
pub(crate) fn release_vote(_: usize, reply: ReleaseReply) -> Vote {
    match reply {
        ReleaseReply::Deleted => Vote::Yes,
        ReleaseReply::NotOurs => Vote::No(None),
    }
}

/// Counts the answers of `pending` (each made a [`Vote`] by `vote`) in
/// `tally`, their failures in `failures`, until a quorum said yes
/// (`Some(true)`), so many said no that no quorum can (`Some(false)`), or
/// `by` (`None`); the rest of the requests finish in the background.
pub(crate) async fn decide<F, T>(
    mut pending: FuturesUnordered<F>,
    by: Instant,
    tally: &mut Tally,
    failures: &mut Vec<NodeFailure>,
    vote: impl Fn(usize, T) -> Vote,
) -> Option<bool>
where
    F: Future<Output = (usize, std::result::Result<T, NodeFailure>)> + Send + 'static,
    T: Send + 'static,
{
    let mut decided = None;
    while let Some((i, r)) = next_by(&mut pending, by).await {
        match r.map(|v| vote(i, v)) {
            Ok(Vote::Yes) => tally.said_yes(i),
            Ok(Vote::No(failure)) => {
                tally.said_no(i);
                failures.extend(failure);
            }
            Err(f) => {
                tally.failed(i);
                failures.push(f);
            }
        }
        if tally.reached() || tally.refused() {
            decided = Some(tally.reached());
            break;
        }
    }
    finish_in_background(pending);
    decided
}

/// The nodes not heard from in `tally` within `waited`, as timed out.
pub(crate) fn silent(inner: &Inner, tally: &Tally, waited: Duration) -> Vec<NodeFailure> {
    tally
        .unheard()
        .map(|i| node::timed_out(&inner.nodes[i], waited))
        .collect()
}
