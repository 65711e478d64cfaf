//! The session: one etcd lease per client, kept alive by one background
//! keep-alive stream, shared by every lock the client holds. Its news reach
//! the guards through one [`SessionHub`].
//!
//! A keep-alive confirms the lease from when it was SENT for the TTL the
//! server answers with, however late the answer comes: a slow commit delays
//! the confirmation, it never retires a session whose lease lives. While no
//! answer comes within the request timeout the guards are suspended; if none
//! comes at all, each guard's validity (bounded by the last confirmation)
//! runs out on its own. The session ends only when the server says the
//! lease is gone (or it is dropped, which revokes the lease).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use etcd_client::{Compare, CompareOp, KeyValue, LeaseKeepAliveStream, LeaseKeeper, PutOptions};
use lock_core::backend::session::{Sent, SessionEvents, SessionHub};
use lock_core::{LockErrorKind, LossCause, Result};
use tokio::time::Instant;

use crate::client::{EtcdClient, Failure};

/// One lease and its keep-alive task. Dropping the last reference stops the
/// keep-alive and revokes the lease in the background (its keys go at once).
pub(crate) struct Session {
    id: i64,
    ttl: Duration,
    hub: Arc<SessionHub>,
    task: tokio::task::AbortHandle,
    client: Arc<EtcdClient>,
    /// The mod revision of each of the session's fence keys (one per lock
    /// name, see [`crate::layout::Queue::fence_key`]) as this client last
    /// knew it; a key not in the map does not exist (it is created by its
    /// first bump).
    fences: StdMutex<HashMap<String, i64>>,
}

impl Session {
    /// Grants a lease of the configured TTL and starts keeping it alive.
    pub(crate) async fn grant(client: Arc<EtcdClient>) -> Result<Arc<Session>> {
        let secs = client.config().lease_ttl_secs();
        let sent = Sent::now();
        let resp = client
            .call("grant the session lease", |mut c| async move {
                c.lease_grant(secs, None).await
            })
            .await?;
        // The server may raise a TTL below its minimum; use what it granted.
        let ttl = Duration::from_secs(u64::try_from(resp.ttl()).unwrap_or(0).max(1));
        let id = resp.id();
        let hub = SessionHub::new();
        hub.confirm(sent, ttl);
        let task = tokio::spawn(keep_alive(client.clone(), id, ttl, hub.clone())).abort_handle();
        tracing::debug!(lease = id, ttl = ?ttl, "distlock etcd: session lease granted");
        Ok(Arc::new(Session {
            id,
            ttl,
            hub,
            task,
            client,
            fences: StdMutex::new(HashMap::new()),
        }))
    }

    /// The compare every put of a contender key carries: the session's
    /// fence key of the name (`key`) is as this client last knew it (absent
    /// before its first bump). After a put whose outcome is unknown, a
    /// [`Session::bump`] known applied makes every earlier copy of it fail,
    /// however late it reaches the server.
    pub(crate) fn fence(&self, key: &str) -> Compare {
        match self.fences().get(key) {
            None => Compare::create_revision(key, CompareOp::Equal, 0),
            Some(rev) => Compare::mod_revision(key, CompareOp::Equal, *rev),
        }
    }

