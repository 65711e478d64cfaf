//! The server's eviction policy, checked at connect (shared with
//! `lock-redlock`, which checks each node).
//!
//! Under any `maxmemory-policy` but `noeviction`, a server that reaches its
//! `maxmemory` deletes keys to make room, lock keys included, silently:
//! the holder's guard stays held while another client takes the lock
//! (`volatile-ttl` evicts the keys closest to expiry first, and every lock
//! key has a TTL; `allkeys-*` can also evict `lock-redis`'s fencing
//! counters and queues). A client reads the policy when it connects
//! ([`read_policy`]) and warns unless it is `noeviction`, or refuses to
//! connect when asked to require it ([`check_policy`]).

use lock_core::{LockError, Result};
use redis::aio::ConnectionLike;

/// The one policy under which Redis never deletes a key to free memory.
pub const NOEVICTION: &str = "noeviction";

/// The server's `maxmemory-policy`: `CONFIG GET maxmemory-policy`, or,
/// where `CONFIG` is renamed or denied (managed services, ACLs), the
/// `maxmemory_policy` line of `INFO memory`. `None` when neither answers
/// (each failure is logged at debug level; the caller goes on).
pub async fn read_policy<C: ConnectionLike + Send>(conn: &mut C, server: &str) -> Option<String> {
    let config: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    match config {
        Ok(pairs) => {
            if let [_, policy] = pairs.as_slice() {
                return Some(policy.clone());
            }
            tracing::debug!(server, reply = ?pairs, "distlock redis: CONFIG GET maxmemory-policy gave no value; trying INFO memory");
        }
        Err(e) => {
            tracing::debug!(server, error = %e, "distlock redis: CONFIG GET maxmemory-policy refused; trying INFO memory");
        }
    }
    let info: redis::RedisResult<String> = redis::cmd("INFO").arg("memory").query_async(conn).await;
    match info {
        Ok(text) => {
            let policy = text.lines().find_map(|line| {
                line.trim()
                    .strip_prefix("maxmemory_policy:")
                    .map(|p| p.trim().to_string())
            });
            if policy.is_none() {
                tracing::debug!(server, "distlock redis: INFO memory has no maxmemory_policy; the eviction policy is not checked");
            }
            policy
        }
        Err(e) => {
            tracing::debug!(server, error = %e, "distlock redis: neither CONFIG GET nor INFO memory answered; the eviction policy is not checked");
            None
        }
    }
}

/// Checks `policy` (from [`read_policy`]) of `server` (an address or a
/// redacted URL, never a password): `noeviction` is fine; any other policy
/// is a `tracing::warn!`, or with `require` an
/// [`InvalidArgument`](lock_core::LockErrorKind::InvalidArgument) error
/// (a configuration problem: retrying does not help). An unknown policy
/// (`None`) passes: it was logged at debug level when it could not be read.
pub fn check_policy(policy: Option<&str>, require: bool, server: &str, who: &str) -> Result<()> {
    let Some(policy) = policy else {
        return Ok(());
    };
    if policy.eq_ignore_ascii_case(NOEVICTION) {
        return Ok(());
    }
    if require {
        return Err(LockError::invalid(format!(
            "{who}: {server} has maxmemory-policy {policy}: it may evict lock keys silently, \
             and noeviction is required (require_noeviction); set `maxmemory-policy noeviction` \
             on that server"
        )));
    }
    tracing::warn!(
        server,
        policy,
        "{who}: maxmemory-policy is not noeviction: when the server reaches maxmemory it may evict lock keys, \
         and another client then gets a lock that is still held; set `maxmemory-policy noeviction`"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_noeviction_passes_a_requirement() {
        assert!(check_policy(Some("noeviction"), true, "h:1", "t").is_ok());
        assert!(check_policy(None, true, "h:1", "t").is_ok());
        assert!(check_policy(Some("volatile-ttl"), false, "h:1", "t").is_ok());
        let err = check_policy(Some("allkeys-lru"), true, "h:1", "t").unwrap_err();
        assert_eq!(err.kind(), lock_core::LockErrorKind::InvalidArgument);
        assert!(!err.is_retryable());
        assert!(err.message().contains("allkeys-lru"));
    }
}
