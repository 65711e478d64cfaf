//! [`RedisLock`]: the [`LockBackend`] implementation.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{
    add_saturating, validity, CleanupOnDrop, Lease, LeaseHandle, LeaseRequest, LockBackend, Renewal,
};
use lock_core::{
    Capabilities, Fencing, FencingToken, ForceReleased, LockError, LockErrorKind, LockName,
    LockStatus, Result,
};
use tokio::time::Instant;

use crate::client::{AcquireReply, Client};
use crate::config::RedisLockConfig;
use crate::kit::call::ttl_millis;
use crate::kit::layout::{owner_token, Keys};
use crate::kit::notify::{Notifier, NotifyNode, Subscription, Timeouts, Wake};
use crate::kit::place::PlaceLife;
use crate::primitive::{self, Intent, Primitive};

/// Longest pause between two attempts of the background compare-and-delete
/// that follows an acquire whose reply was lost.
const CLEANUP_MAX_DELAY: Duration = Duration::from_secs(1);

/// A client of one Redis server: the `redis` backend of distlock.
///
/// Cheap to clone (clones share one connection, one pub/sub connection and
/// the scripts). Use it through [`lock_core::DistributedLock`]
/// (`try_acquire`, `acquire`, `inspect`), e.g. as `Arc<dyn DistributedLock>`.
/// See the [crate docs](crate) for what it guarantees and what it does not.
#[derive(Clone)]
pub struct RedisLock {
    inner: Arc<Inner>,
}

