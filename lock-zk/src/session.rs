//! One ZooKeeper session behind a [`crate::ZkLock`]: the client, what the
//! session is known to be worth, and every request, each bounded in time.
//!
//! A [`Session`] is one `zookeeper_client::Client` (one ZooKeeper session)
//! serving any number of guards. Every guard it grants is registered with
//! the session's [`SessionHub`], which fans the session's news out to them;
//! the monitor task ([`crate::monitor`]) keeps the session alive and tells
//! the hub what it learns.
//!
//! A reply to a request that went through the leader (a write, a `sync`)
//! proves the session alive when the request was sent; reads are answered
//! by the connected server alone, which may be cut off from the quorum, so
//! they prove nothing.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use lock_core::backend::add_saturating;
use lock_core::backend::session::{Sent, SessionHub};
use lock_core::LossCause;
use tokio::sync::watch;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{Failure, Retired};

/// This backend's label in lock-core's metrics.
pub(crate) const BACKEND: &str = "zookeeper";

pub(crate) fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the session, its monitor and its guards share about its liveness.
pub(crate) struct Liveness {
    /// The session's guards and what the session vouches for.
    pub hub: Arc<SessionHub>,
    /// The negotiated session timeout.
    pub timeout: Duration,
    /// The session id as ZooKeeper prints it (`0x...`).
    pub id: String,
    /// The session id as nodes carry it (`ephemeral_owner`).
    owner: i64,
    /// When the last request answered through the leader was sent.
    last_answer: Mutex<Instant>,
    ended: watch::Sender<Option<Retired>>,
}

impl Liveness {
    /// The liveness of `client`'s new session, established by a request
    /// sent at `started` (vouched for until then plus its `timeout`).
    pub(crate) fn new(client: &zk::Client, started: Sent, timeout: Duration) -> Arc<Self> {
        let hub = SessionHub::new();
        hub.confirm(started, timeout);
        Arc::new(Liveness {
            hub,
            timeout,
            id: client.session_id().to_string(),
            owner: client.session_id().0,
            last_answer: Mutex::new(started.at()),
            ended: watch::channel(None).0,
        })
    }

    /// A request sent at `sent` was answered through the leader.
    pub fn answered(&self, sent: Instant) {
        let mut last = locked(&self.last_answer);
        if sent > *last {
            *last = sent;
        }
    }

    /// The session id as the ephemeral nodes of this session carry it.
    pub fn owner(&self) -> i64 {
        self.owner
    }

    /// When the last request answered through the leader was sent.
    pub fn last_answer(&self) -> Instant {
        *locked(&self.last_answer)
    }

    /// Why the session was retired, if it was.
    pub fn retired(&self) -> Option<Retired> {
        *self.ended.borrow()
    }

    /// Marks the session retired: every guard is lost, new work refused.
    pub fn retire(&self, cause: Retired) {
        let first = self.ended.send_if_modified(|ended| {
            let first = ended.is_none();
            if first {
                *ended = Some(cause);
            }
            first
        });
        if first {
            tracing::warn!(session = %self.id, %cause, guards = self.hub.guards(), "lock-zk: session retired; its guards are lost");
            self.hub.end(LossCause::SessionExpired);
        }
    }

    /// Suspends every guard (once per episode).
    pub fn suspend(&self, reason: &str) {
        if matches!(
            self.hub.status(),
            lock_core::backend::session::SessionStatus::Live
        ) {
            tracing::warn!(session = %self.id, reason, "lock-zk: session suspended; guards suspended");
        }
        self.hub
            .suspend(&format!("ZooKeeper session {}: {reason}", self.id));
    }
}

/// One ZooKeeper session and what it knows.
pub(crate) struct Session {
    client: Mutex<Option<Arc<zk::Client>>>,
    /// Shared with the monitor and the guards.
    pub live: Arc<Liveness>,
    request_timeout: Duration,
    monitor: OnceLock<tokio::task::AbortHandle>,
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(monitor) = self.monitor.get() {
            monitor.abort();
        }
    }
}

