//! The etcd client wrapper: one endpoint at a time with fail-over and a
//! backoff per endpoint, one request timeout per call, and the ONE function
//! that maps client errors to [`LockErrorKind`].

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex as StdMutex;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use lock_core::{LockError, LockErrorKind, Result};
use rand::Rng;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::config::EtcdConfig;

tokio::task_local! {
    /// The instant by which every request made by the current call of the
    /// crate's API must be answered (see [`bounded_by`]).
    static BOUND: Instant;
}

/// Runs `fut` with every request it makes on this task bounded by `bound`
/// as well as by its own request timeout (an enclosing bound still
/// applies): a call of the crate's API that makes several requests keeps
/// to its one bound (wait + one request timeout) in all. Background tasks
/// spawned from it are not bounded by it.
pub(crate) async fn bounded_by<F: Future>(bound: Instant, fut: F) -> F::Output {
    let bound = BOUND.try_with(|outer| (*outer).min(bound)).unwrap_or(bound);
    BOUND.scope(bound, fut).await
}

/// What became of a mutation sent at most once ([`EtcdClient::call_once`]).
#[derive(Debug)]
pub(crate) enum Outcome<T> {
    /// Applied; the answer.
    Done(T),
    /// Not applied: the server refused it, or it never left this process.
    Refused(LockError),
    /// Unknown: the request may have been applied, or may still be, later
    /// (it timed out, or its connection failed after it was sent).
    Unknown(LockError),
}

/// Why one request to one endpoint failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The client crate reported an error.
    Etcd(etcd_client::Error),
    /// No answer within the request timeout.
    TimedOut(Duration),
}

impl Failure {
    /// The member answered that the cluster has no leader now, or that the
    /// leader changed under the request: asking it again shortly is worth it
    /// (the request was not applied, or is safe to repeat).
    fn between_leaders(&self) -> bool {
        match self {
            Failure::Etcd(etcd_client::Error::GRpcStatus(status)) => {
                status.code() == tonic::Code::Unavailable
                    && (status.message().starts_with("etcdserver: no leader")
                        || status.message().starts_with("etcdserver: leader changed"))
            }
            _ => false,
        }
    }
}

impl Failure {
    /// The request surely never took effect: the member refused it before
    /// processing it (no leader: every request asks for one), or it could
    /// not even connect. As clientv3's `isSafeRetryMutableRPC`: only then
    /// may a mutation go to another endpoint.
    fn never_applied(&self) -> bool {
        match self {
            Failure::Etcd(etcd_client::Error::GRpcStatus(status)) => {
                let msg = status.message();
                status.code() == tonic::Code::Unavailable
                    && (msg.starts_with("etcdserver: no leader")
                        || msg.contains("error trying to connect")
                        || msg.contains("tcp connect error"))
            }
            _ => false,
        }
    }
}

impl From<etcd_client::Error> for Failure {
    fn from(e: etcd_client::Error) -> Self {
        Failure::Etcd(e)
    }
}

/// The one place where client errors become [`LockError`]s.
///
/// - transport, I/O and stream errors, gRPC `Unavailable`, `DeadlineExceeded`,
///   `Cancelled`, `Aborted`, `ResourceExhausted`, `Unknown` and our own
///   request timeout -> [`LockErrorKind::Unavailable`] (retryable; etcd answers
///   "no leader", "leader changed" and "request timed out" with `Unavailable`);
/// - gRPC `Unauthenticated`, `PermissionDenied`, and etcd's "authentication
///   failed", "user name is empty" and "user name not found" (sent as
///   `InvalidArgument` / `FailedPrecondition`) -> [`LockErrorKind::Unauthorized`];
/// - gRPC `NotFound` for a lease ("requested lease not found": our session lease
///   expired) -> [`LockErrorKind::Lost`];
/// - gRPC `InvalidArgument`, `OutOfRange`, `FailedPrecondition`, `AlreadyExists`
///   and the client's own argument errors -> [`LockErrorKind::InvalidArgument`];
/// - gRPC `Unimplemented`, other `NotFound`, undecodable answers ->
///   [`LockErrorKind::Protocol`];
/// - gRPC `Internal`, `DataLoss`, the client's internal errors ->
///   [`LockErrorKind::Internal`].
pub(crate) fn map_error(failure: Failure, what: &str) -> LockError {
    let err = match failure {
        Failure::TimedOut(d) => {
            return LockError::unavailable(format!(
                "etcd: {what}: no answer within the request timeout of {d:?}"
            ))
        }
        Failure::Etcd(err) => err,
    };
    LockError::new(error_kind(&err), format!("etcd: {what}")).with_source(err)
}

