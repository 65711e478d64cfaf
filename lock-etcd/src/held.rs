//! A granted lock: [`EtcdLease`], its handle for the core, and the events
//! that tell its guard about the session and about our key.

use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::client::{bounded_by, EtcdClient, Outcome};
use crate::deletion::Deletion;
use crate::election::delay::Marker;
use crate::key::OurKey;
use crate::layout::{READ, WRITE};
use crate::queue::{header_revision, txn_call};
use crate::watcher::{KeyWatch, QueueWatch, Watcher};
use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use futures::Stream;
use lock_core::backend::session::{Sent, SessionEvents};
use lock_core::backend::{add_saturating, drift, Lease, LeaseEvent, LeaseHandle, Renewal};
use lock_core::{FencingToken, LockError, LockErrorKind, LockMode, LossCause, Result};
use tokio::time::Instant;

/// The handle of one granted lock: it owns our key (an unreleased lease
/// dropped otherwise removes it through [`OurKey`]'s own clean-up).
pub(crate) struct EtcdLease {
    ours: StdMutex<Option<OurKey>>,
    rev: i64,
    /// The mod revision our key has as far as we know: a change of it
    /// compares this, so that a late copy of an earlier change fails.
    mod_rev: AtomicI64,
    mode: LockMode,
    /// The watch on our key: whether it was deleted (then the lock is not
    /// ours any more), shared with the guard's events.
    watch: KeyWatch,
    /// A leader's lock-delay marker, if its term has a lock-delay.
    marker: Option<Marker>,
    /// When the lease would end on the server without another renewal (its
    /// last renewal's send time plus its TTL): a leader's lock-delay after
    /// a loss runs from no earlier than this.
    nominal_end: StdMutex<Instant>,
}

/// How a grant was confirmed: the fencing token, the revision at which
/// nothing ahead blocked our key, when the confirming request was sent,
/// and a leader's lock-delay marker.
pub(crate) struct Confirmed {
    pub(crate) token: i64,
    pub(crate) at: i64,
    pub(crate) sent: Sent,
    pub(crate) marker: Option<Marker>,
}

/// Builds the lease of `ours` in `mode`, confirmed as `confirmed`. `own`:
/// a watch on our key that has covered it since before `confirmed.at`, if
/// the wait had one (else one is made, from the revision after).
#[allow(clippy::too_many_arguments)]
pub(crate) fn grant(
    ours: OurKey,
    watcher: &Watcher,
    own: Option<QueueWatch>,
    mode: LockMode,
    confirmed: Confirmed,
    ttl: Duration,
    contended: bool,
) -> Result<Lease> {
    let Confirmed {
        token,
        at: confirmed_at,
        sent,
        mut marker,
    } = confirmed;
    let rev = ours.rev.ok_or_else(|| {
        LockError::new(
            LockErrorKind::Internal,
            "etcd: granting a key of unknown revision",
        )
    })?;
    let token = u64::try_from(token).map_err(|_| {
        LockError::new(
            LockErrorKind::Protocol,
            format!("etcd: negative revision {token}"),
        )
    })?;
    let session_until = ours.session.vouched_until().ok_or_else(|| {
        LockError::unavailable("etcd: the session lease is not confirmed (keep-alives failing)")
    })?;
    let session_events = ours
        .session
        .register()
        .map_err(|cause| LockError::new(LockErrorKind::Lost, format!("etcd: {cause}")))?;
    let watch = match own {
        Some(own) => own.into_key_watch(ours.key.as_bytes(), rev),
        None => watcher.watch_key(ours.key.clone(), rev, confirmed_at + 1),
    };
    let events = Events {
        session: Some(session_events),
        key: Some(watch.deletion().clone()),
    };
    let key = ours.key.clone();
    let mut ours = ours;
    if let Some(marker) = marker.as_mut() {
        marker.keep(ours.session.clone(), watch.deletion().clone());
        // A resignation deletes the marker with our key.
        ours.also = vec![marker.delete_op()];
    }
    let handle = EtcdLease {
        ours: StdMutex::new(Some(ours)),
        rev,
        mod_rev: AtomicI64::new(rev),
        mode,
        watch,
        marker,
        nominal_end: StdMutex::new(nominal_end(sent, ttl)),
    };
    Ok(Lease::new(Box::new(handle), sent.validity(ttl))
        .with_session_until(session_until)
        .with_token(Some(FencingToken::new(token)))
        .with_contended(contended)
        .with_key(key)
        .with_events(Box::pin(events)))
}

