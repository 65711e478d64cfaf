//! [`ZkLock`]: the [`LockBackend`] on ZooKeeper.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    add_saturating, validity, Capabilities, CleanupOnDrop, Fencing, FencingToken, Lease,
    LeaseEvent, LeaseHandle, LeaseRequest, LockBackend, LockError, LockErrorKind, LockName,
    LockStatus, LossCause, Renewal, Result,
};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::config::{allowed_char, NodeAcl, Perms, ZkConfig};
use crate::core::{lock_error, Failure, Link, Session};
use crate::node;

/// How often a contender node is created again when its parent vanished
/// between the `mkdir` and the `create` (an empty container node removed by
/// the server), and after a lost create reply that left no node.
const CREATE_ATTEMPTS: usize = 4;

/// How many times clean-up retries the removal of a contender node whose
/// deletion failed (the session stays alive, so the node would otherwise stay).
const CLEANUP_ATTEMPTS: u32 = 30;

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A distributed lock service on ZooKeeper: one session shared by every lock
/// and guard taken through it. Cheap to clone (clones share the session);
/// one per process and ensemble is the usual set-up. When its session
/// expires, the next call opens a new one.
///
/// See the [crate docs](crate) for the node layout, the guarantees and the
/// session states.
#[derive(Clone)]
pub struct ZkLock {
    inner: Arc<Backend>,
}

struct Backend {
    config: ZkConfig,
    hosts: String,
    root: String,
    acls: Arc<[zk::Acl]>,
    current: Mutex<Option<Arc<Session>>>,
    connecting: tokio::sync::Mutex<()>,
    /// Sessions opened or attempted after the first, and how the last
    /// attempt failed (shared with callers that queued behind it).
    connect_attempts: std::sync::atomic::AtomicU64,
    last_connect_failure: Mutex<Option<(LockErrorKind, String)>>,
    /// The server supports container nodes (3.5.3+); parents fall back to
    /// persistent nodes when it does not.
    containers: AtomicBool,
}

impl std::fmt::Debug for ZkLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let session = locked(&self.inner.current)
            .as_ref()
            .map(|s| s.shared.id.clone());
        f.debug_struct("ZkLock")
            .field("config", &self.inner.config)
            .field("session", &session)
            .finish()
    }
}

fn acls_of(acl: &NodeAcl) -> Vec<zk::Acl> {
    match acl {
        NodeAcl::Open => vec![zk::Acl::new(zk::Permission::ALL, zk::AuthId::anyone())],
        NodeAcl::CreatorAll => vec![zk::Acl::new(zk::Permission::ALL, zk::AuthId::authed())],
        NodeAcl::Custom(entries) => entries
            .iter()
            .map(|e| {
                let bits = [
                    (Perms::READ, zk::Permission::READ),
                    (Perms::WRITE, zk::Permission::WRITE),
                    (Perms::CREATE, zk::Permission::CREATE),
                    (Perms::DELETE, zk::Permission::DELETE),
                    (Perms::ADMIN, zk::Permission::ADMIN),
                ];
                let perms = bits
                    .iter()
                    .filter(|(ours, _)| e.perms.contains(*ours))
                    .fold(zk::Permission::NONE, |acc, (_, theirs)| acc | *theirs);
                zk::Acl::new(perms, zk::AuthId::new(&e.scheme, &e.id))
            })
            .collect(),
    }
}

