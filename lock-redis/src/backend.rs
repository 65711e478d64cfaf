//! [`RedisLock`]: the [`LockBackend`] implementation.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{
    add_saturating, validity, CleanupOnDrop, LeaderStream, Lease, LeaseRequest, LockBackend,
};
use lock_core::{
    Capabilities, Fencing, FencingToken, ForceReleased, LeaderInfo, LockError, LockErrorKind,
    LockMode, LockName, LockStatus, Result,
};
use tokio::time::Instant;

use crate::client::{AcquireReply, Client, Inner};
use crate::config::RedisLockConfig;
use crate::kit::call::ttl_millis;
use crate::kit::layout::LeaderKeys;
use crate::kit::layout::{owner_token, Keys};
use crate::kit::notify::{Notifier, NotifyNode, Subscription, Timeouts};
use crate::kit::place::PlaceLife;
use crate::lease::RedisLease;
use crate::primitive::{self, Intent, Primitive};
use crate::queue::{recheck_delay, wait_in_queue, Line};

/// Longest pause between two attempts of the background compare-and-delete
/// that follows an acquire whose reply was lost.
const CLEANUP_MAX_DELAY: Duration = Duration::from_secs(1);

/// What a Sentinel-managed deployment tolerates, and what a failover can do
/// (the `fault_tolerance` of a `redis+sentinel://` client's capabilities).
pub const SENTINEL_FAULT_TOLERANCE: &str = "the primary's failure (Sentinel promotes a \
    replica and the client follows); replication is asynchronous, so a failover can lose an \
    acquisition not yet replicated and two holders are then possible: fencing tokens stay \
    increasing and catch it; sync_replicas (WAIT) narrows the window";

/// What a Redis Cluster tolerates, and what a failover can do (the
/// `fault_tolerance` of a `redis+cluster://` client's capabilities).
pub const CLUSTER_FAULT_TOLERANCE: &str = "a primary's failure (the cluster promotes its \
    replica and the client follows the slot map); replication is asynchronous, so a failover \
    can lose an acquisition not yet replicated and two holders are then possible: fencing \
    tokens stay increasing and catch it; sync_replicas (WAIT) narrows the window";

/// A client of one Redis server, of the primary of a Sentinel-managed
/// deployment (`redis+sentinel://`, followed across failovers), or of a
/// Redis Cluster (`redis+cluster://`, each lock on the owner of its
/// slot): the `redis` backend of distlock.
///
/// Cheap to clone (clones share one connection, one pub/sub connection and
/// the scripts). Use it through [`lock_core::DistributedLock`]
/// (`try_acquire`, `acquire`, `inspect`), e.g. as `Arc<dyn DistributedLock>`.
/// See the [crate docs](crate) for what it guarantees and what it does not.
#[derive(Clone)]
pub struct RedisLock {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for RedisLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLock")
            .field("config", &self.inner.client.config)
            .finish_non_exhaustive()
    }
}

/// The outcome of one acquisition attempt.
enum Attempt {
    Acquired(Lease),
    /// Held by someone else for this many more ms (-1: the key has no expiry).
    Held {
        pttl: i64,
    },
}

impl RedisLock {
    /// Connects to the server of `config` and loads the scripts.
    ///
    /// Fails with `InvalidArgument` for a bad URL or zero timeouts, with
    /// `Unavailable` when the server cannot be reached or does not answer
    /// within `config.connect_timeout`, with `Unauthorized` when it rejects
    /// the credentials. Must be called within a tokio runtime.
    pub async fn connect(config: RedisLockConfig) -> Result<RedisLock, LockError> {
        let client = Client::connect(config).await?;
        // The notifier subscribes where requests go: at each channel's
        // slot owner on a cluster, on the primary the route follows across
        // failovers, or on the one server.
        let node = if let Some(cluster) = client.route.cluster() {
            cluster.notify_node(&client.config)
        } else if client.route.follows_failovers() {
            NotifyNode::moving(client.route.clone())
        } else {
            NotifyNode::fixed(
                client.config.redacted_url(),
                client.route.endpoint().client.clone(),
            )
        };
        let notifier = Notifier::start(
            vec![node],
            Timeouts {
                connect: client.config.connect_timeout,
                request: client.config.request_timeout,
            },
            None,
        );
        Ok(RedisLock {
            inner: Arc::new(Inner { client, notifier }),
        })
    }

    /// The configuration this client was connected with.
    pub fn config(&self) -> &RedisLockConfig {
        &self.inner.client.config
    }