/// A guard's events: the session's news, and `Lost(NotOwner)` once our key
/// is gone (deleted after its creation, or its watch lost). Ends when both
/// have ended. One small struct, polled in place.
struct Events {
    session: Option<SessionEvents>,
    key: Option<Arc<Deletion>>,
}

impl Stream for Events {
    type Item = LeaseEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<LeaseEvent>> {
        let this = &mut *self;
        if let Some(key) = &this.key {
            match key.poll_gone(cx) {
                Poll::Ready(true) => {
                    this.key = None;
                    return Poll::Ready(Some(LeaseEvent::Lost(LossCause::NotOwner)));
                }
                Poll::Ready(false) => this.key = None,
                Poll::Pending => {}
            }
        }
        if let Some(session) = &mut this.session {
            match Pin::new(session).poll_next(cx) {
                Poll::Ready(Some(event)) => return Poll::Ready(Some(event)),
                Poll::Ready(None) => this.session = None,
                Poll::Pending => {}
            }
        }
        if this.key.is_none() && this.session.is_none() {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }
}

impl EtcdLease {
    fn with_ours<T>(&self, f: impl FnOnce(&OurKey) -> T) -> Option<T> {
        self.ours
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(f)
    }
}

#[async_trait]
impl LeaseHandle for EtcdLease {
    /// Answers from the session's state, with no request: the lock lives as
    /// long as the session lease, which the session keeps alive by itself
    /// (and whose confirmations bound the guard's validity). A deletion of
    /// our key is reported by its watch, also one that happened while the
    /// watch stream was down (it resumes from the revision it had reached).
    async fn renew(&self, ttl: Duration) -> Result<Renewal> {
        let sent = Sent::now();
        if self.watch.deletion().is_gone() {
            return Ok(Renewal::Gone);
        }
        let state = self.with_ours(|o| (o.session.is_ended(), o.session.is_suspended()));
        match state {
            None => Ok(Renewal::Gone),
            Some((true, _)) => Err(LockError::new(
                LockErrorKind::Lost,
                "etcd: the session lease expired",
            )),
            Some((_, true)) => Err(LockError::unavailable(
                "etcd: session keep-alives are failing",
            )),
            Some(_) => {
                *self.nominal_end.lock().unwrap_or_else(|p| p.into_inner()) =
                    nominal_end(sent, ttl);
                Ok(Renewal::Renewed {
                    valid_until: sent.validity(ttl),
                })
            }
        }
    }

    /// Deletes our key ([`OurKey::remove`]: never a newer key of this
    /// client on the same name, never anyone else's). The watch on the key
    /// ends first: its deletion is ours, not news.
    async fn release(&self) -> Result<bool> {
        let ours = self.ours.lock().unwrap_or_else(|p| p.into_inner()).take();
        if ours.is_some() {
            self.watch.cancel();
        }
        let Some(ours) = ours else {
            return Ok(false);
        };
        let removed = ours.remove().await;
        if let Some(marker) = &self.marker {
            // Resigned: the marker went with our key, and its lease goes
            // now. Else the term had ended already (or the outcome is
            // unknown): the marker runs out with its lease.
            match removed {
                Ok(true) => marker.revoke(),
                _ => marker.stop(),
            }
        }
        removed
    }

    /// As [`LeaseHandle::release`]; a leader with a lock-delay moves its
    /// marker to a lease of the delay, in the transaction that deletes its
    /// key, once the lease's nominal end has passed (see
    /// [`crate::election::delay`]).
    async fn release_after_loss(&self) -> Result<bool> {
        let Some(marker) = &self.marker else {
            return self.release().await;
        };
        marker.stop();
        let ours = self.ours.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(mut ours) = ours else {
            return Ok(false);
        };
        self.watch.cancel();
        let end = *self.nominal_end.lock().unwrap_or_else(|p| p.into_inner());
        tokio::time::sleep_until(end).await;
        let relay = marker.relay(&ours.key).await;
        // Without the relay the marker stays on its own lease, no longer
        // kept alive: a longer delay, never a shorter one.
        ours.also = match &relay {
            Ok((_, op)) => vec![op.clone()],
            Err(_) => Vec::new(),
        };
        let removed = ours.remove().await;
        if let Ok((lease, _)) = relay {
            match removed {
                Ok(true) => marker.revoke(),
                Ok(false) => marker.revoke_other(lease),
                Err(_) => {}
            }
        }
        removed
    }

