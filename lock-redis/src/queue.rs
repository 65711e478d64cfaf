//! The waiting acquire in arrival order, for the two things a name's
//! queues hand over: its mutex, and a term of its election (the same
//! machinery on the election's keys, see [`crate::kit::layout::LeaderKeys`]).

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{add_saturating, validity, CleanupOnDrop, Lease, LeaseRequest};
use lock_core::{FencingToken, LockErrorKind, Result};
use tokio::time::Instant;

use crate::client::{AcquireReply, Client};
use crate::election::{self, LeaderLease};
use crate::kit::call::ttl_millis;
use crate::kit::layout::{owner_token, Keys, LeaderKeys};
use crate::kit::notify::{Notifier, Wake};
use crate::kit::place::PlaceLife;
use crate::lease::RedisLease;
use crate::primitive::Primitive;

/// What a queued waiter waits for.
#[derive(Clone, Debug)]
pub(crate) enum Line {
    /// The mutex of [`Keys`], with the holder's description (if any).
    Mutex {
        keys: Arc<Keys>,
        described: Option<Arc<str>>,
    },
    /// A term of the election of [`LeaderKeys`], publishing `value`, with
    /// a lock-delay of `delay_ms`.
    Leader {
        keys: Arc<LeaderKeys>,
        value: Arc<str>,
        delay_ms: u64,
    },
}

impl Line {
    /// The line of `req` on `keys` (the mutex) or on `leader` (an election).
    pub(crate) fn of(req: &LeaseRequest, keys: Arc<Keys>, leader: Option<LeaderKeys>) -> Self {
        match leader {
            Some(leader) => Self::Leader {
                keys: Arc::new(leader),
                value: req.value.as_deref().unwrap_or_default().into(),
                delay_ms: u64::try_from(req.lock_delay.as_millis()).unwrap_or(u64::MAX),
            },
            None => Self::Mutex {
                keys,
                described: req.holder_json().map(Into::into),
            },
        }
    }

    /// The channel where its hand-overs are announced.
    fn channel(&self) -> &str {
        match self {
            Self::Mutex { keys, .. } => keys.released(),
            Self::Leader { keys, .. } => keys.released(),
        }
    }

    /// The key that shows the lease on the server (for logs).
    fn key(&self) -> &str {
        match self {
            Self::Mutex { keys, .. } => keys.lock(),
            Self::Leader { keys, .. } => keys.leader(),
        }
    }

    /// The waiter's member in the queue (see the acquire scripts).
    fn member(&self, token: &str, ttl_ms: u64) -> String {
        match self {
            Self::Mutex {
                described: Some(described),
                ..
            } => format!("{token} {ttl_ms} {described}"),
            Self::Mutex { .. } => format!("{token} {ttl_ms}"),
            Self::Leader {
                value, delay_ms, ..
            } => format!("{token} {ttl_ms} {{{delay_ms}}} {value}"),
        }
    }

    /// One attempt, taking (or renewing) a place lasting `lasts_ms`.
    async fn attempt(
        &self,
        client: &Client,
        token: &str,
        ttl_ms: u64,
        lasts_ms: u64,
    ) -> Result<(AcquireReply, u64)> {
        match self {
            Self::Mutex { keys, described } => {
                let described = described.as_deref().unwrap_or_default();
                client
                    .acquire(keys, token, ttl_ms, Some(lasts_ms), described)
                    .await
            }
            Self::Leader {
                keys,
                value,
                delay_ms,
            } => election::acquire(client, keys, token, ttl_ms, lasts_ms, *delay_ms, value).await,
        }
    }

    /// Leaves the queue (as `member`), passing on whatever was handed to
    /// `token` meanwhile.
    async fn leave(&self, client: &Client, token: &str, member: &str) -> Result<bool> {
        match self {
            Self::Mutex { keys, .. } => client.release(keys, token, Some(member)).await,
            Self::Leader { keys, .. } => {
                election::release(client, keys, token, Some(member), true).await
            }
        }
    }

    /// The lease of `token`, granted with `fence` by a request sent at `sent`.
    fn lease(
        &self,
        client: &Arc<Client>,
        token: String,
        fence: u64,
        sent: Instant,
        ttl: Duration,
    ) -> Lease {
        let (handle, key): (Box<dyn lock_core::backend::LeaseHandle>, &str) = match self {
            Self::Mutex { keys, .. } => (
                Box::new(RedisLease {
                    client: client.clone(),
                    primitive: Primitive::Mutex,
                    lock: keys.lock().into(),
                    token: token.into(),
                }),
                keys.lock(),
            ),
            Self::Leader { keys, .. } => (
                Box::new(LeaderLease {
                    client: client.clone(),
                    keys: keys.clone(),
                    token: token.into(),
                }),
                keys.leader(),
            ),
        };
        Lease::new(handle, validity(sent, ttl))
            .with_token(Some(FencingToken::new(fence)))
            .with_key(key.to_owned())
    }
}

