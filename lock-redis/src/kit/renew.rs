//! Renewal batching, shared by `lock-redis` and `lock-redlock`: the renewals
//! of one client's guards that arrive within a short window go to a node as
//! ONE request (one `EVALSHA` of [`RENEW_BATCH`]), so that holding 10,000
//! guards costs a node a few requests per renewal interval, not 10,000.
//!
//! How it works. A [`Batcher`] (one per connection: per client in
//! `lock-redis`, per node in `lock-redlock`) keeps the batch that is open
//! and when the last one left. A renewal on a quiet connection (no batch
//! sent for a [`RenewBatching::window`]) goes at once, alone: no added
//! latency when there is nothing to batch with. Otherwise it waits for the
//! open batch, which leaves one window after the previous one, so that a
//! connection sends at most one renewal request per window however many
//! guards renew through it. No renewal waits longer than
//! [`RenewBatching::wait_for`] its TTL (the window, at most 1/50 of the TTL:
//! a renewal with a shorter TTL takes the open batch with it at once); a
//! batch is also sent at once when it holds [`RenewBatching::max_keys`]
//! renewals (a very large burst is split into several requests, so no
//! script blocks Redis for long). Every renewal gets its own outcome back,
//! with the instant just before the request that carried it was sent: its
//! validity is measured from there. A request that fails or gets no reply
//! gives every renewal in it the same error, the one its own request would
//! have had.
//!
//! Nothing lives per guard here: a batch exists only while it is open or in
//! flight, and its timer is a task that ends with the window.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::batching::RenewBatching;
use crate::kit::call::{Lua, ScriptCall};
use crate::kit::layout::LeaderKeys;

/// Compare-and-extend of many leases in one script, each with its own kind,
/// owner token and TTL, for the mutex, the read-write lock and the semaphore
/// alike. For n leases, `KEYS[i]` (i ≤ n) = the key holding lease i (the
/// lock key, `{key} rw` or `{key} permits`); `ARGV[3i-2]` = its kind (`m`
/// mutex, `d` mutex with a holder's description, `r` read-write lock, `p`
/// permit, `l` leader), `ARGV[3i-1]` = its owner token, `ARGV[3i]` = its TTL in ms;
/// after the n lease keys, the description key (`{key} holder`) of each
/// `d` lease and the info key, lock-delay marker and change channel of
/// each `l` lease ([`LeaderKeys::of_leader`]), in the leases' order. A
/// leader's term is extended as a mutex, with its info key (if its
/// token's) and its marker (to the TTL plus the lock-delay the marker
/// records), and announced: `extended <version> <epoch> <ttl ms>`. A mutex lease is extended if the key
/// still holds its token (`PEXPIRE`), and so is the description of a `d`
/// lease if it is its token's; a read-write lease if its entry in the holders hash has not
/// expired (the entry's expiry moves to now + TTL, the key's TTL to at least
/// that); a permit likewise in the permits sorted set. Returns one entry per
/// key, in order:
/// 1 extended, 0 not ours (gone, expired, another owner), or the error
/// text of a key whose own commands failed (a key of the wrong type, a key
/// the ACL denies): one bad key never fails the others.
pub const RENEW_BATCH: &str = include_str!("lua/renew_batch.lua");

/// [`RENEW_BATCH`] for the keys of any slots a Redis Cluster node serves:
/// no key declared (a script's declared keys must share one slot), `ARGV[1]`
/// = the number of keys, then the keys as [`RENEW_BATCH`] takes them, then
/// its arguments. A key whose slot the node does not serve (moved away)
/// fails alone, with the error text `... non local key ...`
/// ([`KeyOutcome::is_elsewhere`]); see [`send_batch_any_slot`].
pub const RENEW_BATCH_ANY_SLOT: &str = concat!(
    "#!lua flags=allow-cross-slot-keys\n",
    include_str!("lua/fragments/keys_from_argv.lua"),
    include_str!("lua/renew_batch.lua"),
);