    /// Replaces a leader's value in one transaction that compares our
    /// key's create revision and its mod revision as we know it. The create
    /// revision is what makes a copy of this request that arrives late
    /// (after a timeout, on whatever member) harmless: a later leader's
    /// key, even this client's own key of the same name put again for a
    /// later term, has a later create revision, so the compare fails and
    /// nothing is written. The mod revision keeps a late copy from writing
    /// over a later proclaim of this term. Sent once; an unknown outcome is
    /// an error.
    async fn proclaim(&self, value: &str) -> Result<bool> {
        if self.mode != LockMode::Leader {
            return Err(LockError::invalid("etcd: only a leader can proclaim"));
        }
        if self.watch.deletion().is_gone() {
            return Ok(false);
        }
        let Some((client, key, lease)) =
            self.with_ours(|o| (o.client.clone(), o.key.clone(), o.session.id()))
        else {
            return Ok(false);
        };
        let bound = client.request_deadline();
        let proclaimed =
            crate::election::proclaim(&client, &key, self.rev, &self.mod_rev, lease, value);
        bounded_by(bound, proclaimed).await
    }

    /// Write -> read on the same key, in one transaction: the value becomes
    /// `read` while the key keeps its place in the queue, so no writer queued
    /// behind it gets in, and readers behind it (watching it) go ahead. The
    /// read guard's token is the revision of that change.
    ///
    /// The transaction compares the key's create and mod revisions (our
    /// write key, unchanged) and is sent once, within half the request
    /// timeout; the other half settles an unknown outcome or a failed
    /// compare by reading the key back: `read` is a downgrade that was
    /// applied (a read guard), `write` is kept as it is by a put that
    /// bumps its mod revision (so a late copy of the downgrade fails; an
    /// error, the write lock unchanged). What cannot be settled in time
    /// loses the write lock (its key is removed in the background): it
    /// never reports held when the key may be a read lock.
    async fn downgrade(&self, ttl: Duration) -> Result<Lease> {
        if self.mode != LockMode::Write {
            return Err(LockError::invalid(
                "etcd: only a write lock can be downgraded",
            ));
        }
        let (client, key, lease) = self
            .with_ours(|o| (o.client.clone(), o.key.clone(), o.session.id()))
            .ok_or_else(|| LockError::new(LockErrorKind::NotHeld, "etcd: already released"))?;
        let bound = client.request_deadline();
        let at = bounded_by(bound, self.downgrade_key(&client, &key, lease)).await?;
        let ours = self
            .ours
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| LockError::new(LockErrorKind::NotHeld, "etcd: already released"))?;
        grant(
            ours,
            self.watch.watcher(),
            None,
            LockMode::Read,
            Confirmed {
                token: at.revision,
                at: at.revision,
                sent: at.sent,
                marker: None,
            },
            ttl,
            false,
        )
    }
}

/// When a lease renewed by a request sent at `sent` for `ttl` would end on
/// the server: its validity without the drift allowance.
fn nominal_end(sent: Sent, ttl: Duration) -> Instant {
    add_saturating(sent.validity(ttl), drift(ttl))
}

/// A downgrade that was applied: at which revision, and when the request
/// that applied it was sent.
struct Downgraded {
    revision: i64,
    sent: Sent,
}

/// What a read of our key back says.
enum Found {
    /// Downgraded, at this mod revision.
    Read(i64),
    /// Still our write lock, at this mod revision.
    Write(i64),
    /// Not our key any more (gone, or another key of the name).
    Gone,
}