/// The error kind of an `etcd_client` error (the rules above), shared with
/// the crates that talk to etcd for other purposes (`lock-fence`).
pub fn error_kind(err: &etcd_client::Error) -> LockErrorKind {
    use etcd_client::Error as E;
    use tonic::Code;
    match err {
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
    }
}

/// The error of one request's `failure` at `where_`. When the member was
/// asked again after it said the cluster is between leaders (`earlier`,
/// that answer) and was silent when its share of time ran out, the answer
/// is the cause and the silence only where the deadline cut the asking
/// short: the error says both.
fn request_error(failure: Failure, earlier: Option<&LockError>, where_: &str) -> LockError {
    match (&failure, earlier) {
        (Failure::TimedOut(share), Some(answer)) => {
            let answer = match std::error::Error::source(answer) {
                Some(said) => format!("{}: {said}", answer.message()),
                None => answer.message().to_owned(),
            };
            LockError::unavailable(format!(
                "{answer}; asked again, no answer within the {share:?} left of the request timeout"
            ))
        }
        _ => map_error(failure, where_),
    }
}

/// The pause (with jitter down to half of it) before a member that answered
/// "no leader" or "leader changed" is asked again within the same call. An
/// etcd election takes at least one election timeout (1 s by default).
const ELECTION_PAUSE: Duration = Duration::from_millis(50);

/// The time a member gets of the `left` of a call: an equal share with
/// the `untried` members of this pass (itself included) and the `electing`
/// ones that said the cluster is between leaders (asked again by this call,
/// or, for a mutation whose silent member left its outcome unknown, by the
/// caller's next attempt). A silent member tried after electing ones must
/// not take all that is left: the election may end meanwhile, and they
/// would then answer.
fn share_of(left: Duration, untried: usize, electing: usize) -> Duration {
    let turns = u32::try_from(untried.saturating_add(electing)).unwrap_or(u32::MAX);
    left / turns.max(1)
}

/// How long an endpoint that failed is passed over, at first...
const MIN_BACKOFF: Duration = Duration::from_millis(50);
/// ...doubling up to this, until a request on it succeeds again.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

struct Endpoint {
    addr: String,
    client: OnceCell<Client>,
    /// While set: failed recently; passed over until then, unless every
    /// endpoint is. The backoff doubles on each failure, resets on success.
    health: StdMutex<Health>,
}

#[derive(Clone, Copy)]
struct Health {
    down_until: Option<Instant>,
    backoff: Duration,
}

/// The etcd client of one [`crate::EtcdLock`]: talks to one endpoint at a
/// time (the pinned one); a failure moves the pin to the next endpoint and
/// passes the failed one over for a backoff of its own. Every call is
/// bounded by ONE request timeout, fail-over included. Nothing is broadcast:
/// each stream (watch, keep-alive) notices its own failure and reopens with
/// the same backoff.
pub(crate) struct EtcdClient {
    cfg: EtcdConfig,
    /// The TLS settings of every connection, read from the files once.
    tls: Option<etcd_client::TlsOptions>,
    endpoints: Vec<Endpoint>,
    pinned: AtomicUsize,
}

/// The TLS settings of `tls`'s files (an `InvalidArgument` error naming a
/// file that cannot be read): the server checked against the CA given,
/// else against the system's roots (`SSL_CERT_FILE` and `SSL_CERT_DIR`
/// are honoured). An `Unsupported` error when rustls has no crypto
/// provider: neither the application installed one nor this crate's
/// `rustls-aws-lc` or `rustls-ring` feature compiled one in.
fn tls_options(tls: &lock_core::TlsConfig) -> Result<etcd_client::TlsOptions> {
    let compiled_in = cfg!(any(feature = "rustls-aws-lc", feature = "rustls-ring"));
    if !compiled_in && rustls::crypto::CryptoProvider::get_default().is_none() {
        return Err(LockError::new(
            LockErrorKind::Unsupported,
            "etcd over TLS, and rustls has no crypto provider: enable the rustls-aws-lc \
             or rustls-ring feature, or install a provider at startup",
        ));
    }
    let material = tls.load()?;
    let mut opts = etcd_client::TlsOptions::new();
    opts = match material.ca {
        Some(ca) => opts.ca_certificate(etcd_client::Certificate::from_pem(ca)),
        None => opts.with_native_roots(),
    };
    if let (Some(cert), Some(key)) = (material.cert, material.key) {
        opts = opts.identity(etcd_client::Identity::from_pem(cert, key));
    }
    Ok(opts)
}