    /// The Redis keys of lock `name` (lock key, fencing counter, release
    /// channel...). On a Redis Cluster, a name whose lock key holds a `}`
    /// has its other keys behind its hash tag, and one without a hash tag
    /// is an `InvalidArgument` error (see [`crate::kit::layout`]).
    pub fn keys(&self, name: &LockName) -> Result<Keys, LockError> {
        let client = &self.inner.client;
        client.layout.keys(&client.config.key_prefix, name.as_str())
    }

    /// The Redis keys of the leader election `name` (see [`LeaderKeys`];
    /// on a Redis Cluster, errors as [`RedisLock::keys`]).
    pub fn leader_keys(&self, name: &LockName) -> Result<LeaderKeys, LockError> {
        let client = &self.inner.client;
        client
            .layout
            .leader_keys(&client.config.key_prefix, name.as_str())
    }

    /// The queued wait for the mutex or a term of `req` (see
    /// [`wait_in_queue`]); `Unsupported` for the other kinds of lease.
    async fn queued(&self, req: &LeaseRequest, deadline: Instant) -> Result<Option<Lease>> {
        let keys = Arc::new(self.keys(&req.name)?);
        let leader = match req.mode {
            LockMode::Leader => Some(self.leader_keys(&req.name)?),
            _ => None,
        };
        let line = Arc::new(Line::of(req, keys, leader));
        wait_in_queue(
            &self.inner.client,
            &self.inner.notifier,
            line,
            req,
            deadline,
        )
        .await
    }

    /// One attempt: the primitive's acquire script with a fresh owner
    /// token (a writer that will wait passes its `intent`).
    async fn attempt(
        &self,
        req: &LeaseRequest,
        keys: &Arc<Keys>,
        intent: Option<&Intent>,
    ) -> Result<Attempt> {
        let client = self.inner.client.clone();
        let primitive = Primitive::of(req.mode)?;
        let token = owner_token();
        let start = Instant::now();
        // Armed until a reply says who holds the lock: if the request times
        // out, fails, or this future is dropped while it is in flight, the
        // script may have run on the server, so remove what it may have set
        // (compare-and-delete with our token) in the background rather than
        // leave a phantom lock held until its TTL.
        let cleanup = CleanupOnDrop::new(release_lost_acquire(
            client.clone(),
            primitive,
            keys.clone(),
            token.clone(),
            start + req.ttl,
        ));
        let described = req.holder_json().unwrap_or_default();
        match primitive
            .acquire(
                &client,
                keys,
                &token,
                ttl_millis(req.ttl),
                intent,
                &described,
            )
            .await
        {
            Ok(AcquireReply::Acquired(fence)) => {
                // With sync_replicas: not ours to return until replicated;
                // on failure the armed clean-up releases it again.
                client.confirm_replicated(keys.lock()).await?;
                cleanup.disarm();
                let server_key = primitive.server_key(keys).to_string();
                let handle = RedisLease {
                    client,
                    primitive,
                    lock: keys.lock().into(),
                    token: token.into(),
                };
                let lease = Lease::new(Box::new(handle), validity(start, req.ttl))
                    .with_token(Some(FencingToken::new(fence)))
                    .with_key(server_key);
                Ok(Attempt::Acquired(lease))
            }
            Ok(AcquireReply::Held(pttl)) => {
                cleanup.disarm();
                Ok(Attempt::Held { pttl })
            }
            Err(err) => {
                drop(cleanup);
                Err(err)
            }
        }
    }

    /// An attempt that survives a dropped connection: one that fails fast
    /// with `Unavailable` (a broken connection: the first request on it fails
    /// while the connection manager reconnects) is retried once at once, with
    /// a new owner token (the failed one's clean-up removes whatever it may
    /// have set). A timeout is not retried: it already took the request timeout.
    async fn attempt_with_reconnect(
        &self,
        req: &LeaseRequest,
        keys: &Arc<Keys>,
        intent: Option<&Intent>,
    ) -> Result<Attempt> {
        let started = Instant::now();
        match self.attempt(req, keys, intent).await {
            Err(err)
                if err.kind() == LockErrorKind::Unavailable
                    && started.elapsed() < self.inner.client.config.request_timeout =>
            {
                tracing::debug!(key = %keys.lock(), error = %err, "distlock redis: attempt failed on a broken connection; retrying once");
                self.attempt(req, keys, intent).await
            }
            other => other,
        }
    }

