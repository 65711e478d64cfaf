//! The ZooKeeper session behind a [`crate::ZkLock`], its monitor, and the ONE
//! function that maps client errors to [`LockErrorKind`]s.
//!
//! A [`Session`] is one `zookeeper_client::Client` (one ZooKeeper session)
//! serving any number of guards. Its monitor task turns the session's state
//! into lease events, once per session (not per guard):
//!
//! - contact: every answered request that went through the leader (writes,
//!   `sync`) records when it was *sent*; the ensemble keeps the session (and
//!   so every lock of it) at least until that instant plus the negotiated
//!   session timeout. A heartbeat (`sync /`) every quarter of the session
//!   timeout keeps that knowledge fresh; it is the only keep-alive traffic,
//!   one request per session, whatever the number of guards.
//!   [`Shared::bound`] is that promise minus a drift allowance. Every
//!   answered heartbeat sends each guard [`LeaseEvent::Confirmed`] with that
//!   bound: the core holds a guard until the earlier of its own validity
//!   (TTL from the acquisition or the last renewal) and the session's last
//!   confirmation, so a guard lasts its TTL while the session is confirmed,
//!   and never past the session's last confirmation plus the timeout.
//! - `Disconnected`, or no reply for half the session timeout: every guard
//!   gets [`LeaseEvent::Suspended`]; the next answered heartbeat brings
//!   `Confirmed` (which makes them held again), and after a reconnection
//!   also [`LeaseEvent::Resumed`] (the core renews at once).
//! - `Expired` (or `AuthFailed`/`Closed`), or no heartbeat answered until the
//!   latest bound given to guards passes (the server may have expired the
//!   session by then, and a partitioned client only hears of it when it
//!   reconnects): the session is *retired*.
//!   Every guard gets `Lost(SessionExpired)` and the client is dropped, so the
//!   session is closed (or, unreachable, expires on the server): its
//!   ephemeral nodes go away either way and a retired session never comes
//!   back to life holding locks its guards gave up. The next acquisition
//!   opens a new session.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use lock_core::{add_saturating, drift, LeaseEvent, LockError, LockErrorKind, LossCause};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::config::ZkConfig;

/// Why a request did not succeed, before it becomes a [`LockError`].
#[derive(Debug)]
pub(crate) enum Failure {
    /// The client's own error (including server error codes).
    Zk(zk::Error),
    /// No reply within the call's bound (its request or connect timeout).
    Elapsed,
    /// The session was retired (expired, closed, or presumed expired).
    Retired(Retired),
}

impl Failure {
    /// Whether a write that failed so may still have been applied by the
    /// ensemble: anything but an answer from the server (which applied
    /// nothing) or the end of the session (whose ephemeral nodes go with it).
    pub(crate) fn may_have_applied(&self) -> bool {
        use zk::Error as E;
        match self {
            Failure::Elapsed => true,
            Failure::Retired(_) => false,
            Failure::Zk(err) => !matches!(
                err,
                E::NoNode
                    | E::NodeExists
                    | E::BadVersion
                    | E::NotEmpty
                    | E::NoAuth
                    | E::NoChildrenForEphemerals
                    | E::InvalidAcl
                    | E::BadArguments(_)
                    | E::Unimplemented
                    | E::MarshallingError
                    | E::QuotaExceeded
                    | E::Throttled
                    | E::NotReadOnly
                    | E::SessionMoved
                    | E::SessionExpired
                    | E::AuthFailed
                    | E::ClientClosed
            ),
        }
    }
}

