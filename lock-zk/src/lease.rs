//! A granted lease: our node, the watch on it, and the handle the core
//! renews and releases.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use lock_core::backend::session::SessionStatus;
use lock_core::backend::{validity, Lease, LeaseHandle, Renewal};
use lock_core::{FencingToken, LockError, Result};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::Retired;
use crate::error::{lock_error, Failure};
use crate::node;
use crate::own::{Flags, OwnNode};
use crate::queue::{Contender, Created, Nodes};
use crate::session::Session;

/// The lease of our node `created` on `session`: its token is `stamped`
/// (the zxid of the transaction that stamped a read-write lock's grant, see
/// `Backend::contend`) or else the node's czxid (from the create's reply,
/// or read when the node was found after a lost reply), its own validity
/// `ttl` from `looked` (taken before
/// the request that showed it ours was sent), its session validity what the
/// session vouches for now. Its events are the session's (through the hub)
/// and the watch on the node, so a deletion by someone else is
/// `Lost(NotOwner)` ([`OwnNode`]); that watch is set shortly after the grant by the
/// guard's keeper polling the event stream, not on the acquire's path (a
/// node deleted before it is set is found missing then).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn grant(
    session: &Arc<Session>,
    nodes: &Arc<Nodes>,
    data: &Arc<[u8]>,
    created: &Created,
    ttl: Duration,
    looked: Instant,
    stamped: Option<i64>,
    until: Instant,
) -> Result<Lease> {
    let path = created.path.as_str();
    let (czxid, watcher) = match &created.stat {
        Some(stat) => (stat.czxid, None),
        None => match session.watch(path, until).await {
            Ok(Some((stat, watcher))) => (stat.czxid, Some(watcher)),
            Ok(None) => return Err(crate::queue::vanished(path)),
            Err(f) => return Err(lock_error(&format!("watching {path}"), f)),
        },
    };
    let live = &session.live;
    let ended = || {
        lock_error(
            &format!("acquiring {path}"),
            Failure::Retired(live.retired().unwrap_or(Retired::Closed)),
        )
    };
    let session_until = live.hub.vouched_until().ok_or_else(ended)?;
    let valid_until = validity(looked, ttl);
    if valid_until.min(session_until) <= Instant::now() {
        return Err(LockError::unavailable(format!(
            "acquiring {path} took longer than the session can be vouched for"
        )));
    }
    let session_events = live.hub.register().map_err(|_| ended())?;
    let flags = Arc::new(Flags::default());
    // One copy of the path, shared by the lease, its watch and the view.
    let shared_path: Arc<str> = path.into();
    let own = OwnNode::new(
        Arc::downgrade(session),
        shared_path.clone(),
        flags.clone(),
        watcher,
    );
    let handle = ZkLease {
        session: session.clone(),
        nodes: nodes.clone(),
        data: data.clone(),
        path: shared_path.clone(),
        flags,
    };
    let token = u64::try_from(stamped.unwrap_or(czxid))
        .ok()
        .map(FencingToken::new);
    Ok(Lease::new(Box::new(handle), valid_until)
        .with_session_until(session_until)
        .with_token(token)
        .with_key(shared_path)
        .with_events(futures::stream::select(session_events, own).boxed()))
}

/// The lease handle of one guard: its node's exact path on its session.
struct ZkLease {
    session: Arc<Session>,
    nodes: Arc<Nodes>,
    /// Our node's data, which a downgrade's read node carries too.
    data: Arc<[u8]>,
    path: Arc<str>,
    flags: Arc<Flags>,
}

impl Drop for ZkLease {
    fn drop(&mut self) {
        // The core always releases before dropping; should a lease be dropped
        // unreleased anyway (a runtime shutting down), delete its node if a
        // runtime is still there, or it stays until the session ends.
        let unreleased = !self.flags.released() && !self.flags.gone();
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
        if self.flags.gone() {
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
    /// carries our uuid): one request (a watch on the node fires on it,
    /// nothing to cancel). A failed deletion is retried in the background
    /// while the session lives.
    async fn release(&self) -> Result<bool> {
        if self.flags.released.swap(true, Ordering::SeqCst) {
            return Ok(false);
        }
        if self.flags.gone() {
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

    /// Write -> read without a moment in which another writer could get in:
    /// creates the read node that takes our write node's place (same uuid,
    /// same sequence text, so it sorts where the write node stands, ahead
    /// of every contender that came after it: a writer queued behind us
    /// waits for it, as it waited for us), then deletes the write node. The
    /// read lease's token is the new node's czxid: the zxid of its create,
    /// above every earlier grant of the lock (they all happened before it)
    /// and below every later one (a later grant is stamped, or created,
    /// after it; see `Backend::contend`).
    async fn downgrade(&self, ttl: Duration) -> Result<Lease> {
        let (dir, name) = self.path.rsplit_once('/').unwrap_or(("", &self.path));
        let Some(read_name) = node::downgraded(name) else {
            return Err(LockError::invalid(format!(
                "only a write lease can be downgraded, not {}",
                self.path
            )));
        };
        if self.flags.gone() {
            return Err(LockError::new(
                lock_core::LockErrorKind::Lost,
                format!("{} was deleted by someone else", self.path),
            ));
        }
        let read_path = format!("{dir}/{read_name}");
        let session = &self.session;
        let until = session.bound();
        let looked = Instant::now();
        let what = || format!("downgrading {} to {read_path}", self.path);
        let stat = match session
            .create_ephemeral(&read_path, &self.data, &self.nodes.acls, until)
            .await
        {
            Ok(stat) => stat,
            // A reply that never came, or a retry of one: the node carries
            // our uuid, so it is ours if it is there.
            Err(f) if f.may_have_applied() || matches!(f, Failure::Zk(zk::Error::NodeExists)) => {
                match session.stat(&read_path, until).await {
                    Ok(Some(stat)) if stat.ephemeral_owner == session.live.owner() => stat,
                    Ok(_) => return Err(lock_error(&what(), f)),
                    Err(g) => {
                        let read = Contender::known(session.clone(), &read_path);
                        tokio::spawn(Arc::new(read).remove_eventually());
                        return Err(lock_error(&what(), g));
                    }
                }
            }
            Err(f) => return Err(lock_error(&what(), f)),
        };
        let read = Created {
            path: read_path.clone(),
            stat: Some(stat),
            listing: None,
        };
        let lease = match grant(
            session,
            &self.nodes,
            &self.data,
            &read,
            ttl,
            looked,
            None,
            until,
        )
        .await
        {
            Ok(lease) => lease,
            Err(err) => {
                let read = Contender::known(session.clone(), &read_path);
                tokio::spawn(Arc::new(read).remove_eventually());
                return Err(err);
            }
        };
        // The read side is ours: the write side goes.
        self.flags.released.store(true, Ordering::SeqCst);
        match session.delete(&self.path, until).await {
            Ok(()) | Err(Failure::Zk(zk::Error::NoNode)) | Err(Failure::Retired(_)) => {}
            Err(f) => {
                tracing::warn!(path = %self.path, error = %lock_error(&what(), f), "lock-zk: deleting the write node of a downgrade failed; retrying in the background");
                let write = Contender::known(session.clone(), &self.path);
                tokio::spawn(Arc::new(write).remove_eventually());
            }
        }
        Ok(lease)
    }
}
