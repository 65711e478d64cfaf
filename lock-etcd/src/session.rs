//! The session: one etcd lease per client, kept alive by one background
//! keep-alive stream, shared by every lock the client holds.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};
use lock_core::{validity, LockErrorKind, Result};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::core::{Core, Failure};

/// How long before the end of its confirmed validity the session declares an
/// unconfirmed lease expired. Guards are bounded by that validity (it is what
/// the session sends them with [`lock_core::LeaseEvent::Confirmed`]); expiring
/// the session a little earlier makes them see `Lost(SessionExpired)` rather
/// than a bare `Lost(Expired)` of their validity at the same instant.
pub(crate) const EXPIRE_LEAD: Duration = Duration::from_millis(50);

/// What the session knows about its lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SessionState {
    /// The server confirmed the lease; it lives at least until `valid_until`
    /// (last confirmed keep-alive send + TTL - drift), and the session counts
    /// it expired [`EXPIRE_LEAD`] before that. `trouble` is set while
    /// keep-alives fail.
    Live {
        valid_until: Instant,
        trouble: Option<String>,
    },
    /// The lease is gone (expired on the server, or not confirmed within its
    /// TTL). Every key attached to it is gone or about to go.
    Expired { reason: String },
}

/// One lease and its keep-alive task. Dropping the last reference stops the
/// keep-alive and revokes the lease in the background (its keys go at once).
pub(crate) struct Session {
    id: i64,
    ttl: Duration,
    state: Arc<watch::Sender<SessionState>>,
    task: tokio::task::AbortHandle,
    core: Arc<Core>,
}

impl Session {
    /// Grants a lease of the configured TTL and starts keeping it alive.
    pub(crate) async fn grant(core: Arc<Core>) -> Result<Arc<Session>> {
        let secs = core.config().lease_ttl_secs();
        let start = Instant::now();
        let resp = core
            .call("grant the session lease", |mut c| async move {
                c.lease_grant(secs, None).await
            })
            .await?;
        // The server may raise a TTL below its minimum; use what it granted.
        let ttl = Duration::from_secs(u64::try_from(resp.ttl()).unwrap_or(0).max(1));
        let id = resp.id();
        let state = Arc::new(watch::Sender::new(SessionState::Live {
            valid_until: validity(start, ttl),
            trouble: None,
        }));
        let task = tokio::spawn(keep_alive(
            core.clone(),
            id,
            ttl,
            state.clone(),
            start + ttl / 3,
        ))
        .abort_handle();
        tracing::debug!(lease = id, ttl = ?ttl, "distlock etcd: session lease granted");
        Ok(Arc::new(Session {
            id,
            ttl,
            state,
            task,
            core,
        }))
    }

    /// The lease id.
    pub(crate) fn id(&self) -> i64 {
        self.id
    }

    /// The TTL the server granted.
    pub(crate) fn granted_ttl(&self) -> Duration {
        self.ttl
    }

    /// The state now (an unconfirmed lease at its validity, less
    /// [`EXPIRE_LEAD`], counts as expired).
    pub(crate) fn state(&self) -> SessionState {
        let st = self.state.borrow().clone();
        match st {
            SessionState::Live { valid_until, .. } if Instant::now() >= expiry(valid_until) => {
                SessionState::Expired {
                    reason: "the lease was not confirmed within its TTL".into(),
                }
            }
            other => other,
        }
    }

    pub(crate) fn is_expired(&self) -> bool {
        matches!(self.state(), SessionState::Expired { .. })
    }

    /// Until when the session vouches for its keys (last confirmed keep-alive
    /// send + TTL - drift), or `None` once it counts as expired.
    pub(crate) fn confirmed_until(&self) -> Option<Instant> {
        match self.state() {
            SessionState::Live { valid_until, .. } => Some(valid_until),
            SessionState::Expired { .. } => None,
        }
    }

    /// A watch of the state, for guards and waiters.
    pub(crate) fn subscribe(&self) -> watch::Receiver<SessionState> {
        self.state.subscribe()
    }

    /// Marks the session expired because the server said so (a put with the
    /// lease failed with "lease not found").
    pub(crate) fn mark_expired(&self, reason: &str) {
        expire(&self.state, reason.to_string());
        self.task.abort();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.task.abort();
        if self.is_expired() {
            return;
        }
        expire(&self.state, "the client was dropped".into());
        // Revoke in the background so the server drops our keys now rather than
        // after the TTL. Never blocks; without a runtime the lease just expires.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (core, id) = (self.core.clone(), self.id);
            rt.spawn(async move { revoke(&core, id).await });
        }
    }
}

/// When a lease confirmed until `valid_until` counts as expired.
fn expiry(valid_until: Instant) -> Instant {
    valid_until.checked_sub(EXPIRE_LEAD).unwrap_or(valid_until)
}

fn expire(state: &watch::Sender<SessionState>, reason: String) {
    state.send_if_modified(|st| match st {
        SessionState::Expired { .. } => false,
        SessionState::Live { .. } => {
            *st = SessionState::Expired { reason };
            true
        }
    });
}

