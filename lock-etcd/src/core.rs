//! The etcd client wrapper: one endpoint at a time with fail-over, a bound on
//! every request, and the ONE function that maps client errors to
//! [`LockErrorKind`].

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, WatchFilterType, WatchOptions, WatchStream};
use lock_core::{LockError, LockErrorKind, Result};
use tokio::sync::{watch, OnceCell};

use crate::config::EtcdConfig;

/// Why one request to one endpoint failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The client crate reported an error.
    Etcd(etcd_client::Error),
    /// No answer within the request timeout.
    TimedOut(Duration),
    /// The server cancelled a watch, for this reason (not a compaction).
    WatchCanceled(String),
}

impl From<etcd_client::Error> for Failure {
    fn from(e: etcd_client::Error) -> Self {
        Failure::Etcd(e)
    }
}

/// The one place where client errors become [`LockError`]s.
///
/// - transport, I/O and stream errors, gRPC `Unavailable`, `DeadlineExceeded`,
///   `Cancelled`, `Aborted`, `ResourceExhausted`, `Unknown`, our own request
///   timeout, and a watch the server cancelled -> [`LockErrorKind::Unavailable`] (retryable; etcd answers
///   "no leader", "leader changed" and "request timed out" with `Unavailable`);
/// - gRPC `Unauthenticated`, `PermissionDenied`, and etcd's "authentication
///   failed", "user name is empty" and "user name not found" (sent as
///   `InvalidArgument` / `FailedPrecondition`), a watch cancelled for
///   "permission denied" -> [`LockErrorKind::Unauthorized`];
/// - gRPC `NotFound` for a lease ("requested lease not found": our session lease
///   expired) -> [`LockErrorKind::Lost`];
/// - gRPC `InvalidArgument`, `OutOfRange`, `FailedPrecondition`, `AlreadyExists`
///   and the client's own argument errors -> [`LockErrorKind::InvalidArgument`];
/// - gRPC `Unimplemented`, other `NotFound`, undecodable answers ->
///   [`LockErrorKind::Protocol`];
/// - gRPC `Internal`, `DataLoss`, the client's internal errors ->
///   [`LockErrorKind::Internal`].
pub(crate) fn map_error(failure: Failure, what: &str) -> LockError {
    use etcd_client::Error as E;
    use tonic::Code;
    let err = match failure {
        Failure::TimedOut(d) => {
            return LockError::unavailable(format!(
                "etcd: {what}: no answer within the request timeout of {d:?}"
            ))
        }
        Failure::WatchCanceled(reason) => {
            let kind = if reason.contains("permission denied") {
                LockErrorKind::Unauthorized
            } else {
                LockErrorKind::Unavailable
            };
            return LockError::new(
                kind,
                format!("etcd: {what}: the server cancelled the watch: {reason}"),
            );
        }
        Failure::Etcd(err) => err,
    };
    let kind = match &err {
        E::IoError(_)
        | E::TransportError(_)
        | E::EndpointError(_)
        | E::WatchError(_)
        | E::LeaseKeepAliveError(_) => LockErrorKind::Unavailable,
        E::InvalidArgs(_) | E::InvalidUri(_) | E::InvalidMetadataValue(_) => {
            LockErrorKind::InvalidArgument
        }
        E::Utf8Error(_) | E::ElectError(_) => LockErrorKind::Protocol,
        E::EndpointsNotManaged | E::Internal(_) => LockErrorKind::Internal,
        E::GRpcStatus(status) => {
            let msg = status.message();
            match status.code() {
                Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Cancelled
                | Code::Aborted
                | Code::ResourceExhausted
                | Code::Unknown => LockErrorKind::Unavailable,
                Code::Unauthenticated | Code::PermissionDenied => LockErrorKind::Unauthorized,
                // etcd sends these authentication failures with non-auth codes.
                Code::InvalidArgument | Code::FailedPrecondition
                    if msg.contains("authentication failed")
                        || msg.contains("user name is empty")
                        || msg.contains("user name not found") =>
                {
                    LockErrorKind::Unauthorized
                }
                Code::InvalidArgument
                | Code::OutOfRange
                | Code::FailedPrecondition
                | Code::AlreadyExists => LockErrorKind::InvalidArgument,
                Code::NotFound if msg.contains("lease not found") => LockErrorKind::Lost,
                Code::NotFound | Code::Unimplemented => LockErrorKind::Protocol,
                Code::Internal | Code::DataLoss => LockErrorKind::Internal,
                Code::Ok => LockErrorKind::Protocol,
            }
        }
        // etcd_client::Error is not non_exhaustive today; keep the match total anyway.
        #[allow(unreachable_patterns)]
        _ => LockErrorKind::Internal,
    };
    LockError::new(kind, format!("etcd: {what}")).with_source(err)
}

