//! Leader elections on Redlock. A term is the Redlock mutex of the
//! election's leader key (`{L} leader`, see
//! [`LeaderKeys`](lock_redis::kit::layout::LeaderKeys)): its line, rounds
//! and reservations, so candidates lead in campaign order. Winning the key
//! on a quorum is not yet leading: the term begins once a quorum of nodes
//! wrote its info (`{L} leader info`: owner token, proclaim number, since,
//! value) and, with a lock-delay, its marker (`{L} leader delay`); a node
//! where the marker of a term that ended unresigned still runs refuses
//! (see [`scripts`]), and the winner holds the key, renewing it, until the
//! lock-delay is over. Followers read by quorum ([`read`]) and are woken
//! by the `{L} leader changed` announcements ([`observe`]). Redlock has no
//! fencing tokens, so a term has no epoch.

pub(crate) mod observe;
pub(crate) mod read;
mod scripts;
mod term;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use lock_core::backend::{add_saturating, Lease, LeaseRequest, Renewal};
use lock_core::{LockError, LockName, NodeFailure, NodeFailureReason, Result};
use lock_redis::kit::layout::LeaderKeys;
use tokio::time::Instant;

use crate::fan_out::{fan_out, finish_in_background, next_by, silent};
use crate::inner::Inner;
use crate::lease::Won;
use crate::node::NameKeys;
use crate::round::{Ask, Attempt};
use crate::tally::Tally;
use scripts::Began;
use term::RedlockTerm;

/// What came of a won leader key ([`Inner::begin`]).
enum Begin {
    /// The term runs: the leader's lease.
    Leads(Lease),
    /// The deadline came during a lock-delay (the key is given up).
    Deadline,
    /// The key was lost before the term began (given up): back in line.
    Lost,
}

/// What a quorum of nodes said to a term's beginning.
enum BeginRound {
    Begun,
    /// A lock-delay runs this much longer on too many nodes.
    Delayed(Duration),
    NotOurs,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Inner {
    /// The election keys of `name`.
    pub(crate) fn leader_keys(&self, name: &LockName) -> Arc<LeaderKeys> {
        Arc::new(LeaderKeys::new(&self.config.key_prefix, name.as_str()))
    }

    /// A campaign until `deadline`: the waiting acquire of the leader key
    /// (in line), then the term's beginning; a key lost before the term
    /// began sends the candidate back in line.
    pub(crate) async fn campaign(
        self: &Arc<Self>,
        req: &LeaseRequest,
        deadline: Instant,
    ) -> Result<Option<Lease>> {
        let keys = self.leader_keys(&req.name);
        let line = NameKeys::of(keys.leader().into());
        loop {
            let Some(won) = self.lock_on(line.clone(), req, deadline).await? else {
                return Ok(None);
            };
            match self.begin(&keys, won, req, deadline).await? {
                Begin::Leads(lease) => return Ok(Some(lease)),
                Begin::Deadline => return Ok(None),
                Begin::Lost => continue,
            }
        }
    }

    /// One try: a round that respects the line, then the term's beginning
    /// unless a lock-delay holds it back.
    pub(crate) async fn try_campaign(
        self: &Arc<Self>,
        req: &LeaseRequest,
    ) -> Result<Option<Lease>> {
        let keys = self.leader_keys(&req.name);
        let line = NameKeys::of(keys.leader().into());
        let (outcome, deletes) = self.attempt(&line, req.ttl, Ask::InLine(None), None).await;
        if let Some(released) = deletes.won {
            released
                .wait(add_saturating(Instant::now(), self.config.node_timeout))
                .await;
        }
        match outcome {
            Attempt::Acquired(won) => match self.begin(&keys, won, req, Instant::now()).await? {
                Begin::Leads(lease) => Ok(Some(lease)),
                Begin::Deadline | Begin::Lost => Ok(None),
            },
            Attempt::Held { .. } | Attempt::Split { .. } => Ok(None),
            Attempt::NoQuorum { err, .. } | Attempt::TooSlow(err) => Err(err),
        }
    }

    /// Begins the term of `won` (the leader key, held on a quorum): while
    /// a lock-delay holds it back, the key is kept (renewed) until the
    /// delay is over, unless that is past `deadline`. A key given up (the
    /// deadline, a loss, an error) ends like a resignation, in the
    /// background.
    async fn begin(
        self: &Arc<Self>,
        keys: &Arc<LeaderKeys>,
        won: Won,
        req: &LeaseRequest,
        deadline: Instant,
    ) -> Result<Begin> {
        let Won {
            handle,
            mut valid_until,
            contended,
        } = won;
        let term = RedlockTerm::new(handle, keys.clone());
        let value = req.value.as_deref().unwrap_or_default();
        loop {
            let since_ms = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, millis);
            let left = match self
                .begin_round(&term, millis(req.lock_delay), since_ms, value)
                .await
            {
                Ok(BeginRound::Begun) if Instant::now() < valid_until => {
                    let lease = Lease::new(Box::new(term), valid_until)
                        .with_key(keys.leader())
                        .with_contended(contended);
                    return Ok(Begin::Leads(lease));
                }
                Ok(BeginRound::Begun | BeginRound::NotOurs) => {
                    give_up(term);
                    return Ok(Begin::Lost);
                }
                Ok(BeginRound::Delayed(left)) => left,
                Err(err) => {
                    give_up(term);
                    return Err(err);
                }
            };
            let over = add_saturating(Instant::now(), left + Duration::from_millis(1));
            if over > deadline {
                give_up(term);
                return Ok(Begin::Deadline);
            }
            tracing::debug!(key = %keys.leader(), ?left, "redlock: a lock-delay holds the term back");
            // Hold the key until the delay is over, renewed at half its TTL.
            loop {
                let renew_at = valid_until.checked_sub(req.ttl / 2).unwrap_or(valid_until);
                tokio::time::sleep_until(over.min(renew_at)).await;
                if Instant::now() >= over {
                    break;
                }
                match lock_core::backend::LeaseHandle::renew(&term, req.ttl).await {
                    Ok(Renewal::Renewed { valid_until: v }) => valid_until = v,
                    Ok(Renewal::Gone) => {
                        give_up(term);
                        return Ok(Begin::Lost);
                    }
                    Err(err) => {
                        give_up(term);
                        return Err(err);
                    }
                }
            }
        }
    }

