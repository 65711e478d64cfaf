//! [`EtcdLock`]: the [`LockBackend`] on etcd.
//!
//! Protocol (identical to etcd's `clientv3/concurrency.Mutex`):
//! - contender key `NAME/<session lease id in lowercase hex>`, empty value,
//!   attached to the client's session lease, put only if absent;
//! - the holder is the key under `NAME/` with the lowest create revision;
//! - a waiter watches only the DELETE of the key just ahead of it, then reads
//!   again (another earlier key may remain) and confirms that its own key still
//!   exists before it reports the lock held;
//! - release is a compare-and-delete on our key's create revision;
//! - the fencing token is our key's create revision.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse, TxnResponse,
};
use lock_core::{
    validity, Capabilities, CleanupOnDrop, Fencing, FencingToken, Lease, LeaseEvent, LeaseHandle,
    LeaseRequest, LockBackend, LockError, LockErrorKind, LockName, LockStatus, LossCause, Renewal,
    Result,
};
use tokio::sync::{mpsc, watch, OwnedMutexGuard};
use tokio::time::Instant;

use crate::config::EtcdConfig;
use crate::core::{Core, Failure};
use crate::session::{Session, SessionState};

/// How often one acquisition may find its own key in the way (a leftover of a
/// request that timed out after the server applied it) or lose its session
/// before it gives up.
const MAX_ROUNDS: u32 = 8;

/// A distributed lock client on etcd. Cheap to clone (clones share the
/// connection, the session lease and the in-process queues).
///
/// Every client has ONE session: an etcd lease of [`EtcdConfig::lease_ttl`],
/// kept alive by one background keep-alive stream while the client or any of
/// its guards lives. All its locks are keys attached to that lease. Two
/// acquisitions of one name from the same client are serialised in the
/// process (FIFO) before the key is put, since they would share one key.
///
/// See the crate documentation for the guarantees and the key layout.
#[derive(Clone)]
pub struct EtcdLock {
    inner: Arc<Inner>,
}

struct Inner {
    core: Arc<Core>,
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    queues: Arc<LocalQueues>,
}

impl std::fmt::Debug for EtcdLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdLock")
            .field("config", self.inner.core.config())
            .finish_non_exhaustive()
    }
}