impl EtcdLease {
    /// The downgrade's transaction and the settling of its outcome (see
    /// [`LeaseHandle::downgrade`]).
    async fn downgrade_key(
        &self,
        client: &EtcdClient,
        key: &Arc<str>,
        lease: i64,
    ) -> Result<Downgraded> {
        let known = self.mod_rev.load(Ordering::SeqCst);
        let sent = Sent::now();
        let txn = Txn::new()
            .when([
                Compare::create_revision(&**key, CompareOp::Equal, self.rev),
                Compare::mod_revision(&**key, CompareOp::Equal, known),
            ])
            .and_then([TxnOp::put(
                &**key,
                READ,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let within = client.request_timeout() / 2;
        let unknown = match client.call_once("downgrade", within, txn_call(&txn)).await {
            Outcome::Done(resp) if resp.succeeded() => {
                return Ok(Downgraded {
                    revision: header_revision(&resp)?,
                    sent,
                })
            }
            // The compare failed: what is the key now?
            Outcome::Done(_) => None,
            // Not applied: the write lock is unchanged.
            Outcome::Refused(e) => return Err(e),
            Outcome::Unknown(e) => Some(e),
        };
        let found = match self.read_back(client, key, lease).await {
            Ok(found) => found,
            Err(e) => {
                self.give_up(key);
                return Err(LockError::new(
                    LockErrorKind::Lost,
                    format!("etcd: {key}: the downgrade's outcome is unknown; the write lock is given up"),
                )
                .with_source(e));
            }
        };
        match found {
            Found::Read(revision) => Ok(Downgraded { revision, sent }),
            Found::Gone => {
                self.give_up(key);
                Err(LockError::new(
                    LockErrorKind::Lost,
                    format!("etcd: {key} is no longer our write lock"),
                ))
            }
            Found::Write(now) if unknown.is_none() || now != known => {
                // The downgrade did not apply, and no copy of it can.
                self.mod_rev.store(now, Ordering::SeqCst);
                Err(LockError::unavailable(format!(
                    "etcd: {key}: the downgrade was not applied; the write lock is kept"
                )))
            }
            Found::Write(_) => {
                // A copy of the downgrade may still land: bump the key's
                // mod revision so that it cannot.
                let fence = Txn::new()
                    .when([Compare::mod_revision(&**key, CompareOp::Equal, known)])
                    .and_then([TxnOp::put(
                        &**key,
                        WRITE,
                        Some(PutOptions::new().with_lease(lease)),
                    )]);
                let left = client.request_timeout();
                match client
                    .call_once("keep the write lock", left, txn_call(&fence))
                    .await
                {
                    Outcome::Done(resp) if resp.succeeded() => {
                        self.mod_rev
                            .store(header_revision(&resp)?, Ordering::SeqCst);
                        Err(LockError::unavailable(format!(
                            "etcd: {key}: the downgrade was not applied; the write lock is kept"
                        )))
                    }
                    _ => {
                        self.give_up(key);
                        Err(LockError::new(
                            LockErrorKind::Lost,
                            format!("etcd: {key}: the downgrade's outcome is unknown; the write lock is given up"),
                        ))
                    }
                }
            }
        }
    }

    /// Reads our key back (a read: safe to repeat).
    async fn read_back(&self, client: &EtcdClient, key: &Arc<str>, lease: i64) -> Result<Found> {
        let resp = client
            .call("read our key back", |mut c: etcd_client::Client| {
                let key = key.clone();
                async move { c.get(key.as_bytes(), None).await }
            })
            .await?;
        Ok(match resp.kvs().first() {
            Some(kv) if kv.create_revision() == self.rev && kv.lease() == lease => {
                if kv.value() == READ.as_bytes() {
                    Found::Read(kv.mod_revision())
                } else {
                    Found::Write(kv.mod_revision())
                }
            }
            _ => Found::Gone,
        })
    }

    /// The write lock is not ours as we held it (or may not be): the guard
    /// hears it is lost, and our key, if still there, is removed in the
    /// background (comparing its create revision).
    fn give_up(&self, key: &Arc<str>) {
        self.watch.deletion().doubted(key.as_bytes());
        let ours = self.ours.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(ours) = ours {
            self.watch.cancel();
            // Dropped armed: its clean-up deletes it in the background.
            drop(ours);
        }
    }
}