/// The waiting acquire in arrival order (see
/// [`crate::kit::scripts::ACQUIRE_FENCED`] and
/// [`crate::kit::scripts::ACQUIRE_LEADER`]): one owner token for the whole
/// wait, a place in the queue from the first attempt, and a release that
/// hands the lock (or the term) to us wakes this waiter alone
/// ([`Wake::Granted`]), already holding it. Every attempt can be repeated
/// safely (one that finds the lock already ours takes it afresh), so a
/// lost reply needs no clean-up of its own; giving up (the deadline, an
/// error, or this future dropped) leaves the queue and passes on a lock
/// handed to us meanwhile: at the deadline before the call returns (within
/// its bound), after an error or when this future is dropped in the
/// background.
pub(crate) async fn wait_in_queue(
    client: &Arc<Client>,
    notifier: &Notifier,
    line: Arc<Line>,
    req: &LeaseRequest,
    deadline: Instant,
) -> Result<Option<Lease>> {
    let token = owner_token();
    let ttl_ms = ttl_millis(req.ttl);
    let leave = {
        let (client, line, token) = (client.clone(), line.clone(), token.clone());
        CleanupOnDrop::new(async move {
            let member = line.member(&token, ttl_ms);
            if let Err(err) = line.leave(&client, &token, &member).await {
                tracing::debug!(key = %line.key(), error = %err, "distlock redis: could not leave the queue; the place lapses by itself and a lock handed over meanwhile expires with its TTL");
            }
        })
    };
    let got = queue_turns(client, notifier, &line, req, token, deadline).await;
    let by = add_saturating(deadline, client.config.request_timeout);
    leave.settle(&got, by).await;
    got
}

/// The attempts and waits of [`wait_in_queue`] with owner token `token`,
/// until the lock is ours or `deadline`.
async fn queue_turns(
    client: &Arc<Client>,
    notifier: &Notifier,
    line: &Line,
    req: &LeaseRequest,
    token: String,
    deadline: Instant,
) -> Result<Option<Lease>> {
    let ttl_ms = ttl_millis(req.ttl);
    // The attempt in flight at the deadline, then the leaving.
    let slack = client.config.request_timeout.saturating_mul(2);
    let place = PlaceLife::new(req.ttl, client.config.max_recheck, deadline, slack);
    // Subscribed already if other local waiters are; else the first
    // attempt goes out before the subscription (most find the lock free).
    let mut sub = notifier.subscribe_if_live(line.channel());
    if let Some(sub) = &mut sub {
        sub.expect_grant(&token);
    }
    let mut waited = false;
    loop {
        if let Some(sub) = &mut sub {
            sub.before_attempt();
        }
        let sent = Instant::now();
        let reply = queue_attempt(client, line, &token, ttl_ms, place.lasts_ms()).await;
        if let Some(sub) = &mut sub {
            sub.after_attempt();
        }
        let reply = match reply {
            Ok(reply) => reply,
            Err(err) => {
                // Following a failover: try again on the new primary.
                client.route.ride_out(err, deadline).await?;
                continue;
            }
        };
        let (pttl, last_token) = match reply {
            (AcquireReply::Acquired(fence), _) => {
                // With sync_replicas: not ours to return until replicated;
                // on failure, leaving the line passes it on.
                client.confirm_replicated(line.key()).await?;
                let lease = line.lease(client, token, fence, sent, req.ttl);
                return Ok(Some(lease.with_contended(waited)));
            }
            (AcquireReply::Held(pttl), last_token) => (pttl, last_token),
        };
        waited = true;
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        let Some(sub) = &mut sub else {
            // Subscribe and wait for a node to confirm, then try again: a
            // hand-over before the confirmation reached nobody, and the
            // next attempt finds the lock already ours.
            let mut fresh = notifier.subscribe(line.channel());
            fresh.expect_grant(&token);
            let confirm_by = deadline.min(add_saturating(now, client.config.request_timeout));
            if !fresh.confirmed_by(confirm_by).await {
                tracing::debug!(key = %line.key(), "distlock redis: release channel not confirmed in time; re-checking at the holder's TTL until it is");
            }
            sub = Some(fresh);
            continue;
        };
        let recheck = recheck_delay(client.config.max_recheck, pttl);
        let wake = sub
            .wait_until(deadline.min(add_saturating(now, recheck)))
            .await;
        // A grant is the releaser's write, which our `WAIT` would not
        // cover: with sync_replicas the next attempt (ours) decides.
        if let (Wake::Granted(fence), None) = (wake, client.config.sync_replicas) {
            // A token above the last one the attempt saw: handed to us
            // after the attempt sent at `sent` ran, so valid from then.
            // (An older announcement arriving late is void: the lock was
            // not ours when the attempt ran.)
            if fence > last_token
                && validity(sent, req.ttl).saturating_duration_since(Instant::now()) >= req.ttl / 2
            {
                let lease = line.lease(client, token, fence, sent, req.ttl);
                return Ok(Some(lease.with_contended(true)));
            }
            // A late announcement, or one that leaves little of the TTL
            // known: the next attempt decides (and takes it afresh if ours).
        }
        tracing::trace!(key = %line.key(), ?wake, "distlock redis: waiter woke");
    }
}

/// One attempt of [`wait_in_queue`], repeated once at once if it fails
/// fast on a broken connection (safe: the attempt is idempotent for its
/// owner token).
async fn queue_attempt(
    client: &Client,
    line: &Line,
    token: &str,
    ttl_ms: u64,
    lasts_ms: u64,
) -> Result<(AcquireReply, u64)> {
    let started = Instant::now();
    match line.attempt(client, token, ttl_ms, lasts_ms).await {
        Err(err)
            if err.kind() == LockErrorKind::Unavailable
                && started.elapsed() < client.config.request_timeout =>
        {
            tracing::debug!(key = %line.key(), error = %err, "distlock redis: attempt failed on a broken connection; retrying once");
            line.attempt(client, token, ttl_ms, lasts_ms).await
        }
        other => other,
    }
}

/// How long to sleep, without a notification, before the next attempt,
/// when the holder (or a lock-delay) has `pttl` ms left; at most `cap`.
pub(crate) fn recheck_delay(cap: Duration, pttl: i64) -> Duration {
    match u64::try_from(pttl) {
        // The key expires after `pttl` ms: try right after.
        Ok(ms) => Duration::from_millis(ms.saturating_add(1)).min(cap),
        // No expiry (a foreign lock without TTL): re-check now and then.
        Err(_) => cap,
    }
}