/// The kind of lease a renewal extends: which part of [`RENEW_BATCH`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseKind {
    /// A mutex: the key holds the owner token (compare-and-`PEXPIRE`).
    Mutex,
    /// A mutex whose holder's description ([`RenewItem::described`])
    /// is extended with it.
    DescribedMutex,
    /// A read or write lease of the read-write lock (`{key} rw`).
    ReadWrite,
    /// A semaphore permit (`{key} permits`).
    Permit,
    /// A leader's term (`{key} leader`): its info key and lock-delay
    /// marker are extended with it, and the extension is announced on the
    /// election's change channel (see [`LeaderKeys`]).
    Leader,
}

impl LeaseKind {
    fn code(self) -> &'static str {
        match self {
            Self::Mutex => "m",
            Self::DescribedMutex => "d",
            Self::ReadWrite => "r",
            Self::Permit => "p",
            Self::Leader => "l",
        }
    }
}

/// One renewal: extend `token`'s lease of `kind` on `key` to `ttl` from now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenewItem {
    /// Which extend logic applies.
    pub kind: LeaseKind,
    /// The key holding the lease.
    pub key: String,
    /// The owner token.
    pub token: String,
    /// The new TTL.
    pub ttl: Duration,
    /// The key of the holder's description (`{key} holder`) of a
    /// [`LeaseKind::DescribedMutex`], extended with the lock key while it
    /// holds this token; ignored for the other kinds.
    pub described: Option<String>,
}

/// What the server said about one renewal of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyOutcome {
    /// Extended: ours for the TTL from when the request was sent.
    Extended,
    /// Not ours any more (gone, expired, another owner).
    NotOurs,
    /// This key's own commands failed (the server's error text); the other
    /// keys of the batch were not affected.
    Failed(String),
}

impl KeyOutcome {
    /// Whether this key's slot is not served by the node that ran the
    /// batch (it moved: renew it again at its owner; nothing was done).
    pub fn is_elsewhere(&self) -> bool {
        matches!(self, KeyOutcome::Failed(text) if text.contains("non local key"))
    }

    /// The error this key's own single-key request would have had, as a
    /// `redis` error (an ACL denial stays one).
    pub fn error(text: &str) -> RedisError {
        let kind = if text.starts_with("NOPERM") {
            ServerErrorKind::NoPerm
        } else {
            ServerErrorKind::ResponseError
        };
        RedisError::from((
            ErrorKind::Server(kind),
            "the renewal script failed on this key",
            text.to_string(),
        ))
    }
}

/// What a renewal got back from its batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewed {
    /// Taken just before the request that carried the renewal was sent:
    /// the lease's validity counts from here.
    pub sent: Instant,
    /// The server's answer for this renewal.
    pub outcome: KeyOutcome,
}

/// How a batch reaches its node: one request, bounded in time, with the
/// connection's own retry and error type. Implemented by `lock-redis`'s
/// client and by each `lock-redlock` node.
pub trait BatchSender: Send + Sync + 'static {
    /// The error every renewal of a failed batch gets (cloned to each).
    type Error: Clone + Send + 'static;

    /// Sends `items` as one request (see [`send_batch`]) and returns one
    /// outcome per item, in order. Must be bounded in time by itself.
    fn send(
        &self,
        items: Vec<RenewItem>,
    ) -> impl Future<Output = std::result::Result<Vec<KeyOutcome>, Self::Error>> + Send;

    /// The error of a renewal whose batch ended without an answer (its
    /// task was stopped, e.g. by a runtime shutting down).
    fn abandoned(&self) -> Self::Error;
}

/// The renewal batcher of one connection (see the [module docs](self)).
pub struct Batcher<S: BatchSender> {
    shared: Arc<Shared<S>>,
}

impl<S: BatchSender> std::fmt::Debug for Batcher<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("limits", &self.shared.limits)
            .finish_non_exhaustive()
    }
}

struct Shared<S: BatchSender> {
    sender: S,
    limits: RenewBatching,
    open: Mutex<Open<S::Error>>,
}

type Reply<E> = oneshot::Sender<std::result::Result<Renewed, E>>;

/// The batch being filled.
struct Open<E> {
    /// Bumped each time a batch is taken, so that the timer of a batch
    /// that already left does not take the next one.
    generation: u64,
    items: Vec<RenewItem>,
    replies: Vec<Reply<E>>,
    /// When the open batch must be sent.
    flush_at: Instant,
    /// When the last batch was sent.
    last_sent: Option<Instant>,
}

