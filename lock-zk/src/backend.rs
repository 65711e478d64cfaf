//! [`ZkLock`]: the [`LockBackend`] on ZooKeeper.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    add_saturating, Capabilities, CleanupOnDrop, Fencing, FencingToken, Lease, LeaseRequest,
    LockBackend, LockError, LockErrorKind, LockName, LockStatus, Result,
};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::config::{allowed_char, NodeAcl, Perms, ZkConfig};
use crate::error::lock_error;
use crate::lease;
use crate::node;
use crate::queue::{Contender, Nodes, Recipe, Turn};
use crate::session::{locked, Session};

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
    nodes: Nodes,
    current: Mutex<Option<Arc<Session>>>,
    connecting: tokio::sync::Mutex<()>,
    /// Sessions opened or attempted after the first, and how the last
    /// attempt failed (shared with callers that queued behind it).
    connect_attempts: AtomicU64,
    last_connect_failure: Mutex<Option<(LockErrorKind, String)>>,
}

impl std::fmt::Debug for ZkLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let session = locked(&self.inner.current)
            .as_ref()
            .map(|s| s.live.id.clone());
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
        let until = add_saturating(Instant::now(), config.connect_timeout);
        let session = Session::connect(&resolved.hosts, &config, until).await?;
        let nodes = Nodes {
            acls: acls_of(&config.acl).into(),
            data: config.identifier.as_bytes().into(),
            containers: AtomicBool::new(true),
        };
        Ok(Self {
            inner: Arc::new(Backend {
                config,
                hosts: resolved.hosts,
                root: resolved.root,
                nodes,
                current: Mutex::new(Some(session)),
                connecting: tokio::sync::Mutex::new(()),
                connect_attempts: AtomicU64::new(0),
                last_connect_failure: Mutex::new(None),
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
            .map(|s| s.live.timeout)
    }

    /// The id of the current session as ZooKeeper prints it (`0x...`, as in
    /// the server's log and its `cons` output); `None` while no session is
    /// open.
    pub fn session_id(&self) -> Option<String> {
        locked(&self.inner.current)
            .as_ref()
            .filter(|s| s.is_live())
            .map(|s| s.live.id.clone())
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

    /// One acquisition in `recipe`'s queue: create our node, then wait for
    /// our turn (or not: `deadline` `None` is one attempt). Every request
    /// answers before the call's bound: the wait plus one request timeout.
    async fn acquire(
        &self,
        req: &LeaseRequest,
        recipe: Recipe,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>> {
        let dir = self.lock_path(&req.name)?;
        let until = add_saturating(
            deadline.unwrap_or_else(Instant::now),
            self.config.request_timeout,
        );
        let session = self.session(until).await?;
        if deadline.is_none() && self.held(&session, &dir, recipe, until).await? {
            return Ok(None);
        }
        let contender = Arc::new(Contender::new(session.clone(), dir, recipe));
        // Armed before the create is sent: a dropped acquire removes the node
        // even if the create's reply never came.
        let cleanup = CleanupOnDrop::new(contender.clone().remove_eventually());
        let outcome = self.contend(&contender, req, recipe, deadline, until).await;
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

    /// Whether `recipe`'s queue under `dir` has a contender now: a held lock
    /// answers `try_acquire` with `None` without a write (and without
    /// queueing behind waiters: no barging).
    async fn held(
        &self,
        session: &Session,
        dir: &str,
        recipe: Recipe,
        until: Instant,
    ) -> Result<bool> {
        match session.list(dir, until).await {
            Ok(children) => Ok(children
                .iter()
                .any(|c| node::parse(c).is_some_and(|(_, m)| recipe.counts(m)))),
            Err(f) if f.is_no_node() => Ok(false),
            Err(f) => Err(lock_error(&format!("listing {dir}"), f)),
        }
    }

    async fn contend(
        &self,
        c: &Contender,
        req: &LeaseRequest,
        recipe: Recipe,
        deadline: Option<Instant>,
        until: Instant,
    ) -> Result<Option<Lease>> {
        let created = self.nodes.create(c, until).await?;
        let turn = c
            .wait_turn(&created.path, recipe, created.listing, deadline, until)
            .await?;
        match turn {
            Turn::Held => Ok(None),
            Turn::Granted { looked, contended } => lease::grant(
                &c.session,
                &created.path,
                created.stat.as_ref(),
                req.ttl,
                looked,
                until,
            )
            .await
            .map(|l| Some(l.with_contended(contended))),
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
        self.inner.acquire(req, Recipe::Mutex, None).await
    }

    async fn lock(&self, req: &LeaseRequest, deadline: Instant) -> Result<Option<Lease>> {
        self.inner.acquire(req, Recipe::Mutex, Some(deadline)).await
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
                Err(f) if f.is_no_node() => Vec::new(),
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
