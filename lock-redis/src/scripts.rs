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
//! Scripts are sent with `EVALSHA` (the `redis` crate's `Script` loads a
//! script once, on the first `NOSCRIPT` reply).

use redis::Script;

/// Acquire with a fencing token, atomically.
/// `KEYS[1]` = lock key, `KEYS[2]` = fencing counter key; `ARGV[1]` = owner token, `ARGV[2]` = ttl ms.
/// Returns `{1, token}` when acquired, `{0, pttl}` when held by someone else
/// (`pttl` = the holder's remaining ms, -1 if it has no expiry).
///
/// The token is `INCR` of the counter, floored at the server's clock in
/// microseconds (`TIME`): `token = max(counter + 1, now_us)`. The floor keeps
/// tokens increasing when the counter is lost (a restart without persistence,
/// a failover to a replica that missed the last `INCR`), as long as the
/// server's wall clock does not step back by more than the gap. With
/// persistence (`appendfsync always`) the counter alone guarantees it.
/// Tokens stay below 2^53, exact in Lua's doubles, for the next 200 years.
pub const ACQUIRE_FENCED: &str = r#"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local n = redis.call('INCR', KEYS[2])
  local t = redis.call('TIME')
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if n < floor then
    n = floor
    redis.call('SET', KEYS[2], string.format('%.0f', floor))
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