impl EtcdClient {
    pub(crate) fn new(cfg: EtcdConfig) -> Result<Self> {
        let tls = cfg.tls.as_ref().map(tls_options).transpose()?;
        let endpoints = cfg
            .endpoints
            .iter()
            .map(|addr| Endpoint {
                addr: addr.trim().to_string(),
                client: OnceCell::new(),
                health: StdMutex::new(Health {
                    down_until: None,
                    backoff: MIN_BACKOFF,
                }),
            })
            .collect();
        Ok(Self {
            cfg,
            tls,
            endpoints,
            pinned: AtomicUsize::new(0),
        })
    }

    pub(crate) fn config(&self) -> &EtcdConfig {
        &self.cfg
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.cfg.request_timeout
    }

    /// When a request starting now must be answered: one request timeout
    /// from now, or the enclosing call's bound ([`bounded_by`]) if sooner.
    pub(crate) fn request_deadline(&self) -> Instant {
        let own = Instant::now() + self.cfg.request_timeout;
        BOUND.try_with(|b| own.min(*b)).unwrap_or(own)
    }

    /// The endpoints to try, in order, for a call starting now: the pinned
    /// one first, then the others, those in backoff last, the one whose
    /// backoff ends first in front of them (a member that said "no leader"
    /// once comes back before one that has been silent again and again).
    fn order(&self) -> Vec<usize> {
        let n = self.endpoints.len();
        let first = self.pinned.load(Ordering::SeqCst) % n.max(1);
        let now = Instant::now();
        let (up, mut down): (Vec<_>, Vec<_>) = (0..n)
            .map(|i| (first + i) % n)
            .map(|i| {
                let until = lock(&self.endpoints[i].health).down_until;
                (until.filter(|t| *t > now), i)
            })
            .partition(|(until, _)| until.is_none());
        down.sort_by_key(|&(until, _)| until);
        up.into_iter().chain(down).map(|(_, i)| i).collect()
    }

    /// Endpoint `idx` answered: it is healthy again.
    fn succeeded(&self, idx: usize) {
        let mut h = lock(&self.endpoints[idx].health);
        h.down_until = None;
        h.backoff = MIN_BACKOFF;
    }

    /// Endpoint `idx` failed: pass it over for its backoff (with jitter) and
    /// move the pin on if it was the pinned one.
    pub(crate) fn failed(&self, idx: usize) {
        let n = self.endpoints.len().max(1);
        {
            let mut h = lock(&self.endpoints[idx].health);
            let pause = rand::rng().random_range(h.backoff / 2..=h.backoff);
            h.down_until = Some(Instant::now() + pause);
            h.backoff = (h.backoff * 2).min(MAX_BACKOFF);
        }
        if self
            .pinned
            .compare_exchange(idx, (idx + 1) % n, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            tracing::debug!(endpoint = %self.endpoints[idx].addr, "distlock etcd: endpoint failed; moving to the next");
        }
    }

