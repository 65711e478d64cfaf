//! One node: its client, its multiplexed connection, the requests a round
//! sends to it, and the ONE function that maps `redis` errors to distlock's.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::drift;
use lock_core::{LockError, LockErrorKind, NodeFailure, NodeFailureReason, Result, TlsConfig};
use lock_redis::kit::call::{Lua, ScriptCall};
use lock_redis::kit::layout::{Keys, LINE, LINE_LAPSE, LINE_SEQ, RELEASED};
use lock_redis::kit::place::PlaceLife;
use lock_redis::kit::renew::{BatchSender, Batcher, KeyOutcome, LeaseKind, RenewItem, RENEW_BATCH};
use lock_redis::kit::scripts::{Scripts, ACQUIRE_IN_LINE, LEAVE_LINE};
use lock_redis::RenewBatching;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisError, RedisResult, Value};
use tokio::time::Instant;

/// The one place where a `redis` error becomes a distlock error kind (the
/// mapping shared with `lock-redis`) and a per-node failure reason.
pub(crate) fn classify(err: &RedisError) -> (LockErrorKind, NodeFailureReason) {
    if err.is_timeout() {
        return (LockErrorKind::Unavailable, NodeFailureReason::TimedOut);
    }
    if err.is_connection_refusal() || err.is_connection_dropped() || err.is_io_error() {
        return (LockErrorKind::Unavailable, NodeFailureReason::Unreachable);
    }
    (
        lock_redis::kit::errors::error_kind(err),
        NodeFailureReason::Error,
    )
}

/// A whole-operation error from a `redis` error (configuration, single-node
/// paths), through [`classify`].
pub(crate) fn map_error(context: &str, err: RedisError) -> LockError {
    let (kind, _) = classify(&err);
    LockError::new(kind, format!("redlock: {context}: {err}")).with_source(err)
}

/// A node's failure to answer in time.
pub(crate) fn timed_out(node: &Node, after: Duration) -> NodeFailure {
    NodeFailure {
        node: node.addr.clone(),
        reason: NodeFailureReason::TimedOut,
        detail: format!("no answer within {after:?}"),
    }
}

/// A node's failure from a `redis` error, through [`classify`].
pub(crate) fn failed(node: &Node, err: &RedisError) -> NodeFailure {
    let (_, reason) = classify(err);
    NodeFailure {
        node: node.addr.clone(),
        reason,
        detail: err.to_string(),
    }
}

/// A `redis::Client` for `url` (`redis://host:port/db`, `rediss://...`
/// with `tls`'s files, or bare `host:port`).
pub(crate) fn node_client(url: &str, tls: &TlsConfig) -> Result<redis::Client> {
    let url = url.trim();
    let full = if url.contains("://") {
        url.to_string()
    } else {
        format!("redis://{url}/")
    };
    lock_redis::kit::connect::open_client(&full, tls).map_err(|e| {
        let shown = lock_redis::kit::connect::redact_url(url);
        LockError::new(e.kind(), format!("redlock: node {shown}: {}", e.message()))
    })
}

/// What `SET key token NX PX ttl` found on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SetReply {
    /// The key now holds our token.
    Won,
    /// Someone else's token is there (`holder`, if it was still there when
    /// read); its remaining TTL if it has one; `seen`, the node's turn
    /// sequence when it refused (a round in line reads it, see
    /// [`ACQUIRE_IN_LINE`]): a reservation for us announced with a larger
    /// one was made after this refusal.
    Taken {
        pttl: Option<Duration>,
        holder: Option<String>,
        seen: Option<u64>,
    },
    /// A plain `SET NX` was refused: the key is set, by whom and for how
    /// long was not read.
    TakenUnread,
}

/// What a compare-and-delete did on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    /// The key did not hold our token.
    NotOurs,
    /// Deleted (and announced, if asked).
    Deleted,
}

