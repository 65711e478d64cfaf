//! The configuration of a Redlock client.

use std::collections::HashSet;
use std::time::Duration;

use lock_core::{check_duration, LockError, Result, TlsConfig};
use lock_redis::RenewBatching;

/// How a [`crate::RedlockLock`] reaches its nodes and times its rounds.
///
/// Build it with [`RedlockConfig::new`] and the setters of the same names as
/// the fields; every field documents its default. Its `Debug` output never
/// shows a password.
///
/// ```
/// use std::time::Duration;
/// use lock_redlock::RedlockConfig;
/// let cfg = RedlockConfig::new([
///     "redis://127.0.0.1:7001/",
///     "redis://127.0.0.1:7002/",
///     "redis://127.0.0.1:7003/",
/// ])
/// .node_timeout(Duration::from_millis(30))
/// .max_extensions(Some(100));
/// assert_eq!(cfg.quorum(), 2);
/// assert!(cfg.validate().is_ok());
/// let with_password = RedlockConfig::new(["redis://:secret@127.0.0.1:7001/"]);
/// assert!(!format!("{with_password:?}").contains("secret"));
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedlockConfig {
    /// The independent Redis masters (no replication between them, no
    /// cluster), as `redis://host:port/[db]` URLs or bare `host:port`.
    /// At least one; five is the usual choice (tolerates two failures).
    /// Default: none (required). The order does not matter.
    pub nodes: Vec<String>,
    /// For `rediss://` nodes: the CA to trust (default: the system's roots)
    /// and a client certificate and key for mutual TLS, the same for every
    /// node. Default: none.
    pub tls: TlsConfig,
    /// Prepended to every lock name to form the key. Default: `""`, so the
    /// key is the lock name itself, as redis-py `Lock`, redsync,
    /// node-redlock and `lock-redis` use it.
    pub key_prefix: String,
    /// How long one node may take to answer one request before it counts as
    /// failed for that round. Must be far below the lock TTLs in use (the
    /// Redlock spec suggests 5-50 ms for a 10 s TTL): a round never waits
    /// longer than this for a node, so a node that is down or paused costs
    /// at most this much. A release is the exception: it has no validity to
    /// protect, so it waits for its deletes' answers up to the longer of
    /// this and [`connect_timeout`](Self::connect_timeout) (returning as
    /// soon as a quorum has answered), and a busy moment does not turn a
    /// release that landed into an error. Default: 50 ms.
    pub node_timeout: Duration,
    /// The bound on opening a connection to a node, including the check
    /// [`crate::RedlockLock::connect`] makes and the pub/sub connections used
    /// for waiting; also the longest a release waits for its answers (see
    /// [`node_timeout`](Self::node_timeout)). Default: 1 s.
    pub connect_timeout: Duration,
    /// How many more rounds a waiting acquire makes after a round whose
    /// quorum came back only after the validity was used up (a slow
    /// network). Split votes between racing clients are retried until the
    /// deadline; a round where too few nodes answered is retried once if
    /// some of them only timed out, never if they refused (then the nodes
    /// are down and the caller gets `Unavailable` at once). A single attempt
    /// ([`lock_core::DistributedLock::try_acquire`]) is always one round, so
    /// it returns within one node timeout (plus one more when the round won
    /// some nodes but not a quorum: it removes those keys before returning).
    /// Default: 3.
    pub retry_count: u32,
    /// The smallest delay before retrying a failed round. Default: 5 ms.
    pub retry_delay: Duration,
    /// A random extra delay, uniform in `0..=retry_jitter`, added to
    /// `retry_delay` so that racing clients do not retry in lock-step (the
    /// spec's remedy for split votes). Default: 45 ms.
    pub retry_jitter: Duration,
    /// The most times one lease may be extended (by keep-alive or
    /// [`lock_core::LockGuard::extend`]); `None` = no limit. The Redlock
    /// spec asks to bound re-acquisition so that a holder cannot keep a lock
    /// forever. Past the cap, a renewal fails with a
    /// [`lock_core::LockErrorKind::Lost`] error: the guard turns suspended,
    /// the lock stays valid until its current validity ends, then the guard
    /// is lost (`Expired`) and the keys are removed. Default: `None`.
    pub max_extensions: Option<u32>,
    /// The longest a waiting acquire sleeps between two rounds when no
    /// release notification comes: it normally retries when a release is
    /// published or when the holder's TTL runs out; this bounds the wait
    /// after a release that published nothing (a foreign client, a plain
    /// `DEL`) on a lock with a long TTL. Default: 10 s.
    pub max_recheck: Duration,
    /// How the renewals of this client's guards are batched, per node: the
    /// renewals that come within a short window go to each node as one
    /// request (`lock-redis`'s batcher, see [`lock_redis::kit::renew`]); a
    /// renewal waits for its batch, then `node_timeout` counts from the
    /// batch's send.
    /// Default: [`RenewBatching::default`] (a 50 ms window, at most 1/50 of
    /// a lease's TTL; at most 256 renewals per request).
    pub renew_batching: RenewBatching,
    /// Refuse to connect ([`RedlockLock::connect`](crate::RedlockLock::connect))
    /// when a node that answers has a `maxmemory-policy` other than
    /// `noeviction` (an [`InvalidArgument`](lock_core::LockErrorKind::InvalidArgument)
    /// error naming the node). Under any other policy a node at its
    /// `maxmemory` may evict lock keys silently, which counts as that node
    /// failing. Either way `connect` reads each node's policy (`CONFIG GET`,
    /// else `INFO memory`, see [`lock_redis::kit::eviction`]) and warns of any
    /// other; a node that answers neither is not checked (logged at debug
    /// level), and [`RedlockLock::connect_lazy`](crate::RedlockLock::connect_lazy),
    /// which does no I/O, checks nothing. Default: `false`.
    pub require_noeviction: bool,
}

