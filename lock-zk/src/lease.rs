//! A granted lease: our node, the watch on it, and the handle the core
//! renews and releases.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use lock_core::{
    validity, FencingToken, Lease, LeaseEvent, LeaseHandle, LockError, LossCause, Renewal, Result,
    SessionStatus,
};
use tokio::sync::mpsc;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{lock_error, Failure};
use crate::queue::Contender;
use crate::session::Session;

/// A guard's flags, shared with the watch on its node.
#[derive(Default)]
struct Flags {
    /// Released (or being released) by its owner: a deletion is ours.
    released: AtomicBool,
    /// The node was deleted by someone else.
    gone: AtomicBool,
}

/// The lease of our node `path` on `session`: its token is the node's
/// czxid, its own validity `ttl` from `looked` (taken before the request
/// that showed it ours was sent), its session validity what the session
/// vouches for now. Registers with the session's hub and watches the node,
/// so a deletion by someone else is `Lost(NotOwner)`.
pub(crate) async fn grant(
    session: &Arc<Session>,
    path: &str,
    ttl: Duration,
    looked: Instant,
    until: Instant,
) -> Result<Lease> {
    let (stat, watcher) = match session.watch_stat(path, until).await {
        Ok((Some(stat), watcher)) => (stat, watcher),
        Ok((None, _)) => return Err(crate::queue::vanished(path)),
        Err(f) => return Err(lock_error(&format!("watching {path}"), f)),
    };
    let live = &session.live;
    let ended = || {
        lock_error(
            &format!("acquiring {path}"),
            Failure::Retired(live.retired().unwrap_or(crate::session::Retired::Closed)),
        )
    };
    let session_events = live.hub.register().map_err(|_| ended())?;
    let session_until = live.hub.vouched_until().ok_or_else(ended)?;
    let flags = Arc::new(Flags::default());
    let (own_tx, own_rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(watch_own_node(
        Arc::downgrade(session),
        path.to_string(),
        flags.clone(),
        own_tx,
        watcher,
    ));
    let handle = ZkLease {
        session: session.clone(),
        path: path.to_string(),
        flags,
        watch_task: task.abort_handle(),
    };
    let own_events =
        futures::stream::unfold(
            own_rx,
            |mut rx| async move { rx.recv().await.map(|e| (e, rx)) },
        );
    let events = futures::stream::select(session_events, own_events);
    let token = u64::try_from(stat.czxid).ok().map(FencingToken::new);
    let now = Instant::now();
    let valid_until = validity(looked, ttl);
    if valid_until.min(session_until) <= now {
        return Err(LockError::unavailable(format!(
            "acquiring {path} took longer than the session can be vouched for"
        )));
    }
    Ok(Lease::new(Box::new(handle), valid_until)
        .with_session_until(session_until)
        .with_token(token)
        .with_key(path)
        .with_events(events.boxed()))
}

/// Watches our own node while the guard lives: a deletion by anyone else is
/// `Lost(NotOwner)`. Data changes re-arm the watch; session ends are the
/// hub's to report.
async fn watch_own_node(
    session: std::sync::Weak<Session>,
    path: String,
    flags: Arc<Flags>,
    events: mpsc::UnboundedSender<LeaseEvent>,
    watcher: zk::OneshotWatcher,
) {
    let lost = |flags: &Flags| {
        if !flags.released.load(Ordering::SeqCst) {
            flags.gone.store(true, Ordering::SeqCst);
            tracing::warn!(%path, "lock-zk: our lock node was deleted by someone else");
            let _ = events.send(LeaseEvent::Lost(LossCause::NotOwner));
        }
    };
    let mut watcher = Some(watcher);
    loop {
        let watcher = match watcher.take() {
            Some(w) => w,
            None => loop {
                let Some(s) = session.upgrade() else { return };
                match s.watch_stat(&path, s.bound()).await {
                    Ok((Some(_), w)) => break w,
                    Ok((None, _)) => return lost(&flags),
                    Err(_) if !s.is_live() => return,
                    Err(_) => {
                        drop(s);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            },
        };
        let event = watcher.changed().await;
        if flags.released.load(Ordering::SeqCst) {
            return;
        }
        match event.event_type {
            zk::EventType::NodeDeleted => return lost(&flags),
            zk::EventType::Session => return,
            _ => {}
        }
    }
}

/// The lease handle of one guard: its node's exact path on its session.
struct ZkLease {
    session: Arc<Session>,
    path: String,
    flags: Arc<Flags>,
    watch_task: tokio::task::AbortHandle,
}

impl Drop for ZkLease {
    fn drop(&mut self) {
        self.watch_task.abort();
        // The core always releases before dropping; should a lease be dropped
        // unreleased anyway (a runtime shutting down), delete its node if a
        // runtime is still there, or it stays until the session ends.
        let unreleased =
            !self.flags.released.load(Ordering::SeqCst) && !self.flags.gone.load(Ordering::SeqCst);
        if unreleased && self.session.is_live() {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let (session, path) = (self.session.clone(), self.path.clone());
                rt.spawn(async move {
                    let _ = session.delete(&path, session.bound()).await;
                });
            }
        }
    }
}

#[async_trait]
impl LeaseHandle for ZkLease {
    /// Answers from the session's state, without a request: the node is ours
    /// as long as the session lives and nobody deleted it. The answer is the
    /// guard's own bound, `now + ttl - drift`; the core caps it with the
    /// session's, which the hub sends as [`LeaseEvent::Confirmed`] after
    /// every answered heartbeat.
    async fn renew(&self, ttl: Duration) -> Result<Renewal> {
        if self.flags.gone.load(Ordering::SeqCst) {
            return Ok(Renewal::Gone);
        }
        let live = &self.session.live;
        match live.hub.status() {
            SessionStatus::Ended { .. } => Ok(Renewal::Gone),
            SessionStatus::Suspended { reason } => Err(LockError::unavailable(reason)),
            _ => {
                let now = Instant::now();
                if live.hub.vouched_until().is_none_or(|until| until <= now) {
                    return Err(LockError::unavailable(format!(
                        "ZooKeeper session {}: no recent reply",
                        live.id
                    )));
                }
                Ok(Renewal::Renewed {
                    valid_until: validity(now, ttl),
                })
            }
        }
    }

    /// Deletes our node by its exact path (never anyone else's: the path
    /// carries our uuid). A failed deletion is retried in the background
    /// while the session lives.
    async fn release(&self) -> Result<bool> {
        if self.flags.released.swap(true, Ordering::SeqCst) {
            return Ok(false);
        }
        self.watch_task.abort();
        if self.flags.gone.load(Ordering::SeqCst) {
            return Ok(false);
        }
        match self.session.delete(&self.path, self.session.bound()).await {
            Ok(()) => Ok(true),
            Err(Failure::Zk(zk::Error::NoNode)) | Err(Failure::Retired(_)) => Ok(false),
            Err(f) => {
                let contender = Contender::known(self.session.clone(), &self.path);
                tokio::spawn(Arc::new(contender).remove_eventually());
                Err(lock_error(&format!("releasing {}", self.path), f))
            }
        }
    }
}
