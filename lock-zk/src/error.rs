//! Why a ZooKeeper request failed, and THE one function that maps it to a
//! [`LockErrorKind`].

use lock_core::{LockError, LockErrorKind};
use zookeeper_client as zk;

/// Why a session was retired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retired {
    /// The server expired it (reported on reconnection).
    Expired,
    /// No reply for the whole session timeout: the server may have expired it.
    Presumed,
    /// The server refused the credentials.
    AuthFailed,
    /// The client was closed.
    Closed,
}

impl std::fmt::Display for Retired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Expired => "expired on the server",
            Self::Presumed => {
                "no reply from ZooKeeper for the whole session timeout; presumed expired"
            }
            Self::AuthFailed => "authentication failed",
            Self::Closed => "client closed",
        })
    }
}

/// Why a request did not succeed, before it becomes a [`LockError`].
#[derive(Debug)]
pub(crate) enum Failure {
    /// The client's own error (including server error codes).
    Zk(zk::Error),
    /// No reply within the call's bound (its request or connect timeout).
    Elapsed,
    /// The session was retired (expired, closed, or presumed expired).
    Retired(Retired),
}

/// The server's answers that mean it applied nothing: the node was not
/// there, already there, of another version, had children, was not ours to
/// touch, or could not take the request.
fn refused(err: &zk::Error) -> bool {
    use zk::Error as E;
    matches!(
        err,
        E::NoNode
            | E::NodeExists
            | E::BadVersion
            | E::NotEmpty
            | E::NoAuth
            | E::NoChildrenForEphemerals
            | E::InvalidAcl
    )
}

impl Failure {
    /// Whether a write that failed so may still have been applied by the
    /// ensemble: anything but an answer from the server (which applied
    /// nothing), a request never sent, or the end of the session (whose
    /// ephemeral nodes go with it).
    pub(crate) fn may_have_applied(&self) -> bool {
        use zk::Error as E;
        match self {
            Failure::Elapsed => true,
            Failure::Retired(_) => false,
            Failure::Zk(err) => {
                !refused(err)
                    && !matches!(
                        err,
                        E::BadArguments(_)
                            | E::Unimplemented
                            | E::MarshallingError
                            | E::QuotaExceeded
                            | E::Throttled
                            | E::NotReadOnly
                            | E::SessionMoved
                            | E::SessionExpired
                            | E::AuthFailed
                            | E::ClientClosed
                    )
            }
        }
    }

    /// Whether the server answered (so the session was alive when the
    /// server got the request).
    pub(crate) fn answered_by_server(&self) -> bool {
        matches!(self, Failure::Zk(err) if refused(err))
    }

    /// Whether the node the request named does not exist.
    pub(crate) fn is_no_node(&self) -> bool {
        matches!(self, Failure::Zk(zk::Error::NoNode))
    }
}

/// THE mapping from ZooKeeper client failures to [`LockErrorKind`]s. `what`
/// says what was being done, for the message.
pub(crate) fn lock_error(what: &str, failure: Failure) -> LockError {
    use zk::Error as E;
    match failure {
        Failure::Elapsed => LockError::new(
            LockErrorKind::Unavailable,
            format!("{what}: no reply from ZooKeeper within the call's time bound"),
        ),
        Failure::Retired(Retired::AuthFailed) => LockError::new(
            LockErrorKind::Unauthorized,
            format!("{what}: ZooKeeper rejected the session's credentials"),
        ),
        Failure::Retired(cause) => LockError::new(
            LockErrorKind::Unavailable,
            format!("{what}: the ZooKeeper session ended ({cause}); the next call opens a new one"),
        ),
        Failure::Zk(err) => {
            let kind = match &err {
                E::ConnectionLoss
                | E::Timeout
                | E::NoHosts
                | E::SessionExpired
                | E::SessionMoved
                | E::ClientClosed
                | E::Throttled
                | E::NotReadOnly
                | E::QuotaExceeded
                // The client reports a dead connection ("no response from
                // connection in ...") and socket errors as custom errors.
                | E::Custom(_) => LockErrorKind::Unavailable,
                E::NoAuth | E::AuthFailed => LockErrorKind::Unauthorized,
                E::BadArguments(_) | E::InvalidAcl | E::NoChildrenForEphemerals => {
                    LockErrorKind::InvalidArgument
                }
                E::UnmarshalError { .. }
                | E::MarshallingError
                | E::Unimplemented
                | E::UnexpectedErrorCode(_)
                | E::ReconfigDisabled
                | E::NoNode
                | E::NodeExists
                | E::BadVersion
                | E::NotEmpty
                | E::NoWatcher => LockErrorKind::Protocol,
                _ => LockErrorKind::Internal,
            };
            LockError::new(kind, format!("{what}: {err}")).with_source(err)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_client_failures_to_kinds() {
        use LockErrorKind::*;
        let cases = [
            (Failure::Zk(zk::Error::ConnectionLoss), Unavailable),
            (Failure::Zk(zk::Error::SessionExpired), Unavailable),
            (Failure::Zk(zk::Error::Timeout), Unavailable),
            (Failure::Zk(zk::Error::NoHosts), Unavailable),
            (Failure::Elapsed, Unavailable),
            (Failure::Retired(Retired::Presumed), Unavailable),
            (Failure::Zk(zk::Error::NoAuth), Unauthorized),
            (Failure::Zk(zk::Error::AuthFailed), Unauthorized),
            (Failure::Retired(Retired::AuthFailed), Unauthorized),
            (
                Failure::Zk(zk::Error::BadArguments(&"bad path")),
                InvalidArgument,
            ),
            (Failure::Zk(zk::Error::InvalidAcl), InvalidArgument),
            (Failure::Zk(zk::Error::Unimplemented), Protocol),
        ];
        for (failure, kind) in cases {
            let what = format!("{failure:?}");
            let err = lock_error("doing it", failure);
            assert_eq!(err.kind(), kind, "{what}: {err}");
            assert!(err.to_string().contains("doing it"), "{err}");
        }
    }

    #[test]
    fn only_server_answers_and_session_ends_rule_out_a_write() {
        assert!(Failure::Elapsed.may_have_applied());
        assert!(Failure::Zk(zk::Error::ConnectionLoss).may_have_applied());
        assert!(!Failure::Zk(zk::Error::NodeExists).may_have_applied());
        assert!(!Failure::Zk(zk::Error::SessionExpired).may_have_applied());
        assert!(!Failure::Retired(Retired::Expired).may_have_applied());
    }
}