async fn revoke(core: &Core, id: i64) {
    match core
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

/// Outcome of one keep-alive round trip.
enum Beat {
    /// Confirmed: the lease has this many seconds left.
    Alive(i64),
    /// The server no longer knows the lease.
    Gone,
}

struct Stream {
    keeper: LeaseKeeper,
    responses: LeaseKeepAliveStream,
    endpoint: usize,
}

/// Keeps lease `id` alive every TTL/3 on one stream; on failure marks the
/// session troubled and retries soon on the next endpoint; expires it when the
/// lease was not confirmed within its TTL (less [`EXPIRE_LEAD`]) or the server
/// says it is gone. Every confirmation is a state change, which each guard's
/// monitor turns into a [`lock_core::LeaseEvent::Confirmed`].
async fn keep_alive(
    core: Arc<Core>,
    id: i64,
    ttl: Duration,
    state: Arc<watch::Sender<SessionState>>,
    first: Instant,
) {
    let interval = ttl / 3;
    let per_try = core
        .request_timeout()
        .min(interval.max(Duration::from_millis(100)));
    let retry = (interval / 4).clamp(Duration::from_millis(20), Duration::from_millis(250));
    let mut stream: Option<Stream> = None;
    let mut next = first;
    loop {
        let valid_until = match &*state.borrow() {
            SessionState::Live { valid_until, .. } => *valid_until,
            SessionState::Expired { .. } => return,
        };
        let expire_at = expiry(valid_until);
        if next >= expire_at {
            tokio::time::sleep_until(expire_at).await;
            expire(
                &state,
                format!("no keep-alive was confirmed within the lease TTL of {ttl:?}"),
            );
            tracing::warn!(
                lease = id,
                "distlock etcd: session lease expired (no confirmed keep-alive within its TTL)"
            );
            revoke(&core, id).await;
            return;
        }
        tokio::time::sleep_until(next).await;
        let sent = Instant::now();
        let endpoint = stream
            .as_ref()
            .map_or_else(|| core.pinned(), |s| s.endpoint);
        // A keep-alive still unanswered when the lease would count as expired
        // is given up then, so that the expiry is not reported late.
        let outcome = tokio::time::timeout_at(
            (sent + per_try).min(expire_at),
            beat(&core, id, &mut stream),
        )
        .await;
        match outcome {
            Ok(Ok(Beat::Alive(secs))) => {
                let confirmed = Duration::from_secs(u64::try_from(secs).unwrap_or(0));
                state.send_replace(SessionState::Live {
                    valid_until: validity(sent, confirmed.min(ttl)).max(valid_until),
                    trouble: None,
                });
                next = sent + interval;
            }
            Ok(Ok(Beat::Gone)) => {
                expire(&state, "the server says the session lease expired".into());
                tracing::warn!(
                    lease = id,
                    "distlock etcd: session lease expired on the server"
                );
                return;
            }
            failed => {
                let reason = match failed {
                    Ok(Err(e)) => e,
                    _ => format!("keep-alive not answered within {per_try:?}"),
                };
                stream = None;
                core.failed(endpoint);
                tracing::debug!(lease = id, %reason, "distlock etcd: session keep-alive failed");
                state.send_if_modified(|st| match st {
                    SessionState::Live { trouble, .. }
                        if trouble.as_deref() != Some(reason.as_str()) =>
                    {
                        *trouble = Some(reason.clone());
                        true
                    }
                    _ => false,
                });
                next = Instant::now() + retry;
            }
        }
    }
}

/// One keep-alive round trip, opening the stream first if needed.
async fn beat(
    core: &Core,
    id: i64,
    stream: &mut Option<Stream>,
) -> std::result::Result<Beat, String> {
    if stream.is_none() {
        let (client, endpoint) = core.pinned_client().await.map_err(|e| e.to_string())?;
        // Opening the stream sends one keep-alive and waits for its answer.
        match client.lease_client().keep_alive(id).await {
            Ok((keeper, responses)) => {
                *stream = Some(Stream {
                    keeper,
                    responses,
                    endpoint,
                });
                // The answer said ttl > 0; its exact value is not exposed here.
                return Ok(Beat::Alive(i64::MAX));
            }
            Err(etcd_client::Error::LeaseKeepAliveError(msg)) if msg.contains("not found") => {
                return Ok(Beat::Gone)
            }
            Err(e) => {
                let err =
                    core.stream_error(endpoint, Failure::Etcd(e), "open the keep-alive stream");
                if err.kind() == LockErrorKind::Lost {
                    return Ok(Beat::Gone);
                }
                return Err(err.to_string());
            }
        }
    }
    let Some(s) = stream.as_mut() else {
        return Err("no keep-alive stream".into());
    };
    if let Err(e) = s.keeper.keep_alive().await {
        return Err(format!("keep-alive stream closed: {e}"));
    }
    match s.responses.message().await {
        Ok(Some(resp)) if resp.ttl() > 0 => Ok(Beat::Alive(resp.ttl())),
        Ok(Some(_)) => Ok(Beat::Gone),
        Ok(None) => Err("keep-alive stream ended".into()),
        Err(e) => Err(format!("keep-alive stream failed: {e}")),
    }
}
