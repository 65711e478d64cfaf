//! One round of Redlock: `SET NX` (or the line's acquire) with a fresh
//! owner token on every node at once, the replies counted until the round
//! is decided, then either the lease (a quorum said yes within the
//! validity) or what the round came to, with its keys removed from the
//! nodes that may hold them.

use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use lock_core::backend::{add_saturating, drift, validity, CleanupOnDrop};
use lock_core::{LockError, NodeFailure, NodeFailureReason};
use lock_redis::kit::layout::owner_token;
use tokio::sync::SetOnce;
use tokio::time::Instant;

use crate::cleanup::{release_everywhere, Delete, Deletes, Released};
use crate::fan_out::fan_out;
use crate::inner::Inner;
use crate::lease::{RedlockLease, Won};
use crate::node::{NameKeys, Place, SetReply};
use crate::order::{NodeOrder, SetOnDrop};
use crate::tally::{node_bit, Tally};
use crate::turn::TurnHeard;

/// How a round asks each node for the key.
#[derive(Clone)]
pub(crate) enum Ask {
    /// A plain `SET NX` ([`Node::set_nx`](crate::node::Node::set_nx)): the
    /// first round of a call that saw no contention on the name lately (no
    /// other waiter of this client on it). A key reserved for a waiter in
    /// line is not free to it, and a free key with waiters in line (its
    /// holder expired) is given back to the first of them at once.
    Plain,
    /// The line's script ([`Node::acquire`](crate::node::Node::acquire)): as
    /// a waiter in its place, or (`None`) as a single try that respects the
    /// line.
    InLine(Option<Arc<Place>>),
}

/// What one round of `SET NX` on all nodes came to.
pub(crate) enum Attempt {
    /// A quorum said yes within the validity.
    Acquired(Won),
    /// A quorum holds someone else's token, `holder` (`None` after a plain
    /// round, which reads neither the holder nor its TTL); where and when.
    Held {
        min_pttl: Option<Duration>,
        holder: Option<String>,
        lost_to: LostTo,
    },
    /// Enough nodes answered, but the votes are split (racing clients, or
    /// a release still on its way to some nodes); `holders` = the other
    /// owner tokens seen (or `line:<wait id>` where the key was reserved
    /// for the first in line); where and when.
    Split {
        holders: Vec<String>,
        lost_to: LostTo,
    },
    /// Too few nodes answered for any quorum; `transient` if some of them
    /// only timed out (slow, paused or overloaded, rather than refusing).
    NoQuorum { err: LockError, transient: bool },
    /// A quorum said yes, but only after the validity was used up.
    TooSlow(LockError),
}

/// A waiter's round that lost to a holder: when it was sent, and the nodes
/// that refused it (bit `i`: node `i`).
pub(crate) struct LostTo {
    /// Before the round was decided.
    taken_on: u64,
    /// After (the late replies, see [`Inner::settle_late`]).
    taken_late: Arc<AtomicU64>,
    /// Per node, the turn sequence its refusal read (0: none read, as by a
    /// plain `SET NX`; see [`lock_redis::kit::scripts::ACQUIRE_IN_LINE`]).
    seen: Arc<[AtomicU64]>,
    /// When the round was sent.
    pub(crate) start: Instant,
}

impl LostTo {
    /// The nodes that refused the round so far.
    pub(crate) fn refused_by(&self) -> u64 {
        self.taken_on | self.taken_late.load(Ordering::Relaxed)
    }