/// A request's outcome.
pub(crate) type Reply<T> = Result<T, Failure>;

/// A node's stat and a one-shot watch on it, if it exists.
pub(crate) type Watched = Reply<Option<(zk::Stat, zk::OneshotWatcher)>>;

impl Session {
    /// A session on `client`, whose news `live` shares with its monitor
    /// and its guards; requests are bounded by `request_timeout`.
    pub(crate) fn new(
        client: zk::Client,
        live: Arc<Liveness>,
        request_timeout: Duration,
    ) -> Arc<Self> {
        Arc::new(Session {
            client: Mutex::new(Some(Arc::new(client))),
            live,
            request_timeout,
            monitor: OnceLock::new(),
        })
    }

    /// Ties the session's monitor task to it: the task ends with the
    /// session.
    pub(crate) fn monitored_by(&self, task: tokio::task::AbortHandle) {
        let _ = self.monitor.set(task);
    }

    /// Whether new work may use this session.
    pub fn is_live(&self) -> bool {
        self.live.retired().is_none()
    }

    /// The client, unless the session was retired.
    pub fn client(&self) -> Reply<Arc<zk::Client>> {
        if let Some(cause) = self.live.retired() {
            return Err(Failure::Retired(cause));
        }
        locked(&self.client)
            .clone()
            .ok_or(Failure::Retired(Retired::Closed))
    }

    /// Retires the session and drops its client, so the session is closed
    /// (or, unreachable, expires on the server) and its nodes go away; it
    /// never comes back holding locks its guards gave up.
    pub fn retire(&self, cause: Retired) {
        self.live.retire(cause);
        drop(locked(&self.client).take());
    }