impl ZkLock {
    /// Checks `config` and opens a session. Fails with
    /// [`LockErrorKind::Unavailable`] if no server answers within
    /// [`ZkConfig::connect_timeout`], [`LockErrorKind::InvalidArgument`] for a
    /// bad configuration, [`LockErrorKind::Unauthorized`] for refused
    /// credentials.
    pub async fn connect(config: ZkConfig) -> Result<Self> {
        let resolved = config.resolve()?;
        let acls: Arc<[zk::Acl]> = acls_of(&config.acl).into();
        let until = add_saturating(Instant::now(), config.connect_timeout);
        let session = Session::connect(&resolved.hosts, &config, until).await?;
        Ok(Self {
            inner: Arc::new(Backend {
                config,
                hosts: resolved.hosts,
                root: resolved.root,
                acls,
                current: Mutex::new(Some(session)),
                connecting: tokio::sync::Mutex::new(()),
                connect_attempts: std::sync::atomic::AtomicU64::new(0),
                last_connect_failure: Mutex::new(None),
                containers: AtomicBool::new(true),
            }),
        })
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &ZkConfig {
        &self.inner.config
    }

    /// The znode of lock `name`: `[chroot]<base_path>/<name>`, under which
    /// contenders create their nodes (the path to give Curator's
    /// `InterProcessMutex` or kazoo's `Lock` to share the lock). With a
    /// chroot in the connect string, the path seen by clients connected
    /// without that chroot.
    pub fn lock_path(&self, name: &LockName) -> Result<String> {
        self.inner.lock_path(name)
    }

    /// The session timeout the server granted to the current session (the
    /// one asked for, clamped by the server to 2..=20 `tickTime`s); `None`
    /// while no session is open (after an expiry, until the next call).
    pub fn session_timeout(&self) -> Option<Duration> {
        locked(&self.inner.current)
            .as_ref()
            .filter(|s| s.is_live())
            .map(|s| s.shared.timeout)
    }

    /// The id of the current session as ZooKeeper prints it (`0x...`, as in
    /// the server's log and its `cons` output); `None` while no session is
    /// open.
    pub fn session_id(&self) -> Option<String> {
        locked(&self.inner.current)
            .as_ref()
            .filter(|s| s.is_live())
            .map(|s| s.shared.id.clone())
    }
}

impl Backend {
    fn lock_path(&self, name: &LockName) -> Result<String> {
        if let Some(c) = name.as_str().chars().find(|c| !allowed_char(*c)) {
            return Err(LockError::invalid(format!(
                "lock name {name} contains {c:?}, which ZooKeeper does not allow in paths"
            )));
        }
        node::check_name(name)?;
        Ok(format!("{}/{}", self.root, name.as_str()))
    }

    /// The live session, or a new one when the last was retired, opened
    /// before `until` (the bound of the calling operation).
    async fn session(&self, until: Instant) -> Result<Arc<Session>> {
        if let Some(s) = locked(&self.current).as_ref().filter(|s| s.is_live()) {
            return Ok(s.clone());
        }
        let attempts_before = self.connect_attempts.load(Ordering::SeqCst);
        let Ok(_one_at_a_time) = tokio::time::timeout_at(until, self.connecting.lock()).await
        else {
            return Err(LockError::unavailable(
                "no ZooKeeper session: another call is still opening one",
            ));
        };
        if let Some(s) = locked(&self.current).as_ref().filter(|s| s.is_live()) {
            return Ok(s.clone());
        }
        // Callers that queued behind a failed attempt share its outcome rather
        // than each waiting out a connect timeout of its own.
        if self.connect_attempts.load(Ordering::SeqCst) != attempts_before {
            if let Some((kind, message)) = locked(&self.last_connect_failure).clone() {
                return Err(LockError::new(kind, message));
            }
        }
        let outcome = Session::connect(&self.hosts, &self.config, until).await;
        self.connect_attempts.fetch_add(1, Ordering::SeqCst);
        match outcome {
            Ok(session) => {
                *locked(&self.last_connect_failure) = None;
                *locked(&self.current) = Some(session.clone());
                Ok(session)
            }
            Err(err) => {
                *locked(&self.last_connect_failure) = Some((err.kind(), err.to_string()));
                Err(err)
            }
        }
    }

    /// Creates `dir` and its missing ancestors, as container nodes where the
    /// server has them (removed by the server once empty, as Curator's
    /// `creatingParentContainersIfNeeded` does).
    async fn make_parents(&self, session: &Session, dir: &str, until: Instant) -> Result<()> {
        let what = || format!("creating the lock node {dir}");
        if self.containers.load(Ordering::Relaxed) {
            match session
                .mkdir(dir, zk::CreateMode::Container, &self.acls, until)
                .await
            {
                Ok(()) => return Ok(()),
                Err(Failure::Zk(zk::Error::Unimplemented)) => {
                    tracing::info!(
                        "lock-zk: the server has no container nodes; creating persistent parents"
                    );
                    self.containers.store(false, Ordering::Relaxed);
                }
                Err(f) => return Err(lock_error(&what(), f)),
            }
        }
        match session
            .mkdir(dir, zk::CreateMode::Persistent, &self.acls, until)
            .await
        {
            Ok(()) => Ok(()),
            Err(f) => Err(lock_error(&what(), f)),
        }
    }