/// THE mapping from ZooKeeper client failures to [`LockErrorKind`]s. `what`
/// says what was being done, for the message.
pub(crate) fn lock_error(what: &str, failure: Failure) -> LockError {
    use zk::Error as E;
    match failure {
        Failure::Elapsed => LockError::new(
            LockErrorKind::Unavailable,
            format!("{what}: no reply from ZooKeeper within the call's time bound"),
        ),
        Failure::Retired(Retired::AuthFailed) => LockError::new(
            LockErrorKind::Unauthorized,
            format!("{what}: ZooKeeper rejected the session's credentials"),
        ),
        Failure::Retired(cause) => LockError::new(
            LockErrorKind::Unavailable,
            format!("{what}: the ZooKeeper session ended ({cause}); the next call opens a new one"),
        ),
        Failure::Zk(err) => {
            let kind = match &err {
                E::ConnectionLoss
                | E::Timeout
                | E::NoHosts
                | E::SessionExpired
                | E::SessionMoved
                | E::ClientClosed
                | E::Throttled
                | E::NotReadOnly
                | E::QuotaExceeded
                // The client reports a dead connection ("no response from
                // connection in ...") and socket errors as custom errors.
                | E::Custom(_) => LockErrorKind::Unavailable,
                E::NoAuth | E::AuthFailed => LockErrorKind::Unauthorized,
                E::BadArguments(_) | E::InvalidAcl | E::NoChildrenForEphemerals => {
                    LockErrorKind::InvalidArgument
                }
                E::UnmarshalError { .. }
                | E::MarshallingError
                | E::Unimplemented
                | E::UnexpectedErrorCode(_)
                | E::ReconfigDisabled
                | E::NoNode
                | E::NodeExists
                | E::BadVersion
                | E::NotEmpty
                | E::NoWatcher => LockErrorKind::Protocol,
                _ => LockErrorKind::Internal,
            };
            LockError::new(kind, format!("{what}: {err}")).with_source(err)
        }
    }
}

/// Why a session was retired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retired {
    /// The server expired it (reported on reconnection).
    Expired,
    /// No reply for the whole session timeout: the server may have expired it.
    Presumed,
    /// The server refused the credentials.
    AuthFailed,
    /// The client was closed.
    Closed,
}

impl std::fmt::Display for Retired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Expired => "expired on the server",
            Self::Presumed => {
                "no reply from ZooKeeper for the whole session timeout; presumed expired"
            }
            Self::AuthFailed => "authentication failed",
            Self::Closed => "client closed",
        })
    }
}

/// The session as the guards see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Link {
    /// Replies come; locks are confirmed until [`Shared::bound`].
    Connected,
    /// Disconnected or silent; locks are still ours until the bound, unless
    /// the session is found expired.
    Suspended(String),
    /// Gone for good; every guard of it is lost.
    Retired(Retired),
}

/// A registered guard: where its events go.
struct Slot {
    events: mpsc::UnboundedSender<LeaseEvent>,
}

/// What the monitor, the guards and the session share.
pub(crate) struct Shared {
    /// The negotiated session timeout.
    pub timeout: Duration,
    heartbeat_every: Duration,
    last_confirmed: Mutex<Instant>,
    /// The latest session bound given to a guard (at its acquisition, or
    /// with a heartbeat's `Confirmed`): the silent session is retired just
    /// before it, so guards see `Lost(SessionExpired)` first.
    vouched: Mutex<Instant>,
    link: watch::Sender<Link>,
    guards: Mutex<HashMap<u64, Slot>>,
    next_guard: AtomicU64,
    /// The session id, for logs.
    pub id: String,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// The latest instant the server is known to keep the session until:
    /// the send time of the last answered request plus the session timeout,
    /// minus a drift allowance (1% + 2 ms).
    pub fn bound(&self) -> Instant {
        add_saturating(
            *locked(&self.last_confirmed),
            self.timeout.saturating_sub(drift(self.timeout)),
        )
    }

    fn last_confirmed(&self) -> Instant {
        *locked(&self.last_confirmed)
    }

    /// [`Shared::bound`], recorded as given to a guard.
    fn vouch(&self) -> Instant {
        let bound = self.bound();
        let mut vouched = locked(&self.vouched);
        if bound > *vouched {
            *vouched = bound;
        }
        bound
    }

    fn vouched(&self) -> Instant {
        *locked(&self.vouched)
    }