struct Endpoint {
    addr: String,
    client: OnceCell<Client>,
}

/// The etcd client of one [`crate::EtcdLock`]: talks to one endpoint at a time
/// (the pinned one) and moves to the next when a request or stream on it fails.
pub(crate) struct Core {
    cfg: EtcdConfig,
    endpoints: Vec<Endpoint>,
    pinned: AtomicUsize,
    /// Bumped whenever an endpoint is found failing: open watch streams on it
    /// may be dead without knowing it, so their owners re-open them.
    epoch: watch::Sender<u64>,
}

impl Core {
    pub(crate) fn new(cfg: EtcdConfig) -> Self {
        let endpoints = cfg
            .endpoints
            .iter()
            .map(|addr| Endpoint {
                addr: addr.trim().to_string(),
                client: OnceCell::new(),
            })
            .collect();
        Self {
            cfg,
            endpoints,
            pinned: AtomicUsize::new(0),
            epoch: watch::channel(0).0,
        }
    }

    pub(crate) fn config(&self) -> &EtcdConfig {
        &self.cfg
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.cfg.request_timeout
    }

    /// The endpoint requests go to now.
    pub(crate) fn pinned(&self) -> usize {
        self.pinned.load(Ordering::SeqCst) % self.endpoints.len().max(1)
    }

    /// Watch of the fail-over epoch.
    pub(crate) fn epoch(&self) -> watch::Receiver<u64> {
        self.epoch.subscribe()
    }