    /// The client of endpoint `idx`, created on first use (lazy connection;
    /// authenticates when a user is configured; every request asks for a
    /// leader, so a member cut off from the quorum answers `Unavailable`
    /// instead of serving stale reads or a silent watch).
    async fn client(&self, idx: usize) -> std::result::Result<Client, Failure> {
        let ep = &self.endpoints[idx];
        let client = ep
            .client
            .get_or_try_init(|| async {
                let mut opts = ConnectOptions::new()
                    .with_connect_timeout(self.cfg.connect_timeout.min(self.cfg.request_timeout))
                    // A connection counts as dead only after its pings went
                    // unanswered for a lease TTL: a slow member is not a
                    // dead one (its late answers still confirm the lease).
                    .with_keep_alive(
                        self.cfg.request_timeout.max(Duration::from_secs(1)),
                        self.cfg.lease_ttl.max(self.cfg.request_timeout),
                    )
                    .with_require_leader(true);
                if let Some(tls) = &self.tls {
                    opts = opts.with_tls(tls.clone());
                }
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

    /// Pins the member that leads, if one of the endpoints says it does
    /// within `limit` (one status request per endpoint, in parallel; no
    /// answer leaves the pin where it is). Every write and every
    /// linearizable read goes through the leader anyway: a client on a
    /// follower pays a forwarding hop per request and gets watch events
    /// only once the follower has applied them. A later leader change only
    /// makes this a preference that has gone stale; failures move the pin
    /// on as before.
    pub(crate) async fn prefer_leader(&self, limit: Duration) {
        let asks = (0..self.endpoints.len()).map(|idx| async move {
            let ask = async {
                let mut c = self.client(idx).await.ok()?;
                lock_core::metrics::count_request("etcd", "request");
                let status = c.status().await.ok()?;
                let me = status.header()?.member_id();
                (me != 0 && status.leader() == me).then_some(idx)
            };
            tokio::time::timeout(limit, ask).await.ok().flatten()
        });
        if let Some(idx) = futures::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            .next()
        {
            self.pinned.store(idx, Ordering::SeqCst);
        }
    }

    /// Runs `op`, bounded by ONE request timeout in all: on the pinned
    /// endpoint, and after an `Unavailable`-kind failure or silence on the
    /// next ones while time is left. Each endpoint gets an equal share of
    /// what is left (a hung member costs a share, not the whole bound; a
    /// healthy one answers in a fraction of it). A member that answered
    /// that the cluster is between leaders is asked again after a short
    /// pause, while time is left: an election shorter than the request
    /// timeout never fails a call. Only for requests that are safe to
    /// repeat: reads, and writes whose every copy is harmless after the
    /// first (a delete that compares the key's create revision, a lease
    /// revoke). Other mutations go through [`EtcdClient::call_once`].
    pub(crate) async fn call<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        lock_core::metrics::count_request("etcd", "request");
        let limit = self.cfg.request_timeout;
        let deadline = self.request_deadline();
        let mut last = None;
        let mut order = self.order();
        // Asking again the members that said the cluster is between leaders.
        let mut asking_again = false;
        'passes: loop {
            let mut electing = Vec::new();
            for (tried, idx) in order.iter().copied().enumerate() {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break 'passes;
                }
                let share = share_of(left, order.len() - tried, electing.len());
                let attempt = async {
                    let client = self.client(idx).await?;
                    op(client).await.map_err(Failure::Etcd)
                };
                let failure = match tokio::time::timeout(share, attempt).await {
                    Ok(Ok(v)) => {
                        self.succeeded(idx);
                        return Ok(v);
                    }
                    Ok(Err(f)) => f,
                    Err(_) => Failure::TimedOut(share),
                };
                if failure.between_leaders() {
                    electing.push(idx);
                }
                let err = request_error(
                    failure,
                    last.as_ref().filter(|_| asking_again),
                    &format!("{what} (endpoint {})", self.endpoints[idx].addr),
                );
                if err.kind() != LockErrorKind::Unavailable {
                    return Err(err);
                }
                self.failed(idx);
                last = Some(err);
            }
            if electing.is_empty() {
                break;
            }
            asking_again = true;
            let left = deadline.saturating_duration_since(Instant::now());
            let pause = rand::rng().random_range(ELECTION_PAUSE / 2..=ELECTION_PAUSE);
            tokio::time::sleep(pause.min(left)).await;
            order = electing;
        }
        Err(last.unwrap_or_else(|| {
            map_error(
                Failure::TimedOut(limit),
                &format!("{what} (every endpoint)"),
            )
        }))
    }