impl EtcdLock {
    /// Connects to etcd and opens the client's session (grants its lease).
    ///
    /// Fails with [`LockErrorKind::InvalidArgument`] for a bad configuration,
    /// [`LockErrorKind::Unauthorized`] for rejected credentials, and
    /// [`LockErrorKind::Unavailable`] when no endpoint answers within
    /// [`EtcdConfig::connect_timeout`].
    pub async fn connect(config: EtcdConfig) -> Result<Self> {
        config.validate()?;
        let limit = config.connect_timeout;
        let core = Arc::new(Core::new(config));
        let session = match tokio::time::timeout(limit, Session::grant(core.clone())).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(LockError::unavailable(format!(
                    "etcd: no endpoint of {:?} granted a session lease within the connect timeout of {limit:?}",
                    core.config().endpoints
                )))
            }
        };
        Ok(Self {
            inner: Arc::new(Inner {
                core,
                session: tokio::sync::Mutex::new(Some(session)),
                queues: Arc::new(LocalQueues::default()),
            }),
        })
    }

    /// The configuration this client was made with.
    pub fn config(&self) -> &EtcdConfig {
        self.inner.core.config()
    }

    /// The etcd key prefix of lock `name`: [`EtcdConfig::key_prefix`] + `name` +
    /// `/`. Contender keys are this prefix plus a lease id in lowercase hex.
    pub fn key_prefix(&self, name: &LockName) -> String {
        format!("{}{}/", self.config().key_prefix, name.as_str())
    }

    /// The id and the granted TTL of the client's current session lease, if
    /// it has a live one (the next acquisition after an expiry grants a new one).
    /// The granted TTL can be above [`EtcdConfig::lease_ttl`] when the server
    /// raises it to its minimum.
    pub async fn session_lease(&self) -> Option<(i64, Duration)> {
        let slot = self.inner.session.lock().await;
        slot.as_ref()
            .filter(|s| !s.is_expired())
            .map(|s| (s.id(), s.granted_ttl()))
    }

    /// The live session, granting a new lease if the last one expired.
    async fn session(&self) -> Result<Arc<Session>> {
        let mut slot = self.inner.session.lock().await;
        if let Some(s) = slot.as_ref().filter(|s| !s.is_expired()) {
            return Ok(s.clone());
        }
        let s = Session::grant(self.inner.core.clone()).await?;
        *slot = Some(s.clone());
        Ok(s)
    }

    fn core(&self) -> &Arc<Core> {
        &self.inner.core
    }

    /// One acquisition. `deadline: None` is a single attempt that never queues.
    async fn acquire(
        &self,
        req: &LeaseRequest,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>> {
        let core = self.core().clone();
        let Some((permit, waited_here)) =
            self.inner.queues.enter(req.name.as_str(), deadline).await
        else {
            return Ok(None);
        };
        let mut contended = waited_here;
        // The permit stays held until our key is gone or belongs to a guard.
        let slot = Arc::new(StdMutex::new(Some(permit)));
        let prefix = self.key_prefix(&req.name);
        for _round in 0..MAX_ROUNDS {
            let session = self.session().await?;
            let key = format!("{prefix}{}", lease_hex(session.id()));
            // Armed before the put: if this future is dropped from here on, our
            // key (if the put landed) is deleted in the background, and the
            // permit is given back only after that.
            let cleanup = {
                let (core, session, key, slot) =
                    (core.clone(), session.clone(), key.clone(), slot.clone());
                CleanupOnDrop::new(async move {
                    let only_ours = Compare::lease(key.clone(), CompareOp::Equal, session.id());
                    delete_until_done(core, session, key, only_ours, None).await;
                    drop(take(&slot));
                })
            };
            let start = Instant::now();
            let placed = match deadline {
                None => self.place_if_free(&prefix, &key, session.id()).await,
                Some(_) => self.place_in_queue(&prefix, &key, session.id()).await,
            };
            let placed = match placed {
                Ok(p) => p,
                Err(e) if e.kind() == LockErrorKind::Lost => {
                    // A put with an expired lease fails without writing: nothing to
                    // clean up; a new session is granted on the next round.
                    session.mark_expired("the server no longer knows the session lease");
                    cleanup.disarm();
                    continue;
                }
                Err(e) => return Err(e), // the clean-up runs in the background
            };
            match placed {
                Placed::Taken => {
                    cleanup.disarm();
                    drop(take(&slot));
                    return Ok(None);
                }
                Placed::Stale { rev } => {
                    // Our own key from an attempt whose answer we never saw.
                    self.delete_if_created(&key, rev).await?;
                    cleanup.disarm();
                    continue;
                }
                Placed::Owner { rev } => {
                    cleanup.disarm();
                    let Some(session_until) = session.confirmed_until() else {
                        // The session expired meanwhile: our key goes with its lease.
                        continue;
                    };
                    let permit = take(&slot);
                    let lease = self.grant(
                        session,
                        session_until,
                        key,
                        rev,
                        rev,
                        start,
                        req.ttl,
                        permit,
                        contended,
                    )?;
                    return Ok(Some(lease));
                }
                Placed::Queued { rev, pred } => {
                    contended = true;
                    let Some(deadline) = deadline else {
                        return Err(LockError::new(
                            LockErrorKind::Internal,
                            "etcd: queued on a single attempt",
                        ));
                    };
                    match self
                        .wait_turn(&session, &prefix, &key, rev, pred, deadline)
                        .await?
                    {
                        Turn::Mine {
                            start,
                            confirmed_at,
                        } => {
                            cleanup.disarm();
                            let Some(session_until) = session.confirmed_until() else {
                                // The session expired meanwhile: our key goes with
                                // its lease; queue again on a new one.
                                continue;
                            };
                            let permit = take(&slot);
                            let lease = self.grant(
                                session,
                                session_until,
                                key,
                                rev,
                                confirmed_at,
                                start,
                                req.ttl,
                                permit,
                                contended,
                            )?;
                            return Ok(Some(lease));
                        }
                        Turn::Deadline => return Ok(None), // the clean-up runs in the background
                        Turn::Requeue(why) => {
                            // Our key is gone, or goes with the expired lease: nothing to
                            // delete, and the permit stays with this acquisition.
                            tracing::debug!(name = %req.name, why, "distlock etcd: contender key gone while waiting; queueing again");
                            cleanup.disarm();
                            continue;
                        }
                    }
                }
            }
        }
        Err(LockError::unavailable(format!(
            "etcd: could not place a contender key for {} after {MAX_ROUNDS} attempts",
            req.name
        )))
    }

    /// Single attempt: put our key only if no key exists under the prefix.
    async fn place_if_free(&self, prefix: &str, key: &str, lease: i64) -> Result<Placed> {
        let txn = Txn::new()
            .when([Compare::create_revision(prefix, CompareOp::Equal, 0).with_prefix()])
            .and_then([TxnOp::put(
                key,
                "",
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else([
                TxnOp::get(prefix, Some(owner_query())),
                TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
            ]);
        let resp = self.core().call("try-acquire", txn_call(&txn)).await?;
        let rev = header_revision(&resp)?;
        if resp.succeeded() {
            return Ok(Placed::Owner { rev });
        }
        let gets = gets(&resp);
        match gets.get(1).and_then(|kvs| kvs.first()) {
            Some(ours) => Ok(Placed::Stale {
                rev: ours.create_revision(),
            }),
            None => Ok(Placed::Taken),
        }
    }

    /// Waiting attempt: put our key if absent and read, in the same
    /// transaction, our key and the one just ahead of it (by create revision).
    async fn place_in_queue(&self, prefix: &str, key: &str, lease: i64) -> Result<Placed> {
        let newest_two = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(2)
            .with_keys_only();
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(key, "", Some(PutOptions::new().with_lease(lease))),
                TxnOp::get(prefix, Some(newest_two)),
            ])
            .or_else([TxnOp::get(key, Some(GetOptions::new().with_keys_only()))]);
        let resp = self.core().call("acquire", txn_call(&txn)).await?;
        let rev = header_revision(&resp)?;
        let gets = gets(&resp);
        if !resp.succeeded() {
            return match gets.first().and_then(|kvs| kvs.first()) {
                Some(ours) => Ok(Placed::Stale {
                    rev: ours.create_revision(),
                }),
                // Deleted between the compare and now is impossible inside one
                // transaction; treat an empty answer as a protocol error.
                None => Err(LockError::new(
                    LockErrorKind::Protocol,
                    "etcd: put-if-absent failed but the key is not there",
                )),
            };
        }
        let kvs = gets.first().cloned().unwrap_or_default();
        // Our put is the newest revision, so our key comes first.
        match kvs.first() {
            Some(first) if first.key() == key.as_bytes() && first.create_revision() == rev => {}
            _ => {
                return Err(LockError::new(
                    LockErrorKind::Protocol,
                    "etcd: our contender key is not the newest one right after its put",
                ))
            }
        }
        Ok(match kvs.get(1) {
            None => Placed::Owner { rev },
            Some(pred) => Placed::Queued {
                rev,
                pred: Some((pred.key().to_vec(), rev + 1)),
            },
        })
    }

    /// Compare-and-delete of `key` on its create revision.
    async fn delete_if_created(&self, key: &str, rev: i64) -> Result<bool> {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, rev)])
            .and_then([TxnOp::delete(key, None)]);
        let resp = self
            .core()
            .call("delete a contender key", txn_call(&txn))
            .await?;
        Ok(resp.succeeded())
    }

    /// Reads, in one linearizable read, the key just ahead of ours and our own.
    async fn read_queue(&self, prefix: &str, key: &str, rev: i64) -> Result<QueueView> {
        let ahead = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_max_create_revision(rev - 1)
            .with_limit(1)
            .with_keys_only();
        let txn = Txn::new().and_then([
            TxnOp::get(prefix, Some(ahead)),
            TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
        ]);
        let resp = self.core().call("read the queue", txn_call(&txn)).await?;
        let revision = header_revision(&resp)?;
        let gets = gets(&resp);
        let pred = gets
            .first()
            .and_then(|kvs| kvs.first())
            .map(|kv| kv.key().to_vec());
        let ours_ok = gets
            .get(1)
            .and_then(|kvs| kvs.first())
            .is_some_and(|kv| kv.create_revision() == rev);
        Ok(QueueView {
            revision,
            pred,
            ours_ok,
        })
    }

    /// Waits, herd-free, until our key is the oldest under the prefix.
    async fn wait_turn(
        &self,
        session: &Arc<Session>,
        prefix: &str,
        key: &str,
        rev: i64,
        mut pred: Option<(Vec<u8>, i64)>,
        deadline: Instant,
    ) -> Result<Turn> {
        let core = self.core();
        let mut sess = session.subscribe();
        let mut epoch = core.epoch();
        let mut last_err: Option<LockError> = None;
        let mut failures = 0u32;
        loop {
            if Instant::now() >= deadline {
                return match last_err {
                    Some(e) => Err(e),
                    None => Ok(Turn::Deadline),
                };
            }
            if session.is_expired() {
                return Ok(Turn::Requeue("the session lease expired"));
            }
            if let Some(err) = last_err.as_ref() {
                // Back off after a failure, within the deadline.
                let delay =
                    Duration::from_millis(20u64 << failures.min(5)).min(Duration::from_millis(500));
                tracing::debug!(error = %err, ?delay, "distlock etcd: waiting acquire retries after a failure");
                tokio::time::sleep_until((Instant::now() + delay).min(deadline)).await;
            }
            let Some((pred_key, from)) = pred.clone() else {
                let start = Instant::now();
                match tokio::time::timeout_at(deadline, self.read_queue(prefix, key, rev)).await {
                    Err(_) => continue,
                    Ok(Err(e)) => {
                        retry_or_fail(e, &mut last_err, &mut failures)?;
                        continue;
                    }
                    Ok(Ok(view)) => {
                        (last_err, failures) = (None, 0);
                        if !view.ours_ok {
                            return Ok(Turn::Requeue("our contender key disappeared"));
                        }
                        match view.pred {
                            None => {
                                return Ok(Turn::Mine {
                                    start,
                                    confirmed_at: view.revision,
                                })
                            }
                            // Watch from just after the revision we read at: a start
                            // revision in the past lands the watcher in etcd's
                            // "unsynced" group, served only every 100 ms.
                            Some(k) => pred = Some((k, view.revision + 1)),
                        }
                        continue;
                    }
                }
            };
            let (mut stream, idx) = match tokio::time::timeout_at(
                deadline,
                core.watch_deletes(&pred_key, from),
            )
            .await
            {
                Err(_) => continue,
                Ok(Err(e)) => {
                    retry_or_fail(e, &mut last_err, &mut failures)?;
                    continue;
                }
                Ok(Ok(w)) => w,
            };
            (last_err, failures) = (None, 0);
            epoch.borrow_and_update();
            // Whatever ends this wait, read again before watching again: the key
            // ahead may be gone, and a fresh read gives a current start revision.
            pred = None;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => return Ok(Turn::Deadline),
                    changed = sess.changed() => {
                        if changed.is_err() || session.is_expired() {
                            return Ok(Turn::Requeue("the session lease expired"));
                        }
                    }
                    // An endpoint failed somewhere: our stream may be dead without
                    // knowing it.
                    _ = epoch.changed() => break,
                    msg = stream.message() => match msg {
                        Ok(Some(resp)) => {
                            if resp.events().iter().any(|e| e.event_type() == EventType::Delete) {
                                break;
                            }
                            if resp.canceled() {
                                if resp.compact_revision() == 0 {
                                    let reason = Failure::WatchCanceled(resp.cancel_reason().to_string());
                                    let err = core.stream_error(idx, reason, "watch the key ahead");
                                    retry_or_fail(err, &mut last_err, &mut failures)?;
                                }
                                break;
                            }
                        }
                        Ok(None) => {
                            core.failed(idx);
                            break;
                        }
                        Err(e) => {
                            let err = core.stream_error(idx, Failure::Etcd(e), "watch the key ahead");
                            retry_or_fail(err, &mut last_err, &mut failures)?;
                            break;
                        }
                    }
                }
            }
        }
    }

    /// Builds the granted lease: handle, events, token, validity (its own,
    /// `start + ttl - drift`, and the session's, `session_until`).
    #[allow(clippy::too_many_arguments)]
    fn grant(
        &self,
        session: Arc<Session>,
        session_until: Instant,
        key: String,
        rev: i64,
        confirmed_at: i64,
        start: Instant,
        ttl: Duration,
        permit: Option<NamePermit>,
        contended: bool,
    ) -> Result<Lease> {
        let token = u64::try_from(rev).map_err(|_| {
            LockError::new(
                LockErrorKind::Protocol,
                format!("etcd: negative create revision {rev}"),
            )
        })?;
        let flags = Arc::new(Flags::default());
        let (tx, rx) = mpsc::unbounded_channel();
        let monitor = tokio::spawn(monitor(
            self.core().clone(),
            session.subscribe(),
            key.clone(),
            rev,
            confirmed_at + 1,
            flags.clone(),
            tx.clone(),
        ))
        .abort_handle();
        let handle = EtcdLease {
            core: self.core().clone(),
            session,
            key,
            rev,
            flags,
            events: tx.clone(),
            permit: StdMutex::new(permit),
            monitor,
            released: AtomicBool::new(false),
        };
        let events =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) });
        Ok(Lease::new(Box::new(handle), validity(start, ttl))
            .with_session_until(session_until)
            .with_token(Some(FencingToken::new(token)))
            .with_contended(contended)
            .with_events(Box::pin(events)))
    }
}

