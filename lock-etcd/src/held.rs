//! A granted lock: [`EtcdLease`], its handle for the core, and the events
//! that tell its guard about the session and about our key.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use crate::key::OurKey;
use crate::layout::{READ, WRITE};
use crate::queue::{header_revision, txn_call};
use crate::watcher::{WatchEvent, WatchHandle, Watcher};
use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use futures::stream::{self, BoxStream};
use lock_core::session::Sent;
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
    watcher: Watcher,
    /// Our key was deleted (watched), so the lock is not ours any more.
    lost: Arc<AtomicBool>,
    /// The watch on our key (in the guard's events).
    key_watch: i64,
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
    own: Option<WatchHandle>,
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
    let lost = Arc::new(AtomicBool::new(false));
    let watch = own
        .unwrap_or_else(|| watcher.watch(ours.key.clone(), false, false, Some(confirmed_at + 1)));
    let key_watch = watch.id();
    let key_events = key_events(watch, ours.key.clone(), rev, lost.clone());
    let events: BoxStream<'static, LeaseEvent> =
        Box::pin(stream::select(session_events, key_events));
    let key = ours.key.clone();
    let handle = EtcdLease {
        ours: StdMutex::new(Some(ours)),
        rev,
        mode,
        watcher: watcher.clone(),
        lost,
        key_watch,
    };
    Ok(Lease::new(Box::new(handle), sent.validity(ttl))
        .with_session_until(session_until)
        .with_token(Some(FencingToken::new(token)))
        .with_contended(contended)
        .with_key(key)
        .with_events(events))
}

/// `Lost(NotOwner)` when our key, created at `rev`, is deleted (a deletion
/// at or before `rev` was of an older key of the same name).
fn key_events(
    watch: WatchHandle,
    key: Arc<str>,
    rev: i64,
    lost: Arc<AtomicBool>,
) -> BoxStream<'static, LeaseEvent> {
    Box::pin(stream::unfold(Some(watch), move |watch| {
        let lost = lost.clone();
        let key = key.clone();
        async move {
            let mut watch = watch?;
            loop {
                match watch.next().await {
                    Some(WatchEvent::Deleted { revision, .. }) if revision > rev => {
                        tracing::debug!(%key, "distlock etcd: our key was deleted; lock lost");
                        lost.store(true, Ordering::SeqCst);
                        return Some((LeaseEvent::Lost(LossCause::NotOwner), None));
                    }
                    Some(WatchEvent::Lost { reason }) => {
                        // Its history was compacted: we cannot tell whether
                        // the key was deleted meanwhile; the guard must not
                        // count on it.
                        tracing::warn!(%key, %reason, "distlock etcd: the watch on our key is lost");
                        lost.store(true, Ordering::SeqCst);
                        return Some((LeaseEvent::Lost(LossCause::NotOwner), None));
                    }
                    Some(_) => continue,
                    None => return None,
                }
            }
        }
    }))
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
        if self.lost.load(Ordering::SeqCst) {
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

    /// Compare-and-delete of our key on its create revision: never a newer
    /// key of this client on the same name, never anyone else's. The watch
    /// on the key ends first: its deletion is ours, not news.
    async fn release(&self) -> Result<bool> {
        let ours = self.ours.lock().unwrap_or_else(|p| p.into_inner()).take();
        if ours.is_some() {
            self.watcher.cancel(self.key_watch);
        }
        match ours {
            Some(ours) => ours.remove().await.map(|(was_ours, _turn)| was_ours),
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
            &self.watcher,
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