    fn fences(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.fences.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fence key as a read found it (a put whose compare failed reads
    /// it back): a later bump of ours, applied late, moves it on; the next
    /// put compares what is there now. Safe: whatever compared an earlier
    /// value stays refused, mod revisions only grow.
    pub(crate) fn saw_fence(&self, key: &str, kv: Option<&KeyValue>) {
        match kv {
            Some(kv) => self.fences().insert(key.to_string(), kv.mod_revision()),
            None => self.fences().remove(key),
        };
    }

    /// Moves the fence key on (a put of it on the session lease, safe to
    /// send again): once this returns, no copy of a put of ours sent
    /// before it can be applied any more. Fails like any request
    /// (`Unavailable`: try again; `Lost`: the lease is gone, and with it
    /// whatever a late put could write).
    pub(crate) async fn bump(&self, key: &str) -> Result<()> {
        let lease = self.id;
        let resp = self
            .client
            .call("move the session's fence on", |mut c| {
                let key = key.to_string();
                async move {
                    c.put(key, "", Some(PutOptions::new().with_lease(lease)))
                        .await
                }
            })
            .await?;
        let rev = resp.header().map(|h| h.revision()).ok_or_else(|| {
            lock_core::LockError::new(
                lock_core::LockErrorKind::Protocol,
                "etcd: answer without a header",
            )
        })?;
        let mut fences = self.fences();
        let known = fences.entry(key.to_string()).or_insert(rev);
        *known = (*known).max(rev);
        Ok(())
    }

    /// The lease id.
    pub(crate) fn id(&self) -> i64 {
        self.id
    }

    /// The TTL the server granted.
    pub(crate) fn granted_ttl(&self) -> Duration {
        self.ttl
    }

    /// Whether the session is over (the server dropped the lease).
    pub(crate) fn is_ended(&self) -> bool {
        self.hub.is_ended()
    }

    /// Until when the last keep-alive vouches for the lease; `None` once the
    /// session ended or when that time has passed.
    pub(crate) fn vouched_until(&self) -> Option<Instant> {
        self.hub.vouched_until().filter(|t| *t > Instant::now())
    }

    /// Whether keep-alives are failing now.
    pub(crate) fn is_suspended(&self) -> bool {
        matches!(
            self.hub.status(),
            lock_core::backend::session::SessionStatus::Suspended { .. }
        )
    }

    /// The events of one more guard on this session.
    pub(crate) fn register(&self) -> std::result::Result<SessionEvents, LossCause> {
        self.hub.register()
    }

    /// The server says the lease is gone (a put with it failed "lease not found").
    pub(crate) fn end(&self, reason: &str) {
        tracing::warn!(lease = self.id, %reason, "distlock etcd: session lease gone");
        self.hub.end(LossCause::SessionExpired);
        self.task.abort();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.task.abort();
        if self.hub.is_ended() {
            return;
        }
        self.hub.end(LossCause::SessionExpired);
        // Revoke in the background so the server drops our keys now rather than
        // after the TTL. Never blocks; without a runtime the lease just expires.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (client, id) = (self.client.clone(), self.id);
            rt.spawn(async move { revoke(&client, id).await });
        }
    }
}

async fn revoke(client: &EtcdClient, id: i64) {
    match client
        .call("revoke the session lease", |mut c| async move {
            c.lease_revoke(id).await
        })
        .await
    {
        Ok(_) => tracing::debug!(lease = id, "distlock etcd: session lease revoked"),
        Err(e) if e.kind() == LockErrorKind::Lost => {}
        Err(e) => {
            tracing::debug!(lease = id, error = %e, "distlock etcd: revoking the session lease failed; it expires with its TTL")
        }
    }
}

/// One open keep-alive stream and the keep-alives sent on it, oldest first.
struct Stream {
    keeper: LeaseKeeper,
    responses: LeaseKeepAliveStream,
    endpoint: usize,
    in_flight: VecDeque<Sent>,
}

/// What the keep-alive loop is waiting for next.
enum Next {
    /// Time to send the next keep-alive.
    Send,
    /// An answer (or the stream's end).
    Answer(std::result::Result<Option<i64>, String>),
    /// The oldest keep-alive has gone unanswered for a request timeout.
    Overdue,
}

/// Keeps lease `id` alive: one keep-alive every TTL/3 on one stream; answers
/// confirm the lease from their send time, in order, whenever they come.
/// A stream that fails or stays silent is reopened (on the next endpoint,
/// after that endpoint's backoff); meanwhile the guards are suspended.
async fn keep_alive(client: Arc<EtcdClient>, id: i64, ttl: Duration, hub: Arc<SessionHub>) {
    let interval = ttl / 3;
    let patience = client
        .request_timeout()
        .min(interval.max(Duration::from_millis(100)));
    let mut stream: Option<Stream> = None;
    let mut next_send = Instant::now() + interval;
    let mut retry = Duration::from_millis(50);
    loop {
        if stream.is_none() {
            let sent = Sent::now();
            match open(&client, id, ttl).await {
                Ok(Some(s)) => {
                    // The opening keep-alive was answered: the lease lives,
                    // renewed to its TTL.
                    hub.confirm(sent, ttl);
                    stream = Some(s);
                    retry = Duration::from_millis(50);
                    next_send = Instant::now() + interval;
                }
                Ok(None) => {
                    hub.end(LossCause::SessionExpired);
                    tracing::warn!(
                        lease = id,
                        "distlock etcd: session lease expired on the server"
                    );
                    return;
                }
                Err(reason) => {
                    hub.suspend(&format!("etcd session keep-alive failing: {reason}"));
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2)
                        .min(Duration::from_secs(1))
                        .min(interval.max(Duration::from_millis(50)));
                    continue;
                }
            }
        }
        let Some(s) = stream.as_mut() else { continue };
        let overdue_at = s.in_flight.front().map(|sent| sent.at() + patience);
        let next = tokio::select! {
            _ = tokio::time::sleep_until(next_send) => Next::Send,
            answer = s.responses.message() => Next::Answer(match answer {
                Ok(Some(resp)) => Ok(Some(resp.ttl())),
                Ok(None) => Err("the keep-alive stream ended".into()),
                Err(e) => Err(client.stream_error(s.endpoint, Failure::Etcd(e), "keep-alive").to_string()),
            }),
            _ = tokio::time::sleep_until(overdue_at.unwrap_or(next_send)), if overdue_at.is_some() => Next::Overdue,
        };
        match next {
            Next::Send => {
                next_send = Instant::now() + interval;
                let sent = Sent::now();
                lock_core::metrics::count_request("etcd", "keep-alive");
                if let Err(e) = s.keeper.keep_alive().await {
                    let reason = format!("sending a keep-alive: {e}");
                    client.failed(s.endpoint);
                    hub.suspend(&format!("etcd session keep-alive failing: {reason}"));
                    stream = None;
                    continue;
                }
                s.in_flight.push_back(sent);
            }
            Next::Answer(Ok(Some(secs))) if secs > 0 => {
                client.stream_ok(s.endpoint);
                if let Some(sent) = s.in_flight.pop_front() {
                    let granted = Duration::from_secs(u64::try_from(secs).unwrap_or(0));
                    hub.confirm(sent, granted.min(ttl));
                }
            }
            Next::Answer(Ok(_)) => {
                hub.end(LossCause::SessionExpired);
                tracing::warn!(
                    lease = id,
                    "distlock etcd: session lease expired on the server"
                );
                return;
            }
            Next::Answer(Err(reason)) => {
                hub.suspend(&format!("etcd session keep-alive failing: {reason}"));
                stream = None;
                next_send = Instant::now();
            }
            Next::Overdue => {
                // The member may be slow or gone. Answers still on their way
                // count when they come (a drain task reads them), while the
                // keep-alives go on over a new stream on the next endpoint.
                hub.suspend(&format!(
                    "etcd session keep-alive unanswered for {patience:?}"
                ));
                if let Some(old) = stream.take() {
                    client.failed(old.endpoint);
                    tokio::spawn(drain(old, hub.clone(), ttl));
                }
            }
        }
    }
}