    /// The term's info (and marker) on every node at once, decided by
    /// quorum within the node timeout.
    async fn begin_round(
        self: &Arc<Self>,
        term: &RedlockTerm,
        delay_ms: u64,
        since_ms: u64,
        value: &str,
    ) -> Result<BeginRound> {
        let n = self.nodes.len();
        let decide_by = add_saturating(Instant::now(), self.config.node_timeout);
        let mut pending = {
            let (keys, token) = (term.keys.clone(), term.lease.token.clone());
            let value: Arc<str> = value.into();
            fan_out(
                self,
                self.all(),
                self.background_bound(),
                move |inner, i| {
                    let (keys, token, value) = (keys.clone(), token.clone(), value.clone());
                    async move {
                        inner.nodes[i]
                            .begin_term(&keys, &token, delay_ms, since_ms, &value)
                            .await
                    }
                },
            )
        };
        let mut tally = Tally::new(n, self.quorum);
        let (mut not_ours, mut delayed) = (0, None::<Duration>);
        let mut failures = Vec::new();
        while let Some((i, r)) = next_by(&mut pending, decide_by).await {
            match r {
                Ok(Began::Yes) => tally.said_yes(i),
                Ok(Began::Delayed(left)) => {
                    tally.said_no(i);
                    delayed = Some(delayed.map_or(left, |d| d.max(left)));
                }
                Ok(Began::NotOurs) => {
                    tally.said_no(i);
                    not_ours += 1;
                    failures.push(NodeFailure {
                        node: self.nodes[i].addr.clone(),
                        reason: NodeFailureReason::Taken,
                        detail: "the leader key is not ours here".into(),
                    });
                }
                Err(f) => {
                    tally.failed(i);
                    failures.push(f);
                }
            }
            if tally.reached() {
                finish_in_background(pending);
                return Ok(BeginRound::Begun);
            }
            if tally.out_of_reach() {
                break;
            }
        }
        finish_in_background(pending);
        if not_ours + self.quorum > n {
            return Ok(BeginRound::NotOurs);
        }
        if let Some(left) = delayed.filter(|_| tally.out_of_reach()) {
            return Ok(BeginRound::Delayed(left));
        }
        failures.extend(silent(self, &tally, self.config.node_timeout));
        Err(LockError::unavailable(format!(
            "redlock: the term on {} began on {} of {n} nodes; a quorum of {} is needed",
            term.keys.leader(),
            tally.yes(),
            self.quorum
        ))
        .with_nodes(failures))
    }
}

/// Gives up a leader key whose term did not begin (or began too late):
/// ended like a resignation, in the background.
fn give_up(term: RedlockTerm) {
    tokio::spawn(async move {
        if let Err(err) = lock_core::backend::LeaseHandle::release(&term).await {
            tracing::debug!(key = %term.keys.leader(), %err, "redlock: giving up a leader key failed; it expires with its TTL");
        }
    });
}