    /// How many of the nodes that announced our turn (`turn`) hold the lock
    /// for us by their reservation: those that refused the round and
    /// announced a turn sequence above the one the refusal read there. The
    /// announcement alone proves nothing (it may have been published before
    /// the round arrived and be delivered after it began, or be replayed);
    /// the sequence proves that the node reserved the key for us after the
    /// round ran there. A reservation made before would have been taken by
    /// the round as its own. No request of ours has touched the key since
    /// (our earlier requests to a node reach it before our later ones, see
    /// [`NodeOrder`], and [`Deletes::all_answered`] rules out the rest).
    pub(crate) fn reserved_by(&self, turn: &TurnHeard) -> usize {
        let refused = turn.nodes & self.refused_by();
        self.seen
            .iter()
            .enumerate()
            .filter(|(i, seen)| {
                let seen = seen.load(Ordering::Relaxed);
                refused & node_bit(*i) != 0
                    && seen > 0
                    && turn.seq(*i).is_some_and(|announced| announced > seen)
            })
            .count()
    }
}

impl Inner {
    /// One Redlock round: `SET key token NX PX ttl` on every node in
    /// parallel, in line ([`lock_redis::kit::scripts::ACQUIRE_IN_LINE`]: a
    /// waiter passes its `place`, and a node with a line gives its free key
    /// only to the first in it). Held if a quorum said yes before the
    /// validity (`start + ttl - drift`) ran out; otherwise every node that did
    /// not answer "taken" gets a compare-and-delete, including those that
    /// timed out (their `SET` may have landed; the delete follows it on the
    /// same connection). Dropping the future mid-round releases in the
    /// background.
    pub(crate) async fn attempt(
        self: &Arc<Self>,
        keys: &Arc<NameKeys>,
        ttl: Duration,
        ask: Ask,
        order: Option<&Arc<NodeOrder>>,
    ) -> (Attempt, Deletes) {
        let place = match &ask {
            Ask::InLine(place) => place.clone(),
            Ask::Plain => None,
        };
        let place = place.as_ref();
        let token: Arc<str> = owner_token().into();
        let cleanup = CleanupOnDrop::new(release_everywhere(
            self.clone(),
            keys.clone(),
            token.clone(),
        ));
        let start = Instant::now();
        let valid_until = validity(start, ttl);
        let mut pending = self.send_round(keys, &token, ttl, ask, order);
        let mut results: Vec<Option<SetResult>> = vec![None; self.nodes.len()];
        let count = self.count_votes(&mut pending, &mut results).await;
        if count.reached() && Instant::now() < valid_until {
            let (settled, late) = self.finish_won_round(keys, place, order, &results, pending);
            cleanup.disarm();
            let handle = RedlockLease {
                inner: self.clone(),
                key: keys.key.clone(),
                token,
                extensions: AtomicU32::new(0),
                settled,
                late,
            };
            let won = Won {
                handle,
                valid_until,
                contended: false,
            };
            return (Attempt::Acquired(won), Deletes::default());
        }
        let elapsed = start.elapsed();
        let answers = self.answers(results);
        // One other owner holds a quorum: the lock is held, and removing
        // our keys frees nothing, so it wakes nobody (every waiter would try
        // in vain, and each failed try would wake the others again). After a
        // split vote the lock is free once the keys are gone: announce it.
        // A plain round reads no holder: a quorum refusing it is held (the
        // holder's release wakes the waiters), as far as it can tell.
        let held_by = answers
            .holders
            .iter()
            .find(|(_, seen)| *seen >= self.quorum)
            .map(|(holder, _)| Some(holder.clone()))
            .or((answers.unread >= self.quorum).then_some(None));
        // A waiter's place goes back into the lines its wins took it from.
        let delete = Delete {
            keys: keys.clone(),
            token,
            announce: held_by.is_none(),
            rejoin: place.cloned(),
        };
        let taken_late = Arc::new(AtomicU64::new(0));
        let deletes = self
            .delete_round(&answers, &delete, pending, order, &taken_late, start)
            .await;
        cleanup.disarm();
        let lost_to = LostTo {
            taken_on: answers.taken_on,
            taken_late,
            seen: answers.seen,
            start,
        };
        let votes = Votes {
            count,
            holders: answers.holders,
            failures: answers.failures,
            min_pttl: answers.min_pttl,
        };
        let outcome = self.outcome(&keys.key, ttl, elapsed, votes, held_by, lost_to);
        (outcome, deletes)
    }

