//! [`ZkLock`]: the [`LockBackend`] on ZooKeeper.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{add_saturating, LeaderStream, Lease, LeaseRequest, LockBackend};
use lock_core::{
    Capabilities, Fencing, ForceReleased, LeaderInfo, LockError, LockErrorKind, LockMode, LockName,
    LockStatus, Result,
};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::config::{allowed_char, NodeAcl, Perms, ZkConfig};
use crate::error::lock_error;
use crate::lease;
use crate::list;
use crate::node;
use crate::queue::{Contender, Look, Nodes, Pending, Recipe, Turn};
use crate::semaphore;
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

pub(crate) struct Backend {
    config: ZkConfig,
    hosts: String,
    root: String,
    pub(crate) nodes: Arc<Nodes>,
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
        let session = crate::connect::connect(&resolved.hosts, &config, until).await?;
        let nodes = Arc::new(Nodes {
            acls: acls_of(&config.acl).into(),
            identifier: config.identifier.as_str().into(),
            containers: AtomicBool::new(true),
            counting: AtomicBool::new(true),
            crowded: AtomicBool::new(false),
            last_data: std::sync::Mutex::new(None),
        });
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
    pub(crate) fn lock_path(&self, name: &LockName) -> Result<String> {
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
    pub(crate) async fn session(&self, until: Instant) -> Result<Arc<Session>> {
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
        let outcome = crate::connect::connect(&self.hosts, &self.config, until).await;
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

    /// The bound of a call that may wait until `deadline` (`None`: one
    /// attempt): every request answers before the wait plus one request
    /// timeout.
    pub(crate) fn until(&self, deadline: Option<Instant>) -> Instant {
        add_saturating(
            deadline.unwrap_or_else(Instant::now),
            self.config.request_timeout,
        )
    }

    /// One acquisition in `recipe`'s queue: create our node, then wait for
    /// our turn (or not: `deadline` `None` is one attempt).
    async fn acquire(
        &self,
        req: &LeaseRequest,
        recipe: Recipe,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>> {
        let dir = self.lock_path(&req.name)?;
        let until = self.until(deadline);
        let session = self.session(until).await?;
        if deadline.is_none() && self.held(&session, &dir, recipe, until).await? {
            return Ok(None);
        }
        let data = match recipe {
            // A candidate's node holds its value, as `LeaderLatch`'s and
            // `LeaderSelector`'s hold their participant id.
            Recipe::Leader | Recipe::Selector => {
                req.value.as_deref().unwrap_or_default().as_bytes().into()
            }
            _ => self.nodes.data_for(req.holder.as_ref()),
        };
        let contender = Arc::new(Contender::new(session.clone(), dir, recipe.marker(), data));
        let pending = Pending::new(contender.clone());
        let outcome = self.contend(&contender, req, recipe, deadline, until).await;
        match outcome {
            Ok(Some(_)) => pending.keep(),
            _ => pending.remove(until).await,
        }
        outcome
    }

    /// Whether a newcomer to `recipe`'s queue under `dir` would have to
    /// wait: a held lock answers `try_acquire` with `None` without a write
    /// (and without queueing behind waiters: no barging).
    async fn held(
        &self,
        session: &Session,
        dir: &str,
        recipe: Recipe,
        until: Instant,
    ) -> Result<bool> {
        match session.list(dir, until).await {
            Ok(children) => {
                let order = node::contenders(children, |m| recipe.counts(m));
                Ok(recipe.blocker(&order, order.len()).is_some())
            }
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
        let mut created = self.nodes.create(c, Look::Count, until).await?;
        let turn = c
            .wait_turn(
                &created.path,
                recipe,
                created.listing.take(),
                deadline,
                until,
            )
            .await?;
        let (looked, contended, pzxid) = match turn {
            Turn::Held => return Ok(None),
            Turn::Granted {
                looked,
                contended,
                pzxid,
            } => (looked, contended, pzxid),
        };
        if recipe.is_election() {
            let term =
                crate::election::begin(c, &self.nodes, &created, req, looked, deadline, until);
            return Ok(term.await?.map(|l| l.with_contended(contended)));
        }
        let stamped = match recipe {
            Recipe::Mutex | Recipe::Leader | Recipe::Selector => None,
            Recipe::Read | Recipe::Write => {
                let czxid = created.stat.as_ref().map(|s| s.czxid);
                let at_create = czxid.is_some() && pzxid == czxid;
                if at_create {
                    None
                } else {
                    Some(self.stamp(c, &created.path, until).await?)
                }
            }
        };
        lease::grant(
            &c.session,
            &self.nodes,
            &c.data,
            &created,
            req.ttl,
            looked,
            stamped,
            until,
        )
        .await
        .map(|l| Some(l.with_contended(contended)))
    }

    /// The fencing token of a read-write lock's grant that was not proven at
    /// our node's create: the zxid of a transaction that checks our node is
    /// still there and writes the lock znode's data (or, where the lock's
    /// ACL refuses that write, our node's data).
    ///
    /// Why: a node's czxid orders the grants of a mutex (each waits for
    /// every node ahead), but not those of a read-write lock. A writer
    /// queued behind a downgraded writer is granted after the downgrade's
    /// read node (created after the writer's node, so with a larger czxid)
    /// goes; readers queued behind a writer are let in together when it
    /// goes. So a grant that came after a wait takes the zxid of a write of
    /// its own, made once it holds:
    ///
    /// - above every earlier grant's token: each earlier token is the zxid
    ///   of a transaction (a create, a downgrade's create, a stamp) that
    ///   came before this one;
    /// - unique: one transaction per grant, even for readers let in by the
    ///   same deletion;
    /// - below every later grant's token, so fenced storage still refuses a
    ///   stale holder: the stamp happens while our node exists (the check),
    ///   and a grant that conflicts with ours comes after its deletion.
    ///
    /// A grant shown by a listing whose pzxid is our node's czxid (nothing
    /// under the lock's znode was created or deleted between our create and
    /// that listing) held from the create on: its czxid is its token, with
    /// no extra request. That is the usual uncontended acquire.
    async fn stamp(&self, c: &Contender, path: &str, until: Instant) -> Result<i64> {
        let own_node = !self.nodes.counting.load(Ordering::Relaxed);
        let what = || format!("stamping the grant of {path}");
        match c
            .session
            .stamp(&c.dir, path, &c.data, own_node, until)
            .await
        {
            Ok(zxid) => Ok(zxid),
            Err(f) if f.is_no_node() => Err(crate::queue::vanished(path)),
            Err(crate::error::Failure::Zk(zk::Error::NoAuth)) if !own_node => c
                .session
                .stamp(&c.dir, path, &c.data, true, until)
                .await
                .map_err(|f| {
                    if f.is_no_node() {
                        crate::queue::vanished(path)
                    } else {
                        lock_error(&what(), f)
                    }
                }),
            Err(f) => Err(lock_error(&what(), f)),
        }
    }

    /// One acquisition of `req`'s kind of lease.
    async fn lease(&self, req: &LeaseRequest, deadline: Option<Instant>) -> Result<Option<Lease>> {
        match req.mode {
            LockMode::Read => self.acquire(req, Recipe::Read, deadline).await,
            LockMode::Write => self.acquire(req, Recipe::Write, deadline).await,
            LockMode::Leader => {
                let recipe = Recipe::election(self.config.election);
                self.acquire(req, recipe, deadline).await
            }
            LockMode::Permit { permits } => {
                let dir = self.lock_path(&req.name)?;
                let until = self.until(deadline);
                let session = self.session(until).await?;
                semaphore::acquire(&self.nodes, session, &dir, until, req, permits, deadline).await
            }
            _ => self.acquire(req, Recipe::Mutex, deadline).await,
        }
    }
}

#[async_trait]
impl LockBackend for ZkLock {
    fn backend_capabilities(&self) -> Capabilities {
        Capabilities::new(crate::session::BACKEND)
            .with_fencing(Fencing::Durable)
            .with_fifo(true)
            .with_loss_events(true)
            .with_notified_wait(true)
            .with_remote(true)
            .with_read_write(true)
            .with_semaphore(true)
            .with_describes_holder(true)
            .with_election(true)
            .with_fault_tolerance("a minority of the 2N+1 ensemble; a holder's lock outlives it by the session timeout")
    }

    async fn try_lock(&self, req: &LeaseRequest) -> Result<Option<Lease>> {
        self.inner.lease(req, None).await
    }

    async fn lock(&self, req: &LeaseRequest, deadline: Instant) -> Result<Option<Lease>> {
        self.inner.lease(req, Some(deadline)).await
    }

    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        let dir = self.inner.lock_path(name)?;
        let until = self.inner.until(None);
        let session = self.inner.session(until).await?;
        list::inspect(&session, &dir, until).await
    }

    /// Deletes the holders' nodes of the mutex, the read-write lock and
    /// the semaphore of `name`, every request within
    /// one request timeout from the call.
    async fn force_release(&self, name: &LockName) -> Result<ForceReleased> {
        let dir = self.inner.lock_path(name)?;
        let until = self.inner.until(None);
        let session = self.inner.session(until).await?;
        crate::force::force_release(&session, &dir, until).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<(LockName, LockStatus)>> {
        let until = self.inner.until(None);
        let session = self.inner.session(until).await?;
        list::held(&session, &self.inner.root, prefix, limit, until).await
    }

    /// The first candidate node's data, czxid and ctime (see the crate
    /// docs' elections).
    async fn leader(&self, name: &LockName) -> Result<Option<LeaderInfo>> {
        let dir = self.inner.lock_path(name)?;
        let until = self.inner.until(None);
        let session = self.inner.session(until).await?;
        let recipe = Recipe::election(self.inner.config.election);
        crate::election::follow::leader(&session, &dir, recipe, until).await
    }

    /// Follows the election with watches on the current session; the
    /// stream ends with a retryable error when that session ends.
    async fn observe(&self, name: &LockName) -> Result<LeaderStream> {
        let dir = self.inner.lock_path(name)?;
        let until = self.inner.until(None);
        let session = self.inner.session(until).await?;
        let recipe = Recipe::election(self.inner.config.election);
        Ok(crate::election::follow::observe(session, dir, recipe))
    }
}