impl<E> Open<E> {
    /// Takes the open batch to send it now.
    fn take(&mut self, now: Instant) -> (Vec<RenewItem>, Vec<Reply<E>>) {
        self.generation = self.generation.wrapping_add(1);
        self.last_sent = Some(now);
        (
            std::mem::take(&mut self.items),
            std::mem::take(&mut self.replies),
        )
    }
}

impl<S: BatchSender> Batcher<S> {
    /// A batcher sending through `sender`, within `limits` (validated by
    /// the client's configuration).
    pub fn new(sender: S, limits: RenewBatching) -> Self {
        Self {
            shared: Arc::new(Shared {
                sender,
                limits,
                open: Mutex::new(Open {
                    generation: 0,
                    items: Vec::new(),
                    replies: Vec::new(),
                    flush_at: Instant::now(),
                    last_sent: None,
                }),
            }),
        }
    }

    /// The limits in use.
    pub fn limits(&self) -> RenewBatching {
        self.shared.limits
    }

    /// Renews `item` in the next batch; its outcome and when its request
    /// was sent, or the error of the whole request. Must run within a tokio
    /// runtime. Dropping the future does not take the renewal out of its
    /// batch (it may already be on its way; extending is idempotent).
    pub async fn renew(&self, item: RenewItem) -> std::result::Result<Renewed, S::Error> {
        let (tx, rx) = oneshot::channel();
        let limits = self.shared.limits;
        let now = Instant::now();
        // This renewal may not wait past `latest`.
        let latest = lock_core::backend::add_saturating(now, limits.wait_for(item.ttl));
        let ready = {
            let mut open = lock(&self.shared.open);
            open.items.push(item);
            open.replies.push(tx);
            if open.items.len() == 1 {
                // A new batch leaves one window after the last one (at once
                // on a quiet connection), and never later than its first
                // renewal may wait.
                let next = open.last_sent.map_or(now, |t| {
                    lock_core::backend::add_saturating(t, limits.window)
                });
                open.flush_at = next.max(now).min(latest);
                if open.flush_at > now {
                    tokio::spawn(Shared::flush_at(
                        self.shared.clone(),
                        open.generation,
                        open.flush_at,
                    ));
                }
            }
            (open.flush_at <= now || latest < open.flush_at || open.items.len() >= limits.max_keys)
                .then(|| open.take(now))
        };
        if let Some((items, replies)) = ready {
            tokio::spawn(Shared::send(self.shared.clone(), items, replies));
        }
        match rx.await {
            Ok(reply) => reply,
            Err(_) => Err(self.shared.sender.abandoned()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding it; a poisoned lock still holds a
    // consistent batch.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<S: BatchSender> Shared<S> {
    /// The window's end: sends the batch of `generation` if it is still open.
    async fn flush_at(self: Arc<Self>, generation: u64, at: Instant) {
        tokio::time::sleep_until(at).await;
        let ready = {
            let mut open = lock(&self.open);
            (open.generation == generation && !open.items.is_empty())
                .then(|| open.take(Instant::now()))
        };
        if let Some((items, replies)) = ready {
            self.send(items, replies).await;
        }
    }

    /// Sends one batch and hands every renewal its outcome.
    async fn send(self: Arc<Self>, items: Vec<RenewItem>, replies: Vec<Reply<S::Error>>) {
        let n = items.len();
        let sent = Instant::now();
        match self.sender.send(items).await {
            Ok(outcomes) if outcomes.len() == n => {
                for (reply, outcome) in replies.into_iter().zip(outcomes) {
                    let _ = reply.send(Ok(Renewed { sent, outcome }));
                }
            }
            Ok(_) => {
                // `send_batch` checks the count; a sender that does not is
                // a bug, and its renewals get the abandoned error.
                for reply in replies {
                    let _ = reply.send(Err(self.sender.abandoned()));
                }
            }
            Err(err) => {
                for reply in replies {
                    let _ = reply.send(Err(err.clone()));
                }
            }
        }
    }
}

/// Runs [`RENEW_BATCH`] for `items` on `conn` (one `EVALSHA`, `EVAL` on
/// `NOSCRIPT`) and reads one outcome per item.
pub async fn send_batch<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
    script: &Lua,
    items: &[RenewItem],
) -> RedisResult<Vec<KeyOutcome>> {
    send(conn, script, items, true).await
}

/// Runs [`RENEW_BATCH_ANY_SLOT`] for `items`, whatever their slots, on
/// `conn` (a connection to one cluster node) and reads one outcome per
/// item.
pub async fn send_batch_any_slot<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
    script: &Lua,
    items: &[RenewItem],
) -> RedisResult<Vec<KeyOutcome>> {
    send(conn, script, items, false).await
}

/// [`send_batch`] with the keys declared, or passed first in the
/// arguments (see [`RENEW_BATCH_ANY_SLOT`]).
async fn send<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
    script: &Lua,
    items: &[RenewItem],
    declared: bool,
) -> RedisResult<Vec<KeyOutcome>> {
    // The keys: every item's lease key, then the description keys of the
    // described mutexes; the arguments: three per item.
    let extras: Vec<String> = items
        .iter()
        .flat_map(|item| match (item.kind, &item.described) {
            (LeaseKind::DescribedMutex, Some(described)) => vec![described.clone()],
            (LeaseKind::Leader, _) => LeaderKeys::of_leader(&item.key).to_vec(),
            _ => Vec::new(),
        })
        .collect();
    let keys: Vec<&str> = items
        .iter()
        .map(|item| item.key.as_str())
        .chain(extras.iter().map(String::as_str))
        .collect();
    let mut call = if declared {
        ScriptCall::new(script, &keys)
    } else {
        let mut call = ScriptCall::new(script, &[]);
        call.arg(keys.len());
        keys.iter().for_each(|key| {
            call.arg(*key);
        });
        call
    };
    for item in items {
        let kind = match (item.kind, &item.described) {
            (LeaseKind::DescribedMutex, None) => LeaseKind::Mutex,
            (kind, _) => kind,
        };
        call.arg(kind.code())
            .arg(&item.token)
            .arg(crate::kit::call::ttl_millis(item.ttl));
    }
    let reply: Vec<Value> = call.invoke_async(conn).await?;
    parse_reply(reply, items.len())
}

