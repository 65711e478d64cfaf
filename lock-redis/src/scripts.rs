//! The Lua scripts and key layout shared by `lock-redis` and `lock-redlock`.
//!
//! Layout (compatible with redis-py `Lock`, redsync, node-redlock, rslock):
//! the lock key is the lock name (with an optional prefix) holding a random
//! owner token; acquisition is `SET key token NX PX ttl`; release and extend
//! compare the token first. `lock-redis` adds a fencing counter
//! `{key}:fencing` (same cluster slot through the hash tag) that never expires,
//! and publishes on `{key}:released` when it releases, so that waiters wake at
//! once instead of polling.
//!
//! [`error_kind`] is the shared mapping of `redis` errors to error kinds.
//!
//! Scripts are sent with `EVALSHA` (the `redis` crate's `Script` loads a
//! script once, on the first `NOSCRIPT` reply).

use lock_core::LockErrorKind;
use redis::{ErrorKind, RedisError, Script, ServerErrorKind};

/// Acquire with a fencing token, atomically.
/// `KEYS[1]` = lock key, `KEYS[2]` = fencing counter key; `ARGV[1]` = owner token, `ARGV[2]` = ttl ms.
/// Returns `{1, token}` when acquired, `{0, pttl}` when held by someone else
/// (`pttl` = the holder's remaining ms, -1 if it has no expiry).
///
/// The token is `INCR` of the counter. When the counter was missing (`INCR`
/// returned 1: first use, or lost to a restart without persistence, a
/// failover to a replica that missed it, an eviction), it starts from the
/// server's clock in microseconds (`TIME`) instead of 1. Tokens handed out
/// since the previous start are at most that start plus one per acquisition,
/// and acquisitions come far less often than once a microsecond, so the new
/// start is above every earlier token as long as the server's wall clock did
/// not step back. With persistence (`appendfsync always`) the counter alone
/// guarantees it. Tokens stay below 2^53, exact in Lua's doubles.
pub const ACQUIRE_FENCED: &str = r#"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local n = redis.call('INCR', KEYS[2])
  if n == 1 then
    local t = redis.call('TIME')
    n = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', KEYS[2], string.format('%.0f', n))
  end
  return {1, n}
end
return {0, redis.call('PTTL', KEYS[1])}
"#;

/// Compare-and-delete, then notify waiters.
/// `KEYS[1]` = lock key, `KEYS[2]` = release channel; `ARGV[1]` = owner token.
/// Returns 1 if the key held our token and was deleted, else 0.
pub const RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[2], ARGV[1])
  return 1
end
return 0
"#;

/// Compare-and-`PEXPIRE`.
/// `KEYS[1]` = lock key; `ARGV[1]` = owner token, `ARGV[2]` = ttl ms.
/// Returns 1 if the key held our token and its TTL was set, else 0.
pub const EXTEND: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"#;

/// The scripts, ready for `EVALSHA`.
#[derive(Clone, Debug)]
pub struct Scripts {
    /// See [`ACQUIRE_FENCED`].
    pub acquire_fenced: Script,
    /// See [`RELEASE`].
    pub release: Script,
    /// See [`EXTEND`].
    pub extend: Script,
}

impl Default for Scripts {
    fn default() -> Self {
        Self {
            acquire_fenced: Script::new(ACQUIRE_FENCED),
            release: Script::new(RELEASE),
            extend: Script::new(EXTEND),
        }
    }
}

/// The Redis keys of one lock name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    /// The lock key itself: `prefix + name`.
    pub lock: String,
    /// The fencing counter: `{prefix + name}:fencing` (never expires).
    pub fencing: String,
    /// The pub/sub channel a release publishes on: `{prefix + name}:released`.
    pub released: String,
}

impl Keys {
    /// The keys of lock `name` under `prefix` (empty for none).
    pub fn new(prefix: &str, name: &str) -> Self {
        let lock = format!("{prefix}{name}");
        Self {
            fencing: format!("{{{lock}}}:fencing"),
            released: format!("{{{lock}}}:released"),
            lock,
        }
    }
}

/// The error kind of a `redis` error, shared by `lock-redis` and
/// `lock-redlock` (each wraps it into its own messages).
pub fn error_kind(err: &RedisError) -> LockErrorKind {
    let code = err.code().unwrap_or("");
    match err.kind() {
        ErrorKind::Io => LockErrorKind::Unavailable,
        _ if err.is_timeout() || err.is_connection_dropped() || err.is_connection_refusal() => {
            LockErrorKind::Unavailable
        }
        ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm) => {
            LockErrorKind::Unauthorized
        }
        _ if matches!(code, "NOAUTH" | "WRONGPASS" | "NOPERM") => LockErrorKind::Unauthorized,
        ErrorKind::InvalidClientConfig => LockErrorKind::InvalidArgument,
        // The server is up but cannot serve writes now: loading its data set,
        // a failover in progress, a busy script, out of memory, failing to persist.
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::ReadOnly,
        ) => LockErrorKind::Unavailable,
        _ if matches!(code, "BUSY" | "OOM" | "MISCONF" | "LOADING") => LockErrorKind::Unavailable,
        ErrorKind::Client => LockErrorKind::Internal,
        // Parse errors, unexpected reply types, MOVED/ASK/CROSSSLOT from a
        // cluster (not supported: use one node), script errors.
        _ => LockErrorKind::Protocol,
    }
}

/// A random owner token: 128 bits from the OS-seeded thread RNG, as 32 hex digits.
pub fn owner_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_a_hash_slot_tag() {
        let k = Keys::new("", "jobs/report");
        assert_eq!(k.lock, "jobs/report");
        assert_eq!(k.fencing, "{jobs/report}:fencing");
        assert_eq!(k.released, "{jobs/report}:released");
        assert_eq!(Keys::new("app:", "x").lock, "app:x");
    }

    #[test]
    fn owner_tokens_are_128_bit_and_distinct() {
        let (a, b) = (owner_token(), owner_token());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