/// One lock's keys, the same on every node: the key, its release channel,
/// its line of waiters and the turn sequence (see [`ACQUIRE_IN_LINE`]).
#[derive(Debug)]
pub(crate) struct NameKeys {
    pub key: Arc<str>,
    pub channel: Arc<str>,
    pub line: Arc<str>,
    pub lapse: Arc<str>,
    pub seq: Arc<str>,
}

impl NameKeys {
    /// The keys that go with the lock key `key`.
    pub fn of(key: Arc<str>) -> Arc<Self> {
        Arc::new(Self {
            channel: Keys::aux(&key, RELEASED).into(),
            line: Keys::aux(&key, LINE).into(),
            lapse: Keys::aux(&key, LINE_LAPSE).into(),
            seq: Keys::aux(&key, LINE_SEQ).into(),
            key,
        })
    }

    /// The keys of the release and leave-line scripts, in their order.
    pub fn for_release(&self) -> [&str; 5] {
        [&self.key, &self.channel, &self.line, &self.lapse, &self.seq]
    }
}

/// A waiting call's place in the nodes' line: the same wait id and arrival
/// on every node, so that every node puts the same waiters in the same
/// order.
#[derive(Debug)]
pub(crate) struct Place {
    /// A random id for this call only, naming this client
    /// ([`lock_redis::kit::notify::Notifier::wait_id`]).
    pub id: String,
    /// When the call began, in µs of this machine's clock since the Unix
    /// epoch (an order between waiters, not a time bound).
    pub arrival_us: u64,
    /// How long a place lasts on a node unless the waiter tries again, and
    /// its end: the call's deadline and a little slack.
    life: PlaceLife,
    /// How much of the place must be left on a node for a reservation
    /// there to last our TTL ([`Place::new`]): twice that slack.
    grace: Duration,
}

impl Place {
    /// A new place for a call that waits until `deadline` for a lock of
    /// `ttl` and tries again at least every `max(ttl, max_recheck)`; each
    /// attempt keeps the place twice that longer, but not past
    /// `deadline + slack` ([`PlaceLife`]).
    ///
    /// Its wait id is `wait_id` ([`lock_redis::kit::notify::Notifier::wait_id`])
    /// with `+<ttl ms>+<grace ms>` appended: a node that reserves the key
    /// for this place while more than the grace is left of it keeps the
    /// reservation for the TTL at least (see
    /// [`lock_redis::kit::scripts::ACQUIRE_IN_LINE`]), so that it is the lock of
    /// this waiter once a quorum of nodes made it ([`Place::ttl_reserved_before`]).
    ///
    /// The grace is twice the slack. A node counts a place from when the
    /// attempt that renewed it arrived, so the place of a waiter whose
    /// attempt arrived late (a busy machine, a slow link) outlasts the
    /// waiter's end there by that lateness. With a grace of one slack, a
    /// release right after such a waiter gave up (cut off, it could not
    /// leave the line) found more than the grace left and reserved the key
    /// for the waiter's whole TTL: one attempt 60 ms late held the name up
    /// for 10 s instead of about 1 s. With twice the slack that takes an
    /// attempt arriving more than one slack (the node timeout and the time
    /// to leave) after it was sent, long after its sender gave up on it; and
    /// then the name is held up for one TTL, as by a holder that vanished.
    pub fn new(
        wait_id: &str,
        ttl: Duration,
        deadline: Instant,
        max_recheck: Duration,
        slack: Duration,
    ) -> Self {
        let life = PlaceLife::new(ttl, max_recheck, deadline, slack);
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let grace = slack.saturating_mul(2);
        let id = format!("{wait_id}+{}+{}", ms(ttl), ms(grace));
        let arrival_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        Self {
            id,
            arrival_us,
            life,
            grace,
        }
    }

    /// Until when a node that reserves the key for this place, after an
    /// attempt of ours sent at `sent` reached it, keeps the reservation for
    /// our TTL at least: while more than the grace is left of the place
    /// there (the node renewed the place when that attempt arrived), with
    /// the drift allowance for the node's clock: one slack before our
    /// deadline at the latest, earlier if the place was last renewed long
    /// before.
    pub fn ttl_reserved_before(&self, sent: Instant) -> Instant {
        let lapse = self.life.lapse_after(sent);
        let margin = self.grace.saturating_add(drift(self.life.lasts()));
        lapse.checked_sub(margin).unwrap_or(sent)
    }