    /// Runs the mutation `op` at most once, within `within` and the
    /// request's deadline ([`EtcdClient::request_deadline`]), giving each
    /// endpoint an equal share of that time as [`EtcdClient::call`] does:
    /// it goes to another endpoint only when the failure proves that it
    /// never took effect (it could not connect, or the member had no
    /// leader); after a timeout or a broken connection its first copy may
    /// still be applied, so the outcome is [`Outcome::Unknown`] and the
    /// caller settles it. A server's refusal is [`Outcome::Refused`].
    pub(crate) async fn call_once<T, F, Fut>(
        &self,
        what: &str,
        within: Duration,
        mut op: F,
    ) -> Outcome<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        lock_core::metrics::count_request("etcd", "request");
        let deadline = self.request_deadline().min(Instant::now() + within);
        let mut last = None;
        let mut order = self.order();
        // Asking again the members that said the cluster is between leaders.
        let mut asking_again = false;
        'passes: loop {
            let mut electing = Vec::new();
            for (tried, idx) in order.iter().copied().enumerate() {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break 'passes;
                }
                let where_ = format!("{what} (endpoint {})", self.endpoints[idx].addr);
                // Connecting: nothing has been sent yet.
                let share = share_of(left, order.len() - tried, electing.len());
                let client = match tokio::time::timeout(share, self.client(idx)).await {
                    Ok(Ok(c)) => c,
                    Ok(Err(f)) => {
                        let err = map_error(f, &where_);
                        if err.kind() != LockErrorKind::Unavailable {
                            return Outcome::Refused(err);
                        }
                        self.failed(idx);
                        last = Some(err);
                        continue;
                    }
                    Err(_) => {
                        self.failed(idx);
                        last = Some(map_error(Failure::TimedOut(share), &where_));
                        continue;
                    }
                };
                // The request gets its share, as in `call`: after a silent
                // member the caller may try again elsewhere within its
                // own request timeout, once it has settled the outcome.
                let left = deadline.saturating_duration_since(Instant::now());
                let share = share_of(left, order.len() - tried, electing.len());
                let failure = match tokio::time::timeout(share, op(client)).await {
                    Ok(Ok(v)) => {
                        self.succeeded(idx);
                        return Outcome::Done(v);
                    }
                    Ok(Err(e)) => Failure::Etcd(e),
                    Err(_) => Failure::TimedOut(share),
                };
                if failure.never_applied() {
                    if failure.between_leaders() {
                        electing.push(idx);
                    }
                    self.failed(idx);
                    last = Some(map_error(failure, &where_));
                    continue;
                }
                let err = request_error(failure, last.as_ref().filter(|_| asking_again), &where_);
                if err.kind() != LockErrorKind::Unavailable {
                    // The server answered: it refused the request.
                    return Outcome::Refused(err);
                }
                self.failed(idx);
                return Outcome::Unknown(err);
            }
            if electing.is_empty() {
                break;
            }
            asking_again = true;
            let left = deadline.saturating_duration_since(Instant::now());
            let pause = rand::rng().random_range(ELECTION_PAUSE / 2..=ELECTION_PAUSE);
            tokio::time::sleep(pause.min(left)).await;
            order = electing;
        }
        Outcome::Refused(last.unwrap_or_else(|| {
            map_error(
                Failure::TimedOut(self.cfg.request_timeout),
                &format!("{what} (no time left to send it)"),
            )
        }))
    }

    /// A client for a long-lived stream (watch, keep-alive): the first
    /// endpoint in order whose client can be made within the request
    /// timeout, with its index (the caller reports the stream's failures).
    pub(crate) async fn stream_client(&self) -> Result<(Client, usize)> {
        let limit = self.cfg.request_timeout;
        let deadline = Instant::now() + limit;
        let mut last = None;
        let order = self.order();
        for (tried, idx) in order.iter().copied().enumerate() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let share = share_of(left, order.len() - tried, 0);
            match tokio::time::timeout(share, self.client(idx)).await {
                Ok(Ok(c)) => return Ok((c, idx)),
                Ok(Err(f)) => {
                    self.failed(idx);
                    last = Some(map_error(f, "connect"));
                }
                Err(_) => {
                    self.failed(idx);
                    last = Some(map_error(Failure::TimedOut(limit), "connect"));
                }
            }
        }
        Err(last.unwrap_or_else(|| map_error(Failure::TimedOut(limit), "connect")))
    }

    /// Maps a failure of a stream the caller drives itself; an
    /// `Unavailable` one counts against its endpoint.
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

    /// A stream on endpoint `idx` worked.
    pub(crate) fn stream_ok(&self, idx: usize) {
        self.succeeded(idx);
    }
}

fn lock<T>(m: &StdMutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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
