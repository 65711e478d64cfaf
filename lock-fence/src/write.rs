//! What every fenced write carries: the resource, the lock holder's token and
//! an optional idempotency key.

use lock_core::{FencingToken, GuardView, LockError, LockGuard, LockName};

use crate::FenceError;

/// The longest resource name and idempotency key, in bytes.
pub const MAX_RESOURCE_LEN: usize = 1024;

/// One write under a fencing token.
///
/// The store admits it only if `token` is at least the highest token it has
/// admitted for `resource`, and records the token, atomically with the write.
/// Tokens are comparable only between grants of ONE lock name: always fence a
/// resource with tokens of the same lock ([`FencedWrite::for_guard`] uses the
/// lock name as the resource).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FencedWrite {
    resource: String,
    token: FencingToken,
    idempotency_key: Option<String>,
}

impl FencedWrite {
    /// A write to `resource` under `token` (as read from a guard, or passed
    /// along from the process that holds the lock).
    pub fn new(resource: impl Into<String>, token: FencingToken) -> Result<Self, FenceError> {
        let resource = resource.into();
        check_text("resource", &resource)?;
        Ok(Self {
            resource,
            token,
            idempotency_key: None,
        })
    }

    /// A write under `guard`'s token to the resource named like its lock:
    /// `guard` is a [`LockGuard`], or the [`GuardView`] that `with_lock`
    /// hands the critical section.
    ///
    /// An [`InvalidArgument`](lock_core::LockErrorKind::InvalidArgument) error
    /// when the guard has no token: its backend (Redlock) cannot give one.
    pub fn for_guard(guard: &impl HeldLock) -> Result<Self, FenceError> {
        Self::with_token(guard.lock_name().as_str(), guard.token())
    }

    /// A write to `resource` under an optional token, as
    /// [`LockGuard::fencing_token`] returns it: `None` is an
    /// [`InvalidArgument`](lock_core::LockErrorKind::InvalidArgument) error.
    pub fn with_token(
        resource: impl Into<String>,
        token: Option<FencingToken>,
    ) -> Result<Self, FenceError> {
        let resource = resource.into();
        match token {
            Some(token) => Self::new(resource, token),
            None => Err(LockError::invalid(format!(
                "no fencing token for a write to {resource:?}: the lock's backend gives none \
                 (Redlock cannot: its independent nodes share no counter); protect stored data \
                 with a lock from a fencing backend: redis, etcd or zookeeper"
            ))
            .into()),
        }
    }

    /// Records `key` with the token: a retry of the same write (same key) is
    /// admitted once; later tries report [`Admission::Duplicate`] and must
    /// skip the write. Supported by PostgreSQL.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Result<Self, FenceError> {
        let key = key.into();
        check_text("idempotency key", &key)?;
        self.idempotency_key = Some(key);
        Ok(self)
    }

    /// The resource written.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The lock holder's token.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The idempotency key, if any.
    pub fn key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }

    /// The stale-token error for this write, given the newer token the store holds.
    #[cfg_attr(
        not(any(feature = "postgres", feature = "redis", feature = "etcd")),
        allow(dead_code)
    )]
    pub(crate) fn stale(&self, newer: FencingToken) -> FenceError {
        FenceError::StaleToken {
            resource: self.resource.clone(),
            token: self.token,
            newer,
        }
    }
}

/// What the store did with an admitted write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The token was admitted and recorded: perform the write (in PostgreSQL,
    /// in the same transaction, then commit).
    Admitted,
    /// The idempotency key was already recorded, under `token`: the write was
    /// done before (a retry after a lost reply). Skip it; committing is harmless.
    Duplicate {
        /// The token the key was first admitted with.
        token: FencingToken,
    },
}

fn check_text(what: &str, text: &str) -> Result<(), FenceError> {
    if text.is_empty() || text.len() > MAX_RESOURCE_LEN || text.contains('\0') {
        return Err(LockError::invalid(format!(
            "a fenced write's {what} must be 1 to {MAX_RESOURCE_LEN} bytes without NUL, \
             not {} bytes",
            text.len()
        ))
        .into());
    }
    Ok(())
}

/// What a fenced write needs of the lock it is made under: its name and its
/// fencing token. Implemented by [`LockGuard`] and by [`GuardView`] (what
/// `with_lock` hands the critical section).
pub trait HeldLock {
    /// The name of the lock held.
    fn lock_name(&self) -> &LockName;
    /// Its fencing token; `None` when its backend has none (Redlock).
    fn token(&self) -> Option<FencingToken>;
}

impl HeldLock for LockGuard {
    fn lock_name(&self) -> &LockName {
        self.name()
    }
    fn token(&self) -> Option<FencingToken> {
        self.fencing_token()
    }
}

impl HeldLock for GuardView {
    fn lock_name(&self) -> &LockName {
        self.name()
    }
    fn token(&self) -> Option<FencingToken> {
        self.fencing_token()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::LockErrorKind;

    #[test]
    fn a_missing_token_says_to_pick_a_fencing_backend() {
        let err = FencedWrite::with_token("account-1", None).unwrap_err();
        assert_eq!(err.kind(), LockErrorKind::InvalidArgument);
        let msg = err.to_string();
        assert!(msg.contains("Redlock"), "{msg}");
        assert!(msg.contains("redis, etcd or zookeeper"), "{msg}");
    }

    #[test]
    fn resources_and_keys_are_checked() {
        let t = FencingToken::new(1);
        assert!(FencedWrite::new("", t).is_err());
        assert!(FencedWrite::new("a\0b", t).is_err());
        assert!(FencedWrite::new("x".repeat(MAX_RESOURCE_LEN + 1), t).is_err());
        let w = FencedWrite::new("r", t).unwrap();
        assert!(w.clone().idempotency_key("").is_err());
        let w = w.idempotency_key("k").unwrap();
        assert_eq!((w.resource(), w.token(), w.key()), ("r", t, Some("k")));
    }
}