    /// The three script arguments of `place` (wait id, arrival, how long
    /// the place lasts from now), or `'', 0, 0` for none.
    fn add_args(call: &mut ScriptCall<'_>, place: Option<&Place>) {
        match place {
            Some(p) => call.arg(&p.id).arg(p.arrival_us).arg(p.life.lasts_ms()),
            None => call.arg("").arg(0).arg(0),
        };
    }
}

/// What a read of the key found on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Peek {
    /// The token stored there, if any.
    pub value: Option<String>,
    /// Its remaining TTL, if it has one.
    pub pttl: Option<Duration>,
}

fn pttl(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// Runs `op` on `conn`; if the connection was refused or had dropped (a
/// stale connection, or the node came back), once more on a fresh one. Each
/// try counts as one request (`op_name`) in [`lock_core::metrics::REQUESTS`].
/// The caller bounds the whole with the per-node timeout.
async fn call_on<T, F, Fut>(
    conn: &ConnectionManager,
    op_name: &'static str,
    op: F,
) -> RedisResult<T>
where
    F: Fn(ConnectionManager) -> Fut,
    Fut: Future<Output = RedisResult<T>>,
{
    lock_core::metrics::count_request("redlock", op_name);
    match op(conn.clone()).await {
        Err(e) if e.is_connection_refusal() || e.is_connection_dropped() => {
            lock_core::metrics::count_request("redlock", op_name);
            op(conn.clone()).await
        }
        other => other,
    }
}

/// How one node's renewal batches reach it: one `RENEW_BATCH` per batch on
/// the node's connection, retried once on a fresh connection as every
/// request to a node is, bounded by `limit` (the node timeout) from when
/// the batch is sent.
pub(crate) struct NodeBatch {
    conn: ConnectionManager,
    script: Lua,
    limit: Duration,
}

impl BatchSender for NodeBatch {
    type Error = RedisError;

    async fn send(&self, items: Vec<RenewItem>) -> RedisResult<Vec<KeyOutcome>> {
        let request = call_on(&self.conn, "renew", |mut c| {
            let (script, items) = (&self.script, &items);
            async move { lock_redis::kit::renew::send_batch(&mut c, script, items).await }
        });
        match tokio::time::timeout(self.limit, request).await {
            Ok(r) => r,
            Err(_) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("renew batch: no answer within {:?}", self.limit),
            ))),
        }
    }

    fn abandoned(&self) -> RedisError {
        RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "renew batch: ended without an answer (client shutting down?)",
        ))
    }
}

/// One independent Redis master.
pub(crate) struct Node {
    /// `host:port`, as errors name it.
    pub addr: String,
    /// For the pub/sub connection used while waiting.
    pub client: redis::Client,
    /// One multiplexed connection, reconnected lazily by the manager.
    conn: ConnectionManager,
    /// The renewals of this client's leases on this node, one request per batch.
    renewals: Batcher<NodeBatch>,
    /// The prefix of the waiters' inbox channels, where this node announces
    /// a waiter's turn (see `lock_redis::kit::notify`).
    inbox: Arc<str>,
}

