//! The error of a fenced write: refused as stale, or any other failure as a
//! distlock [`LockError`].

use std::fmt;

use lock_core::{FencingToken, LockError, LockErrorKind};

/// Why a fenced write did not happen.
#[derive(Debug)]
#[non_exhaustive]
pub enum FenceError {
    /// The resource already admitted a newer token: a later lock holder wrote
    /// to it, so this holder lost its lock (a pause, a partition, an expired
    /// lease). Nothing was written; in PostgreSQL the transaction has failed
    /// and can only be rolled back. Retrying with the same token fails again.
    StaleToken {
        /// The resource the write was for.
        resource: String,
        /// The token that came with the refused write.
        token: FencingToken,
        /// The newer token the resource had already admitted.
        newer: FencingToken,
    },
    /// Anything else: [`LockErrorKind::InvalidArgument`] for a guard without a
    /// fencing token (Redlock), an empty resource or a token the store cannot
    /// hold; [`LockErrorKind::Unavailable`] for a store that could not be
    /// reached or a transaction to retry; [`LockErrorKind::Timeout`] for a
    /// server-side lock or statement timeout; [`LockErrorKind::Unauthorized`],
    /// [`LockErrorKind::Protocol`] otherwise.
    Store(LockError),
}

impl FenceError {
    /// Whether the write was refused as stale.
    pub fn is_stale(&self) -> bool {
        matches!(self, FenceError::StaleToken { .. })
    }

    /// What kind of failure this is; a stale token is [`LockErrorKind::Lost`]
    /// (the holder lost its lock).
    pub fn kind(&self) -> LockErrorKind {
        match self {
            FenceError::StaleToken { .. } => LockErrorKind::Lost,
            FenceError::Store(e) => e.kind(),
        }
    }

    /// Whether the same write may succeed if tried again: never for a stale
    /// token, as [`LockError::is_retryable`] otherwise (a new transaction for
    /// PostgreSQL).
    pub fn is_retryable(&self) -> bool {
        match self {
            FenceError::StaleToken { .. } => false,
            FenceError::Store(e) => e.is_retryable(),
        }
    }
}

impl fmt::Display for FenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FenceError::StaleToken {
                resource,
                token,
                newer,
            } => write!(
                f,
                "stale fencing token {token} for resource {resource:?}: it already admitted \
                 {newer} from a newer lock holder; this holder lost its lock"
            ),
            FenceError::Store(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for FenceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FenceError::StaleToken { .. } => None,
            FenceError::Store(e) => Some(e),
        }
    }
}

impl From<LockError> for FenceError {
    fn from(e: LockError) -> Self {
        FenceError::Store(e)
    }
}