    /// A request sent at `sent` was answered by the server.
    fn confirm(&self, sent: Instant) {
        let mut last = locked(&self.last_confirmed);
        if sent > *last {
            *last = sent;
        }
    }

    /// The session's state now.
    pub fn link(&self) -> Link {
        self.link.borrow().clone()
    }

    fn broadcast(&self, event: &LeaseEvent) {
        for slot in locked(&self.guards).values() {
            let _ = slot.events.send(event.clone());
        }
    }

    fn suspend(&self, reason: &str) {
        let changed = self.link.send_if_modified(|link| match link {
            Link::Connected => {
                *link = Link::Suspended(reason.to_string());
                true
            }
            _ => false,
        });
        if changed {
            tracing::warn!(session = %self.id, reason, "lock-zk: session suspended; guards suspended");
            self.broadcast(&LeaseEvent::Suspended {
                reason: format!("ZooKeeper session {}: {reason}", self.id),
            });
        }
    }

    /// A heartbeat was answered while connected: resume a suspended
    /// session, and tell every guard that the session vouches for it until
    /// [`Shared::bound`] (which also makes a suspended guard held again).
    /// After a reconnection, `Resumed` follows: the core renews at once.
    fn confirmed(&self, reconnected: bool) {
        let resumed = self.link.send_if_modified(|link| match link {
            Link::Suspended(_) => {
                *link = Link::Connected;
                true
            }
            _ => false,
        });
        if resumed {
            tracing::info!(session = %self.id, "lock-zk: session resumed");
        }
        let guards = locked(&self.guards);
        let valid_until = self.vouch();
        for slot in guards.values() {
            let _ = slot.events.send(LeaseEvent::Confirmed { valid_until });
            if resumed && reconnected {
                let _ = slot.events.send(LeaseEvent::Resumed);
            }
        }
    }

    /// Marks the session retired and tells every guard it is lost.
    fn retire(&self, cause: Retired) {
        let slots: Vec<Slot> = {
            let mut guards = locked(&self.guards);
            let already = matches!(*self.link.borrow(), Link::Retired(_));
            if already {
                return;
            }
            self.link.send_replace(Link::Retired(cause));
            guards.drain().map(|(_, slot)| slot).collect()
        };
        tracing::warn!(session = %self.id, %cause, guards = slots.len(), "lock-zk: session retired; its guards are lost");
        for slot in slots {
            let _ = slot
                .events
                .send(LeaseEvent::Lost(LossCause::SessionExpired));
        }
    }
}

/// A registered guard's side of the registry.
pub(crate) struct Registration {
    pub id: u64,
    pub events: mpsc::UnboundedSender<LeaseEvent>,
    pub receiver: mpsc::UnboundedReceiver<LeaseEvent>,
    /// Until when the session vouches for the guard ([`Shared::bound`] at
    /// registration; later ones come as [`LeaseEvent::Confirmed`]).
    pub session_until: Instant,
}