    /// Resolves when the session is retired, with the cause.
    pub fn ended(&self) -> impl Future<Output = Retired> + Send + 'static {
        let mut rx = self.live.ended.subscribe();
        async move {
            loop {
                if let Some(cause) = *rx.borrow_and_update() {
                    return cause;
                }
                if rx.changed().await.is_err() {
                    return Retired::Closed;
                }
            }
        }
    }

    /// The bound of a call that starts now: one request timeout.
    pub fn bound(&self) -> Instant {
        self.bound_after(Instant::now())
    }

    /// The bound of a call that may wait until `deadline`: the deadline plus
    /// one request timeout.
    pub fn bound_after(&self, deadline: Instant) -> Instant {
        add_saturating(deadline, self.request_timeout)
    }

    /// Runs one request, answered before `until` (the bound of the call it
    /// belongs to) or failed with [`Failure::Elapsed`]. On a lost connection
    /// an idempotent request (`retry_on_loss`) is sent again, and waits for
    /// the reconnection, within the same bound. `via_leader`: writes and
    /// `sync`, whose answers prove the session alive when they were sent.
    /// Every send counts as one request `what` in
    /// [`lock_core::metrics::REQUESTS`].
    async fn request<T, F, Fut>(
        &self,
        what: &'static str,
        until: Instant,
        retry_on_loss: bool,
        via_leader: bool,
        op: F,
    ) -> Reply<T>
    where
        F: Fn(Arc<zk::Client>) -> Fut,
        Fut: Future<Output = Result<T, zk::Error>>,
    {
        let deadline = until.min(self.bound());
        loop {
            let client = self.client()?;
            lock_core::metrics::count_request(BACKEND, what);
            let sent = Instant::now();
            match tokio::time::timeout_at(deadline, op(client)).await {
                Err(_) => return Err(Failure::Elapsed),
                Ok(Ok(value)) => {
                    if via_leader {
                        self.live.answered(sent);
                    }
                    return Ok(value);
                }
                Ok(Err(zk::Error::ConnectionLoss)) if retry_on_loss => {
                    // Requests sent while disconnected wait for the reconnection.
                    tokio::time::sleep_until(
                        deadline.min(Instant::now() + Duration::from_millis(10)),
                    )
                    .await;
                }
                Ok(Err(err)) => {
                    let failure = Failure::Zk(err);
                    if via_leader && failure.answered_by_server() {
                        self.live.answered(sent);
                    }
                    return Err(failure);
                }
            }
        }
    }

    /// The children of `path` and its pzxid (the zxid of the last create or
    /// delete of one of its children).
    pub async fn list_with_pzxid(&self, path: &str, until: Instant) -> Reply<(Vec<String>, i64)> {
        self.request("list", until, true, false, |c| async move {
            c.get_children(path)
                .await
                .map(|(children, stat)| (children, stat.pzxid))
        })
        .await
    }

    /// Stamps a grant of our contender node `path` under `dir` (see
    /// `lease::grant`): one transaction that checks that `path` still
    /// exists and sets `dir`'s data to empty, as a contender's create does;
    /// its zxid (the new mzxid of `dir`) is the grant's fencing token. With
    /// `own_node` (the lock's ACL refuses writes to `dir`'s data) it sets
    /// the data of `path` itself to `data` instead. A `NoNode` means that
    /// `path` is gone. Retried after a lost reply: a second stamp only
    /// gives a later zxid, still while `path` exists.
    pub async fn stamp(
        &self,
        dir: &str,
        path: &str,
        data: &[u8],
        own_node: bool,
        until: Instant,
    ) -> Reply<i64> {
        self.request("stamp", until, true, true, |c| async move {
            if own_node {
                return c.set_data(path, data, None).await.map(|stat| stat.mzxid);
            }
            let mut txn = c.new_multi_writer();
            txn.add_check_version(path, -1)?;
            txn.add_set_data(dir, &[], None)?;
            let results = txn.commit().await.map_err(|err| match err {
                zk::MultiWriteError::RequestFailed { source }
                | zk::MultiWriteError::OperationFailed { source, .. } => source,
            })?;
            match results.into_iter().nth(1) {
                Some(zk::MultiWriteResult::SetData { stat }) => Ok(stat.mzxid),
                _ => Err(zk::Error::UnexpectedError(
                    "a check and set-data transaction answered with other results".into(),
                )),
            }
        })
        .await
    }

    /// The children of `path`.
    pub async fn list(&self, path: &str, until: Instant) -> Reply<Vec<String>> {
        self.request("list", until, true, false, |c| async move {
            c.list_children(path).await
        })
        .await
    }

    /// The stat of `path`, if it exists.
    pub async fn stat(&self, path: &str, until: Instant) -> Reply<Option<zk::Stat>> {
        self.request("stat", until, true, false, |c| async move {
            c.check_stat(path).await
        })
        .await
    }

    /// The data and stat of `path`, if it exists.
    pub async fn get(&self, path: &str, until: Instant) -> Reply<Option<(Vec<u8>, zk::Stat)>> {
        match self
            .request("get", until, true, false, |c| async move {
                c.get_data(path).await
            })
            .await
        {
            Ok(got) => Ok(Some(got)),
            Err(f) if f.is_no_node() => Ok(None),
            Err(f) => Err(f),
        }
    }

    /// The stat of `path` and a one-shot watch on it (fires on deletion,
    /// data change and session termination), or `None` if it does not
    /// exist: then no watch is left behind (an `exists` watch on a missing
    /// node would wait for its creation for the rest of the session, as
    /// Curator's `LockInternals` notes).
    pub async fn watch(&self, path: &str, until: Instant) -> Watched {
        match self
            .request("watch", until, true, false, |c| async move {
                c.get_and_watch_data(path).await
            })
            .await
        {
            Ok((_data, stat, watcher)) => Ok(Some((stat, watcher))),
            Err(f) if f.is_no_node() => Ok(None),
            Err(f) => Err(f),
        }
    }

    /// The data and stat of `path` and a one-shot watch on it (fires on
    /// its deletion or data change, and on the session's end), or `None`
    /// if it does not exist (no watch left behind).
    pub async fn get_and_watch(
        &self,
        path: &str,
        until: Instant,
    ) -> Reply<Option<(Vec<u8>, zk::Stat, zk::OneshotWatcher)>> {
        match self
            .request("watch", until, true, false, |c| async move {
                c.get_and_watch_data(path).await
            })
            .await
        {
            Ok(got) => Ok(Some(got)),
            Err(f) if f.is_no_node() => Ok(None),
            Err(f) => Err(f),
        }
    }

    /// Brings the connected server up to date with the leader for `path`.
    pub async fn sync(&self, path: &str, until: Instant) -> Reply<()> {
        self.request(
            "sync",
            until,
            true,
            true,
            |c| async move { c.sync(path).await },
        )
        .await
    }

    /// Deletes `path` (any version).
    pub async fn delete(&self, path: &str, until: Instant) -> Reply<()> {
        self.request("delete", until, true, true, |c| async move {
            c.delete(path, None).await
        })
        .await
    }

    /// Creates an ephemeral sequential node `prefix<seq>` (its path and
    /// stat) and lists the children of `dir` with its pzxid, sent right
    /// behind it on the same connection (one round trip for both): the
    /// server answers the listing after it applied the create, so a created
    /// node is in the listing, with every contender created before it. The create is never
    /// retried here: after a lost reply the caller looks for the node.
    pub async fn create_and_list(
        &self,
        prefix: &str,
        data: &[u8],
        acls: &[zk::Acl],
        dir: &str,
        until: Instant,
    ) -> (Reply<(String, zk::Stat)>, Reply<(Vec<String>, i64)>) {
        let client = match self.client() {
            Ok(client) => client,
            Err(f) => {
                let again = match &f {
                    Failure::Retired(cause) => Failure::Retired(*cause),
                    _ => Failure::Elapsed,
                };
                return (Err(f), Err(again));
            }
        };
        let deadline = until.min(self.bound());
        let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(acls));
        lock_core::metrics::count_request(BACKEND, "create");
        lock_core::metrics::count_request(BACKEND, "list");
        let sent = Instant::now();
        // Both requests are on the wire before either reply is awaited.
        let create = client.create(prefix, data, &options);
        let list = client.get_children(dir);
        let (created, listed) = tokio::join!(
            tokio::time::timeout_at(deadline, create),
            tokio::time::timeout_at(deadline, list)
        );
        let created = match created {
            Err(_) => Err(Failure::Elapsed),
            Ok(Ok((stat, seq))) => {
                self.live.answered(sent);
                Ok((format!("{prefix}{seq}"), stat))
            }
            Ok(Err(err)) => Err(Failure::Zk(err)),
        };
        let listed = match listed {
            Err(_) => Err(Failure::Elapsed),
            Ok(result) => result
                .map(|(children, stat)| (children, stat.pzxid))
                .map_err(Failure::Zk),
        };
        (created, listed)
    }

    /// Creates an ephemeral sequential node `prefix<seq>` and, in the same
    /// transaction, sets the data of its parent `dir` to empty (as lock
    /// znodes are made, by Curator, kazoo and us), whose
    /// stat in the reply counts `dir`'s children right after the create: 1
    /// means our node is alone, with no contender of any kind ahead, which
    /// the uncontended acquisition learns without a listing (one request,
    /// no read). Its path, its stat (czxid = the transaction's zxid) and that
    /// count. Never retried here: after a lost reply the caller looks for
    /// the node. A `NoAuth` may come from the parent's data (the ACL grants
    /// CREATE but not WRITE): the caller then creates without counting.
    pub async fn create_counted(
        &self,
        prefix: &str,
        data: &[u8],
        acls: &[zk::Acl],
        dir: &str,
        until: Instant,
    ) -> Reply<(String, zk::Stat, i32)> {
        self.request("create", until, false, true, |c| async move {
            let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(acls));
            let mut txn = c.new_multi_writer();
            txn.add_create(prefix, data, &options)?;
            txn.add_set_data(dir, &[], None)?;
            let results = txn.commit().await.map_err(|err| match err {
                zk::MultiWriteError::RequestFailed { source }
                | zk::MultiWriteError::OperationFailed { source, .. } => source,
            })?;
            let mut results = results.into_iter();
            match (results.next(), results.next()) {
                (
                    Some(zk::MultiWriteResult::Create { path, mut stat }),
                    Some(zk::MultiWriteResult::SetData { stat: parent }),
                ) => {
                    // Some servers answer a create inside a transaction
                    // without its stat (ZOOKEEPER-4026); both writes share
                    // the transaction's zxid.
                    if stat.czxid <= 0 {
                        stat.czxid = parent.mzxid;
                    }
                    Ok((path, stat, parent.num_children))
                }
                _ => Err(zk::Error::UnexpectedError(
                    "a create and set-data transaction answered with other results".into(),
                )),
            }
        })
        .await
    }

    /// Creates the ephemeral node `path` (not sequential); its stat. Never
    /// retried here: after a lost reply the caller looks for the node.
    pub async fn create_ephemeral(
        &self,
        path: &str,
        data: &[u8],
        acls: &[zk::Acl],
        until: Instant,
    ) -> Reply<zk::Stat> {
        self.request("create", until, false, true, |c| async move {
            let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(acls));
            c.create(path, data, &options).await.map(|(stat, _)| stat)
        })
        .await
    }

    /// The children of `dir` and a one-shot watch on them (fires when a
    /// child is created or deleted, and on the session's end).
    pub async fn watch_children(
        &self,
        dir: &str,
        until: Instant,
    ) -> Reply<(Vec<String>, zk::OneshotWatcher)> {
        self.request("list", until, true, false, |c| async move {
            c.list_and_watch_children(dir).await
        })
        .await
    }

    /// Sets the data of `path` (any version): its new stat. Idempotent, so
    /// sent again after a lost connection.
    pub async fn set_data(&self, path: &str, data: &[u8], until: Instant) -> Reply<zk::Stat> {
        self.request("set", until, true, true, |c| async move {
            c.set_data(path, data, None).await
        })
        .await
    }

    /// The stat of `path` (`None` when missing) and a one-shot watch that
    /// fires on its creation, deletion or data change (and on the
    /// session's end).
    pub async fn watch_exists(
        &self,
        path: &str,
        until: Instant,
    ) -> Reply<(Option<zk::Stat>, zk::OneshotWatcher)> {
        self.request("watch", until, true, false, |c| async move {
            c.check_and_watch_stat(path).await
        })
        .await
    }

    /// Commits the transaction that `build` writes (never sent again here:
    /// after a lost reply the caller looks). `Ok(Err((index, error)))`: the
    /// server refused it at operation `index`, and applied none of it.
    pub async fn commit<F>(
        &self,
        what: &'static str,
        until: Instant,
        build: F,
    ) -> Reply<Result<Vec<zk::MultiWriteResult>, (usize, zk::Error)>>
    where
        F: Fn(&mut zk::MultiWriter<'_>) -> Result<(), zk::Error> + Sync,
    {
        let build = &build;
        self.request(what, until, false, true, |c| async move {
            let mut txn = c.new_multi_writer();
            build(&mut txn)?;
            {
                match txn.commit().await {
                    Ok(results) => Ok(Ok(results)),
                    Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                        Ok(Err((index, source)))
                    }
                    Err(zk::MultiWriteError::RequestFailed { source }) => Err(source),
                }
            }
        })
        .await
    }

    /// Creates `path` and its missing ancestors as `mode` nodes (counted as
    /// one request `mkdir`, though it sends a create per missing ancestor:
    /// only on a lock's first use, or after its empty znode was removed).
    pub async fn mkdir(
        &self,
        path: &str,
        mode: zk::CreateMode,
        acls: &[zk::Acl],
        until: Instant,
    ) -> Reply<()> {
        self.request("mkdir", until, true, true, |c| async move {
            c.mkdir(path, &mode.with_acls(zk::Acls::new(acls))).await
        })
        .await
    }
}
