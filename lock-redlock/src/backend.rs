//! [`RedlockLock`]: the Redlock algorithm behind the `lock-core` seam.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::{FuturesUnordered, StreamExt};
use lock_core::backend::{
    add_saturating, drift, validity, CleanupOnDrop, Lease, LeaseHandle, LeaseRequest, LockBackend,
    Renewal,
};
use lock_core::{
    Capabilities, Fencing, ForceReleased, LockError, LockErrorKind, LockName, LockStatus,
    NodeFailure, NodeFailureReason, Result,
};
use lock_redis::kit::layout::{owner_token, RESERVED_FOR};
use lock_redis::kit::scripts::Scripts;
use rand::Rng;
use redis::RedisResult;
use tokio::sync::SetOnce;
use tokio::time::Instant;

use crate::config::RedlockConfig;
use crate::node::{self, NameKeys, Node, Place, ReleaseReply, SetReply};
use crate::tally::{node_bit, Tally};
use crate::turn::{turn_reached, TurnHeard};
use lock_redis::kit::notify::{Notifier, NotifyNode, Subscription, Timeouts, Wake};

/// What [`RedlockLock`] guarantees, as [`lock_core::DistributedLock::capabilities`] reports it.
pub const FAULT_TOLERANCE: &str =
    "a minority of N nodes down or partitioned; unsafe under clock jumps and process pauses";

/// How long a waiter whose turn it is waits for the release that made it
/// so to be announced by a quorum of nodes before its round: the deletes
/// reach the nodes at about the same time, and a round sent after the first
/// announcement alone often finds the key still on the others.
const TURN_GRACE: Duration = Duration::from_millis(2);

/// A Redlock client over N independent Redis masters.
///
/// Cheap to clone (one shared set of connections). Use it through
/// [`lock_core::DistributedLock`] (`try_acquire`, `acquire`, `inspect`);
/// the guards it returns carry no fencing token. See the crate docs for the
/// algorithm, its timing assumptions and when not to use it.
#[derive(Clone)]
pub struct RedlockLock {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    nodes: Vec<Node>,
    quorum: usize,
    config: RedlockConfig,
    scripts: Scripts,
    notifier: Notifier,
}

impl fmt::Debug for RedlockLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockLock")
            .field("nodes", &self.nodes())
            .field("quorum", &self.inner.quorum)
            .field("node_timeout", &self.inner.config.node_timeout)
            .finish_non_exhaustive()
    }
}

impl RedlockLock {
    /// Validates `config`, connects to every node in parallel (each bounded
    /// by [`RedlockConfig::connect_timeout`]) and succeeds if at least a
    /// quorum answered. Nodes that are down are connected later, lazily, as
    /// rounds need them.
    ///
    /// Errors: [`LockErrorKind::InvalidArgument`] for a bad configuration;
    /// [`LockErrorKind::Unavailable`], naming each node that failed and why,
    /// when fewer than a quorum could be reached.
    pub async fn connect(config: RedlockConfig) -> Result<Self> {
        let lock = Self::connect_lazy(config)?;
        lock.check_quorum().await?;
        Ok(lock)
    }