/// Reads the answers still due on a stream that was given up for being
/// slow: each one that comes within the lease TTL confirms the lease from
/// its own send time (a late answer is still an answer).
async fn drain(mut old: Stream, hub: Arc<SessionHub>, ttl: Duration) {
    let give_up = Instant::now() + ttl;
    while let Some(sent) = old.in_flight.pop_front() {
        match tokio::time::timeout_at(give_up, old.responses.message()).await {
            Ok(Ok(Some(resp))) if resp.ttl() > 0 => {
                let granted = Duration::from_secs(u64::try_from(resp.ttl()).unwrap_or(0));
                hub.confirm(sent, granted.min(ttl));
            }
            Ok(Ok(Some(_))) => {
                hub.end(LossCause::SessionExpired);
                return;
            }
            _ => return,
        }
    }
}

/// Opens a keep-alive stream (which sends one keep-alive and waits for its
/// answer, up to half the lease TTL: a slow answer still confirms the
/// lease). `Ok(None)`: the server no longer knows the lease.
async fn open(
    client: &EtcdClient,
    id: i64,
    ttl: Duration,
) -> std::result::Result<Option<Stream>, String> {
    let (c, endpoint) = client.stream_client().await.map_err(|e| e.to_string())?;
    lock_core::metrics::count_request("etcd", "keep-alive");
    let limit = client.request_timeout().max(ttl / 2);
    match tokio::time::timeout(limit, c.lease_client().keep_alive(id)).await {
        Ok(Ok((keeper, responses))) => {
            client.stream_ok(endpoint);
            Ok(Some(Stream {
                keeper,
                responses,
                endpoint,
                in_flight: VecDeque::new(),
            }))
        }
        Ok(Err(etcd_client::Error::LeaseKeepAliveError(msg))) if msg.contains("not found") => {
            Ok(None)
        }
        Ok(Err(e)) => {
            let err = client.stream_error(endpoint, Failure::Etcd(e), "open the keep-alive stream");
            if err.kind() == LockErrorKind::Lost {
                return Ok(None);
            }
            Err(err.to_string())
        }
        Err(_) => {
            client.failed(endpoint);
            Err(format!(
                "opening the keep-alive stream took more than {limit:?}"
            ))
        }
    }
}