    /// The waiting acquire: try, subscribe to the primitive's release
    /// channel, then try again on every notification (or at the holder's
    /// expiry, or when a resubscription may have missed one) until `deadline`.
    async fn wait_for(
        &self,
        req: &LeaseRequest,
        keys: &Arc<Keys>,
        primitive: Primitive,
        intent: Option<&Intent>,
        deadline: Instant,
    ) -> Result<Option<Lease>> {
        let route = &self.inner.client.route;
        let first = loop {
            match self.attempt_with_reconnect(req, keys, intent).await {
                Ok(first) => break first,
                Err(err) => route.ride_out(err, deadline).await?,
            }
        };
        if let Attempt::Acquired(lease) = first {
            return Ok(Some(lease));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        // Subscribe, wait for the server to confirm, then try again: a release
        // between the failed attempt and the subscription published to nobody.
        let mut sub = self.subscribe(primitive, keys);
        let confirm_by = deadline.min(add_saturating(
            Instant::now(),
            self.inner.client.config.request_timeout,
        ));
        if !sub.confirmed_by(confirm_by).await {
            tracing::debug!(key = %keys.lock(), "distlock redis: release channel not confirmed in time; re-checking at the holder's TTL until it is");
        }
        loop {
            sub.before_attempt();
            let outcome = self.attempt_with_reconnect(req, keys, intent).await;
            sub.after_attempt();
            let outcome = match outcome {
                Ok(outcome) => outcome,
                Err(err) => {
                    // Following a failover: try again on the new primary.
                    route.ride_out(err, deadline).await?;
                    continue;
                }
            };
            let pttl = match outcome {
                Attempt::Acquired(lease) => return Ok(Some(lease.with_contended(true))),
                Attempt::Held { pttl } => pttl,
            };
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let wake = sub
                .wait_until(deadline.min(add_saturating(
                    now,
                    recheck_delay(self.inner.client.config.max_recheck, pttl),
                )))
                .await;
            tracing::trace!(key = %keys.lock(), ?wake, "distlock redis: waiter woke");
        }
    }

    fn subscribe(&self, primitive: Primitive, keys: &Keys) -> Subscription {
        let channel = primitive.channel(keys);
        if primitive.wakes_all() {
            self.inner.notifier.subscribe_all(channel)
        } else {
            self.inner.notifier.subscribe(channel)
        }
    }
}

/// The background compare-and-delete after an acquire whose reply was lost:
/// tried until it gets an answer, or until the key would have expired anyway.
async fn release_lost_acquire(
    client: Arc<Client>,
    primitive: Primitive,
    keys: Arc<Keys>,
    token: String,
    until: Instant,
) {
    let mut delay = Duration::from_millis(25);
    loop {
        match primitive.release(&client, &keys, &token).await {
            Ok(true) => {
                tracing::info!(key = %keys.lock(), "distlock redis: removed a lock taken by an acquire whose reply was lost");
                return;
            }
            Ok(false) => return,
            Err(err) => {
                tracing::debug!(key = %keys.lock(), error = %err, "distlock redis: clean-up of an unanswered acquire failed; retrying");
            }
        }
        if add_saturating(Instant::now(), delay) >= until {
            tracing::warn!(key = %keys.lock(), "distlock redis: could not confirm the clean-up of an unanswered acquire; the key expires with its TTL");
            return;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(CLEANUP_MAX_DELAY);
    }
}

#[async_trait]
impl LockBackend for RedisLock {
    fn backend_capabilities(&self) -> Capabilities {
        let route = &self.inner.client.route;
        Capabilities::new("redis")
            .with_fencing(Fencing::ServerClock)
            .with_fifo(true)
            .with_loss_events(false)
            .with_notified_wait(true)
            .with_remote(true)
            .with_fault_tolerance(if route.is_cluster() {
                CLUSTER_FAULT_TOLERANCE
            } else if route.follows_failovers() {
                SENTINEL_FAULT_TOLERANCE
            } else {
                "none: a single server"
            })
            .with_read_write(true)
            .with_semaphore(true)
            .with_describes_holder(true)
            .with_election(true)
    }

    async fn try_lock(&self, req: &LeaseRequest) -> Result<Option<Lease>> {
        if req.mode == LockMode::Leader {
            // One attempt: a place taken if a term runs, left at once.
            return self.queued(req, Instant::now()).await;
        }
        let keys = Arc::new(self.keys(&req.name)?);
        match self.attempt_with_reconnect(req, &keys, None).await? {
            Attempt::Acquired(lease) => Ok(Some(lease)),
            Attempt::Held { .. } => Ok(None),
        }
    }

    async fn lock(&self, req: &LeaseRequest, deadline: Instant) -> Result<Option<Lease>> {
        // Shared, not copied, by the clean-ups that may need them.
        if matches!(req.mode, LockMode::Exclusive | LockMode::Leader) {
            return self.queued(req, deadline).await;
        }
        let keys = Arc::new(self.keys(&req.name)?);
        let primitive = Primitive::of(req.mode)?;
        // A caller of the read-write lock that has to wait takes a place in
        // its queue, so that it is served in arrival order between readers
        // and writers; the place goes when it gets in or gives up (at the
        // deadline before the call returns; after an error or when this
        // future is dropped in the background), and lapses by itself after
        // twice the longest time between two of its attempts, or two request
        // timeouts after the deadline, whichever comes first.
        let config = &self.inner.client.config;
        let intent = matches!(primitive, Primitive::Read | Primitive::Write).then(|| Intent {
            id: owner_token(),
            place: PlaceLife::new(
                req.ttl,
                config.max_recheck,
                deadline,
                config.request_timeout.saturating_mul(2),
            ),
        });
        let withdraw = intent.clone().map(|intent| {
            let (client, keys) = (self.inner.client.clone(), keys.clone());
            CleanupOnDrop::new(async move {
                if let Err(err) = primitive::withdraw(&client, &keys, primitive, &intent).await {
                    tracing::debug!(key = %keys.rw(), error = %err, "distlock redis: could not leave the read-write queue; the place lapses by itself");
                }
            })
        });
        let got = self
            .wait_for(req, &keys, primitive, intent.as_ref(), deadline)
            .await;
        if let Some(withdraw) = withdraw {
            // Granted, the acquire script took us out of the queue.
            let by = add_saturating(deadline, self.inner.client.config.request_timeout);
            withdraw.settle(&got, by).await;
        }
        got
    }

    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        let keys = self.keys(name)?;
        let seen = self.inner.client.inspect(&keys).await?;
        let ttl_remaining = u64::try_from(seen.pttl).ok().map(Duration::from_millis);
        Ok(LockStatus::new(seen.pttl != -2)
            .with_token(seen.counter.filter(|c| *c > 0).map(FencingToken::new))
            .with_ttl_remaining(ttl_remaining)
            .with_holder(seen.holder))
    }

    /// The mutex by [`RELEASE_QUEUED`](crate::kit::scripts::RELEASE_QUEUED)
    /// with the owner not compared (the first waiter is handed the lock
    /// and woken, as on a release), then the read-write lock's holders and
    /// the semaphore's permits by
    /// [`FORCE_RELEASE_SHARED`](crate::kit::scripts::FORCE_RELEASE_SHARED), a
    /// release notice published for each; two requests, each within the
    /// request timeout. The evicted guards find out at their next renewal.
    async fn force_release(&self, name: &LockName) -> Result<ForceReleased> {
        let keys = self.keys(name)?;
        let client = &self.inner.client;
        let mutex = client.force_release_mutex(&keys).await?;
        let (rw, permits): (i64, i64) = client
            .eval(
                "force release",
                |s| &s.force_release_shared,
                &[
                    keys.rw(),
                    keys.rw_released(),
                    keys.permits(),
                    keys.permits_released(),
                ],
                &[],
                false,
            )
            .await?;
        Ok(ForceReleased::none()
            .with_mutex(usize::from(mutex))
            .with_read_write(usize::try_from(rw).unwrap_or(0))
            .with_permits(usize::try_from(permits).unwrap_or(0)))
    }

    async fn leader(&self, name: &LockName) -> Result<Option<LeaderInfo>> {
        let keys = self.leader_keys(name)?;
        Ok(crate::election::read(&self.inner.client, &keys)
            .await?
            .leader
            .map(|(info, _)| info))
    }

    async fn observe(&self, name: &LockName) -> Result<LeaderStream> {
        crate::election::observe::follow(self.inner.clone(), self.leader_keys(name)?).await
    }

    /// The keys under the prefix that hold a lock (a 32-hex-digit owner
    /// token with an expiry), by `SCAN`, within one request timeout. The
    /// owner is the first 8 digits of the holder's token (the whole token
    /// would let anyone release the lock).
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<(LockName, LockStatus)>> {
        let key_prefix = &self.inner.client.config.key_prefix;
        let mut out: Vec<(LockName, LockStatus)> = self
            .inner
            .client
            .list(prefix)
            .await?
            .into_iter()
            .filter_map(|(listed, counter, holder)| {
                let name = LockName::new(listed.key.strip_prefix(key_prefix.as_str())?).ok()?;
                let status = LockStatus::new(true)
                    .with_token(counter.filter(|c| *c > 0).map(FencingToken::new))
                    .with_ttl_remaining(Some(Duration::from_millis(listed.pttl)))
                    .with_owner(Some(owner_hint(&listed.token)))
                    .with_holder(holder);
                Some((name, status))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.truncate(limit);
        Ok(out)
    }
}

/// What an operator sees of an owner token: its first 8 digits.
pub(crate) fn owner_hint(token: &str) -> String {
    format!("{}…", token.get(..8).unwrap_or(token))
}