/// Keeps a waiting acquire going through failures the session survives;
/// gives up on errors that retrying cannot fix.
fn retry_or_fail(err: LockError, last: &mut Option<LockError>, failures: &mut u32) -> Result<()> {
    if err.kind() != LockErrorKind::Unavailable {
        return Err(err);
    }
    *failures = failures.saturating_add(1);
    *last = Some(err);
    Ok(())
}

#[async_trait]
impl LockBackend for EtcdLock {
    fn backend_capabilities(&self) -> Capabilities {
        Capabilities::new("etcd")
            .with_fencing(Fencing::Durable)
            .with_fifo(true)
            .with_loss_events(true)
            .with_notified_wait(true)
            .with_remote(true)
            .with_fault_tolerance(FAULT_TOLERANCE)
    }

    async fn try_lock(&self, req: &LeaseRequest) -> Result<Option<Lease>> {
        self.acquire(req, None).await
    }

    async fn lock(&self, req: &LeaseRequest, deadline: Instant) -> Result<Option<Lease>> {
        self.acquire(req, Some(deadline)).await
    }

    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        let prefix = self.key_prefix(name);
        let resp = self
            .core()
            .call("inspect", |mut c| {
                let prefix = prefix.clone();
                async move { c.get(prefix, Some(owner_query())).await }
            })
            .await?;
        let Some(owner) = resp.kvs().first() else {
            return Ok(LockStatus::new(false).with_waiters(Some(0)));
        };
        let token = u64::try_from(owner.create_revision())
            .ok()
            .map(FencingToken::new);
        let lease = owner.lease();
        let ttl = if lease == 0 {
            None
        } else {
            let r = self
                .core()
                .call("read the holder's lease TTL", |mut c| async move {
                    c.lease_time_to_live(lease, None).await
                })
                .await?;
            u64::try_from(r.ttl())
                .ok()
                .filter(|s| *s > 0)
                .map(Duration::from_secs)
        };
        let waiters = usize::try_from(resp.count().saturating_sub(1)).unwrap_or(0);
        Ok(LockStatus::new(true)
            .with_token(token)
            .with_ttl_remaining(ttl)
            .with_waiters(Some(waiters)))
    }
}