/// One ZooKeeper session and what it knows.
pub(crate) struct Session {
    client: Mutex<Option<zk::Client>>,
    pub shared: Arc<Shared>,
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

type Reply<T> = Result<T, Failure>;

impl Session {
    /// Opens a session on `hosts` within the connect timeout, and before
    /// `until` (the bound of the call that needs the session). Fails at once
    /// when every server refuses the connection.
    pub async fn connect(
        hosts: &str,
        config: &ZkConfig,
        until: Instant,
    ) -> Result<Arc<Session>, LockError> {
        let what = || format!("connecting to ZooKeeper at {hosts}");
        let mut connector = zk::Client::connector()
            .with_session_timeout(config.session_timeout)
            .with_fail_eagerly();
        for (scheme, auth) in &config.auth {
            connector = connector.with_auth(scheme, auth);
        }
        let started = Instant::now();
        let give_up = until.min(add_saturating(started, config.connect_timeout));
        let client = match tokio::time::timeout_at(give_up, connector.connect(hosts)).await {
            Err(_) => {
                return Err(LockError::new(
                    LockErrorKind::Unavailable,
                    format!(
                        "{}: no session within {:?}",
                        what(),
                        give_up.saturating_duration_since(started)
                    ),
                ))
            }
            Ok(Err(err)) => return Err(lock_error(&what(), Failure::Zk(err))),
            Ok(Ok(client)) => client,
        };
        let timeout = client.session_timeout();
        let id = client.session_id().to_string();
        let states = client.state_watcher();
        let shared = Arc::new(Shared {
            timeout,
            heartbeat_every: (timeout / 4).max(Duration::from_millis(10)),
            // The session was created after the connect started.
            last_confirmed: Mutex::new(started),
            vouched: Mutex::new(add_saturating(
                started,
                timeout.saturating_sub(drift(timeout)),
            )),
            link: watch::channel(Link::Connected).0,
            guards: Mutex::new(HashMap::new()),
            next_guard: AtomicU64::new(1),
            id,
        });
        let session = Arc::new(Session {
            client: Mutex::new(Some(client)),
            shared: shared.clone(),
            request_timeout: config.request_timeout,
            monitor: OnceLock::new(),
        });
        let task = tokio::spawn(monitor(Arc::downgrade(&session), shared, states));
        let _ = session.monitor.set(task.abort_handle());
        tracing::debug!(session = %session.shared.id, ?timeout, "lock-zk: session established");
        Ok(session)
    }

    /// Whether new work may use this session.
    pub fn is_live(&self) -> bool {
        !matches!(self.shared.link(), Link::Retired(_))
    }

    fn client(&self) -> Reply<zk::Client> {
        if let Link::Retired(cause) = self.shared.link() {
            return Err(Failure::Retired(cause));
        }
        locked(&self.client)
            .clone()
            .ok_or(Failure::Retired(Retired::Closed))
    }

    /// Retires the session (see the module docs) and drops its client.
    pub fn retire(&self, cause: Retired) {
        self.shared.retire(cause);
        drop(locked(&self.client).take());
    }

    /// Resolves when the session is retired, with the cause.
    pub fn ended(&self) -> impl Future<Output = Retired> + Send + 'static {
        let mut rx = self.shared.link.subscribe();
        async move {
            loop {
                if let Link::Retired(cause) = &*rx.borrow_and_update() {
                    return *cause;
                }
                if rx.changed().await.is_err() {
                    return Retired::Closed;
                }
            }
        }
    }