    /// The requests of one round: `ask` with owner `token` for `ttl` on
    /// every node at once, each bounded by the node timeout and sent after
    /// the call's earlier requests to its node (`order`); yields `(node
    /// index, reply)` as they come.
    fn send_round(
        self: &Arc<Self>,
        keys: &Arc<NameKeys>,
        token: &Arc<str>,
        ttl: Duration,
        ask: Ask,
        order: Option<&Arc<NodeOrder>>,
    ) -> FuturesUnordered<impl Future<Output = (usize, SetResult)> + Send + 'static> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let (keys, token, order) = (keys.clone(), token.clone(), order.cloned());
        fan_out(
            self,
            self.all(),
            self.config.node_timeout,
            move |inner, i| {
                let (keys, token, ask) = (keys.clone(), token.clone(), ask.clone());
                let earlier = order.as_ref().map(|o| o.after(i));
                async move {
                    if let Some(earlier) = earlier {
                        earlier.await;
                    }
                    let node = &inner.nodes[i];
                    match ask {
                        Ask::Plain => node.set_nx(&inner.scripts, &keys, &token, ttl_ms).await,
                        Ask::InLine(place) => {
                            node.acquire(&inner.scripts, &keys, &token, ttl_ms, place.as_deref())
                                .await
                        }
                    }
                }
            },
        )
    }

    /// Reads the replies to a round into `results` (by node) until it is
    /// decided: a quorum said yes, or a quorum answered and ours can no
    /// longer be one (held, or a split vote), or every node answered. The
    /// replies so read, counted.
    async fn count_votes<F>(
        &self,
        pending: &mut FuturesUnordered<F>,
        results: &mut [Option<SetResult>],
    ) -> Tally
    where
        F: Future<Output = (usize, SetResult)>,
    {
        let mut votes = Tally::new(self.nodes.len(), self.quorum);
        while let Some((i, r)) = pending.next().await {
            match r {
                Ok(SetReply::Won) => votes.said_yes(i),
                Ok(SetReply::Taken { .. } | SetReply::TakenUnread) => votes.said_no(i),
                Err(_) => votes.failed(i),
            }
            results[i] = Some(r);
            if votes.out_of_reach() && votes.quorum_answered() {
                // Decided without the silent nodes: a quorum answered and
                // ours can no longer be one (held, or a split vote). The
                // silent nodes get the background delete below.
                break;
            }
            if votes.reached() {
                break;
            }
        }
        votes
    }

    /// The rest of a round that a quorum said yes to within the validity
    /// (`results` so far, by node). The requests to the slower nodes
    /// (`pending`) finish in the background (each within the node timeout):
    /// their yes adds redundancy, so the lease survives more failures.
    /// Renewals and the release wait for them first, so a delete never
    /// overtakes its node's SET. A waiter's place stays in line where it
    /// did not win: it leaves those lines. Returns what the lease waits
    /// for: set once the slower nodes answered (`None`: all did), and
    /// which nodes they are.
    fn finish_won_round<F>(
        self: &Arc<Self>,
        keys: &Arc<NameKeys>,
        place: Option<&Arc<Place>>,
        order: Option<&Arc<NodeOrder>>,
        results: &[Option<SetResult>],
        mut pending: FuturesUnordered<F>,
    ) -> (Option<Arc<SetOnce<()>>>, Box<[usize]>)
    where
        F: Future<Output = (usize, SetResult)> + Send + 'static,
    {
        let n = self.nodes.len();
        if let Some(place) = place {
            let lost: Vec<usize> = (0..n)
                .filter(|&i| !matches!(results[i], Some(Ok(SetReply::Won)) | None))
                .collect();
            if !lost.is_empty() {
                tokio::spawn(self.clone().leave_line(
                    lost,
                    keys.clone(),
                    place.clone(),
                    true,
                    order.cloned(),
                ));
            }
        }
        // The nodes still to answer: a release sends them its
        // delete only once they have.
        let late: Box<[usize]> = (0..n).filter(|&i| results[i].is_none()).collect();
        let settled = (!pending.is_empty()).then(|| {
            let settled = Arc::new(SetOnce::new());
            let done = SetOnDrop(settled.clone());
            let (inner, keys, place) = (self.clone(), keys.clone(), place.cloned());
            let order = order.cloned();
            tokio::spawn(async move {
                let _done = done;
                let mut lost = Vec::new();
                while let Some((i, r)) = pending.next().await {
                    if !matches!(r, Ok(SetReply::Won)) {
                        lost.push(i);
                    }
                }
                if let Some(place) = place {
                    inner.leave_line(lost, keys, place, true, order).await;
                }
            });
            settled
        });
        (settled, late)
    }

    /// What the nodes answered to a round that did not win, node by node.
    fn answers(&self, results: Vec<Option<SetResult>>) -> Answers {
        let n = self.nodes.len();
        let mut t = Answers {
            unread: 0,
            min_pttl: None,
            failures: Vec::new(),
            ours: Vec::new(),
            unknown: Vec::new(),
            late: Vec::new(),
            holders: Vec::new(),
            taken_on: 0,
            seen: (0..n).map(|_| AtomicU64::new(0)).collect(),
        };
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Some(Ok(SetReply::Won)) => t.ours.push(i),
                Some(Ok(SetReply::Taken {
                    pttl,
                    holder,
                    seen: seq,
                })) => {
                    t.taken_on |= node_bit(i);
                    t.seen[i].store(seq.unwrap_or(0), Ordering::Relaxed);
                    if let Some(holder) = holder {
                        match t.holders.iter_mut().find(|(h, _)| *h == holder) {
                            Some((_, seen)) => *seen += 1,
                            None => t.holders.push((holder, 1)),
                        }
                    }
                    if let Some(p) = pttl {
                        t.min_pttl = Some(t.min_pttl.map_or(p, |m| m.min(p)));
                    }
                    t.failures.push(NodeFailure {
                        node: self.nodes[i].addr.clone(),
                        reason: NodeFailureReason::Taken,
                        detail: pttl.map_or_else(
                            || "held, no expiry".into(),
                            |p| format!("held for {p:?} more"),
                        ),
                    });
                }
                Some(Ok(SetReply::TakenUnread)) => {
                    t.unread += 1;
                    t.failures.push(NodeFailure {
                        node: self.nodes[i].addr.clone(),
                        reason: NodeFailureReason::Taken,
                        detail: "held".into(),
                    });
                }
                Some(Err(f)) => {
                    t.unknown.push(i);
                    t.failures.push(f);
                }
                None => {
                    t.late.push(i);
                    t.failures.push(NodeFailure {
                        node: self.nodes[i].addr.clone(),
                        reason: NodeFailureReason::TimedOut,
                        detail: "no answer yet when the round was decided".into(),
                    });
                }
            }
        }
        t
    }

    /// Removes the keys of a round that did not win. Where the SET failed
    /// and may have landed, the delete goes in the background (it follows
    /// the SET on that node's connection); where the SET is still on its
    /// way (`pending`), its reply decides in the background whether the key
    /// needs deleting (most of them are refused; the late refusals are
    /// recorded in `taken_late` and the answers' `seen`); where we know we
    /// won, it is done before returning, waiting only for what is left of
    /// the round's node timeout from `start` (the call's bound): when the
    /// nodes answer, the keys are gone when the round returns; when they
    /// hang, the release goes on in the background and a waiting caller
    /// awaits it before its next round (see `Released`).
    async fn delete_round<F>(
        self: &Arc<Self>,
        answers: &Answers,
        delete: &Delete,
        pending: FuturesUnordered<F>,
        order: Option<&Arc<NodeOrder>>,
        taken_late: &Arc<AtomicU64>,
        start: Instant,
    ) -> Deletes
    where
        F: Future<Output = (usize, SetResult)> + Send + 'static,
    {
        let mut unanswered: Vec<Released> = Vec::new();
        if !answers.unknown.is_empty() {
            unanswered.push(self.start_release(&answers.unknown, delete, order));
        }
        if !answers.late.is_empty() {
            unanswered.push(self.settle_late(
                pending,
                &answers.late,
                delete,
                order,
                (taken_late.clone(), answers.seen.clone()),
            ));
        }
        let mut released =
            (!answers.ours.is_empty()).then(|| self.start_release(&answers.ours, delete, order));
        if let Some(r) = released.as_mut() {
            if r.wait_by(add_saturating(start, self.config.node_timeout))
                .await
            {
                released = None;
            }
        }
        Deletes {
            won: released,
            unanswered,
            doubtful: false,
        }
    }

    /// What a round that did not win came to, from its `votes`: too slow
    /// (a quorum said yes after `elapsed`, past the validity of `ttl`), held
    /// by `held_by` (a quorum refused it for one holder), too few answers for
    /// a quorum, or a split vote.
    fn outcome(
        &self,
        key: &str,
        ttl: Duration,
        elapsed: Duration,
        votes: Votes,
        held_by: Option<Option<String>>,
        lost_to: LostTo,
    ) -> Attempt {
        let n = self.nodes.len();
        let Votes {
            count,
            holders,
            failures,
            min_pttl,
        } = votes;
        if count.reached() {
            Attempt::TooSlow(
                LockError::unavailable(format!(
                    "redlock: a quorum for {key} answered only after {elapsed:?}, past the validity of a {ttl:?} lease \
                     (drift allowance {:?}); the keys were released",
                    drift(ttl)
                ))
                .with_nodes(failures),
            )
        } else if let Some(holder) = held_by {
            Attempt::Held {
                min_pttl,
                holder,
                lost_to,
            }
        } else if !count.quorum_answered() {
            let answered = count.answered();
            let transient = failures
                .iter()
                .any(|f| f.reason == NodeFailureReason::TimedOut);
            Attempt::NoQuorum {
                err: LockError::unavailable(format!(
                    "redlock: only {answered} of {n} nodes answered for {key}; a quorum of {} is needed",
                    self.quorum
                ))
                .with_nodes(failures),
                transient,
            }
        } else {
            Attempt::Split {
                holders: holders.into_iter().map(|(holder, _)| holder).collect(),
                lost_to,
            }
        }
    }
}

