//! A leader's lock-delay on etcd, which keeps time only through leases.
//!
//! While a term with a lock-delay `d` leads, it keeps a marker,
//! `P N delay/<marker lease hex>` ([`Queue::delay_key`]), on a lease of
//! its own (the marker lease) whose TTL is the session's TTL `s` plus `d`
//! plus `s/3` (rounded up to whole seconds), kept alive every `s/3` while
//! the term leads. Before a candidate starts its term (nothing is ahead of
//! its key any more), it waits until no marker exists: a marker left by an
//! earlier term holds the next term back until it runs out.
//!
//! - A resignation deletes the marker in the transaction that deletes the
//!   leader key, and revokes the marker lease: the next term starts at
//!   once.
//! - A term whose guard's validity passed (the core calls
//!   [`LeaseHandle::release_after_loss`](lock_core::backend::LeaseHandle::release_after_loss))
//!   moves the marker to a new lease of `d` (rounded up to whole seconds,
//!   at least the server's minimum TTL) in the transaction that deletes
//!   the leader key, once the lease's nominal end has passed: the delay
//!   runs from the end of the term, as if it had expired on the server.
//! - A term that ends on the server (its session lease expired: a crash, a
//!   pause, a partition) takes its leader key with it; the marker's
//!   keep-alives stop (the process is gone, or it sees its session end or
//!   its key deleted), and the marker runs out at least `d` after the
//!   session lease: its last keep-alive was at most `s/3` before the
//!   session's, and its TTL is `s/3 + d` longer.
//!
//! A marker is put only while the term's leader key exists (the put
//! compares its create revision), so a late copy of it can never hold
//! back a term that started after ours ended. The marker lives outside the
//! name's prefix `P N/`: `etcdctl elect N` and Go's `concurrency.Election`
//! never see it, and so never honour it either.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use lock_core::backend::session::Sent;
use lock_core::{LockError, LockErrorKind, Result};
use tokio::time::Instant;

use crate::client::EtcdClient;
use crate::deletion::Deletion;
use crate::event::WatchEvent;
use crate::key::OurKey;
use crate::layout::Queue;
use crate::queue::{gets, header_revision, txn_call};
use crate::session::Session;
use crate::watcher::{QueueWatch, Watcher};

/// How a candidate's wait for the lock-delays of earlier terms ended.
pub(crate) enum Cleared {
    /// No marker is left as of revision `at`, and our key is still there:
    /// the term may start, with its own marker if it has a lock-delay.
    /// `sent`: when the read that showed it was sent, if the candidate
    /// waited for a marker (its grant is confirmed from then).
    Term {
        ours: OurKey,
        at: i64,
        sent: Option<Sent>,
        marker: Option<Marker>,
    },
    /// The deadline passed first (or a single attempt found a marker).
    Deadline(OurKey),
    /// Our key is gone (the session ended, or someone deleted it).
    Gone(OurKey),
}

/// The marker of a term that leads with a lock-delay.
pub(crate) struct Marker {
    client: Arc<EtcdClient>,
    /// `P N delay/<marker lease hex>`.
    pub(crate) key: Arc<str>,
    /// The marker lease.
    lease: i64,
    /// The lock-delay.
    delay: Duration,
    /// The task that keeps the marker lease alive, once started.
    keeper: Option<tokio::task::AbortHandle>,
}