    /// Registers a granted lease for session events.
    pub fn register(&self) -> Reply<Registration> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut guards = locked(&self.shared.guards);
        if let Link::Retired(cause) = self.shared.link() {
            return Err(Failure::Retired(cause));
        }
        let id = self.shared.next_guard.fetch_add(1, Ordering::Relaxed);
        guards.insert(id, Slot { events: tx.clone() });
        Ok(Registration {
            id,
            events: tx,
            receiver: rx,
            session_until: self.shared.vouch(),
        })
    }

    /// Forgets a guard (released or dropped).
    pub fn unregister(&self, id: u64) {
        locked(&self.shared.guards).remove(&id);
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
    /// the reconnection, within the same bound. A reply to a request that
    /// went through the leader (`via_leader`: writes and `sync`) confirms the
    /// session as of the request's send time; reads are answered by the
    /// connected server alone, which may be cut off from the quorum, so they
    /// vouch for nothing.
    async fn request<T, F, Fut>(
        &self,
        until: Instant,
        retry_on_loss: bool,
        via_leader: bool,
        op: F,
    ) -> Reply<T>
    where
        F: Fn(zk::Client) -> Fut,
        Fut: Future<Output = Result<T, zk::Error>>,
    {
        let deadline = until.min(self.bound());
        loop {
            let client = self.client()?;
            let sent = Instant::now();
            match tokio::time::timeout_at(deadline, op(client)).await {
                Err(_) => return Err(Failure::Elapsed),
                Ok(Ok(value)) => {
                    if via_leader {
                        self.shared.confirm(sent);
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
                    if via_leader && answered_by_server(&err) {
                        self.shared.confirm(sent);
                    }
                    return Err(Failure::Zk(err));
                }
            }
        }
    }

    /// The children of `path`.
    pub async fn list(&self, path: &str, until: Instant) -> Reply<Vec<String>> {
        self.request(until, true, false, |c| async move {
            c.list_children(path).await
        })
        .await
    }

    /// The stat of `path`, if it exists.
    pub async fn stat(&self, path: &str, until: Instant) -> Reply<Option<zk::Stat>> {
        self.request(
            until,
            true,
            false,
            |c| async move { c.check_stat(path).await },
        )
        .await
    }

    /// The stat of `path`, if it exists, and a one-shot watch on it (fires on
    /// deletion, data change, creation if absent, and session termination).
    pub async fn watch_stat(
        &self,
        path: &str,
        until: Instant,
    ) -> Reply<(Option<zk::Stat>, zk::OneshotWatcher)> {
        self.request(until, true, false, |c| async move {
            c.check_and_watch_stat(path).await
        })
        .await
    }

    /// Brings the connected server up to date with the leader for `path`.
    pub async fn sync(&self, path: &str, until: Instant) -> Reply<()> {
        self.request(until, true, true, |c| async move { c.sync(path).await })
            .await
    }

    /// Deletes `path` (any version).
    pub async fn delete(&self, path: &str, until: Instant) -> Reply<()> {
        self.request(
            until,
            true,
            true,
            |c| async move { c.delete(path, None).await },
        )
        .await
    }

    /// Creates an ephemeral sequential node `prefix<seq>`; returns its path.
    /// Never retried here: after a lost reply the caller looks for the node.
    pub async fn create_sequential(
        &self,
        prefix: &str,
        data: &[u8],
        acls: &[zk::Acl],
        until: Instant,
    ) -> Reply<String> {
        self.request(until, false, true, |c| async move {
            let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(acls));
            let (_stat, seq) = c.create(prefix, data, &options).await?;
            Ok(format!("{prefix}{seq}"))
        })
        .await
    }

    /// Creates `path` and its missing ancestors as `mode` nodes.
    pub async fn mkdir(
        &self,
        path: &str,
        mode: zk::CreateMode,
        acls: &[zk::Acl],
        until: Instant,
    ) -> Reply<()> {
        self.request(until, true, true, |c| async move {
            c.mkdir(path, &mode.with_acls(zk::Acls::new(acls))).await
        })
        .await
    }
}

/// Whether the error is an answer from the server (so the session was alive
/// when the server got the request).
fn answered_by_server(err: &zk::Error) -> bool {
    use zk::Error as E;
    matches!(
        err,
        E::NoNode
            | E::NodeExists
            | E::BadVersion
            | E::NotEmpty
            | E::NoAuth
            | E::NoChildrenForEphemerals
            | E::InvalidAcl
    )
}

/// How much earlier than the latest session bound given to a guard the
/// monitor declares a silent session expired, so that guards see
/// `Lost(SessionExpired)` rather than a bare `Lost(Expired)` of their validity.
const RETIRE_LEAD: Duration = Duration::from_millis(50);

/// When the monitor retires a silent session whose guards were vouched for
/// until `vouched`.
fn retire_at(vouched: Instant) -> Instant {
    vouched.checked_sub(RETIRE_LEAD).unwrap_or(vouched)
}

type Heartbeat = Pin<Box<dyn Future<Output = Option<Instant>> + Send>>;

/// One heartbeat: `sync /` with a deadline; the send time if answered. A
/// `sync` goes through the leader, so a server cut off from the quorum
/// (which still answers reads until it notices) cannot vouch for the session.
fn heartbeat(client: zk::Client, within: Duration) -> Heartbeat {
    Box::pin(async move {
        let sent = Instant::now();
        match tokio::time::timeout(within, client.sync("/")).await {
            Ok(Ok(_)) => Some(sent),
            _ => None,
        }
    })
}