/// One node's answer to a round's `SET`.
type SetResult = std::result::Result<SetReply, NodeFailure>;

/// What the nodes answered to a round that did not win, node by node (see
/// [`Inner::answers`]).
struct Answers {
    /// How many refused it without reading the holder (a plain round's
    /// refusal).
    unread: usize,
    /// The shortest TTL left of a holder, where it has one.
    min_pttl: Option<Duration>,
    /// Why each node did not say yes.
    failures: Vec<NodeFailure>,
    /// The nodes that said yes.
    ours: Vec<usize>,
    /// The nodes whose request failed (the `SET` may have landed).
    unknown: Vec<usize>,
    /// The nodes that had not answered when the round was decided.
    late: Vec<usize>,
    /// How many nodes each other owner token was seen on, and where.
    holders: Vec<(String, usize)>,
    /// The nodes that refused the key (bit `i`: node `i`).
    taken_on: u64,
    /// The turn sequence each node read when it refused (0: not read).
    seen: Arc<[AtomicU64]>,
}

/// The votes that decide what a round that did not win came to (see
/// [`Inner::outcome`]).
struct Votes {
    /// The replies read until the round was decided.
    count: Tally,
    holders: Vec<(String, usize)>,
    failures: Vec<NodeFailure>,
    min_pttl: Option<Duration>,
}
