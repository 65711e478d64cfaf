//! The waiting acquire: one place in every node's line for the whole
//! wait, a round, then a sleep until a release wakes the waiter (its turn
//! in line), the holder's remaining TTL or a random retry delay, until the
//! lock is ours or the deadline; a waiter whose turn a quorum of nodes
//! announced after its round holds the lock by their reservations, with no
//! round.

use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{add_saturating, validity, CleanupOnDrop, LeaseRequest};
use lock_core::{LockError, Result};
use lock_redis::kit::layout::RESERVED_FOR;
use lock_redis::kit::notify::{Subscription, Wake};
use rand::Rng;
use tokio::time::Instant;

use crate::cleanup::Deletes;
use crate::inner::Inner;
use crate::lease::{RedlockLease, Won};
use crate::node::{NameKeys, Place};
use crate::order::NodeOrder;
use crate::round::{Ask, Attempt, LostTo};
use crate::turn::turn_reached;

/// How long a waiter whose turn it is waits for the release that made it
/// so to be announced by a quorum of nodes before its round: the deletes
/// reach the nodes at about the same time, and a round sent after the first
/// announcement alone often finds the key still on the others.
const TURN_GRACE: Duration = Duration::from_millis(2);

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
    /// A node confirmed our subscription again (it came back, or answered
    /// late) since the last round that a quorum answered: rounds that too
    /// few nodes answer go back to waiting, for the other nodes on their
    /// way back, instead of ending the wait.
    recovering: bool,
    /// The error of the last such round, returned if the deadline comes
    /// before a quorum answers again.
    unanswered: Option<LockError>,
}

/// What a waiting acquire does after a round (see [`Inner::after_round`]).
enum Next {
    /// It is over: the lease, none (the deadline came), or the error.
    Done(Result<Option<Won>>),
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

impl Inner {
    /// The waiting acquire: rounds until the lock is ours or `deadline`,
    /// with one place in the nodes' line for the whole wait (so a free lock
    /// is the turn of the longest waiter, and a client that just released
    /// it queues behind the others), woken when a release makes it the first
    /// in line (see [`lock_redis::kit::notify`]; the lock is ours with no round
    /// once a quorum of nodes did, see [`Inner::reserved_lease`]),
    /// re-checking at the holder's
    /// remaining TTL (at most every `max_recheck`), retrying split votes
    /// after a random delay. Too few nodes answering ends the wait with
    /// their error (after one more round if they only timed out), unless a
    /// node confirmed the subscription again since the last round a quorum
    /// answered: nodes are coming back, and the waiter waits for the others
    /// (see `WaitState::recovering`). A round starts only before the deadline, so the
    /// call returns within its wait plus one node timeout. At the deadline
    /// it removes the last round's keys and leaves the line before it
    /// returns, within that bound (the caller may exit at once); what is not
    /// done by then, the clean-up after an error (returned at once), and
    /// everything if this future is dropped, go on in the background.
    pub(crate) async fn lock(
        self: &Arc<Self>,
        req: &LeaseRequest,
        deadline: Instant,
    ) -> Result<Option<Won>> {
        self.lock_on(self.keys(&req.name), req, deadline).await
    }

    /// [`lock`](Self::lock) on the lock key and line of `keys` (a name's
    /// mutex, or the term of its election).
    pub(crate) async fn lock_on(
        self: &Arc<Self>,
        keys: Arc<NameKeys>,
        req: &LeaseRequest,
        deadline: Instant,
    ) -> Result<Option<Won>> {
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
    ) -> Result<Option<Won>> {
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
            recovering: false,
            unanswered: None,
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
                return state.unanswered.take().map_or(Ok(None), Err);
            }
            let wake = add_saturating(now, delay).min(wait.deadline);
            match state.sub.as_mut() {
                Some(s) if listen => {
                    match self.listen(wait, s, lost_to.as_ref(), deletes, wake).await {
                        Ok(won) => return Ok(Some(won)),
                        Err(why) => state.recovering |= why == Wake::Subscribed,
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
        if !matches!(outcome, Attempt::NoQuorum { .. }) {
            // A quorum answered: the nodes are back.
            state.recovering = false;
            state.unanswered = None;
        }
        // The holder this round lost to, where, and when it was sent.
        let mut lost_to: Option<LostTo> = None;
        let mut listen = false;
        let delay = match outcome {
            Attempt::Acquired(mut won) => {
                won.contended = state.contended;
                return Next::Done(Ok(Some(won)));
            }
            Attempt::NoQuorum { err, .. } if state.recovering && state.sub.is_some() => {
                // Nodes are coming back (one confirmed our subscription
                // again): wait for the others, each of which wakes us as
                // it confirms too, re-checking with backoff.
                state.unanswered = Some(err);
                if Instant::now() >= deadline {
                    return Next::Done(Err(state.unanswered.take().expect("set above")));
                }
                return Next::Sleep {
                    delay: req.retry.delay(state.rounds),
                    listen: true,
                    lost_to: None,
                };
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
    /// Otherwise a round takes it: `Err` with what woke the waiter.
    async fn listen(
        self: &Arc<Self>,
        wait: &Wait<'_>,
        s: &mut Subscription,
        lost_to: Option<&LostTo>,
        deletes: &Deletes,
        wake: Instant,
    ) -> std::result::Result<Won, Wake> {
        loop {
            let why = s.wait_until(wake).await;
            tracing::trace!(key = %wait.keys.key, ?why, "redlock: waiter woke");
            if why != Wake::Notified {
                return Err(why);
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
                            return Ok(lease);
                        }
                    }
                    return Err(why);
                }
                // A quorum made it another waiter's turn (our line on
                // some node had lost it already): it holds, we wait on.
                None => {
                    tracing::trace!(key = %wait.keys.key, "redlock: the turn of another waiter on a quorum");
                }
            }
        }
    }

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
    ) -> Option<Won> {
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
        Some(Won {
            handle,
            valid_until,
            contended: true,
        })
    }

    /// A subscription to `keys`' release channel that a release making
    /// `place` the first in line wakes alone.
    fn subscribe_for(&self, keys: &NameKeys, place: &Place) -> Subscription {
        let mut s = self.notifier.subscribe(&keys.channel);
        s.expect_grant(&place.id);
        s
    }

    /// The pause before the next round after one that was too slow, had too
    /// few answers or split the vote: the configured `retry_delay` plus a
    /// random jitter of up to `retry_jitter`.
    fn retry_delay(&self) -> Duration {
        let jitter = self.config.retry_jitter;
        self.config.retry_delay + rand::rng().random_range(Duration::ZERO..=jitter)
    }
}
