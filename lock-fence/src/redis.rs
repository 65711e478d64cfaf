//! Redis as the protected resource: one Lua script compares the token with the
//! resource's fence key and writes, atomically.

use lock_core::{FencingToken, LockError, LockErrorKind};
use lock_redis::kit::call::{Lua, ScriptCall};
use redis::aio::ConnectionLike;
use redis::RedisError;

use crate::{metrics, Admission, FenceError, FencedWrite, Storage};

/// The default prefix of fence keys: `distlock:fence:<resource>`.
pub const DEFAULT_PREFIX: &str = "distlock:fence:";

/// KEYS[1] the fence key, KEYS[2] the data key. ARGV[1] the token in decimal,
/// ARGV[2] `set` or `hset`, then the value (`set`) or field and value (`hset`).
/// Tokens are compared as decimal strings (length first), exactly for any u64:
/// Lua numbers are doubles. Returns {1, token} when written, {0, newer} when stale.
const FENCED_WRITE: &str = r#"
local function older(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local seen = redis.call('GET', KEYS[1])
if seen and older(ARGV[1], seen) then
  return {0, seen}
end
if ARGV[2] == 'hset' then
  local t = redis.call('TYPE', KEYS[2]).ok
  if t ~= 'none' and t ~= 'hash' then
    return redis.error_reply('WRONGTYPE the fenced hash key holds a ' .. t)
  end
end
if seen ~= ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1])
end
if ARGV[2] == 'hset' then
  redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
else
  redis.call('SET', KEYS[2], ARGV[3])
end
return {1, ARGV[1]}
"#;

/// Fenced writes into Redis: a `SET` or `HSET` that the server refuses when
/// the resource's fence key holds a newer token.
///
/// The fence key `<prefix><resource>` never expires (a forgotten fence would
/// admit a stale holder again); it is one small string per resource. On a
/// Redis Cluster the fence key and the data key must share a hash slot: put
/// the same hash tag in both (resource `{acct-42}`, key `{acct-42}:balance`).
/// Calls take as long as the connection allows: set its response timeout
/// (`ConnectionManagerConfig::set_response_timeout`).
#[derive(Clone, Debug)]
pub struct RedisFence {
    prefix: String,
    script: Lua,
}

impl Default for RedisFence {
    fn default() -> Self {
        Self::with_prefix(DEFAULT_PREFIX)
    }
}

impl RedisFence {
    /// Fence keys under [`DEFAULT_PREFIX`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Fence keys under `prefix`.
    pub fn with_prefix(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            script: Lua::new(FENCED_WRITE),
        }
    }

    /// The key holding `resource`'s highest admitted token.
    pub fn fence_key(&self, resource: &str) -> String {
        format!("{}{resource}", self.prefix)
    }

    /// `SET key value` if `write`'s token is not older than the resource's.
    pub async fn set(
        &self,
        conn: &mut (impl ConnectionLike + Send),
        write: &FencedWrite,
        key: &str,
        value: impl AsRef<[u8]>,
    ) -> Result<(), FenceError> {
        self.write(conn, write, key, &[b"set", value.as_ref()])
            .await
    }

    /// `HSET key field value` if `write`'s token is not older than the resource's.
    pub async fn hset(
        &self,
        conn: &mut (impl ConnectionLike + Send),
        write: &FencedWrite,
        key: &str,
        field: &str,
        value: impl AsRef<[u8]>,
    ) -> Result<(), FenceError> {
        self.write(
            conn,
            write,
            key,
            &[b"hset", field.as_bytes(), value.as_ref()],
        )
        .await
    }

    /// The highest token `resource` has admitted, if any.
    pub async fn highest(
        &self,
        conn: &mut (impl ConnectionLike + Send),
        resource: &str,
    ) -> Result<Option<FencingToken>, FenceError> {
        let seen: Option<String> = redis::cmd("GET")
            .arg(self.fence_key(resource))
            .query_async(conn)
            .await
            .map_err(|e| map_error("reading a fence key", e))?;
        seen.map(|s| parse_token(&s)).transpose()
    }

    async fn write(
        &self,
        conn: &mut (impl ConnectionLike + Send),
        write: &FencedWrite,
        key: &str,
        op: &[&[u8]],
    ) -> Result<(), FenceError> {
        let outcome = self.try_write(conn, write, key, op).await;
        metrics::record(Storage::Redis, &outcome);
        outcome.map(drop)
    }

    async fn try_write(
        &self,
        conn: &mut (impl ConnectionLike + Send),
        write: &FencedWrite,
        key: &str,
        op: &[&[u8]],
    ) -> Result<Admission, FenceError> {
        no_idempotency_key(write)?;
        let fence_key = self.fence_key(write.resource());
        let mut call = ScriptCall::new(&self.script, &[&fence_key, key]);
        call.arg(write.token().get());
        for arg in op {
            call.arg(*arg);
        }
        let (written, token): (i64, String) = call
            .invoke_async(conn)
            .await
            .map_err(|e| map_error("fenced write", e))?;
        if written == 1 {
            Ok(Admission::Admitted)
        } else {
            Err(write.stale(parse_token(&token)?))
        }
    }
}

fn parse_token(text: &str) -> Result<FencingToken, FenceError> {
    text.parse::<u64>().map(FencingToken::new).map_err(|_| {
        LockError::new(
            LockErrorKind::Protocol,
            format!("redis: a fence key holds {text:?}, not a token"),
        )
        .into()
    })
}

fn no_idempotency_key(write: &FencedWrite) -> Result<(), FenceError> {
    match write.key() {
        None => Ok(()),
        Some(_) => Err(LockError::new(
            LockErrorKind::Unsupported,
            "idempotency keys are recorded by PgFence only: a fenced Redis SET or HSET \
             writes the same value again on a retry, which is idempotent by itself",
        )
        .into()),
    }
}

/// The one place where `redis` errors become [`LockError`]s: the kinds of
/// lock-redis ([`lock_redis::kit::errors::error_kind`]).
fn map_error(what: &str, err: RedisError) -> LockError {
    LockError::new(
        lock_redis::kit::errors::error_kind(&err),
        format!("redis: {what}"),
    )
    .with_source(err)
}