    /// Records that endpoint `idx` failed: move to the next one (if `idx` is
    /// still the pinned one) and tell stream owners.
    pub(crate) fn failed(&self, idx: usize) {
        let n = self.endpoints.len().max(1);
        let moved = self
            .pinned
            .compare_exchange(idx, (idx + 1) % n, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if moved {
            tracing::debug!(endpoint = %self.endpoints[idx].addr, "distlock etcd: endpoint failed; moving to the next");
            self.epoch.send_modify(|e| *e += 1);
        }
    }

    /// The client of endpoint `idx`, created on first use (lazy connection;
    /// authenticates when a user is configured).
    async fn client(&self, idx: usize) -> std::result::Result<Client, Failure> {
        let ep = &self.endpoints[idx];
        let client = ep
            .client
            .get_or_try_init(|| async {
                let mut opts = ConnectOptions::new().with_connect_timeout(self.cfg.connect_timeout);
                if let (Some(user), Some(password)) = (&self.cfg.user, &self.cfg.password) {
                    opts = opts
                        .with_user(user.clone(), password.clone())
                        .with_auto_token_refresh(true);
                }
                Client::connect([ep.addr.as_str()], Some(opts)).await
            })
            .await?;
        Ok(client.clone())
    }

    /// Runs `op` on the pinned endpoint, bounded by the request timeout; on an
    /// `Unavailable`-kind failure moves to the next endpoint and tries again,
    /// each endpoint at most once. Only for requests that are safe to repeat.
    pub(crate) async fn call<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let n = self.endpoints.len();
        let first = self.pinned();
        let mut last = None;
        for i in 0..n {
            let idx = (first + i) % n;
            let attempt = async {
                let client = self.client(idx).await?;
                op(client).await.map_err(Failure::Etcd)
            };
            let failure = match tokio::time::timeout(self.cfg.request_timeout, attempt).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(f)) => f,
                Err(_) => Failure::TimedOut(self.cfg.request_timeout),
            };
            let err = map_error(
                failure,
                &format!("{what} (endpoint {})", self.endpoints[idx].addr),
            );
            if err.kind() != LockErrorKind::Unavailable {
                return Err(err);
            }
            self.failed(idx);
            last = Some(err);
        }
        Err(last.unwrap_or_else(|| LockError::invalid("etcd config: no endpoints")))
    }

    /// Opens a watch of the DELETE events of `key` from `start_revision`, on
    /// the pinned endpoint (with fail-over). Returns the stream and the index
    /// of the endpoint it runs on.
    pub(crate) async fn watch_deletes(
        &self,
        key: &[u8],
        start_revision: i64,
    ) -> Result<(WatchStream, usize)> {
        let n = self.endpoints.len();
        let first = self.pinned();
        let mut last = None;
        for i in 0..n {
            let idx = (first + i) % n;
            let opts = WatchOptions::new()
                .with_start_revision(start_revision)
                .with_filters([WatchFilterType::NoPut]);
            let attempt = async {
                let client = self.client(idx).await?;
                client
                    .watch_client()
                    .watch(key.to_vec(), Some(opts))
                    .await
                    .map_err(Failure::Etcd)
            };
            let failure = match tokio::time::timeout(self.cfg.request_timeout, attempt).await {
                Ok(Ok(stream)) => return Ok((stream, idx)),
                Ok(Err(f)) => f,
                Err(_) => Failure::TimedOut(self.cfg.request_timeout),
            };
            let err = map_error(
                failure,
                &format!("open a watch (endpoint {})", self.endpoints[idx].addr),
            );
            if err.kind() != LockErrorKind::Unavailable {
                return Err(err);
            }
            self.failed(idx);
            last = Some(err);
        }
        Err(last.unwrap_or_else(|| LockError::invalid("etcd config: no endpoints")))
    }

    /// The client of the pinned endpoint and its index, for opening a
    /// keep-alive stream (the caller bounds the time and reports failures).
    pub(crate) async fn pinned_client(&self) -> Result<(Client, usize)> {
        let idx = self.pinned();
        match tokio::time::timeout(self.cfg.request_timeout, self.client(idx)).await {
            Ok(Ok(c)) => Ok((c, idx)),
            Ok(Err(f)) => {
                self.failed(idx);
                Err(map_error(f, "connect"))
            }
            Err(_) => {
                self.failed(idx);
                Err(map_error(
                    Failure::TimedOut(self.cfg.request_timeout),
                    "connect",
                ))
            }
        }
    }

    /// Maps a failure of a stream the caller drives itself.
    pub(crate) fn stream_error(&self, idx: usize, failure: Failure, what: &str) -> LockError {
        let err = map_error(
            failure,
            &format!(
                "{what} (endpoint {})",
                self.endpoints[idx % self.endpoints.len().max(1)].addr
            ),
        );
        if err.kind() == LockErrorKind::Unavailable {
            self.failed(idx);
        }
        err
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: i32, msg: &str) -> Failure {
        Failure::Etcd(etcd_client::Error::GRpcStatus(tonic::Status::new(
            code.into(),
            msg,
        )))
    }

    #[test]
    fn grpc_codes_map_to_kinds() {
        let cases = [
            (14, "etcdserver: no leader", LockErrorKind::Unavailable),
            (4, "deadline", LockErrorKind::Unavailable),
            (
                16,
                "etcdserver: invalid auth token",
                LockErrorKind::Unauthorized,
            ),
            (
                7,
                "etcdserver: permission denied",
                LockErrorKind::Unauthorized,
            ),
            (
                3,
                "etcdserver: authentication failed, invalid user ID or password",
                LockErrorKind::Unauthorized,
            ),
            (
                3,
                "etcdserver: key is not provided",
                LockErrorKind::InvalidArgument,
            ),
            (
                5,
                "etcdserver: requested lease not found",
                LockErrorKind::Lost,
            ),
            (
                11,
                "etcdserver: mvcc: required revision has been compacted",
                LockErrorKind::InvalidArgument,
            ),
            (13, "boom", LockErrorKind::Internal),
            (12, "nope", LockErrorKind::Protocol),
        ];
        for (code, msg, kind) in cases {
            assert_eq!(
                map_error(status(code, msg), "op").kind(),
                kind,
                "{code} {msg}"
            );
        }
    }

    #[test]
    fn timeouts_and_transport_are_unavailable() {
        let e = map_error(Failure::TimedOut(Duration::from_secs(1)), "get");
        assert_eq!(e.kind(), LockErrorKind::Unavailable);
        assert!(e.is_retryable());
        let e = map_error(
            Failure::Etcd(etcd_client::Error::IoError(std::io::Error::other("reset"))),
            "get",
        );
        assert_eq!(e.kind(), LockErrorKind::Unavailable);
        let e = map_error(
            Failure::Etcd(etcd_client::Error::InvalidArgs("x".into())),
            "get",
        );
        assert_eq!(e.kind(), LockErrorKind::InvalidArgument);
    }
}