/// Waits until no lock-delay marker of an earlier term is left (our key,
/// created at `rev`, still there), then puts this term's marker if it has
/// a lock-delay. `deadline: None` is a single attempt.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn clear(
    client: &Arc<EtcdClient>,
    watcher: &Watcher,
    queue: &Queue,
    session: &Session,
    ours: OurKey,
    rev: i64,
    delay: Duration,
    deadline: Option<Instant>,
) -> Result<Cleared> {
    let mut watch: Option<QueueWatch> = None;
    let mut waited = false;
    let (at, sent) = loop {
        if session.is_ended() {
            return Ok(Cleared::Gone(ours));
        }
        let sent = Sent::now();
        let (at, mine, markers) = read(client, queue, &ours.key).await?;
        if mine != Some(rev) {
            return Ok(Cleared::Gone(ours));
        }
        if markers.is_empty() {
            break (at, waited.then_some(sent));
        }
        waited = true;
        let Some(deadline) = deadline else {
            return Ok(Cleared::Deadline(ours));
        };
        tracing::debug!(key = %ours.key, "distlock etcd: an earlier term's lock-delay runs; waiting for its marker to go");
        let w = watch.get_or_insert_with(|| watcher.queue_watch(queue.delay.as_bytes(), false));
        let limit = deadline.min(Instant::now() + client.request_timeout());
        let covers = match w.created(limit).await {
            Ok(c) => c,
            Err(_) if Instant::now() >= deadline => return Ok(Cleared::Deadline(ours)),
            Err(e) => return Err(e),
        };
        if covers > at {
            // The store moved on between the read and the watch: read again.
            continue;
        }
        if !marker_gone(w, &markers, at, deadline).await? {
            if Instant::now() >= deadline {
                return Ok(Cleared::Deadline(ours));
            }
            // The watch was lost: join anew and read again.
            watch = None;
        }
    };
    if delay.is_zero() {
        return Ok(Cleared::Term {
            ours,
            at,
            sent,
            marker: None,
        });
    }
    match Marker::put(client, queue, &ours, rev, session, delay).await? {
        Some(marker) => Ok(Cleared::Term {
            ours,
            at,
            sent,
            marker: Some(marker),
        }),
        None => Ok(Cleared::Gone(ours)),
    }
}

/// Waits for the deletion of one of `markers` after revision `at`: `true`
/// once one went, `false` at the deadline or when the watch was lost.
async fn marker_gone(
    watch: &mut QueueWatch,
    markers: &[Vec<u8>],
    at: i64,
    deadline: Instant,
) -> Result<bool> {
    loop {
        let event = tokio::select! {
            e = watch.next() => e,
            _ = tokio::time::sleep_until(deadline) => return Ok(false),
        };
        match event {
            None => return Err(LockError::unavailable("etcd: the client is gone")),
            Some(WatchEvent::Lost { .. }) => return Ok(false),
            Some(WatchEvent::Deleted { key, revision })
                if revision > at && markers.contains(&key) =>
            {
                return Ok(true)
            }
            Some(_) => {}
        }
    }
}

/// One read: its revision, the create revision of our key (if it is
/// there) and the markers of the name.
async fn read(
    client: &EtcdClient,
    queue: &Queue,
    key: &str,
) -> Result<(i64, Option<i64>, Vec<Vec<u8>>)> {
    let txn = Txn::new().and_then([
        TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
        TxnOp::get(
            queue.delay.as_str(),
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_keys_only()
                    .with_limit(64),
            ),
        ),
    ]);
    let resp = client
        .call("read the lock-delay markers", txn_call(&txn))
        .await?;
    let at = header_revision(&resp)?;
    let found = gets(&resp);
    let mine = found
        .first()
        .and_then(|kvs| kvs.first())
        .map(|kv| kv.create_revision());
    let markers = found
        .get(1)
        .map(|kvs| kvs.iter().map(|kv| kv.key().to_vec()).collect())
        .unwrap_or_default();
    Ok((at, mine, markers))
}

/// Whole seconds, rounded up, at least one.
fn secs(d: Duration) -> i64 {
    let whole = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i64::try_from(whole.max(1)).unwrap_or(i64::MAX)
}