    /// Creates our contender node `dir/_c_<uuid>-lock-<seq>`. After a lost
    /// reply (connection loss, request timeout) it looks for the node by its
    /// uuid, as Curator's protection mode does, and creates it only if it
    /// is not there.
    async fn create_contender(&self, c: &Contender, until: Instant) -> Result<String> {
        let prefix = format!("{}/{}", c.dir, c.prefix);
        let data = self.config.identifier.as_bytes();
        let mut last = None;
        for _ in 0..CREATE_ATTEMPTS {
            c.update(|st| st.in_flight = true);
            let created = c
                .session
                .create_sequential(&prefix, data, &self.acls, until)
                .await;
            c.update(|st| st.in_flight = false);
            match created {
                Ok(path) => {
                    c.update(|st| st.node = Some(path.clone()));
                    return Ok(path);
                }
                Err(Failure::Zk(zk::Error::NoNode)) => {
                    self.make_parents(&c.session, &c.dir, until).await?
                }
                Err(f) if f.may_have_applied() => {
                    c.update(|st| st.lost_reply = true);
                    if let Some(path) = c.find(until).await? {
                        c.update(|st| st.node = Some(path.clone()));
                        return Ok(path);
                    }
                    last = Some(f);
                }
                Err(f) => {
                    return Err(lock_error(
                        &format!("creating a contender node under {}", c.dir),
                        f,
                    ))
                }
            }
        }
        Err(match last {
            Some(f) => lock_error(&format!("creating a contender node under {}", c.dir), f),
            None => LockError::unavailable(format!(
                "creating a contender node under {}: its parent kept disappearing",
                c.dir
            )),
        })
    }

