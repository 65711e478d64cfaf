//! Why a request failed ([`Failure`]), and THE mapping of failures to
//! [`LockErrorKind`]s ([`map_error`]), shared by the client's requests and
//! the route's connections.

use std::time::Duration;

use lock_core::{LockError, LockErrorKind};
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// Why a request failed, before mapping (cloned to every renewal of a
/// failed batch, so that each gets the error its own request would have).
#[derive(Clone, Debug)]
pub(crate) enum Failure {
    /// The `redis` crate reported an error.
    Redis(RedisError),
    /// No reply within this long (our own timeout, which also covers the wait
    /// for a reconnection).
    TimedOut(Duration),
    /// The request's task ended without an answer (the client or the
    /// runtime shutting down).
    Abandoned,
}

/// THE mapping of client failures to [`LockErrorKind`]s; `what` names the
/// operation for the message.
pub(crate) fn map_error(what: &str, failure: Failure) -> LockError {
    let err = match failure {
        Failure::TimedOut(after) => {
            return LockError::new(
                LockErrorKind::Unavailable,
                format!("{what}: no reply from Redis within {after:?}"),
            )
        }
        Failure::Abandoned => {
            return LockError::new(
                LockErrorKind::Unavailable,
                format!("{what}: the request ended without an answer (client shutting down?)"),
            )
        }
        Failure::Redis(err) => err,
    };
    let kind = crate::kit::errors::error_kind(&err);
    let hint = match err.kind() {
        ErrorKind::Server(
            ServerErrorKind::Moved | ServerErrorKind::Ask | ServerErrorKind::CrossSlot,
        ) => " (a Redis Cluster node: connect with a redis+cluster:// URL)",
        _ => "",
    };
    LockError::new(kind, format!("{what}: {}{hint}", err.category())).with_source(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_and_io_are_unavailable() {
        let e = map_error("acquire", Failure::TimedOut(Duration::from_millis(5)));
        assert_eq!(e.kind(), LockErrorKind::Unavailable);
        assert!(e.is_retryable());
        let io = RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset",
        ));
        assert_eq!(
            map_error("x", Failure::Redis(io)).kind(),
            LockErrorKind::Unavailable
        );
        let gone = RedisError::from((ErrorKind::ClusterConnectionNotFound, "no connection"));
        let e = map_error("extend", Failure::Redis(gone));
        assert_eq!(e.kind(), LockErrorKind::Unavailable, "a cluster node gone");
        assert!(e.is_retryable());
        let cfg = redis::Client::open("nonsense://").unwrap_err();
        assert_eq!(
            map_error("x", Failure::Redis(cfg)).kind(),
            LockErrorKind::InvalidArgument
        );
    }
}
