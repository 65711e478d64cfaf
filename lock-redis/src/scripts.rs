//! The Lua scripts and key layout shared by `lock-redis` and `lock-redlock`.
//!
//! Layout (compatible with redis-py `Lock`, redsync, node-redlock, rslock):
//! the lock key is the lock name (with an optional prefix) holding a random
//! owner token; acquisition is `SET key token NX PX ttl`; release and extend
//! compare the token first. `lock-redis` adds a fencing counter
//! `{key} fencing` (same cluster slot through the hash tag) that never
//! expires, and publishes on `{key} released` when it releases, so that
//! waiters wake at once instead of polling.
//!
//! Every auxiliary key is the lock key in braces, a space and a suffix. Lock
//! names and key prefixes cannot contain whitespace, so no lock key is ever
//! an auxiliary key of another lock: the lock named `{x}:fencing` is just a
//! lock, never the counter of the lock `x`.
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
/// The token is `max(counter + 1, the server's clock in microseconds)`, on
/// every acquisition. The counter alone can go back: a restart without
/// persistence forgets it, a reload of an RDB snapshot or of an AOF that
/// lost its last second of writes brings back an older value, a promoted
/// replica may be behind. The clock does not: every token is at least the
/// server's clock when it was issued, and can run ahead of the clock only
/// by the acquisitions that happen within one microsecond (none: a script
/// runs for several), so the first token after any such loss is above every
/// token issued before it, as long as the clock of the server issuing tokens
/// never steps back below the last token issued. Tokens stay below 2^53,
/// exact in Lua's doubles.
pub const ACQUIRE_FENCED: &str = r#"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local n = (tonumber(redis.call('GET', KEYS[2])) or 0) + 1
  if now > n then n = now end
  redis.call('SET', KEYS[2], string.format('%.0f', n))
  return {1, n}
end
return {0, redis.call('PTTL', KEYS[1])}
"#;

/// Compare-and-delete, then notify waiters.
/// `KEYS[1]` = lock key, `KEYS[2]` = release channel; `ARGV[1]` = owner token.
/// Returns 1 if the key held our token and was deleted, else 0. The
/// notification is best effort (`pcall`): a user whose ACL does not allow
/// the channel still releases, and waiters re-check at the holder's TTL.
pub const RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.pcall('PUBLISH', KEYS[2], ARGV[1])
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

/// One page of `list`: `SCAN` from `ARGV[1]` with `MATCH ARGV[2]` and
/// `COUNT ARGV[3]`, keeping the keys that hold a lock: a string of 32 hex
/// digits (the owner token of this crate, of redis-py and most peers) with
/// an expiry. Returns `{next cursor, key1, token1, pttl1, key2, ...}`.
pub const LIST_PAGE: &str = r#"
local page = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3])
local out = {page[1]}
for _, k in ipairs(page[2]) do
  if redis.call('TYPE', k).ok == 'string' then
    local v = redis.call('GET', k)
    if #v == 32 and not string.find(v, '[^0-9a-fA-F]') then
      local ttl = redis.call('PTTL', k)
      if ttl > 0 then
        table.insert(out, k)
        table.insert(out, v)
        table.insert(out, ttl)
      end
    end
  end
end
return out
"#;

/// `prefix` as a `SCAN MATCH` pattern for every key that starts with it.
pub fn match_prefix(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 1);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('*');
    pattern
}

/// A lock key found by [`LIST_PAGE`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The key (the prefix and the lock name).
    pub key: String,
    /// The holder's owner token.
    pub token: String,
    /// Its remaining TTL in ms.
    pub pttl: u64,
}

/// Every lock key whose name starts with `name_prefix` under `key_prefix`,
/// page by page with [`LIST_PAGE`] through `conn` (one request per page).
pub async fn list_keys<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
    script: &Script,
    key_prefix: &str,
    name_prefix: &str,
) -> redis::RedisResult<Vec<Listed>> {
    let pattern = match_prefix(&format!("{key_prefix}{name_prefix}"));
    let mut cursor = "0".to_string();
    let mut found = Vec::new();
    loop {
        let page: Vec<redis::Value> = script
            .arg(&cursor)
            .arg(&pattern)
            .arg(1000)
            .invoke_async(conn)
            .await?;
        let mut items = page.into_iter();
        cursor = match items.next() {
            Some(v) => redis::from_redis_value(v)?,
            None => "0".to_string(),
        };
        while let (Some(k), Some(t), Some(p)) = (items.next(), items.next(), items.next()) {
            found.push(Listed {
                key: redis::from_redis_value(k)?,
                token: redis::from_redis_value(t)?,
                pttl: redis::from_redis_value(p)?,
            });
        }
        if cursor == "0" {
            return Ok(found);
        }
    }
}

/// The scripts, ready for `EVALSHA`.
#[derive(Clone, Debug)]
pub struct Scripts {
    /// See [`ACQUIRE_FENCED`].
    pub acquire_fenced: Script,
    /// See [`RELEASE`].
    pub release: Script,
    /// See [`EXTEND`].
    pub extend: Script,
    /// See [`LIST_PAGE`].
    pub list_page: Script,
}

impl Default for Scripts {
    fn default() -> Self {
        Self {
            acquire_fenced: Script::new(ACQUIRE_FENCED),
            release: Script::new(RELEASE),
            extend: Script::new(EXTEND),
            list_page: Script::new(LIST_PAGE),
        }
    }
}

/// The Redis keys of one lock name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    /// The lock key itself: `prefix + name`.
    pub lock: String,
    /// The fencing counter: `{prefix + name} fencing` (never expires).
    pub fencing: String,
    /// The pub/sub channel a release publishes on: `{prefix + name} released`.
    pub released: String,
}

impl Keys {
    /// The keys of lock `name` under `prefix` (empty for none). `prefix`
    /// must pass [`check_prefix`] (the configurations check it).
    pub fn new(prefix: &str, name: &str) -> Self {
        let lock = format!("{prefix}{name}");
        Self {
            fencing: Self::aux(&lock, "fencing"),
            released: Self::aux(&lock, "released"),
            lock,
        }
    }

    /// The auxiliary key `suffix` of the lock key `lock`: `{lock} suffix`.
    pub fn aux(lock: &str, suffix: &str) -> String {
        format!("{{{lock}}} {suffix}")
    }
}

/// Checks a key prefix: no whitespace or control characters, so that no
/// lock key can be an auxiliary key (see the module docs).
pub fn check_prefix(prefix: &str) -> lock_core::Result<()> {
    match prefix
        .chars()
        .find(|c| c.is_whitespace() || c.is_control())
    {
        Some(c) => Err(lock_core::LockError::invalid(format!(
            "key prefix {prefix:?} contains {c:?}; whitespace and control characters are not allowed"
        ))),
        None => Ok(()),
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
        assert_eq!(k.fencing, "{jobs/report} fencing");
        assert_eq!(k.released, "{jobs/report} released");
        assert_eq!(Keys::new("app:", "x").lock, "app:x");
        // A name shaped like another lock's counter is just a lock.
        let tricky = Keys::new("", "{x}:fencing");
        assert_ne!(tricky.lock, Keys::new("", "x").fencing);
        assert!(check_prefix("locks:").is_ok());
        assert!(check_prefix("a b").is_err());
        assert_eq!(match_prefix("jobs/[a]*"), "jobs/\\[a\\]\\**");
    }

    #[test]
    fn owner_tokens_are_128_bit_and_distinct() {
        let (a, b) = (owner_token(), owner_token());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
