//! Configuration of a [`crate::RedisLock`] client.

use std::fmt;
use std::time::Duration;

use lock_core::{check_duration, LockError, TlsConfig};

use crate::batching::RenewBatching;
use crate::kit::connect::redact_url;

/// The default server URL: `redis://127.0.0.1:6379/`.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379/";
/// The default connect timeout: 1 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The default request timeout: 500 ms.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_millis(500);
/// The default longest sleep of a waiter between two attempts: 10 s.
pub const DEFAULT_MAX_RECHECK: Duration = Duration::from_secs(10);
/// The longest connect or request timeout accepted: one hour.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// How to reach Redis and how long to wait for it.
///
/// ```
/// use std::time::Duration;
/// use lock_redis::RedisLockConfig;
/// let config = RedisLockConfig::new("redis://:secret@127.0.0.1:6379/2")
///     .key_prefix("locks:")
///     .request_timeout(Duration::from_millis(200));
/// assert_eq!(config.connect_timeout, Duration::from_secs(1));
/// // The password never shows up in logs.
/// assert!(!format!("{config:?}").contains("secret"));
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisLockConfig {
    /// The server: `redis://[[user]:password@]host[:port][/db]`, or
    /// `rediss://...` for TLS. The ACL user, password and database go in
    /// the URL. Or the primary of a Sentinel-managed deployment:
    /// `redis+sentinel://[[user]:password@]s1[:port],s2,s3/MASTER_NAME[/db]`
    /// (`rediss+sentinel://` for TLS to the sentinels and the data nodes;
    /// the sentinels' port defaults to 26379; the credentials and the
    /// database are those of the data nodes, the sentinels are reached
    /// without credentials): the client asks the sentinels where the
    /// primary is, checks it with `ROLE`, and follows it across failovers.
    /// Or a Redis Cluster: `redis+cluster://[[user]:password@]n1[:port],n2,...`
    /// (`rediss+cluster://` for TLS; the port defaults to 6379; database 0
    /// only): the nodes given are seeds, the client learns every primary
    /// from them and sends each lock's requests to the owner of its slot.
    /// Waiters subscribe to releases at the owner of each channel's slot
    /// (`SSUBSCRIBE`), again at the new owner after a slot moves or a
    /// failover.
    /// Default: [`DEFAULT_URL`].
    pub url: String,
    /// With a `rediss://` URL: the CA to trust (default: the system's
    /// roots) and a client certificate and key for mutual TLS. Default: none.
    pub tls: TlsConfig,
    /// Prepended to every lock name to form the Redis key. Default: none (the
    /// key is the lock name itself, as redis-py `Lock`, redsync and
    /// node-redlock use it, so that they and this crate exclude each other).
    pub key_prefix: String,
    /// How long [`crate::RedisLock::connect`] may take in total (TCP connect,
    /// handshake, loading the scripts), and each reconnection attempt.
    /// Default: [`DEFAULT_CONNECT_TIMEOUT`] (1 s).
    pub connect_timeout: Duration,
    /// How long one request (acquire, renew, release, inspect) may wait for its
    /// reply, including the wait for a connection that is being re-established.
    /// An acquire whose reply does not come in time returns `Unavailable` and
    /// removes the lock it may have taken (compare-and-delete with its own
    /// token, in the background). Keep it well below the lock TTLs you use:
    /// a renewal that takes longer than the time left suspends the guard.
    /// Default: [`DEFAULT_REQUEST_TIMEOUT`] (500 ms).
    pub request_timeout: Duration,
    /// The longest a waiting acquire sleeps between two attempts when no
    /// release notification comes. A waiter normally retries when a release
    /// is published, or when the holder's TTL runs out; this bounds the wait
    /// after a release that published nothing (a foreign client, a plain
    /// `DEL`) on a lock with a long TTL, and is the re-check period for a key
    /// without expiry. Default: [`DEFAULT_MAX_RECHECK`] (10 s).
    pub max_recheck: Duration,
    /// How the renewals of this client's guards are batched: those that come
    /// within a short window go to the server as one request (see
    /// [`crate::kit::renew`]). Default: [`RenewBatching::default`] (a 50 ms
    /// window, at most 1/50 of a lease's TTL; at most 256 renewals per
    /// request).
    pub renew_batching: RenewBatching,
    /// Refuse to connect to a server whose `maxmemory-policy` is not
    /// `noeviction` (an [`InvalidArgument`](lock_core::LockErrorKind::InvalidArgument)
    /// error). Under any other policy a server at its `maxmemory` may evict
    /// lock keys silently, and another client then gets a lock that is
    /// still held. Either way the policy is read at connect (`CONFIG GET`,
    /// else `INFO memory`; see [`crate::kit::eviction`]) and any other policy is
    /// a warning; a server that answers neither is not checked (logged at
    /// debug level). Default: `false`.
    pub require_noeviction: bool,
    /// With a `redis+sentinel://` or `redis+cluster://` URL: addresses as
    /// the sentinels or the cluster's nodes report them (`host:port`),
    /// each with the address to connect to instead,
    /// for a client that reaches the data nodes through a NAT or a port
    /// mapping (containers, a bastion), as Redisson's `NatMapper`.
    /// Addresses not listed are used as reported. Default: none.
    pub address_map: Vec<(String, String)>,
    /// Wait until this many replicas have the lock before an acquisition
    /// returns (`WAIT n`, as Redisson's `syncSlaves`). See
    /// [`SyncReplicas`]. Default: none (an acquisition returns once the
    /// primary has it).
    pub sync_replicas: Option<SyncReplicas>,
}