    /// One acquisition: create our node, then wait for our turn (or not:
    /// `deadline` `None` is one attempt).
    async fn acquire(
        &self,
        req: &LeaseRequest,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>> {
        let dir = self.lock_path(&req.name)?;
        // Every request of this call answers before `until`: the wait plus
        // one request timeout.
        let until = add_saturating(
            deadline.unwrap_or_else(Instant::now),
            self.config.request_timeout,
        );
        let session = self.session(until).await?;
        if deadline.is_none() {
            // A held lock answers `None` without a write (and without queueing
            // behind waiters: no barging).
            match session.list(&dir, until).await {
                Ok(children)
                    if children
                        .iter()
                        .any(|c| node::parse(c).is_some_and(|(_, m)| node::is_mutex(m))) =>
                {
                    return Ok(None)
                }
                Ok(_) | Err(Failure::Zk(zk::Error::NoNode)) => {}
                Err(f) => return Err(lock_error(&format!("listing {dir}"), f)),
            }
        }
        let contender = Arc::new(Contender {
            session: session.clone(),
            dir,
            prefix: node::our_prefix(&uuid::Uuid::new_v4(), node::Marker::CuratorLock),
            state: Mutex::new(NodeState::default()),
        });
        // Armed before the create is sent: a dropped acquire removes the node
        // even if the create's reply never came.
        let cleanup = CleanupOnDrop::new(contender.clone().remove_eventually());
        let outcome = self.contend(&contender, req, deadline, until).await;
        if matches!(outcome, Ok(Some(_))) {
            cleanup.disarm();
            return outcome;
        }
        // Not granted: remove our node before answering, so that the caller's
        // next step (or another client's) does not see it.
        match contender.remove(until).await {
            Ok(()) => cleanup.disarm(),
            Err(err) => {
                tracing::warn!(dir = %contender.dir, error = %err, "lock-zk: removing a contender node failed; retrying in the background");
                drop(cleanup);
            }
        }
        outcome
    }

    async fn contend(
        &self,
        c: &Contender,
        req: &LeaseRequest,
        deadline: Option<Instant>,
        until: Instant,
    ) -> Result<Option<Lease>> {
        let path = self.create_contender(c, until).await?;
        let ours = path.rsplit('/').next().unwrap_or_default().to_string();
        let mut contended = None;
        loop {
            let looked = Instant::now();
            let children = match c.session.list(&c.dir, until).await {
                Ok(children) => children,
                Err(Failure::Zk(zk::Error::NoNode)) => Vec::new(),
                Err(f) => return Err(lock_error(&format!("listing {}", c.dir), f)),
            };
            let order = node::contenders(children, node::is_mutex);
            let Some(pos) = order.iter().position(|n| n.name == ours) else {
                return Err(vanished(&path));
            };
            let contended = *contended.get_or_insert(pos > 0);
            if pos == 0 {
                return self
                    .grant(c, &path, req.ttl, looked, until)
                    .await
                    .map(|l| Some(l.with_contended(contended)));
            }
            let Some(deadline) = deadline else {
                return Ok(None);
            };
            if Instant::now() >= deadline {
                return Ok(None);
            }
            // Watch only the contender just before us (no herd); when it goes,
            // list again: an earlier one may still be there.
            let predecessor = format!("{}/{}", c.dir, order[pos - 1].name);
            let watcher = match c.session.watch_stat(&predecessor, until).await {
                Ok((Some(_), watcher)) => watcher,
                Ok((None, _)) => continue,
                Err(f) => return Err(lock_error(&format!("watching {predecessor}"), f)),
            };
            tokio::select! {
                _ = watcher.changed() => {}
                _ = tokio::time::sleep_until(deadline) => return Ok(None),
                cause = c.session.ended() => {
                    return Err(lock_error(&format!("waiting for {}", c.dir), Failure::Retired(cause)));
                }
            }
        }
    }

    /// Our node is first: set up the watch on it and build the lease.
    async fn grant(
        &self,
        c: &Contender,
        path: &str,
        ttl: Duration,
        looked: Instant,
        until: Instant,
    ) -> Result<Lease> {
        let session = &c.session;
        let (stat, watcher) = match session.watch_stat(path, until).await {
            Ok((Some(stat), watcher)) => (stat, watcher),
            Ok((None, _)) => return Err(vanished(path)),
            Err(f) => return Err(lock_error(&format!("watching {path}"), f)),
        };
        let now = Instant::now();
        // The guard's own bound; the session's comes with the registration
        // (and with every answered heartbeat after it).
        let valid_until = validity(looked, ttl);
        if valid_until.min(session.shared.bound()) <= now {
            return Err(LockError::unavailable(format!(
                "acquiring {path} took longer than the session can be vouched for"
            )));
        }
        let reg = session
            .register()
            .map_err(|f| lock_error(&format!("acquiring {path}"), f))?;
        let flags = Arc::new(Flags::default());
        let task = tokio::spawn(watch_own_node(
            Arc::downgrade(session),
            path.to_string(),
            flags.clone(),
            reg.events.clone(),
            watcher,
        ));
        let handle = ZkLease {
            session: session.clone(),
            path: path.to_string(),
            id: reg.id,
            flags,
            watch_task: task.abort_handle(),
        };
        let events = futures::stream::unfold(reg.receiver, |mut rx| async move {
            rx.recv().await.map(|e| (e, rx))
        });
        let token = u64::try_from(stat.czxid).ok().map(FencingToken::new);
        Ok(Lease::new(Box::new(handle), valid_until)
            .with_session_until(reg.session_until)
            .with_token(token)
            .with_events(Box::pin(events)))
    }
}

fn vanished(path: &str) -> LockError {
    LockError::new(
        LockErrorKind::Lost,
        format!(
            "our contender node {path} was deleted while acquiring (by someone else, or with its expired session)"
        ),
    )
}

/// What we know about our contender node.
#[derive(Default)]
struct NodeState {
    /// Its full path, once the create reply (or the search) told us.
    node: Option<String>,
    /// A create was sent and has no answer yet (the acquire may be dropped
    /// right now): the node may exist.
    in_flight: bool,
    /// A create's reply was lost: a node we do not know of may exist.
    lost_reply: bool,
}

/// One acquisition's contender node.
struct Contender {
    session: Arc<Session>,
    dir: String,
    /// `_c_<uuid>-lock-`, unique to this acquisition.
    prefix: String,
    state: Mutex<NodeState>,
}

impl Contender {
    fn update(&self, f: impl FnOnce(&mut NodeState)) {
        f(&mut locked(&self.state));
    }

    /// Our node, found by its uuid among the children, after a `sync`: the
    /// server we read from may be another than the one the create went
    /// through (after a reconnection) and lag behind the leader; the sync
    /// makes it apply every write the leader committed first. A failed sync
    /// is an error: without it, "not there" proves nothing.
    async fn find(&self, until: Instant) -> Result<Option<String>> {
        self.sync(until).await?;
        match self.session.list(&self.dir, until).await {
            Ok(children) => Ok(children
                .into_iter()
                .find(|child| child.starts_with(&self.prefix))
                .map(|child| format!("{}/{child}", self.dir))),
            Err(Failure::Zk(zk::Error::NoNode)) => Ok(None),
            Err(f) => Err(lock_error(
                &format!("looking for our contender node under {}", self.dir),
                f,
            )),
        }
    }

