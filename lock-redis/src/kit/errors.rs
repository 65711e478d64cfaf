//! The mapping of `redis` errors to error kinds, shared by `lock-redis`,
//! `lock-redlock` and the Redis fence of `lock-fence` (each wraps the kind
//! into its own messages).

use lock_core::LockErrorKind;
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// The error kind of a `redis` error, shared by `lock-redis` and
/// `lock-redlock` (each wraps it into its own messages).
pub fn error_kind(err: &RedisError) -> LockErrorKind {
    let code = err.code().unwrap_or("");
    match err.kind() {
        // No connection to a cluster node (gone, or not connected yet).
        ErrorKind::Io | ErrorKind::ClusterConnectionNotFound => LockErrorKind::Unavailable,
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
        // cluster node reached as one server (redis:// instead of
        // redis+cluster://), script errors.
        _ => LockErrorKind::Protocol,
    }
}