/// One [`KeyOutcome`] per key from the script's reply.
fn parse_reply(reply: Vec<Value>, expected: usize) -> RedisResult<Vec<KeyOutcome>> {
    if reply.len() != expected {
        return Err(RedisError::from((
            ErrorKind::Parse,
            "renew batch: wrong number of replies",
            format!("{} replies for {expected} keys", reply.len()),
        )));
    }
    reply
        .into_iter()
        .map(|v| match v {
            Value::Int(1) => Ok(KeyOutcome::Extended),
            Value::Int(0) => Ok(KeyOutcome::NotOurs),
            Value::BulkString(b) => {
                Ok(KeyOutcome::Failed(String::from_utf8_lossy(&b).into_owned()))
            }
            Value::SimpleString(s) => Ok(KeyOutcome::Failed(s)),
            other => Err(RedisError::from((
                ErrorKind::Parse,
                "renew batch: unexpected reply",
                format!("{other:?}"),
            ))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_per_key() {
        let got = parse_reply(
            vec![
                Value::Int(1),
                Value::Int(0),
                Value::BulkString(b"WRONGTYPE bad key".to_vec()),
            ],
            3,
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                KeyOutcome::Extended,
                KeyOutcome::NotOurs,
                KeyOutcome::Failed("WRONGTYPE bad key".into())
            ]
        );
        assert!(parse_reply(vec![Value::Int(1)], 2).is_err());
        assert!(parse_reply(vec![Value::Nil], 1).is_err());
        assert_eq!(
            crate::kit::errors::error_kind(&KeyOutcome::error("NOPERM no")),
            lock_core::LockErrorKind::Unauthorized
        );
        assert_eq!(
            crate::kit::errors::error_kind(&KeyOutcome::error("WRONGTYPE x")),
            lock_core::LockErrorKind::Protocol
        );
    }
}