impl Node {
    /// A node with a lazy connection (no I/O here); each of its renewal
    /// batches gives up `batch_limit` (the node timeout) after it was sent;
    /// it announces turns in the inboxes named by `inbox`.
    /// Must run inside a Tokio runtime.
    pub fn new(
        url: &str,
        tls: &TlsConfig,
        connect_timeout: Duration,
        batching: RenewBatching,
        batch_limit: Duration,
        inbox: Arc<str>,
    ) -> Result<Self> {
        let client = node_client(url, tls)?;
        let addr = client.get_connection_info().addr().to_string();
        // No retries inside the manager: a node that refuses must fail this
        // round at once (the round decides), and the next request reconnects.
        // No response timeout either: every request is bounded by the
        // per-node timeout of its round.
        let cfg = ConnectionManagerConfig::new()
            .set_number_of_retries(0)
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(None);
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), cfg)
            .map_err(|e| map_error(&format!("node {addr}"), e))?;
        let renewals = Batcher::new(
            NodeBatch {
                conn: conn.clone(),
                script: Lua::new(RENEW_BATCH),
                limit: batch_limit,
            },
            batching,
        );
        Ok(Self {
            addr,
            client,
            conn,
            renewals,
            inbox,
        })
    }

    /// [`call_on`] this node's connection.
    pub(crate) async fn call<T, F, Fut>(&self, op_name: &'static str, op: F) -> RedisResult<T>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        call_on(&self.conn, op_name, op).await
    }

    /// `SET key token NX PX ttl`: the first round of a call that saw no
    /// contention lately (one command, no script, as the peers send, with
    /// `EXISTS` of the line in the same pipeline). A key reserved for a
    /// waiter in line is not free to it. A key that was free while waiters
    /// are in line (its holder expired, or vanished) is not ours to take
    /// ahead of them: we give it back at once with [`RELEASE`](Node::release),
    /// which reserves it for the first in line and announces that waiter's
    /// turn, and the node counts as refused. A refused `SET` reads nothing:
    /// the call then goes in line, whose script tells who holds the key
    /// and for how long. The retry on a fresh connection (the first `SET`
    /// may have landed before the connection dropped) sends `GET` and
    /// `PTTL` in the same pipeline, which recognises our own token.
    pub async fn set_nx(
        &self,
        scripts: &Scripts,
        keys: &NameKeys,
        token: &str,
        ttl_ms: u64,
    ) -> RedisResult<SetReply> {
        let retried = AtomicBool::new(false);
        let (reply, line) = self
            .call("acquire", |mut c| {
                let retry = retried.swap(true, Ordering::Relaxed);
                async move {
                    let key = &*keys.key;
                    let mut set = redis::cmd("SET");
                    set.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
                    let mut pipe = redis::pipe();
                    pipe.add_command(set);
                    if !retry {
                        pipe.cmd("EXISTS").arg(&*keys.line);
                        let (set, line): (Value, i64) = pipe.query_async(&mut c).await?;
                        let reply = match set {
                            Value::Nil => SetReply::TakenUnread,
                            _ => SetReply::Won,
                        };
                        return Ok((reply, line > 0));
                    }
                    pipe.cmd("GET")
                        .arg(key)
                        .cmd("PTTL")
                        .arg(key)
                        .cmd("EXISTS")
                        .arg(&*keys.line);
                    let (set, value, ms, line): (Value, Option<String>, i64, i64) =
                        pipe.query_async(&mut c).await?;
                    let reply = if !matches!(set, Value::Nil) || value.as_deref() == Some(token) {
                        SetReply::Won
                    } else {
                        SetReply::Taken {
                            pttl: pttl(ms),
                            holder: value,
                            seen: None,
                        }
                    };
                    Ok((reply, line > 0))
                }
            })
            .await?;
        if reply == SetReply::Won && line {
            self.release(scripts, keys, token, true, None).await?;
            return Ok(SetReply::TakenUnread);
        }
        Ok(reply)
    }

    /// One attempt on this node in line ([`ACQUIRE_IN_LINE`]): `SET key
    /// token NX PX ttl` while nobody is in line, else the key only for the
    /// first in line (or the waiter it is reserved for); a waiter (`place`)
    /// takes or keeps its place in line when it does not get the key. The
    /// key already holding our token (a retried request whose first reply
    /// was lost) counts as won.
    pub async fn acquire(
        &self,
        scripts: &Scripts,
        keys: &NameKeys,
        token: &str,
        ttl_ms: u64,
        place: Option<&Place>,
    ) -> RedisResult<SetReply> {
        let reply: Vec<Value> = self
            .call("acquire", |mut c| async move {
                let mut call = ScriptCall::new(
                    &scripts.acquire_in_line,
                    &[&keys.key, &keys.line, &keys.lapse, &keys.seq],
                );
                call.arg(token).arg(ttl_ms);
                Place::add_args(&mut call, place);
                call.invoke_async(&mut c).await
            })
            .await?;
        match reply.as_slice() {
            [Value::Int(1)] => Ok(SetReply::Won),
            [Value::Int(0), Value::Int(ms), holder, seen] => Ok(SetReply::Taken {
                pttl: pttl(*ms),
                holder: redis::from_redis_value_ref(holder).ok(),
                seen: redis::from_redis_value_ref::<String>(seen)
                    .ok()
                    .and_then(|s| s.parse().ok()),
            }),
            other => Err(RedisError::from((
                redis::ErrorKind::Parse,
                "unexpected acquire reply",
                format!("{other:?}"),
            ))),
        }
    }

    /// Compare-and-`PEXPIRE` of our mutex key in this node's next renewal
    /// batch: `Some(sent)` if the key held our token and now has `ttl` left
    /// from `sent` (taken before the request that carried it was sent),
    /// `None` if it did not. A failed batch is the error this renewal's own
    /// request would have had.
    pub async fn renew(
        &self,
        kind: LeaseKind,
        key: &str,
        token: &str,
        ttl: Duration,
    ) -> RedisResult<Option<Instant>> {
        let renewed = self
            .renewals
            .renew(RenewItem {
                kind,
                described: None,
                key: key.to_string(),
                token: token.to_string(),
                ttl,
            })
            .await?;
        match renewed.outcome {
            KeyOutcome::Extended => Ok(Some(renewed.sent)),
            KeyOutcome::NotOurs => Ok(None),
            KeyOutcome::Failed(text) => Err(KeyOutcome::error(&text)),
        }
    }

    /// Compare-and-delete (the shared `RELEASE` script, which also publishes
    /// on the release channel if `announce`): whether the key held our token.
    /// The clean-up of a waiter's failed round passes its place (`rejoin`),
    /// which its win here had taken out of the line.
    pub async fn release(
        &self,
        scripts: &Scripts,
        keys: &NameKeys,
        token: &str,
        announce: bool,
        rejoin: Option<&Place>,
    ) -> RedisResult<ReleaseReply> {
        let n: i64 = self
            .call("release", |mut c| async move {
                let mut call = ScriptCall::new(&scripts.release, &keys.for_release());
                call.arg(token).arg(if announce { "1" } else { "0" });
                Place::add_args(&mut call, rejoin);
                call.arg(&*self.inbox).invoke_async(&mut c).await
            })
            .await?;
        Ok(if n > 0 {
            ReleaseReply::Deleted
        } else {
            ReleaseReply::NotOurs
        })
    }

    /// An operator's force release on this node (the shared `RELEASE`
    /// script with the owner not compared): whoever holds the key is
    /// removed, and the first in line gets its turn and is told, as on a
    /// release. Whether the key held anything.
    pub async fn force_release(
        &self,
        scripts: &Scripts,
        keys: &NameKeys,
    ) -> RedisResult<ReleaseReply> {
        let n: i64 = self
            .call("force release", |mut c| async move {
                let mut call = ScriptCall::new(&scripts.release, &keys.for_release());
                call.arg("").arg("1");
                Place::add_args(&mut call, None);
                call.arg(&*self.inbox).arg("1").invoke_async(&mut c).await
            })
            .await?;
        Ok(if n > 0 {
            ReleaseReply::Deleted
        } else {
            ReleaseReply::NotOurs
        })
    }

    /// Leaves this node's line ([`LEAVE_LINE`]), passing the turn on if it
    /// was ours (silently if we leave `holding` the lock).
    pub async fn leave_line(
        &self,
        scripts: &Scripts,
        keys: &NameKeys,
        wait_id: &str,
        holding: bool,
    ) -> RedisResult<()> {
        self.call("leave line", |mut c| async move {
            ScriptCall::new(&scripts.leave_line, &keys.for_release())
                .arg(wait_id)
                .arg(if holding { "1" } else { "" })
                .arg(&*self.inbox)
                .invoke_async::<i64>(&mut c)
                .await
        })
        .await
        .map(drop)
    }

    /// `GET` and `PTTL` of the key.
    pub async fn peek(&self, key: &str) -> RedisResult<Peek> {
        let mut pipe = redis::pipe();
        pipe.cmd("GET").arg(key).cmd("PTTL").arg(key);
        let (value, ms): (Option<String>, i64) = self
            .call("inspect", |mut c| {
                let pipe = &pipe;
                async move { pipe.query_async(&mut c).await }
            })
            .await?;
        Ok(Peek {
            value,
            pttl: pttl(ms),
        })
    }

    /// The lock keys on this node whose names start with `name_prefix`.
    pub async fn list(
        &self,
        scripts: &Scripts,
        key_prefix: &str,
        name_prefix: &str,
    ) -> RedisResult<Vec<lock_redis::kit::list::Listed>> {
        self.call("list", |mut c| async move {
            lock_redis::kit::list::list_keys(&mut c, &scripts.list_page, key_prefix, name_prefix)
                .await
        })
        .await
    }

    /// The node's `maxmemory-policy`, if it tells
    /// ([`lock_redis::kit::eviction::read_policy`]).
    pub async fn eviction_policy(&self) -> RedisResult<Option<String>> {
        self.call("connect", |mut c| async move {
            Ok(lock_redis::kit::eviction::read_policy(&mut c, &self.addr).await)
        })
        .await
    }

    /// Loads the scripts (so the first release or extension needs no
    /// `NOSCRIPT` round trip) — also the reachability check of `connect`.
    pub async fn load_scripts(&self, scripts: &Scripts) -> RedisResult<()> {
        let mut pipe = redis::pipe();
        pipe.cmd("SCRIPT")
            .arg("LOAD")
            .arg(lock_redis::kit::scripts::RELEASE)
            .cmd("SCRIPT")
            .arg("LOAD")
            .arg(RENEW_BATCH)
            .cmd("SCRIPT")
            .arg("LOAD")
            .arg(ACQUIRE_IN_LINE)
            .cmd("SCRIPT")
            .arg("LOAD")
            .arg(LEAVE_LINE);
        let (a, b, c, d): (String, String, String, String) = self
            .call("connect", |mut c| {
                let pipe = &pipe;
                async move { pipe.query_async(&mut c).await }
            })
            .await?;
        debug_assert_eq!(a, scripts.release.hash());
        debug_assert_eq!(b, scripts.renew_batch.hash());
        debug_assert_eq!(c, scripts.acquire_in_line.hash());
        debug_assert_eq!(d, scripts.leave_line.hash());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::ErrorKind;

    fn io(kind: std::io::ErrorKind) -> RedisError {
        RedisError::from(std::io::Error::new(kind, "test"))
    }

    #[test]
    fn classify_maps_client_errors_to_kinds_and_node_reasons() {
        use LockErrorKind as K;
        use NodeFailureReason as R;
        assert_eq!(
            classify(&io(std::io::ErrorKind::TimedOut)),
            (K::Unavailable, R::TimedOut)
        );
        assert_eq!(
            classify(&io(std::io::ErrorKind::ConnectionRefused)),
            (K::Unavailable, R::Unreachable)
        );
        assert_eq!(
            classify(&io(std::io::ErrorKind::ConnectionReset)),
            (K::Unavailable, R::Unreachable)
        );
        assert_eq!(
            classify(&RedisError::from((ErrorKind::Parse, "bad reply"))),
            (K::Protocol, R::Error)
        );
        assert_eq!(
            classify(&RedisError::from((
                ErrorKind::AuthenticationFailed,
                "denied"
            ))),
            (K::Unauthorized, R::Error)
        );
        assert_eq!(
            classify(&RedisError::from((
                ErrorKind::InvalidClientConfig,
                "bad url"
            ))),
            (K::InvalidArgument, R::Error)
        );
    }
}