/// `WAIT` after every acquisition (see [`RedisLockConfig::sync_replicas`]).
///
/// Redis replicates asynchronously: a failover to a replica that had not
/// yet received an acquisition loses it, and another client can then
/// take the same lock while its first holder still believes it holds it
/// (fencing tokens catch that). With `SyncReplicas`, `acquire` and
/// `try_acquire` return a lock only after `replicas` replicas confirmed
/// every write before it (the lock included) within `timeout`; otherwise
/// the lock is released again and the call fails with `Unavailable`. This
/// narrows the window (a failover picks the most up-to-date replica) but
/// does not close it: Redis's replication stays asynchronous, and
/// `WAIT` does not make a write durable on the replicas' disks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncReplicas {
    /// How many replicas must confirm (at least 1).
    pub replicas: u32,
    /// How long to wait for them (1 ms ..= [`MAX_TIMEOUT`]).
    pub timeout: Duration,
}

impl SyncReplicas {
    /// `replicas` replicas within `timeout`.
    pub fn new(replicas: u32, timeout: Duration) -> Self {
        Self { replicas, timeout }
    }
}

impl Default for RedisLockConfig {
    fn default() -> Self {
        Self {
            url: DEFAULT_URL.to_string(),
            tls: TlsConfig::default(),
            key_prefix: String::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_recheck: DEFAULT_MAX_RECHECK,
            renew_batching: RenewBatching::default(),
            require_noeviction: false,
            address_map: Vec::new(),
            sync_replicas: None,
        }
    }
}

impl RedisLockConfig {
    /// The defaults, with the server at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            ..Self::default()
        }
    }

    /// Sets [`RedisLockConfig::tls`].
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.tls = tls;
        self
    }

    /// Sets [`RedisLockConfig::key_prefix`].
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Sets [`RedisLockConfig::connect_timeout`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`RedisLockConfig::request_timeout`].
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets [`RedisLockConfig::max_recheck`].
    pub fn max_recheck(mut self, interval: Duration) -> Self {
        self.max_recheck = interval;
        self
    }

    /// Sets [`RedisLockConfig::renew_batching`].
    pub fn renew_batching(mut self, batching: RenewBatching) -> Self {
        self.renew_batching = batching;
        self
    }

    /// Sets [`RedisLockConfig::require_noeviction`].
    pub fn require_noeviction(mut self, require: bool) -> Self {
        self.require_noeviction = require;
        self
    }

    /// Adds an entry to [`RedisLockConfig::address_map`]: connect to `to`
    /// where a sentinel reports `from` (both `host:port`).
    pub fn map_address(mut self, from: impl Into<String>, to: impl Into<String>) -> Self {
        self.address_map.push((from.into(), to.into()));
        self
    }

    /// Sets [`RedisLockConfig::sync_replicas`].
    pub fn sync_replicas(mut self, sync: Option<SyncReplicas>) -> Self {
        self.sync_replicas = sync;
        self
    }

    /// Checks the configuration: timeouts in 1 ms ..= [`MAX_TIMEOUT`],
    /// `max_recheck` in 1 ms ..= one day, a key prefix without whitespace or
    /// control characters, the renewal batching's bounds
    /// ([`RenewBatching::validate`]). The URL is checked when connecting.
    pub fn validate(&self) -> Result<(), LockError> {
        let ms = Duration::from_millis(1);
        check_duration("connect_timeout", self.connect_timeout, ms, MAX_TIMEOUT)?;
        check_duration("request_timeout", self.request_timeout, ms, MAX_TIMEOUT)?;
        check_duration("max_recheck", self.max_recheck, ms, lock_core::MAX_WAIT)?;
        self.tls.validate()?;
        self.renew_batching.validate()?;
        if let Some(sync) = self.sync_replicas {
            if sync.replicas == 0 {
                return Err(LockError::invalid(
                    "sync_replicas: at least 1 replica (or none at all)",
                ));
            }
            check_duration("sync_replicas timeout", sync.timeout, ms, MAX_TIMEOUT)?;
        }
        crate::kit::layout::check_prefix(&self.key_prefix)
    }

    /// The URL with its password replaced by `***`, for logs and errors.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }
}

impl fmt::Debug for RedisLockConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLockConfig")
            .field("url", &self.redacted_url())
            .field("tls", &self.tls)
            .field("key_prefix", &self.key_prefix)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("max_recheck", &self.max_recheck)
            .field("renew_batching", &self.renew_batching)
            .field("require_noeviction", &self.require_noeviction)
            .field("address_map", &self.address_map)
            .field("sync_replicas", &self.sync_replicas)
            .finish()
    }
}

/// `reported` (`host:port`, as a sentinel or a cluster node reports it)
/// through an [`RedisLockConfig::address_map`]: where to connect.
pub(crate) fn mapped_address(map: &[(String, String)], reported: String) -> String {
    map.iter()
        .find(|(from, _)| *from == reported)
        .map_or(reported, |(_, to)| to.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_timeouts_are_rejected() {
        assert!(RedisLockConfig::default().validate().is_ok());
        for bad in [
            RedisLockConfig::default().request_timeout(Duration::ZERO),
            RedisLockConfig::default().connect_timeout(Duration::MAX),
            RedisLockConfig::default().max_recheck(Duration::MAX),
            RedisLockConfig::default().key_prefix("two words:"),
        ] {
            assert_eq!(
                bad.validate().unwrap_err().kind(),
                lock_core::LockErrorKind::InvalidArgument
            );
        }
    }
}