/// The fault tolerance, in words.
pub(crate) const FAULT_TOLERANCE: &str =
    "a minority of the 2N+1 etcd members (Raft); a leader change delays lease expiry but never shortens it";

/// Range options for "the oldest key under the prefix" (the holder).
fn owner_query() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1)
        .with_keys_only()
}

/// The lease id as etcd's Go client writes it into the key (`%x`).
pub(crate) fn lease_hex(id: i64) -> String {
    if id < 0 {
        format!("-{:x}", id.unsigned_abs())
    } else {
        format!("{id:x}")
    }
}

fn header_revision(resp: &TxnResponse) -> Result<i64> {
    resp.header()
        .map(|h| h.revision())
        .ok_or_else(|| LockError::new(LockErrorKind::Protocol, "etcd: answer without a header"))
}

/// The key-values of every range operation in a transaction answer, in order.
fn gets(resp: &TxnResponse) -> Vec<Vec<KeyValue>> {
    resp.op_responses()
        .into_iter()
        .filter_map(|r| match r {
            TxnOpResponse::Get(mut g) => Some(g.take_kvs()),
            _ => None,
        })
        .collect()
}

type TxnFuture =
    futures::future::BoxFuture<'static, std::result::Result<TxnResponse, etcd_client::Error>>;

/// A request closure for [`Core::call`] that runs `txn` (cloned per attempt).
fn txn_call(txn: &Txn) -> impl FnMut(etcd_client::Client) -> TxnFuture {
    let txn = txn.clone();
    move |mut c| {
        let txn = txn.clone();
        Box::pin(async move { c.txn(txn).await })
    }
}