    /// Deletes our node(s): the known path, and any child carrying our uuid
    /// when a create's outcome was unknown. A retired session counts as done:
    /// its nodes go away with it.
    async fn remove(&self, until: Instant) -> Result<()> {
        let (node, uncertain) = {
            let st = locked(&self.state);
            (st.node.clone(), st.in_flight || st.lost_reply)
        };
        let done = |r: std::result::Result<(), Failure>, what: &str| match r {
            Ok(()) | Err(Failure::Zk(zk::Error::NoNode)) | Err(Failure::Retired(_)) => Ok(()),
            Err(f) => Err(lock_error(what, f)),
        };
        if let Some(path) = &node {
            done(
                self.session.delete(path, until).await,
                &format!("deleting {path}"),
            )?;
        }
        if uncertain {
            // A node we never heard of may exist, also on a server that has
            // not applied its create yet: sync first (see `find`).
            match self.sync(until).await {
                Err(err) if self.session.is_live() => return Err(err),
                _ => {}
            }
            let children = match self.session.list(&self.dir, until).await {
                Ok(children) => children,
                Err(f) => {
                    return done(Err(f), &format!("listing {}", self.dir));
                }
            };
            for child in children.iter().filter(|c| c.starts_with(&self.prefix)) {
                let path = format!("{}/{child}", self.dir);
                done(
                    self.session.delete(&path, until).await,
                    &format!("deleting {path}"),
                )?;
            }
        }
        Ok(())
    }

    /// Brings the server we read from up to date with the leader for our
    /// directory.
    async fn sync(&self, until: Instant) -> Result<()> {
        match self.session.sync(&self.dir, until).await {
            Ok(()) | Err(Failure::Zk(zk::Error::NoNode)) => Ok(()),
            Err(f) => Err(lock_error(
                &format!("syncing with the leader before looking under {}", self.dir),
                f,
            )),
        }
    }