impl Marker {
    /// Grants the marker lease and puts the marker, if our key (created at
    /// `rev`) is still there (`None` if it is not). Safe to send again:
    /// only while our key exists, on our own marker lease.
    async fn put(
        client: &Arc<EtcdClient>,
        queue: &Queue,
        ours: &OurKey,
        rev: i64,
        session: &Session,
        delay: Duration,
    ) -> Result<Option<Marker>> {
        let ttl = session.granted_ttl();
        let ttl = secs(ttl + ttl / 3 + delay);
        let lease = client
            .call("grant the lock-delay marker's lease", |mut c| async move {
                c.lease_grant(ttl, None).await
            })
            .await?
            .id();
        let key: Arc<str> = queue.delay_key(lease).into();
        let txn = Txn::new()
            .when([Compare::create_revision(&*ours.key, CompareOp::Equal, rev)])
            .and_then([TxnOp::put(
                &*key,
                ours.key.as_bytes(),
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let put = client
            .call("put the lock-delay marker", txn_call(&txn))
            .await;
        let marker = Marker {
            client: client.clone(),
            key,
            lease,
            delay,
            keeper: None,
        };
        match put {
            Ok(resp) if resp.succeeded() => Ok(Some(marker)),
            other => {
                // Our key is gone, or the put's outcome is unknown: the
                // lease (and the marker, if it was put) goes now.
                marker.revoke();
                other.map(|_| None)
            }
        }
    }

    /// The operation that deletes the marker with our key (a resignation).
    pub(crate) fn delete_op(&self) -> TxnOp {
        TxnOp::delete(&*self.key, None)
    }

    /// Keeps the marker lease alive every third of the session's TTL until
    /// stopped, or until the session ends or our key is `gone` (then the
    /// term ended without a resignation, and the marker runs out).
    pub(crate) fn keep(&mut self, session: Arc<Session>, gone: Arc<Deletion>) {
        let (client, lease) = (self.client.clone(), self.lease);
        let interval = session.granted_ttl() / 3;
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                if session.is_ended() || gone.is_gone() {
                    return;
                }
                let kept = client
                    .call("keep the lock-delay marker alive", |mut c| async move {
                        c.lease_keep_alive(lease).await.map(|_| ())
                    })
                    .await;
                match kept {
                    Err(e) if e.kind() != LockErrorKind::Unavailable => return,
                    _ => {}
                }
            }
        });
        self.keeper = Some(task.abort_handle());
    }

    /// Stops the keep-alives: the marker runs out with its lease.
    pub(crate) fn stop(&self) {
        if let Some(keeper) = &self.keeper {
            keeper.abort();
        }
    }

    /// Revokes the marker lease in the background (the marker, if still
    /// on it, goes with it).
    pub(crate) fn revoke(&self) {
        self.stop();
        revoke(self.client.clone(), self.lease);
    }

    /// After a term ended without a resignation, now: a lease of the
    /// lock-delay for the marker, and the operation that moves the marker
    /// onto it (applied with the deletion of our key). `Err`: the marker
    /// stays where it is and runs out with its own lease (later).
    pub(crate) async fn relay(&self, leader_key: &str) -> Result<(i64, TxnOp)> {
        let ttl = secs(self.delay);
        let lease = self
            .client
            .call("grant the lock-delay's lease", |mut c| async move {
                c.lease_grant(ttl, None).await
            })
            .await?
            .id();
        let op = TxnOp::put(
            &*self.key,
            leader_key,
            Some(PutOptions::new().with_lease(lease)),
        );
        Ok((lease, op))
    }

    /// Revokes the lease `lease` of this client in the background (the
    /// relay's, when it was not used).
    pub(crate) fn revoke_other(&self, lease: i64) {
        revoke(self.client.clone(), lease);
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Revokes `lease` in the background; a failure leaves it to expire.
fn revoke(client: Arc<EtcdClient>, lease: i64) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        let revoked = client
            .call("revoke a lock-delay lease", |mut c| async move {
                c.lease_revoke(lease).await
            })
            .await;
        if let Err(e) = revoked {
            if e.kind() != LockErrorKind::Lost {
                tracing::debug!(lease, error = %e, "distlock etcd: revoking a lock-delay lease failed; it expires");
            }
        }
    });
}