enum Placed {
    /// Our key is the oldest: we hold the lock.
    Owner { rev: i64 },
    /// Our key is queued behind `pred` (key, watch-from revision).
    Queued {
        rev: i64,
        pred: Option<(Vec<u8>, i64)>,
    },
    /// Someone holds it (single attempt only; nothing was written).
    Taken,
    /// Our own key already exists (created at `rev`).
    Stale { rev: i64 },
}

struct QueueView {
    revision: i64,
    pred: Option<Vec<u8>>,
    ours_ok: bool,
}

enum Turn {
    /// Our key is the oldest, confirmed by a read started at `start` and
    /// answered at revision `confirmed_at`.
    Mine {
        start: Instant,
        confirmed_at: i64,
    },
    Deadline,
    /// Our key is gone (session expired, or deleted by someone): queue again.
    Requeue(&'static str),
}

/// Deletes `key` if `guard` holds, retrying while the server is unreachable and
/// the session lives (after that the key goes with the lease anyway). Gives
/// `permit` back at the end.
async fn delete_until_done(
    core: Arc<Core>,
    session: Arc<Session>,
    key: String,
    guard: Compare,
    permit: Option<NamePermit>,
) {
    let txn = Txn::new()
        .when([guard])
        .and_then([TxnOp::delete(key.clone(), None)]);
    let mut delay = Duration::from_millis(50);
    loop {
        match core.call("delete a contender key", txn_call(&txn)).await {
            Ok(_) => break,
            Err(e) if e.kind() == LockErrorKind::Unavailable && !session.is_expired() => {
                tracing::debug!(%key, error = %e, "distlock etcd: deleting our key failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
            Err(e) => {
                // A refused request (no permission) wrote nothing either.
                let harmless =
                    matches!(e.kind(), LockErrorKind::Lost | LockErrorKind::Unauthorized);
                if !harmless && !session.is_expired() {
                    tracing::warn!(%key, error = %e, "distlock etcd: could not delete our key; it goes with the session lease");
                }
                break;
            }
        }
    }
    drop(permit);
}

fn take(slot: &StdMutex<Option<NamePermit>>) -> Option<NamePermit> {
    lock_unpoisoned(slot).take()
}

fn lock_unpoisoned<T>(m: &StdMutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Shared between a lease handle and its monitor task.
struct Flags {
    /// Our key was deleted or the session expired.
    lost: AtomicBool,
    /// Why the watch on our key is down, while it is: a deletion could go
    /// unnoticed.
    watch_trouble: watch::Sender<Option<String>>,
}

impl Default for Flags {
    fn default() -> Self {
        Self {
            lost: AtomicBool::new(false),
            watch_trouble: watch::Sender::new(None),
        }
    }
}

/// The handle of one granted lock.
struct EtcdLease {
    core: Arc<Core>,
    session: Arc<Session>,
    key: String,
    rev: i64,
    flags: Arc<Flags>,
    /// The guard's event stream, shared with the monitor task.
    events: mpsc::UnboundedSender<LeaseEvent>,
    permit: StdMutex<Option<NamePermit>>,
    monitor: tokio::task::AbortHandle,
    released: AtomicBool,
}

#[async_trait]
impl LeaseHandle for EtcdLease {
    /// Answers from the session's state, with no request: the lock lives as
    /// long as the session lease, which the session keeps alive by itself.
    /// The answer is the guard's own bound (`now + ttl - drift`); the core
    /// caps it with the session's, which the monitor sends as
    /// [`LeaseEvent::Confirmed`] after every confirmed keep-alive.
    async fn renew(&self, ttl: Duration) -> Result<Renewal> {
        let now = Instant::now();
        if self.released.load(Ordering::SeqCst) || self.flags.lost.load(Ordering::SeqCst) {
            return Ok(Renewal::Gone);
        }
        match self.session.state() {
            SessionState::Expired { reason } => {
                // Report the precise cause through the event stream (the core maps
                // `Gone` to `NotOwner`); the error keeps the guard from being
                // renewed meanwhile.
                let _ = self
                    .events
                    .send(LeaseEvent::Lost(LossCause::SessionExpired));
                Err(LockError::new(
                    LockErrorKind::Lost,
                    format!("etcd: the session lease expired: {reason}"),
                ))
            }
            SessionState::Live {
                trouble: Some(reason),
                ..
            } => Err(LockError::unavailable(format!(
                "etcd: session keep-alive failing: {reason}"
            ))),
            SessionState::Live { .. } if self.flags.watch_trouble.borrow().is_some() => {
                Err(LockError::unavailable(
                    "etcd: the watch on our key is down; a deletion could go unnoticed",
                ))
            }
            SessionState::Live { .. } => Ok(Renewal::Renewed {
                valid_until: validity(now, ttl),
            }),
        }
    }

    /// Compare-and-delete of our key on its create revision: never a newer key
    /// of this client on the same name, never anyone else's.
    async fn release(&self) -> Result<bool> {
        if self.released.swap(true, Ordering::SeqCst) {
            return Ok(false);
        }
        self.monitor.abort();
        let permit = take(&self.permit);
        let guard = Compare::create_revision(self.key.clone(), CompareOp::Equal, self.rev);
        let txn = Txn::new()
            .when([guard.clone()])
            .and_then([TxnOp::delete(self.key.clone(), None)]);
        match self.core.call("release", txn_call(&txn)).await {
            Ok(resp) => {
                drop(permit);
                Ok(resp.succeeded())
            }
            Err(e) => {
                // Keep trying in the background, holding the in-process permit,
                // so that our key never outlives the guard on a live session.
                tokio::spawn(delete_until_done(
                    self.core.clone(),
                    self.session.clone(),
                    self.key.clone(),
                    guard,
                    permit,
                ));
                Err(e)
            }
        }
    }
}

impl Drop for EtcdLease {
    fn drop(&mut self) {
        self.monitor.abort();
        if self.released.load(Ordering::SeqCst) {
            return;
        }
        // The core always releases; this covers a keeper that ended otherwise.
        let guard = Compare::create_revision(self.key.clone(), CompareOp::Equal, self.rev);
        let cleanup = delete_until_done(
            self.core.clone(),
            self.session.clone(),
            self.key.clone(),
            guard,
            take(&self.permit),
        );
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(cleanup);
        }
    }
}

/// Watches a held lock until it is lost: follows the session (see
/// [`follow_session`]) and watches the DELETE of our key (-> `Lost(NotOwner)`).
async fn monitor(
    core: Arc<Core>,
    sess: watch::Receiver<SessionState>,
    key: String,
    rev: i64,
    first_from: i64,
    flags: Arc<Flags>,
    tx: mpsc::UnboundedSender<LeaseEvent>,
) {
    tokio::select! {
        () = follow_session(sess, &flags, &tx) => {}
        () = watch_key(&core, &key, rev, first_from, &flags, &tx) => {}
    }
}

/// Marks the lock lost and tells the guard why.
fn lose(flags: &Flags, tx: &mpsc::UnboundedSender<LeaseEvent>, cause: LossCause) {
    flags.lost.store(true, Ordering::SeqCst);
    let _ = tx.send(LeaseEvent::Lost(cause));
}

/// Turns the session's state into the guard's events: every confirmed
/// keep-alive -> `Confirmed` until the session's new bound (last confirmed
/// keep-alive send + lease TTL - drift), which also makes a suspended guard
/// held again; failing keep-alives, or the watch on our key down ->
/// `Suspended` (and no confirmation until both are fine again); the lease
/// expired -> `Lost(SessionExpired)`. Returns only when the lock is lost.
async fn follow_session(
    mut sess: watch::Receiver<SessionState>,
    flags: &Flags,
    tx: &mpsc::UnboundedSender<LeaseEvent>,
) {
    let mut watch_trouble = flags.watch_trouble.subscribe();
    let mut suspended = false;
    let mut confirmed: Option<Instant> = None;
    loop {
        let (valid_until, session_trouble) = match &*sess.borrow_and_update() {
            SessionState::Expired { reason } => {
                tracing::debug!(%reason, "distlock etcd: session expired; lock lost");
                lose(flags, tx, LossCause::SessionExpired);
                return;
            }
            SessionState::Live {
                valid_until,
                trouble,
            } => (*valid_until, trouble.clone()),
        };
        let watch_trouble_now = watch_trouble.borrow_and_update().clone();
        match session_trouble.or(watch_trouble_now) {
            Some(reason) => {
                if !suspended {
                    let _ = tx.send(LeaseEvent::Suspended { reason });
                    suspended = true;
                }
            }
            None => {
                if suspended || confirmed != Some(valid_until) {
                    let _ = tx.send(LeaseEvent::Confirmed { valid_until });
                    suspended = false;
                    confirmed = Some(valid_until);
                }
            }
        }
        let open = tokio::select! {
            changed = sess.changed() => changed.is_ok(),
            changed = watch_trouble.changed() => changed.is_ok(),
        };
        if !open {
            // Cannot happen while the guard holds the session; never confirm again.
            return std::future::pending().await;
        }
    }
}

/// Watches the DELETE of our key, reopening the watch after failures (reading
/// our key first, so that a deletion in between is seen). Returns only when
/// our key is gone.
async fn watch_key(
    core: &Core,
    key: &str,
    rev: i64,
    first_from: i64,
    flags: &Flags,
    tx: &mpsc::UnboundedSender<LeaseEvent>,
) {
    let set_trouble = |trouble: Option<String>| {
        flags.watch_trouble.send_if_modified(|t| {
            let changed = *t != trouble;
            *t = trouble;
            changed
        });
    };
    let mut epoch = core.epoch();
    let mut stream = None;
    let mut from = Some(first_from);
    let mut retry = Duration::from_millis(100);
    loop {
        let Some((s, idx)) = stream.as_mut() else {
            // (Re)open the watch. The first one starts right after the read that
            // confirmed our key; later ones read our key again first, so that a
            // deletion in between is seen and the watch starts at a current
            // revision (an old start revision makes etcd scan its history).
            let start = match from.take() {
                Some(r) => Ok(Some(r)),
                None => check_key(core, key, rev).await,
            };
            let opened = match start {
                Ok(None) => {
                    tracing::debug!(%key, "distlock etcd: our key is gone; lock lost");
                    lose(flags, tx, LossCause::NotOwner);
                    return;
                }
                Ok(Some(r)) => core.watch_deletes(key.as_bytes(), r).await,
                Err(e) => Err(e),
            };
            match opened {
                Ok(open) => {
                    epoch.borrow_and_update();
                    set_trouble(None);
                    retry = Duration::from_millis(100);
                    stream = Some(open);
                }
                Err(e) => {
                    set_trouble(Some(format!("the watch on our key is down: {e}")));
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(Duration::from_secs(1));
                }
            }
            continue;
        };
        let idx = *idx;
        tokio::select! {
            _ = epoch.changed() => stream = None,
            msg = s.message() => match msg {
                Ok(Some(resp)) => {
                    if resp.events().iter().any(|e| e.event_type() == EventType::Delete) {
                        tracing::debug!(%key, "distlock etcd: our key was deleted; lock lost");
                        lose(flags, tx, LossCause::NotOwner);
                        return;
                    }
                    if resp.canceled() {
                        // Compacted history, or refused: reopen after reading our key.
                        stream = None;
                        if resp.compact_revision() == 0 {
                            let reason = Failure::WatchCanceled(resp.cancel_reason().to_string());
                            let err = core.stream_error(idx, reason, "watch our key");
                            set_trouble(Some(err.to_string()));
                            tokio::time::sleep(retry).await;
                            retry = (retry * 2).min(Duration::from_secs(1));
                        }
                    }
                }
                Ok(None) => {
                    core.failed(idx);
                    stream = None;
                }
                Err(e) => {
                    let err = core.stream_error(idx, Failure::Etcd(e), "watch our key");
                    tracing::debug!(%key, error = %err, "distlock etcd: watch on our key broke; reopening");
                    stream = None;
                }
            }
        }
    }
}

/// Reads our key: `Some(revision to watch from)` if it is still ours,
/// `None` if it is gone or was re-created.
async fn check_key(core: &Core, key: &str, rev: i64) -> Result<Option<i64>> {
    let resp = core
        .call("check our key", |mut c| {
            let k = key.to_string();
            async move { c.get(k, Some(GetOptions::new().with_keys_only())).await }
        })
        .await?;
    let ours = resp
        .kvs()
        .first()
        .is_some_and(|kv| kv.create_revision() == rev);
    let revision = resp
        .header()
        .map(|h| h.revision())
        .ok_or_else(|| LockError::new(LockErrorKind::Protocol, "etcd: answer without a header"))?;
    Ok(ours.then_some(revision + 1))
}

/// In-process FIFO queues, one per lock name in use: two acquisitions of one
/// name from one client would share one etcd key, so they take turns here
/// first.
#[derive(Default)]
struct LocalQueues {
    names: StdMutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl LocalQueues {
    /// Takes the turn for `name`: at once, or waiting (FIFO) until `deadline`
    /// (`None`: no waiting). Returns whether it had to wait.
    async fn enter(
        self: &Arc<Self>,
        name: &str,
        deadline: Option<Instant>,
    ) -> Option<(NamePermit, bool)> {
        let interest = Interest {
            queues: self.clone(),
            name: name.to_string(),
            mutex: Some(
                lock_unpoisoned(&self.names)
                    .entry(name.to_string())
                    .or_default()
                    .clone(),
            ),
        };
        let mutex = interest.mutex.clone()?;
        if let Ok(guard) = mutex.clone().try_lock_owned() {
            return Some((interest.into_permit(guard), false));
        }
        let deadline = deadline?;
        match tokio::time::timeout_at(deadline, mutex.lock_owned()).await {
            Ok(guard) => Some((interest.into_permit(guard), true)),
            Err(_) => None,
        }
    }

    /// Forgets `name` when nobody holds or waits for it.
    fn tidy(&self, name: &str) {
        let mut names = lock_unpoisoned(&self.names);
        if names.get(name).is_some_and(|m| Arc::strong_count(m) == 1) {
            names.remove(name);
        }
    }
}

/// A reference to a name's queue that tidies up when dropped.
struct Interest {
    queues: Arc<LocalQueues>,
    name: String,
    mutex: Option<Arc<tokio::sync::Mutex<()>>>,
}

impl Interest {
    fn into_permit(mut self, guard: OwnedMutexGuard<()>) -> NamePermit {
        self.mutex = None;
        NamePermit {
            guard: Some(guard),
            queues: self.queues.clone(),
            name: std::mem::take(&mut self.name),
        }
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        if self.mutex.take().is_some() {
            self.queues.tidy(&self.name);
        }
    }
}

/// This client's turn on one name.
struct NamePermit {
    guard: Option<OwnedMutexGuard<()>>,
    queues: Arc<LocalQueues>,
    name: String,
}

impl Drop for NamePermit {
    fn drop(&mut self) {
        self.guard.take();
        self.queues.tidy(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ids_format_like_go() {
        assert_eq!(lease_hex(0x694d_81a3_5c1f_0b2e), "694d81a35c1f0b2e");
        assert_eq!(lease_hex(255), "ff");
        assert_eq!(lease_hex(-255), "-ff");
    }

    #[tokio::test]
    async fn local_queue_is_fifo_and_tidies_up() {
        let q = Arc::new(LocalQueues::default());
        let (first, waited) = q.enter("n", None).await.unwrap();
        assert!(!waited);
        assert!(
            q.enter("n", None).await.is_none(),
            "a single attempt must not wait"
        );
        let order = Arc::new(StdMutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..3 {
            let (q, order) = (q.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let (p, waited) = q
                    .enter("n", Some(Instant::now() + Duration::from_secs(5)))
                    .await
                    .unwrap();
                assert!(waited);
                lock_unpoisoned(&order).push(i);
                drop(p);
            }));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let timed_out = q
            .enter("n", Some(Instant::now() + Duration::from_millis(10)))
            .await;
        assert!(timed_out.is_none());
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*lock_unpoisoned(&order), vec![0, 1, 2]);
        assert!(
            lock_unpoisoned(&q.names).is_empty(),
            "queue entry left behind"
        );
    }
}