    /// Validates `config` and builds the client without any I/O: connections
    /// are opened by the first round that needs them, and re-opened after a
    /// failure. Acquiring fails with [`LockErrorKind::Unavailable`] while
    /// fewer than a quorum of nodes can be reached: at once when they refuse
    /// connections, after two [`RedlockConfig::node_timeout`]s when they do
    /// not answer (one retry). Must be called within a Tokio runtime.
    pub fn connect_lazy(config: RedlockConfig) -> Result<Self> {
        config.validate()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(LockError::invalid(
                "redlock: RedlockLock must be created within a Tokio runtime",
            ));
        }
        let inbox: Arc<str> = inbox_prefix(&config.key_prefix).into();
        let nodes = config
            .nodes
            .iter()
            .map(|url| {
                Node::new(
                    url,
                    &config.tls,
                    config.connect_timeout,
                    config.renew_batching,
                    config.node_timeout,
                    inbox.clone(),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let notifier = Notifier::start(
            nodes
                .iter()
                .map(|n| NotifyNode {
                    addr: n.addr.clone(),
                    client: n.client.clone(),
                })
                .collect(),
            Timeouts {
                connect: config.connect_timeout,
                request: config.connect_timeout.max(config.node_timeout),
            },
            Some(&inbox),
        );
        Ok(Self {
            inner: Arc::new(Inner {
                quorum: config.quorum(),
                nodes,
                config,
                scripts: Scripts::default(),
                notifier,
            }),
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &RedlockConfig {
        &self.inner.config
    }

    /// The nodes' addresses (`host:port`), in configuration order.
    pub fn nodes(&self) -> Vec<&str> {
        self.inner.nodes.iter().map(|n| n.addr.as_str()).collect()
    }

    /// How many nodes must agree: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// The Redis key of lock `name` on every node (the prefix plus the name).
    pub fn key_of(&self, name: &LockName) -> String {
        self.inner.keys(name).key.to_string()
    }

    /// Connects to every node (loading the shared scripts, reading its
    /// eviction policy); `Ok` if a quorum answered and no node that did has
    /// a policy [`RedlockConfig::require_noeviction`] refuses.
    async fn check_quorum(&self) -> Result<()> {
        let inner = &self.inner;
        let limit = inner.config.connect_timeout;
        let mut pending = fan_out(inner, inner.all(), limit, |inner, i| async move {
            let node = &inner.nodes[i];
            node.load_scripts(&inner.scripts).await?;
            node.eviction_policy().await
        });
        let mut tally = Tally::new(inner.nodes.len(), inner.quorum);
        let mut failures = Vec::new();
        while let Some((i, r)) = pending.next().await {
            match r {
                Ok(policy) => {
                    tally.said_yes(i);
                    lock_redis::kit::eviction::check_policy(
                        policy.as_deref(),
                        inner.config.require_noeviction,
                        &inner.nodes[i].addr,
                        "redlock",
                    )?;
                }
                Err(f) => {
                    tally.failed(i);
                    failures.push(f);
                }
            }
        }
        if tally.reached() {
            for f in &failures {
                tracing::warn!(node = %f.node, reason = %f.reason, detail = %f.detail, "redlock: node not reachable at start; it will be retried by later rounds");
            }
            Ok(())
        } else {
            Err(LockError::unavailable(format!(
                "redlock: only {} of {} nodes could be reached within {limit:?}; a quorum of {} is needed",
                tally.yes(),
                inner.nodes.len(),
                inner.quorum
            ))
            .with_nodes(failures))
        }
    }
}

/// The prefix of this client's inbox channel (`<key_prefix>distlock inbox
/// <client id>`), where the nodes announce its waiters' turns.
fn inbox_prefix(key_prefix: &str) -> String {
    format!("{key_prefix}distlock inbox ")
}

/// Sends one request to each of the nodes `which` (`inner.all()`: every
/// node), all at once, each bounded by `limit`; yields
/// `(node index, outcome)` as they come. The futures own what they use, so
/// what is left of them can finish in the background.
fn fan_out<T, F, Fut>(
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
fn finish_in_background<F>(mut rest: FuturesUnordered<F>)
where
    F: Future + Send + 'static,
    F::Output: Send,
{
    if !rest.is_empty() {
        tokio::spawn(async move { while rest.next().await.is_some() {} });
    }
}

/// The next outcome of a fan-out, if one comes before `deadline`.
async fn next_by<F: Future>(
    pending: &mut FuturesUnordered<F>,
    deadline: Instant,
) -> Option<F::Output> {
    tokio::time::timeout_at(deadline, pending.next())
        .await
        .ok()
        .flatten()
}

/// The nodes not heard from in `tally`, as timed out.
fn silent(inner: &Inner, tally: &Tally) -> Vec<NodeFailure> {
    tally
        .unheard()
        .map(|i| node::timed_out(&inner.nodes[i], inner.config.node_timeout))
        .collect()
}

/// How a round asks each node for the key.
#[derive(Clone)]
enum Ask {
    /// A plain `SET NX` ([`Node::set_nx`]): the first round of a call that
    /// saw no contention on the name lately (no other waiter of this client
    /// on it). A key reserved for a waiter in line is not free to it, and a
    /// free key with waiters in line (its holder expired) is given back to
    /// the first of them at once.
    Plain,
    /// The line's script ([`Node::acquire`]): as a waiter in its place, or
    /// (`None`) as a single try that respects the line.
    InLine(Option<Arc<Place>>),
}

/// What one round of `SET NX` on all nodes came to.
enum Attempt {
    /// A quorum said yes within the validity.
    Acquired(Lease),
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

/// One waiting acquire: its request, the name's keys, its place in the
/// nodes' line, the order of its requests on each node, and its deadline.
#[derive(Clone, Copy)]
struct Wait<'a> {
    req: &'a LeaseRequest,
    keys: &'a Arc<NameKeys>,
    place: &'a Arc<Place>,
    order: &'a Arc<NodeOrder>,
    deadline: Instant,
}

/// What a waiting acquire keeps from one round to the next.
struct WaitState {
    /// A round lost to a holder or in a split vote: the lease says contended.
    contended: bool,
    /// Rounds whose quorum came too late, and rounds without a quorum of answers.
    slow_rounds: u32,
    silent_rounds: u32,
    /// Rounds so far.
    rounds: u32,
    /// The subscription to the name's releases, once there is one.
    sub: Option<Subscription>,
    /// The holder whose release was still reaching nodes when we tried.
    late_release_of: Option<String>,
}

/// What a waiting acquire does after a round (see [`Inner::after_round`]).
enum Next {
    /// It is over: the lease, none (the deadline came), or the error.
    Done(Result<Option<Lease>>),
    /// Another round at once.
    Again,
    /// Another round after `delay`, or sooner when a release wakes the
    /// waiter (if it `listen`s); `lost_to`: the round lost to a holder.
    Sleep {
        delay: Duration,
        listen: bool,
        lost_to: Option<LostTo>,
    },
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

impl Inner {
    fn keys(&self, name: &LockName) -> Arc<NameKeys> {
        NameKeys::of(format!("{}{}", self.config.key_prefix, name.as_str()).into())
    }

    /// Every node's index, for [`fan_out`].
    fn all(&self) -> std::ops::Range<usize> {
        0..self.nodes.len()
    }

    /// How long a request that must reach its node (a release, an
    /// extension) may keep trying in the background after the caller has
    /// stopped waiting for it.
    fn background_bound(&self) -> Duration {
        self.config.connect_timeout.max(self.config.node_timeout)
    }

    fn retry_delay(&self) -> Duration {
        let jitter = self.config.retry_jitter;
        self.config.retry_delay + rand::rng().random_range(Duration::ZERO..=jitter)
    }

    /// One Redlock round: `SET key token NX PX ttl` on every node in
    /// parallel, in line ([`lock_redis::kit::scripts::ACQUIRE_IN_LINE`]: a
    /// waiter passes its `place`, and a node with a line gives its free key
    /// only to the first in it). Held if a quorum said yes before the
    /// validity (`start + ttl - drift`) ran out; otherwise every node that did
    /// not answer "taken" gets a compare-and-delete, including those that
    /// timed out (their `SET` may have landed; the delete follows it on the
    /// same connection). Dropping the future mid-round releases in the
    /// background.
    async fn attempt(
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
            let lease = Lease::new(Box::new(handle), valid_until).with_key(keys.key.clone());
            return (Attempt::Acquired(lease), Deletes::default());
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

    /// Starts `delete` (a compare-and-delete of a round's token) on the
    /// nodes `which`, each a task of its own that is running when this
    /// returns. Each is bounded by [`Inner::background_bound`]; wait on the
    /// returned [`Released`] as long as the caller may. Outcomes are only
    /// logged: a key that could not be deleted expires with its TTL. With
    /// `order` (a waiting call's), each request goes to its node after the
    /// call's earlier clean-ups there, and the call's later requests to the
    /// node go after it.
    fn start_release(
        self: &Arc<Self>,
        which: &[usize],
        delete: &Delete,
        order: Option<&Arc<NodeOrder>>,
    ) -> Released {
        let unconfirmed = Arc::new(AtomicUsize::new(which.len()));
        Released {
            tasks: which
                .iter()
                .map(|&i| {
                    let (earlier, done) = order.map(|o| o.enter(i)).unzip();
                    let earlier = async move {
                        if let Some(earlier) = earlier {
                            earlier.await;
                        }
                    };
                    self.spawn_release_on(i, delete.clone(), earlier, done, unconfirmed.clone())
                })
                .collect(),
            unconfirmed,
        }
    }

    /// The nodes `late` that a round was decided without: their requests
    /// (in `pending`) are still on their way. Each node's reply decides, in
    /// the background: a refused `SET` needs nothing (the usual case: the
    /// round lost to a holder everywhere); one that won or failed gets
    /// `delete`, as [`start_release`](Self::start_release) sends it, after
    /// it on the node's connection. The nodes that refused it are added to
    /// `taken_late.0` (bit `i`: node `i`), with the turn sequence each read
    /// in `taken_late.1`. With `order`, the call's later requests to those
    /// nodes go after this.
    fn settle_late<F>(
        self: &Arc<Self>,
        mut pending: FuturesUnordered<F>,
        late: &[usize],
        delete: &Delete,
        order: Option<&Arc<NodeOrder>>,
        taken_late: (Arc<AtomicU64>, Arc<[AtomicU64]>),
    ) -> Released
    where
        F: Future<Output = (usize, std::result::Result<SetReply, NodeFailure>)> + Send + 'static,
    {
        let unconfirmed = Arc::new(AtomicUsize::new(late.len()));
        // The requests were sent after the call's earlier clean-ups there:
        // only the later requests need ordering.
        let mut done: Vec<Option<SetOnDrop>> = (0..self.nodes.len()).map(|_| None).collect();
        if let Some(order) = order {
            for &i in late {
                done[i] = Some(order.enter(i).1);
            }
        }
        let (inner, delete, confirmed) = (self.clone(), delete.clone(), unconfirmed.clone());
        let task = tokio::spawn(async move {
            let deletes = FuturesUnordered::new();
            while let Some((i, r)) = pending.next().await {
                let done = done.get_mut(i).and_then(Option::take);
                if let Ok(SetReply::Taken { seen, .. }) = &r {
                    if let Some(slot) = taken_late.1.get(i) {
                        slot.store(seen.unwrap_or(0), Ordering::Relaxed);
                    }
                }
                if matches!(r, Ok(SetReply::Taken { .. } | SetReply::TakenUnread)) {
                    taken_late.0.fetch_or(node_bit(i), Ordering::Relaxed);
                    confirmed.fetch_sub(1, Ordering::Relaxed);
                    continue;
                }
                let earlier = std::future::ready(());
                deletes.push(inner.spawn_release_on(
                    i,
                    delete.clone(),
                    earlier,
                    done,
                    confirmed.clone(),
                ));
            }
            deletes.collect::<Vec<_>>().await;
        });
        Released {
            tasks: std::iter::once(task).collect(),
            unconfirmed,
        }
    }

    /// Spawns `delete` on node `i`, after `earlier` (the call's earlier
    /// clean-up there), given up [`Inner::background_bound`] after it
    /// starts; `done` marks it finished for the call's later requests to
    /// the node, and `unconfirmed` counts it off once the node answered.
    fn spawn_release_on(
        self: &Arc<Self>,
        i: usize,
        delete: Delete,
        earlier: impl Future<Output = ()> + Send + 'static,
        done: Option<SetOnDrop>,
        unconfirmed: Arc<AtomicUsize>,
    ) -> tokio::task::JoinHandle<()> {
        let inner = self.clone();
        tokio::spawn(async move {
            let _done = done;
            let by = add_saturating(Instant::now(), inner.background_bound());
            let _ = tokio::time::timeout_at(by, earlier).await;
            let node = &inner.nodes[i];
            let Delete {
                keys,
                token,
                announce,
                rejoin,
            } = &delete;
            let release = node.release(&inner.scripts, keys, token, *announce, rejoin.as_deref());
            match tokio::time::timeout_at(by, release).await {
                Ok(Ok(_)) => {
                    unconfirmed.fetch_sub(1, Ordering::Relaxed);
                }
                Ok(Err(e)) => {
                    tracing::debug!(node = %node.addr, error = %e, "redlock: clean-up release failed; the key expires with its TTL")
                }
                Err(_) => {
                    tracing::debug!(node = %node.addr, "redlock: clean-up release timed out; it runs when the node answers, else the key expires")
                }
            }
        })
    }

    /// Takes `place` out of the line on the nodes `which`, in parallel,
    /// each request bounded by [`Inner::background_bound`] (with `order`,
    /// after the call's clean-ups on that node). A place that cannot be
    /// removed lapses by itself. `holding`: we leave because the lock is
    /// ours (a turn we pass on there wakes nobody).
    async fn leave_line(
        self: Arc<Self>,
        which: Vec<usize>,
        keys: Arc<NameKeys>,
        place: Arc<Place>,
        holding: bool,
        order: Option<Arc<NodeOrder>>,
    ) {
        let limit = self.background_bound();
        let pending: FuturesUnordered<_> = which
            .into_iter()
            .map(|i| {
                let node = &self.nodes[i];
                let earlier = order.as_ref().map(|o| o.after(i));
                let leave = node.leave_line(&self.scripts, &keys, &place.id, holding);
                let leave = async move {
                    if let Some(earlier) = earlier {
                        earlier.await;
                    }
                    leave.await
                };
                async move {
                    match tokio::time::timeout(limit, leave).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => tracing::debug!(node = %node.addr, error = %e, "redlock: could not leave the line; the place lapses by itself"),
                        Err(_) => tracing::debug!(node = %node.addr, "redlock: leaving the line timed out; the place lapses by itself"),
                    }
                }
            })
            .collect();
        pending.collect::<()>().await;
    }

    /// A subscription to `keys`' release channel that a release making
    /// `place` the first in line wakes alone.
    fn subscribe_for(&self, keys: &NameKeys, place: &Place) -> Subscription {
        let mut s = self.notifier.subscribe(&keys.channel);
        s.expect_grant(&place.id);
        s
    }

    /// The waiting acquire: rounds until the lock is ours or `deadline`,
    /// with one place in the nodes' line for the whole wait (so a free lock
    /// is the turn of the longest waiter, and a client that just released
    /// it queues behind the others), woken when a release makes it the first
    /// in line (see [`lock_redis::kit::notify`]; the lock is ours with no round
    /// once a quorum of nodes did, see [`Inner::reserved_lease`]),
    /// re-checking at the holder's
    /// remaining TTL (at most every `max_recheck`), retrying split votes
    /// after a random delay. A round starts only before the deadline, so the
    /// call returns within its wait plus one node timeout. At the deadline
    /// it removes the last round's keys and leaves the line before it
    /// returns, within that bound (the caller may exit at once); what is not
    /// done by then, the clean-up after an error (returned at once), and
    /// everything if this future is dropped, go on in the background.
    async fn lock(
        self: &Arc<Self>,
        req: &LeaseRequest,
        deadline: Instant,
    ) -> Result<Option<Lease>> {
        let keys = self.keys(&req.name);
        // A place outlasts the deadline by the round then in flight and
        // the leaving of the line after it.
        let slack = self.config.node_timeout + self.background_bound();
        let place = Arc::new(Place::new(
            &self.notifier.wait_id(),
            req.ttl,
            deadline,
            self.config.max_recheck,
            slack,
        ));
        let order = NodeOrder::new(self.nodes.len());
        let leave = CleanupOnDrop::new(self.clone().leave_line(
            (0..self.nodes.len()).collect(),
            keys.clone(),
            place.clone(),
            false,
            Some(order.clone()),
        ));
        let mut deletes = Deletes::default();
        let wait = Wait {
            req,
            keys: &keys,
            place: &place,
            order: &order,
            deadline,
        };
        let got = self.rounds(&wait, &mut deletes).await;
        // Granted, the round left the lines where it did not win. At the
        // deadline, our keys go first: their deletes put our place back in
        // line.
        let by = add_saturating(deadline, self.config.node_timeout);
        if matches!(got, Ok(None)) {
            deletes.wait_all(by).await;
        }
        leave.settle(&got, by).await;
        got
    }

    /// The rounds and waits of [`lock`](Self::lock) with the place of
    /// `wait` in line, until the lock is ours or the deadline; the deletes of
    /// rounds that did not win still going on are left in `deletes`.
    async fn rounds(
        self: &Arc<Self>,
        wait: &Wait<'_>,
        deletes: &mut Deletes,
    ) -> Result<Option<Lease>> {
        let mut state = WaitState {
            contended: false,
            slow_rounds: 0,
            silent_rounds: 0,
            rounds: 0,
            // Subscribed already if other local waiters are (or were
            // lately): then a release after our first round reaches us.
            // Else the first round goes out before the subscription (most
            // find the lock free).
            sub: self.notifier.subscribe_if_live(&wait.keys.channel),
            late_release_of: None,
        };
        if let Some(s) = state.sub.as_mut() {
            s.expect_grant(&wait.place.id);
        }
        loop {
            let outcome = self.round(wait, &mut state, deletes).await;
            let (delay, listen, lost_to) = match self.after_round(wait, &mut state, outcome).await {
                Next::Done(got) => return got,
                Next::Again => continue,
                Next::Sleep {
                    delay,
                    listen,
                    lost_to,
                } => (delay, listen, lost_to),
            };
            let now = Instant::now();
            if now >= wait.deadline {
                return Ok(None);
            }
            let wake = add_saturating(now, delay).min(wait.deadline);
            match state.sub.as_mut() {
                Some(s) if listen => {
                    if let Some(lease) = self.listen(wait, s, lost_to.as_ref(), deletes, wake).await
                    {
                        return Ok(Some(lease.with_contended(true)));
                    }
                }
                _ => tokio::time::sleep_until(wake).await,
            }
        }
    }

    /// One round of a waiting acquire, once the last round's keys are gone.
    async fn round(
        self: &Arc<Self>,
        wait: &Wait<'_>,
        state: &mut WaitState,
        deletes: &mut Deletes,
    ) -> Attempt {
        if let Some(released) = deletes.won.take() {
            // Our keys of the last round must be gone before the next
            // round, or they would count against us: wait up to one
            // node timeout (a node's next request waits for its delete
            // in any case, see `NodeOrder`).
            let by = add_saturating(Instant::now(), self.config.node_timeout);
            released.wait(by.min(wait.deadline)).await;
        }
        if let Some(sub) = state.sub.as_mut() {
            sub.before_attempt();
        }
        // A first round with no sign of contention is a plain `SET NX`;
        // from the second on, or with other waiters of ours on the
        // name, the round takes (or keeps) our place in line.
        let ask = if state.rounds == 0 && state.sub.is_none() {
            Ask::Plain
        } else {
            Ask::InLine(Some(wait.place.clone()))
        };
        let (outcome, round) = self
            .attempt(wait.keys, wait.req.ttl, ask, Some(wait.order))
            .await;
        deletes.add(round);
        if let Some(sub) = state.sub.as_mut() {
            sub.after_attempt();
        }
        state.rounds = state.rounds.saturating_add(1);
        outcome
    }

    /// What a waiting acquire does after a round that came to `outcome`:
    /// return, try again at once, or sleep until a release, the holder's
    /// remaining TTL (at most `max_recheck`) or a random retry delay.
    async fn after_round(
        self: &Arc<Self>,
        wait: &Wait<'_>,
        state: &mut WaitState,
        outcome: Attempt,
    ) -> Next {
        let (req, deadline) = (wait.req, wait.deadline);
        // The holder this round lost to, where, and when it was sent.
        let mut lost_to: Option<LostTo> = None;
        let mut listen = false;
        let delay = match outcome {
            Attempt::Acquired(lease) => {
                return Next::Done(Ok(Some(lease.with_contended(state.contended))));
            }
            Attempt::NoQuorum { err, transient } => {
                // A majority that timed out once may be a hiccup: one
                // more round if time is left; nodes that refuse are
                // down: fail at once.
                state.silent_rounds += 1;
                if !transient || state.silent_rounds > 1 || Instant::now() >= deadline {
                    return Next::Done(Err(err));
                }
                self.retry_delay()
            }
            Attempt::TooSlow(err) => {
                state.slow_rounds += 1;
                if state.slow_rounds > self.config.retry_count || Instant::now() >= deadline {
                    return Next::Done(Err(err));
                }
                self.retry_delay()
            }
            Attempt::Split {
                holders,
                lost_to: round,
            } => {
                state.contended = true;
                lost_to = Some(round);
                // The line decides who goes next: the racers' clean-up
                // announces the first in line, which wakes it alone; the
                // random delay only bounds the wait. A split against
                // a release still reaching some nodes ends with its
                // next copy.
                match state.sub.as_mut() {
                    Some(s) => {
                        if !holders.is_empty() && holders.iter().all(|h| s.was_released(h)) {
                            s.follow_copies();
                        }
                        listen = s.is_confirmed();
                    }
                    None => state.sub = Some(self.subscribe_for(wait.keys, wait.place)),
                }
                self.retry_delay()
            }
            Attempt::Held {
                min_pttl,
                holder,
                lost_to: round,
            } => {
                state.contended = true;
                lost_to = Some(round);
                let now = Instant::now();
                if now >= deadline {
                    return Next::Done(Ok(None));
                }
                let Some(s) = state.sub.as_mut() else {
                    // Subscribe, wait for a node to confirm, then try
                    // again at once: a release between the round and the
                    // subscription published to nobody.
                    let mut s = self.subscribe_for(wait.keys, wait.place);
                    let confirm_by = deadline.min(add_saturating(now, self.config.node_timeout));
                    s.confirmed_by(confirm_by).await;
                    state.sub = Some(s);
                    return Next::Again;
                };
                let until_free =
                    self.until_free(req, s, min_pttl, holder, &mut state.late_release_of);
                listen = true;
                if s.is_confirmed() {
                    until_free
                } else {
                    // No node confirmed our subscription: re-check with backoff.
                    req.retry.delay(state.rounds).min(until_free)
                }
            }
        };
        Next::Sleep {
            delay,
            listen,
            lost_to,
        }
    }

    /// How long a waiter whose round was refused by a holder sleeps at
    /// most: until the holder's shortest remaining TTL (`min_pttl`, else
    /// the request's TTL) plus a jitter, at most `max_recheck`. If the
    /// release of that `holder` was heard from some nodes already, the
    /// waiter follows the copies of it on `s`, and sleeps no longer than
    /// the releaser's bound the first time (`late_release_of`).
    fn until_free(
        &self,
        req: &LeaseRequest,
        s: &mut Subscription,
        min_pttl: Option<Duration>,
        holder: Option<String>,
        late_release_of: &mut Option<String>,
    ) -> Duration {
        let jitter = rand::rng().random_range(
            Duration::from_millis(1)..=self.retry_delay().max(Duration::from_millis(1)),
        );
        let mut until_free = (min_pttl.unwrap_or(req.ttl) + jitter).min(self.config.max_recheck);
        if let Some(holder) = holder.filter(|h| s.was_released(h)) {
            // We heard the holder's release from some nodes and
            // tried before it reached the others. Their deletes
            // are on the way, each announced: wake on the next
            // one. All of them are done within the releaser's
            // bound, which covers the nodes that do not reach us.
            s.follow_copies();
            if late_release_of.as_deref() != Some(holder.as_str()) {
                until_free = until_free.min(self.background_bound());
                *late_release_of = Some(holder);
            }
        }
        until_free
    }

    /// Sleeps on `s` until a release wakes it, a node (re)confirms the
    /// subscription, or `wake`. A release that made it our turn in line is
    /// followed until it freed a quorum ([`turn_reached`]); if a quorum
    /// reserved the key for us after the round `lost_to`, that is the lock,
    /// with no round ([`Inner::reserved_lease`]), and it is returned.
    /// Otherwise (`None`) a round takes it.
    async fn listen(
        self: &Arc<Self>,
        wait: &Wait<'_>,
        s: &mut Subscription,
        lost_to: Option<&LostTo>,
        deletes: &Deletes,
        wake: Instant,
    ) -> Option<Lease> {
        loop {
            let why = s.wait_until(wake).await;
            tracing::trace!(key = %wait.keys.key, ?why, "redlock: waiter woke");
            if why != Wake::Notified {
                return None;
            }
            // Our turn: go once the release freed a quorum.
            let by = add_saturating(Instant::now(), TURN_GRACE).min(wait.deadline);
            let among = lost_to.map_or(0, LostTo::refused_by);
            match turn_reached(s, self.quorum, among, by).await {
                Some(turn) => {
                    let turns = lost_to.map_or(0, |l| l.reserved_by(&turn));
                    // A quorum reserved the key for us: that is the
                    // lock, with no round. Otherwise a round takes it.
                    if turns >= self.quorum {
                        if let Some(lease) = lost_to.and_then(|l| {
                            self.reserved_lease(wait.req, wait.keys, wait.place, l, deletes)
                        }) {
                            s.after_attempt();
                            return Some(lease);
                        }
                    }
                    return None;
                }
                // A quorum made it another waiter's turn (our line on
                // some node had lost it already): it holds, we wait on.
                None => {
                    tracing::trace!(key = %wait.keys.key, "redlock: the turn of another waiter on a quorum");
                }
            }
        }
    }
}

impl Inner {
    /// The lock held by the reservations that a quorum of nodes announced
    /// for `place` ([`lock_redis::kit::scripts::ACQUIRE_IN_LINE`]), with no
    /// round: the owner token is the reservation, `line:<wait id>`, and the
    /// place stays in line until the release takes it out. Each node made
    /// its reservation after the latest round reached it (its announcement
    /// carried a turn sequence above the one that round's refusal read
    /// there: `lost_to`, see [`LostTo::reserved_by`]), and before [`Place::ttl_reserved_before`]
    /// (we are still waiting), so it keeps it for the requested TTL at
    /// least: the lease is valid as long as that of a round sent when that
    /// round was.
    ///
    /// `None`, and a round takes the lock, when a request of an earlier
    /// round may still run on a node, when a node may have reserved the key
    /// for less than the TTL (our place there nearly lapsed: the deadline
    /// is near), or when less than half the TTL is left of that validity
    /// (a round gives the whole of it).
    fn reserved_lease(
        self: &Arc<Self>,
        req: &LeaseRequest,
        keys: &NameKeys,
        place: &Place,
        lost_to: &LostTo,
        deletes: &Deletes,
    ) -> Option<Lease> {
        if !deletes.all_answered() {
            return None;
        }
        let now = Instant::now();
        if now >= place.ttl_reserved_before(lost_to.start) {
            return None;
        }
        let valid_until = validity(lost_to.start, req.ttl);
        if valid_until < add_saturating(now, req.ttl / 2) {
            return None;
        }
        let handle = RedlockLease {
            inner: self.clone(),
            key: keys.key.clone(),
            token: format!("{RESERVED_FOR}{}", place.id).into(),
            extensions: AtomicU32::new(0),
            settled: None,
            late: Box::default(),
        };
        Some(Lease::new(Box::new(handle), valid_until).with_key(keys.key.clone()))
    }
}

/// A waiter's round that lost to a holder: when it was sent, and the nodes
/// that refused it (bit `i`: node `i`).
struct LostTo {
    /// Before the round was decided.
    taken_on: u64,
    /// After (the late replies, see [`Inner::settle_late`]).
    taken_late: Arc<AtomicU64>,
    /// Per node, the turn sequence its refusal read (0: none read, as by a
    /// plain `SET NX`; see [`lock_redis::kit::scripts::ACQUIRE_IN_LINE`]).
    seen: Arc<[AtomicU64]>,
    start: Instant,
}

impl LostTo {
    /// The nodes that refused the round so far.
    fn refused_by(&self) -> u64 {
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
    fn reserved_by(&self, turn: &TurnHeard) -> usize {
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

/// Sets its flag when dropped: when the task that owns it finishes, or is
/// cancelled with its runtime (a waiter must not wait for ever then).
struct SetOnDrop(Arc<SetOnce<()>>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        let _ = self.0.set(());
    }
}

/// A compare-and-delete of one token, as a clean-up or a release in the
/// background sends it to each node ([`Inner::start_release`]).
#[derive(Clone)]
struct Delete {
    keys: Arc<NameKeys>,
    token: Arc<str>,
    /// Announced to the waiters (see [`lock_redis::kit::scripts::RELEASE`]).
    announce: bool,
    /// A waiter's place that goes back into the lines where the token was.
    rejoin: Option<Arc<Place>>,
}

impl Delete {
    /// The release of `token`, announced, putting no place back.
    fn of(keys: Arc<NameKeys>, token: Arc<str>) -> Self {
        Self {
            keys,
            token,
            announce: true,
            rejoin: None,
        }
    }
}

/// A background delete of our key on some nodes, after a round that did
/// not win: one task per node.
struct Released {
    tasks: FuturesUnordered<tokio::task::JoinHandle<()>>,
    /// How many of the deletes have not been answered by their node (yet).
    unconfirmed: Arc<AtomicUsize>,
}

/// Our deletes still going on after rounds that did not win.
#[derive(Default)]
struct Deletes {
    /// On the nodes the last round won: the next round waits for them.
    won: Option<Released>,
    /// On nodes that had not answered when a round was decided: nobody
    /// waits for them but a wait that gives up, which leaves the line only
    /// after them (a delete puts the waiter's place back where its key
    /// stood).
    unanswered: Vec<Released>,
    /// One of those ended unanswered (timed out or failed): the round's
    /// request to that node may still run there, later.
    doubtful: bool,
}

impl Deletes {
    /// Takes in the deletes of the latest round.
    fn add(&mut self, round: Deletes) {
        self.won = round.won;
        let doubtful = &mut self.doubtful;
        self.unanswered.retain(|r| {
            let running = r.tasks.iter().any(|task| !task.is_finished());
            *doubtful |= !running && !r.confirmed();
            running
        });
        self.unanswered.extend(round.unanswered);
    }

    /// Whether every request our rounds sent to a node that had not
    /// answered when its round was decided is known to have run: the node
    /// answered the delete that followed it on the same connection. Only
    /// then can no late request of ours still change a key.
    fn all_answered(&self) -> bool {
        !self.doubtful && self.unanswered.iter().all(Released::confirmed)
    }

    /// Waits for every one of them, but not past `deadline`.
    async fn wait_all(&mut self, deadline: Instant) {
        if let Some(won) = self.won.take() {
            won.wait(deadline).await;
        }
        for r in self.unanswered.drain(..) {
            r.wait(deadline).await;
        }
    }
}

impl Released {
    /// Whether every node answered its delete.
    fn confirmed(&self) -> bool {
        self.unconfirmed.load(Ordering::Relaxed) == 0
    }

    /// Waits for it, but not past `deadline`.
    async fn wait(mut self, deadline: Instant) {
        self.wait_by(deadline).await;
    }

    /// Waits for it, but not past `deadline`: whether every node's delete
    /// is done. What is not goes on in the background.
    async fn wait_by(&mut self, deadline: Instant) -> bool {
        while !self.tasks.is_empty() {
            if next_by(&mut self.tasks, deadline).await.is_none() {
                return false;
            }
        }
        true
    }
}

/// The order of one waiting call's requests to each node. Requests to one
/// node reach it in the order they are sent, but a clean-up is a task of
/// its own, which may start only after the call's next round: its delete,
/// which puts the call's place back into the node's line, could then land
/// after the call left that line holding the lock, and the node would keep
/// the lock reserved for a waiter that is gone (until its place lapses).
/// So each of the call's requests to a node waits for its clean-ups there
/// that are still going on (each bounded by the background bound).
struct NodeOrder {
    /// Per node: the call's latest clean-up there, set once it is done.
    last: std::sync::Mutex<Vec<Option<Arc<SetOnce<()>>>>>,
}

impl NodeOrder {
    fn new(nodes: usize) -> Arc<Self> {
        Arc::new(Self {
            last: std::sync::Mutex::new(vec![None; nodes]),
        })
    }

    /// Done once the call's clean-ups on node `i` started so far are.
    fn after(&self, i: usize) -> impl Future<Output = ()> + Send + 'static {
        let last = self.lock()[i].clone();
        async move {
            if let Some(last) = last {
                last.wait().await;
            }
        }
    }

    /// A clean-up on node `i` starts: what it waits for first, and what
    /// marks it done when dropped (later requests to the node wait for it).
    fn enter(&self, i: usize) -> (impl Future<Output = ()> + Send + 'static, SetOnDrop) {
        let mine = Arc::new(SetOnce::new());
        let last = self.lock()[i].replace(mine.clone());
        let earlier = async move {
            if let Some(last) = last {
                last.wait().await;
            }
        };
        (earlier, SetOnDrop(mine))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<Arc<SetOnce<()>>>>> {
        self.last.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Compare-and-delete of `token` on every node; the background clean-up of
/// a round whose future was dropped.
async fn release_everywhere(inner: Arc<Inner>, keys: Arc<NameKeys>, token: Arc<str>) {
    let all: Vec<usize> = (0..inner.nodes.len()).collect();
    let by = add_saturating(Instant::now(), inner.background_bound());
    inner
        .start_release(&all, &Delete::of(keys, token), None)
        .wait(by)
        .await;
}

#[async_trait]
impl LockBackend for RedlockLock {
    fn backend_capabilities(&self) -> Capabilities {
        Capabilities::new("redlock")
            .with_fencing(Fencing::None)
            .with_fifo(true)
            .with_loss_events(false)
            .with_notified_wait(true)
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
        let keys = inner.keys(&req.name);
        let (outcome, deletes) = inner.attempt(&keys, req.ttl, Ask::InLine(None), None).await;
        if let Some(released) = deletes.won {
            released
                .wait(add_saturating(Instant::now(), inner.config.node_timeout))
                .await;
        }
        match outcome {
            Attempt::Acquired(lease) => Ok(Some(lease)),
            Attempt::Held { .. } | Attempt::Split { .. } => Ok(None),
            Attempt::NoQuorum { err, .. } | Attempt::TooSlow(err) => Err(err),
        }
    }

    async fn lock(&self, req: &LeaseRequest, deadline: Instant) -> Result<Option<Lease>> {
        self.inner.lock(req, deadline).await
    }

    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        let inner = &self.inner;
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

    /// On every node in parallel, the shared `RELEASE` script with the
    /// owner not compared: whatever the key holds is removed and the first
    /// in line gets its turn (the key reserved for it, it alone told), as
    /// on a holder's release. Decided by quorum, as a release is, within the
    /// node timeout: the holder was removed once a quorum of nodes removed
    /// a key; nobody held it once so many nodes held nothing that no quorum
    /// can have; otherwise an `Unavailable` error. Slower nodes still get
    /// the request in the background.
    async fn force_release(&self, name: &LockName) -> Result<ForceReleased> {
        let inner = &self.inner;
        let n = inner.nodes.len();
        let keys = inner.keys(name);
        let decide_by = add_saturating(Instant::now(), inner.config.node_timeout);
        let mut pending = fan_out(inner, inner.all(), inner.background_bound(), {
            let keys = keys.clone();
            move |inner, i| {
                let keys = keys.clone();
                async move { inner.nodes[i].force_release(&inner.scripts, &keys).await }
            }
        });
        let mut tally = Tally::new(n, inner.quorum);
        let mut failures = Vec::new();
        while let Some((i, r)) = next_by(&mut pending, decide_by).await {
            match r {
                Ok(ReleaseReply::Deleted) => tally.said_yes(i),
                Ok(ReleaseReply::NotOurs) => tally.said_no(i),
                Err(f) => {
                    tally.failed(i);
                    failures.push(f);
                }
            }
            if tally.reached() || tally.refused() {
                break;
            }
        }
        finish_in_background(pending);
        if tally.reached() {
            return Ok(ForceReleased::none().with_mutex(1));
        }
        if tally.refused() {
            return Ok(ForceReleased::none());
        }
        failures.extend(silent(inner, &tally));
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

    /// The names held on a quorum of nodes (the same owner token on at
    /// least a quorum), by `SCAN` on every node in parallel, each bounded by
    /// the larger of the connect and node timeouts.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<(LockName, LockStatus)>> {
        let inner = &self.inner;
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

/// One granted Redlock lease: the key and token on every node.
struct RedlockLease {
    inner: Arc<Inner>,
    key: Arc<str>,
    token: Arc<str>,
    extensions: AtomicU32,
    /// The acquiring round's requests to its slower nodes, if any were
    /// still on their way when the quorum was reached.
    /// (Set when they are: a guard may live long, so this costs a flag
    /// and a wait list, not the finished task.)
    settled: Option<Arc<SetOnce<()>>>,
    /// The nodes those requests went to.
    late: Box<[usize]>,
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
                    async move { inner.nodes[i].renew(&key, &token, ttl).await }
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
        failures.extend(silent(inner, &tally));
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
    /// have held ours) an `Unavailable` error. The requests to slower nodes
    /// still complete in the background.
    async fn release(&self) -> Result<bool> {
        let inner = &self.inner;
        let n = inner.nodes.len();
        // Decide within the node timeout; slower nodes still get the delete
        // in the background.
        let decide_by = add_saturating(Instant::now(), inner.config.node_timeout);
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
        let mut pending = {
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
        while let Some((i, r)) = next_by(&mut pending, decide_by).await {
            match r {
                Ok(ReleaseReply::Deleted) => tally.said_yes(i),
                Ok(ReleaseReply::NotOurs) => tally.said_no(i),
                Err(f) => {
                    tally.failed(i);
                    failures.push(f);
                }
            }
            if tally.reached() {
                finish_in_background(pending);
                return Ok(true);
            }
            if tally.refused() {
                finish_in_background(pending);
                return Ok(false);
            }
        }
        finish_in_background(pending);
        failures.extend(silent(inner, &tally));
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