struct Inner {
    client: Arc<Client>,
    notifier: Notifier,
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
        let notifier = Notifier::start(
            vec![NotifyNode {
                addr: client.config.redacted_url(),
                client: client.redis.clone(),
            }],
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

    /// The Redis keys of lock `name` (lock key, fencing counter, release channel).
    pub fn keys(&self, name: &LockName) -> Keys {
        Keys::new(&self.inner.client.config.key_prefix, name.as_str())
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
                cleanup.disarm();
                let server_key = primitive.server_key(keys.lock()).into_owned();
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
        if let Attempt::Acquired(lease) = self.attempt_with_reconnect(req, keys, intent).await? {
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
            let pttl = match outcome? {
                Attempt::Acquired(lease) => return Ok(Some(lease.with_contended(true))),
                Attempt::Held { pttl } => pttl,
            };
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let wake = sub
                .wait_until(deadline.min(add_saturating(now, self.recheck_delay(pttl))))
                .await;
            tracing::trace!(key = %keys.lock(), ?wake, "distlock redis: waiter woke");
        }
    }

    /// The waiting acquire of the mutex, in arrival order (see
    /// [`crate::kit::scripts::ACQUIRE_FENCED`]): one owner token for the whole
    /// wait, a place in the name's queue from the first attempt, and a
    /// release that hands the lock to us wakes this waiter alone
    /// ([`Wake::Granted`]), already holding it. Every attempt can be
    /// repeated safely (one that finds the lock already ours takes it afresh),
    /// so a lost reply needs no clean-up of its own; giving up (the deadline,
    /// an error, or this future dropped) leaves the queue and passes on a lock
    /// handed to us meanwhile: at the deadline before the call returns
    /// (within its bound), after an error or when this future is dropped in
    /// the background.
    async fn wait_in_queue(
        &self,
        req: &LeaseRequest,
        keys: &Arc<Keys>,
        deadline: Instant,
    ) -> Result<Option<Lease>> {
        let client = &self.inner.client;
        let token = owner_token();
        let ttl_ms = ttl_millis(req.ttl);
        // Written once, for the attempts and (rarely needed) the leaving.
        let described: Option<Arc<str>> = req.holder_json().map(Into::into);
        let leave = {
            let (client, keys, token) = (client.clone(), keys.clone(), token.clone());
            let described = described.clone();
            CleanupOnDrop::new(async move {
                let member = match described {
                    Some(described) => format!("{token} {ttl_ms} {described}"),
                    None => format!("{token} {ttl_ms}"),
                };
                if let Err(err) = client.release(&keys, &token, Some(&member)).await {
                    tracing::debug!(key = %keys.lock(), error = %err, "distlock redis: could not leave the queue; the place lapses by itself and a lock handed over meanwhile expires with its TTL");
                }
            })
        };
        let described = described.as_deref().unwrap_or_default();
        let got = self
            .queue_turns(req, keys, token, described, deadline)
            .await;
        let by = add_saturating(deadline, client.config.request_timeout);
        leave.settle(&got, by).await;
        got
    }

    /// The attempts and waits of [`wait_in_queue`](Self::wait_in_queue)
    /// with owner token `token` and the holder's description `described`,
    /// until the lock is ours or `deadline`.
    async fn queue_turns(
        &self,
        req: &LeaseRequest,
        keys: &Arc<Keys>,
        token: String,
        described: &str,
        deadline: Instant,
    ) -> Result<Option<Lease>> {
        let client = &self.inner.client;
        let ttl_ms = ttl_millis(req.ttl);
        // The attempt in flight at the deadline, then the leaving.
        let slack = client.config.request_timeout.saturating_mul(2);
        let place = PlaceLife::new(req.ttl, client.config.max_recheck, deadline, slack);
        // Subscribed already if other local waiters are; else the first
        // attempt goes out before the subscription (most find the lock free).
        let mut sub = self.inner.notifier.subscribe_if_live(keys.released());
        if let Some(sub) = &mut sub {
            sub.expect_grant(&token);
        }
        let mut waited = false;
        loop {
            if let Some(sub) = &mut sub {
                sub.before_attempt();
            }
            let sent = Instant::now();
            let reply = self
                .queue_attempt(keys, &token, ttl_ms, place.lasts_ms(), described)
                .await;
            if let Some(sub) = &mut sub {
                sub.after_attempt();
            }
            let (pttl, last_token) = match reply? {
                (AcquireReply::Acquired(fence), _) => {
                    return Ok(Some(
                        self.mutex_lease(keys, token, fence, sent, req.ttl, waited),
                    ));
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
                let mut fresh = self.inner.notifier.subscribe(keys.released());
                fresh.expect_grant(&token);
                let confirm_by = deadline.min(add_saturating(now, client.config.request_timeout));
                if !fresh.confirmed_by(confirm_by).await {
                    tracing::debug!(key = %keys.lock(), "distlock redis: release channel not confirmed in time; re-checking at the holder's TTL until it is");
                }
                sub = Some(fresh);
                continue;
            };
            let wake = sub
                .wait_until(deadline.min(add_saturating(now, self.recheck_delay(pttl))))
                .await;
            if let Wake::Granted(fence) = wake {
                // A token above the last one the attempt saw: handed to us
                // after the attempt sent at `sent` ran, so valid from then.
                // (An older announcement arriving late is void: the lock was
                // not ours when the attempt ran.)
                if fence > last_token
                    && validity(sent, req.ttl).saturating_duration_since(Instant::now())
                        >= req.ttl / 2
                {
                    return Ok(Some(
                        self.mutex_lease(keys, token, fence, sent, req.ttl, true),
                    ));
                }
                // A late announcement, or one that leaves little of the TTL
                // known: the next attempt decides (and takes it afresh if ours).
            }
            tracing::trace!(key = %keys.lock(), ?wake, "distlock redis: waiter woke");
        }
    }

    /// One attempt of [`wait_in_queue`](Self::wait_in_queue), repeated once
    /// at once if it fails fast on a broken connection (safe: the attempt is
    /// idempotent for its owner token).
    async fn queue_attempt(
        &self,
        keys: &Arc<Keys>,
        token: &str,
        ttl_ms: u64,
        lasts_ms: u64,
        described: &str,
    ) -> Result<(AcquireReply, u64)> {
        let (client, queued) = (&self.inner.client, Some(lasts_ms));
        let started = Instant::now();
        match client.acquire(keys, token, ttl_ms, queued, described).await {
            Err(err)
                if err.kind() == LockErrorKind::Unavailable
                    && started.elapsed() < client.config.request_timeout =>
            {
                tracing::debug!(key = %keys.lock(), error = %err, "distlock redis: attempt failed on a broken connection; retrying once");
                client.acquire(keys, token, ttl_ms, queued, described).await
            }
            other => other,
        }
    }

    /// The mutex lease of `token`, granted by a request sent at `sent`.
    fn mutex_lease(
        &self,
        keys: &Arc<Keys>,
        token: String,
        fence: u64,
        sent: Instant,
        ttl: Duration,
        waited: bool,
    ) -> Lease {
        let handle = RedisLease {
            client: self.inner.client.clone(),
            primitive: Primitive::Mutex,
            lock: keys.lock().into(),
            token: token.into(),
        };
        Lease::new(Box::new(handle), validity(sent, ttl))
            .with_token(Some(FencingToken::new(fence)))
            .with_key(keys.lock().to_owned())
            .with_contended(waited)
    }

    /// How long to sleep, without a notification, before the next attempt.
    fn recheck_delay(&self, pttl: i64) -> Duration {
        let cap = self.inner.client.config.max_recheck;
        match u64::try_from(pttl) {
            // The key expires after `pttl` ms: try right after.
            Ok(ms) => Duration::from_millis(ms.saturating_add(1)).min(cap),
            // No expiry (a foreign lock without TTL): re-check now and then.
            Err(_) => cap,
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
        Capabilities::new("redis")
            .with_fencing(Fencing::ServerClock)
            .with_fifo(true)
            .with_loss_events(false)
            .with_notified_wait(true)
            .with_remote(true)
            .with_fault_tolerance("none: a single server")
            .with_read_write(true)
            .with_semaphore(true)
            .with_describes_holder(true)
    }

    async fn try_lock(&self, req: &LeaseRequest) -> Result<Option<Lease>> {
        let keys = Arc::new(self.keys(&req.name));
        match self.attempt_with_reconnect(req, &keys, None).await? {
            Attempt::Acquired(lease) => Ok(Some(lease)),
            Attempt::Held { .. } => Ok(None),
        }
    }

    async fn lock(&self, req: &LeaseRequest, deadline: Instant) -> Result<Option<Lease>> {
        // Shared, not copied, by the clean-ups that may need them.
        let keys = Arc::new(self.keys(&req.name));
        let primitive = Primitive::of(req.mode)?;
        if primitive == Primitive::Mutex {
            return self.wait_in_queue(req, &keys, deadline).await;
        }
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
        let keys = self.keys(name);
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
        let keys = self.keys(name);
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

/// A granted lease: the primitive, the owner token and the lock key, with
/// the shared connection. Only the lock key is kept (a guard lives long and
/// there may be many): the other keys derive from it when a release or a
/// downgrade needs them.
struct RedisLease {
    client: Arc<Client>,
    primitive: Primitive,
    lock: Box<str>,
    token: Box<str>,
}

impl RedisLease {
    fn keys(&self) -> Keys {
        Keys::of_lock(&self.lock)
    }
}

#[async_trait]
impl LeaseHandle for RedisLease {
    async fn renew(&self, ttl: Duration) -> Result<Renewal> {
        // Batched with this client's other renewals; valid from before
        // the request that carried it was sent.
        match self
            .primitive
            .renew(&self.client, &self.lock, &self.token, ttl)
            .await?
        {
            Some(sent) => Ok(Renewal::Renewed {
                valid_until: validity(sent, ttl),
            }),
            None => Ok(Renewal::Gone),
        }
    }

    async fn release(&self) -> Result<bool> {
        self.primitive
            .release(&self.client, &self.keys(), &self.token)
            .await
    }

    /// In place: the holder's entry turns from `w` to `r` in one script, so
    /// the name is never without our lease, and the writers already waiting
    /// keep waiting (they still need every reader gone, and new readers
    /// still queue behind them).
    async fn downgrade(&self, ttl: Duration) -> Result<Lease> {
        if self.primitive != Primitive::Write {
            return Err(LockError::invalid(
                "only a write lease of a read-write lock can be downgraded",
            ));
        }
        let start = Instant::now();
        let keys = self.keys();
        match primitive::downgrade(&self.client, &keys, &self.token, ttl_millis(ttl)).await? {
            Some(fence) => {
                let handle = RedisLease {
                    client: self.client.clone(),
                    primitive: Primitive::Read,
                    lock: self.lock.clone(),
                    token: self.token.clone(),
                };
                Ok(Lease::new(Box::new(handle), validity(start, ttl))
                    .with_token(Some(FencingToken::new(fence)))
                    .with_key(keys.rw()))
            }
            None => Err(LockError::new(
                LockErrorKind::Lost,
                format!(
                    "redis: the write lease on {} expired before the downgrade",
                    keys.rw()
                ),
            )),
        }
    }
}