/// The longest connect or node timeout accepted: one hour.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

impl std::fmt::Debug for RedlockConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| lock_redis::kit::connect::redact_url(n))
            .collect();
        f.debug_struct("RedlockConfig")
            .field("nodes", &nodes)
            .field("tls", &self.tls)
            .field("key_prefix", &self.key_prefix)
            .field("node_timeout", &self.node_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("retry_count", &self.retry_count)
            .field("retry_delay", &self.retry_delay)
            .field("retry_jitter", &self.retry_jitter)
            .field("max_extensions", &self.max_extensions)
            .field("max_recheck", &self.max_recheck)
            .field("renew_batching", &self.renew_batching)
            .field("require_noeviction", &self.require_noeviction)
            .finish()
    }
}

impl RedlockConfig {
    /// A configuration for `nodes` with every other field at its default.
    pub fn new<I, S>(nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            nodes: nodes.into_iter().map(Into::into).collect(),
            tls: TlsConfig::default(),
            key_prefix: String::new(),
            node_timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_secs(1),
            retry_count: 3,
            retry_delay: Duration::from_millis(5),
            retry_jitter: Duration::from_millis(45),
            max_extensions: None,
            max_recheck: Duration::from_secs(10),
            renew_batching: RenewBatching::default(),
            require_noeviction: false,
        }
    }

    /// Sets [`RedlockConfig::require_noeviction`].
    pub fn require_noeviction(mut self, require: bool) -> Self {
        self.require_noeviction = require;
        self
    }

    /// Sets [`RedlockConfig::tls`].
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.tls = tls;
        self
    }

    /// Sets [`RedlockConfig::key_prefix`].
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Sets [`RedlockConfig::node_timeout`].
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Sets [`RedlockConfig::connect_timeout`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`RedlockConfig::retry_count`].
    pub fn retry_count(mut self, count: u32) -> Self {
        self.retry_count = count;
        self
    }

    /// Sets [`RedlockConfig::retry_delay`] and [`RedlockConfig::retry_jitter`].
    pub fn retry_delay(mut self, delay: Duration, jitter: Duration) -> Self {
        self.retry_delay = delay;
        self.retry_jitter = jitter;
        self
    }

    /// Sets [`RedlockConfig::max_extensions`].
    pub fn max_extensions(mut self, max: Option<u32>) -> Self {
        self.max_extensions = max;
        self
    }

    /// Sets [`RedlockConfig::max_recheck`].
    pub fn max_recheck(mut self, interval: Duration) -> Self {
        self.max_recheck = interval;
        self
    }

    /// Sets [`RedlockConfig::renew_batching`].
    pub fn renew_batching(mut self, batching: RenewBatching) -> Self {
        self.renew_batching = batching;
        self
    }

    /// The number of nodes that must agree: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// Checks the configuration: at least one node, every node a valid Redis
    /// address, no node twice, timeouts in 1 ms ..= one hour, retry
    /// delays and `max_recheck` at most a day, a key prefix without
    /// whitespace or control characters, the renewal batching's bounds.
    pub fn validate(&self) -> Result<()> {
        if self.nodes.is_empty() {
            return Err(LockError::invalid(
                "redlock: at least one Redis node is required",
            ));
        }
        let mut seen = HashSet::new();
        for url in &self.nodes {
            let info = crate::node::node_client(url, &self.tls)?;
            let addr = info.get_connection_info().addr().to_string();
            if !seen.insert(addr.clone()) {
                return Err(LockError::invalid(format!(
                    "redlock: node {addr} is listed twice; the nodes must be independent servers"
                )));
            }
        }
        let ms = Duration::from_millis(1);
        check_duration("redlock: node_timeout", self.node_timeout, ms, MAX_TIMEOUT)?;
        check_duration(
            "redlock: connect_timeout",
            self.connect_timeout,
            ms,
            MAX_TIMEOUT,
        )?;
        check_duration(
            "redlock: retry_delay",
            self.retry_delay,
            Duration::ZERO,
            lock_core::MAX_WAIT,
        )?;
        check_duration(
            "redlock: retry_jitter",
            self.retry_jitter,
            Duration::ZERO,
            lock_core::MAX_WAIT,
        )?;
        check_duration(
            "redlock: max_recheck",
            self.max_recheck,
            ms,
            lock_core::MAX_WAIT,
        )?;
        self.renew_batching.validate()?;
        lock_redis::kit::layout::check_prefix(&self.key_prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::LockErrorKind;

    #[test]
    fn quorum_is_a_strict_majority() {
        let q = |n: usize| {
            RedlockConfig::new((0..n).map(|i| format!("127.0.0.1:{}", 7000 + i))).quorum()
        };
        assert_eq!(
            [q(1), q(2), q(3), q(4), q(5), q(6), q(7)],
            [1, 2, 2, 3, 3, 4, 4]
        );
    }

    #[test]
    fn rejects_bad_configurations() {
        let bad = [
            RedlockConfig::new(Vec::<String>::new()),
            RedlockConfig::new(["127.0.0.1:7000", "redis://127.0.0.1:7000/"]),
            RedlockConfig::new(["http://127.0.0.1:7000/"]),
            RedlockConfig::new(["127.0.0.1:7000"]).node_timeout(Duration::ZERO),
            RedlockConfig::new(["127.0.0.1:7000"]).connect_timeout(Duration::ZERO),
        ];
        for cfg in bad {
            let err = cfg.validate().expect_err("accepted a bad configuration");
            assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
        }
        assert!(RedlockConfig::new([
            "127.0.0.1:7000",
            "localhost:7001",
            "redis://127.0.0.1:7002/2"
        ])
        .validate()
        .is_ok());
    }

    #[test]
    fn lazy_client_outside_a_runtime_is_an_error_not_a_panic() {
        let err = crate::client::RedlockLock::connect_lazy(RedlockConfig::new(["127.0.0.1:7000"]))
            .unwrap_err();
        assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
    }
}