    /// [`Contender::remove`], retried with backoff until it succeeds or the
    /// session is retired (which removes the node too).
    async fn remove_eventually(self: Arc<Self>) {
        let mut delay = Duration::from_millis(20);
        for attempt in 1..=CLEANUP_ATTEMPTS {
            match self.remove(self.session.bound()).await {
                Ok(()) => return,
                Err(err) if attempt == CLEANUP_ATTEMPTS => {
                    tracing::error!(dir = %self.dir, error = %err, "lock-zk: giving up removing a contender node; it stays until the session ends");
                }
                Err(err) => {
                    tracing::debug!(dir = %self.dir, error = %err, attempt, "lock-zk: removing a contender node failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
            }
        }
    }
}

/// A guard's flags, shared with the watch on its node.
#[derive(Default)]
struct Flags {
    /// Released (or being released) by its owner: a deletion is ours.
    released: AtomicBool,
    /// The node was deleted by someone else.
    gone: AtomicBool,
}

/// Watches our own node while the guard lives: a deletion by anyone else is
/// `Lost(NotOwner)`. Data changes re-arm the watch; session ends are the
/// monitor's to report.
async fn watch_own_node(
    session: std::sync::Weak<Session>,
    path: String,
    flags: Arc<Flags>,
    events: tokio::sync::mpsc::UnboundedSender<LeaseEvent>,
    mut watcher: zk::OneshotWatcher,
) {
    let lost = |flags: &Flags| {
        if !flags.released.load(Ordering::SeqCst) {
            flags.gone.store(true, Ordering::SeqCst);
            tracing::warn!(%path, "lock-zk: our lock node was deleted by someone else");
            let _ = events.send(LeaseEvent::Lost(LossCause::NotOwner));
        }
    };
    loop {
        let event = watcher.changed().await;
        if flags.released.load(Ordering::SeqCst) {
            return;
        }
        match event.event_type {
            zk::EventType::NodeDeleted => return lost(&flags),
            zk::EventType::Session => return,
            _ => loop {
                let Some(s) = session.upgrade() else { return };
                match s.watch_stat(&path, s.bound()).await {
                    Ok((Some(_), w)) => {
                        watcher = w;
                        break;
                    }
                    Ok((None, _)) => return lost(&flags),
                    Err(_) if !s.is_live() => return,
                    Err(_) => {
                        drop(s);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            },
        }
    }
}

/// The lease handle of one guard: its node's exact path on its session.
struct ZkLease {
    session: Arc<Session>,
    path: String,
    id: u64,
    flags: Arc<Flags>,
    watch_task: tokio::task::AbortHandle,
}

impl Drop for ZkLease {
    fn drop(&mut self) {
        self.watch_task.abort();
        self.session.unregister(self.id);
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
    /// session's, which the session sends as [`LeaseEvent::Confirmed`] after
    /// every answered heartbeat.
    async fn renew(&self, ttl: Duration) -> Result<Renewal> {
        if self.flags.gone.load(Ordering::SeqCst) {
            return Ok(Renewal::Gone);
        }
        match self.session.shared.link() {
            Link::Retired(_) => Ok(Renewal::Gone),
            Link::Suspended(reason) => Err(LockError::unavailable(format!(
                "ZooKeeper session {} suspended: {reason}",
                self.session.shared.id
            ))),
            Link::Connected => {
                let now = Instant::now();
                let bound = self.session.shared.bound();
                if bound <= now {
                    return Err(LockError::unavailable(format!(
                        "ZooKeeper session {}: no recent reply",
                        self.session.shared.id
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
        self.session.unregister(self.id);
        if self.flags.gone.load(Ordering::SeqCst) {
            return Ok(false);
        }
        match self.session.delete(&self.path, self.session.bound()).await {
            Ok(()) => Ok(true),
            Err(Failure::Zk(zk::Error::NoNode)) | Err(Failure::Retired(_)) => Ok(false),
            Err(f) => {
                let (dir, name) = self.path.rsplit_once('/').unwrap_or(("", &self.path));
                let contender = Arc::new(Contender {
                    session: self.session.clone(),
                    dir: dir.to_string(),
                    prefix: name.to_string(),
                    state: Mutex::new(NodeState {
                        node: Some(self.path.clone()),
                        ..NodeState::default()
                    }),
                });
                tokio::spawn(contender.remove_eventually());
                Err(lock_error(&format!("releasing {}", self.path), f))
            }
        }
    }
}

#[async_trait]
impl LockBackend for ZkLock {
    fn backend_capabilities(&self) -> Capabilities {
        Capabilities::new("zookeeper")
            .with_fencing(Fencing::Durable)
            .with_fifo(true)
            .with_loss_events(true)
            .with_notified_wait(true)
            .with_remote(true)
            .with_fault_tolerance("a minority of the 2N+1 ensemble; a holder's lock outlives it by the session timeout")
    }

    async fn try_lock(&self, req: &LeaseRequest) -> Result<Option<Lease>> {
        self.inner.acquire(req, None).await
    }

    async fn lock(&self, req: &LeaseRequest, deadline: Instant) -> Result<Option<Lease>> {
        self.inner.acquire(req, Some(deadline)).await
    }

    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        let inner = &self.inner;
        let dir = inner.lock_path(name)?;
        let until = add_saturating(Instant::now(), inner.config.request_timeout);
        let session = inner.session(until).await?;
        // The holder may leave between the listing and the stat: look again.
        for _ in 0..5 {
            let children = match session.list(&dir, until).await {
                Ok(children) => children,
                Err(Failure::Zk(zk::Error::NoNode)) => Vec::new(),
                Err(f) => return Err(lock_error(&format!("listing {dir}"), f)),
            };
            let order = node::contenders(children, node::is_mutex);
            let Some(first) = order.first() else {
                return Ok(LockStatus::new(false).with_waiters(Some(0)));
            };
            let path = format!("{dir}/{}", first.name);
            match session.stat(&path, until).await {
                Ok(Some(stat)) => {
                    return Ok(LockStatus::new(true)
                        .with_token(u64::try_from(stat.czxid).ok().map(FencingToken::new))
                        .with_waiters(Some(order.len() - 1)))
                }
                Ok(None) => continue,
                Err(f) => return Err(lock_error(&format!("reading {path}"), f)),
            }
        }
        Err(LockError::new(
            LockErrorKind::Unavailable,
            format!("{dir}: the holder kept changing while inspecting"),
        ))
    }
}
