//! A granted lock: [`EtcdLease`], its handle for the core, and the events
//! that tell its guard about the session and about our key.

use std::pin::Pin;
use std::sync::{Arc, Mutex as StdMutex};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::deletion::Deletion;
use crate::key::OurKey;
use crate::layout::{READ, WRITE};
use crate::queue::{header_revision, txn_call};
use crate::watcher::{KeyWatch, QueueWatch, Watcher};
use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use futures::Stream;
use lock_core::session::{Sent, SessionEvents};
use lock_core::{
    FencingToken, Lease, LeaseEvent, LeaseHandle, LockError, LockErrorKind, LockMode, LossCause,
    Renewal, Result,
};

/// The handle of one granted lock: it owns our key (an unreleased lease
/// dropped otherwise removes it through [`OurKey`]'s own clean-up).
pub(crate) struct EtcdLease {
    ours: StdMutex<Option<OurKey>>,
    rev: i64,
    mode: LockMode,
    /// The watch on our key: whether it was deleted (then the lock is not
    /// ours any more), shared with the guard's events.
    watch: KeyWatch,
}

/// How a grant was confirmed: the fencing token, the revision at which
/// nothing ahead blocked our key, and when the confirming request was sent.
pub(crate) struct Confirmed {
    pub(crate) token: i64,
    pub(crate) at: i64,
    pub(crate) sent: Sent,
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
    let handle = EtcdLease {
        ours: StdMutex::new(Some(ours)),
        rev,
        mode,
        watch,
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
            Some(_) => Ok(Renewal::Renewed {
                valid_until: sent.validity(ttl),
            }),
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
        match ours {
            Some(ours) => ours.remove().await,
            None => Ok(false),
        }
    }

    /// Write -> read on the same key, in one transaction: the value becomes
    /// `read` while the key keeps its place in the queue, so no writer queued
    /// behind it gets in, and readers behind it (watching it) go ahead. The
    /// read guard's token is the revision of that change.
    async fn downgrade(&self, ttl: Duration) -> Result<Lease> {
        if self.mode != LockMode::Write {
            return Err(LockError::invalid(
                "etcd: only a write lock can be downgraded",
            ));
        }
        let (client, key, lease) = self
            .with_ours(|o| (o.client.clone(), o.key.clone(), o.session.id()))
            .ok_or_else(|| LockError::new(LockErrorKind::NotHeld, "etcd: already released"))?;
        let sent = Sent::now();
        let txn = Txn::new()
            .when([
                Compare::create_revision(&*key, CompareOp::Equal, self.rev),
                Compare::value(&*key, CompareOp::Equal, WRITE),
            ])
            .and_then([TxnOp::put(
                &*key,
                READ,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let resp = client.call("downgrade", txn_call(&txn)).await?;
        if !resp.succeeded() {
            return Err(LockError::new(
                LockErrorKind::Lost,
                format!("etcd: {key} is no longer our write lock"),
            ));
        }
        let at = header_revision(&resp)?;
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
                token: at,
                at,
                sent,
            },
            ttl,
            false,
        )
    }
}
