//! Listing the held locks: one script pass per page of `SCAN`, keeping the
//! keys that hold a lock.

use crate::kit::call::Lua;

/// One page of `list`: `SCAN` from `ARGV[1]` with `MATCH ARGV[2]` and
/// `COUNT ARGV[3]`, keeping the keys that hold a lock: a string of 32 hex
/// digits (the owner token of this crate, of redis-py and most peers) or a
/// Redlock key reserved for a waiter
/// ([`RESERVED_FOR`](super::layout::RESERVED_FOR)), with an expiry. Returns
/// `{next cursor, key1, token1, pttl1, key2, ...}`.
pub const LIST_PAGE: &str = include_str!("lua/list_page.lua");

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
    script: &Lua,
    key_prefix: &str,
    name_prefix: &str,
) -> redis::RedisResult<Vec<Listed>> {
    let pattern = match_prefix(&format!("{key_prefix}{name_prefix}"));
    let mut cursor = "0".to_string();
    let mut found = Vec::new();
    loop {
        let page: Vec<redis::Value> = crate::kit::call::ScriptCall::new(script, &[])
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