async fn poll_heartbeat(hb: &mut Option<Heartbeat>) -> Option<Instant> {
    match hb {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// The per-session monitor (see the module docs). Holds only a weak
/// reference to the session, so dropping the last user closes it.
async fn monitor(session: Weak<Session>, shared: Arc<Shared>, mut states: zk::StateWatcher) {
    let every = shared.heartbeat_every;
    let mut next_heartbeat = add_saturating(Instant::now(), every);
    let mut in_flight: Option<Heartbeat> = None;
    let mut disconnected = false;
    // Disconnected since the last answered heartbeat.
    let mut reconnected = false;
    let retire = |cause: Retired| match session.upgrade() {
        Some(s) => s.retire(cause),
        None => shared.retire(cause),
    };
    loop {
        let link = shared.link();
        if matches!(link, Link::Retired(_)) {
            return;
        }
        let suspect_at = add_saturating(shared.last_confirmed(), shared.timeout / 2);
        let expire_at = retire_at(shared.vouched());
        tokio::select! {
            biased;
            state = states.changed() => match state {
                zk::SessionState::Disconnected => {
                    disconnected = true;
                    reconnected = true;
                    shared.suspend("disconnected from ZooKeeper; reconnecting");
                }
                zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                    disconnected = false;
                    next_heartbeat = Instant::now();
                }
                zk::SessionState::Expired => return retire(Retired::Expired),
                zk::SessionState::AuthFailed => return retire(Retired::AuthFailed),
                zk::SessionState::Closed => return retire(Retired::Closed),
            },
            answered = poll_heartbeat(&mut in_flight), if in_flight.is_some() => {
                in_flight = None;
                if let Some(sent) = answered {
                    shared.confirm(sent);
                    if !disconnected {
                        shared.confirmed(std::mem::take(&mut reconnected));
                    }
                }
            }
            _ = tokio::time::sleep_until(expire_at) => {
                if retire_at(shared.vouched()) <= Instant::now() {
                    return retire(Retired::Presumed);
                }
            }
            _ = tokio::time::sleep_until(suspect_at), if matches!(link, Link::Connected) => {
                if add_saturating(shared.last_confirmed(), shared.timeout / 2) <= Instant::now() {
                    shared.suspend("no reply from ZooKeeper for half the session timeout");
                }
            }
            _ = tokio::time::sleep_until(next_heartbeat), if in_flight.is_none() => {
                next_heartbeat = add_saturating(Instant::now(), every);
                let Some(s) = session.upgrade() else { return };
                match s.client() {
                    Ok(client) => in_flight = Some(heartbeat(client, every)),
                    Err(_) => return,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_client_failures_to_kinds() {
        use LockErrorKind::*;
        let cases = [
            (Failure::Zk(zk::Error::ConnectionLoss), Unavailable),
            (Failure::Zk(zk::Error::SessionExpired), Unavailable),
            (Failure::Zk(zk::Error::Timeout), Unavailable),
            (Failure::Zk(zk::Error::NoHosts), Unavailable),
            (Failure::Elapsed, Unavailable),
            (Failure::Retired(Retired::Presumed), Unavailable),
            (Failure::Zk(zk::Error::NoAuth), Unauthorized),
            (Failure::Zk(zk::Error::AuthFailed), Unauthorized),
            (Failure::Retired(Retired::AuthFailed), Unauthorized),
            (
                Failure::Zk(zk::Error::BadArguments(&"bad path")),
                InvalidArgument,
            ),
            (Failure::Zk(zk::Error::InvalidAcl), InvalidArgument),
            (Failure::Zk(zk::Error::Unimplemented), Protocol),
        ];
        for (failure, kind) in cases {
            let what = format!("{failure:?}");
            let err = lock_error("doing it", failure);
            assert_eq!(err.kind(), kind, "{what}: {err}");
            assert!(err.to_string().contains("doing it"), "{err}");
        }
    }
}
