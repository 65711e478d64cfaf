//! The configuration of an [`crate::EtcdLock`] client.

use std::fmt;
use std::time::Duration;

use lock_core::{check_duration, LockError, TlsConfig, MAX_TTL};

/// How to reach etcd and how long the client's session lease lives.
///
/// ```
/// use std::time::Duration;
/// use lock_etcd::EtcdConfig;
///
/// let config = EtcdConfig::new(["127.0.0.1:2379", "127.0.0.1:22379"])
///     .key_prefix("locks/")
///     .lease_ttl(Duration::from_millis(2500)) // rounded up to 3 s
///     .request_timeout(Duration::from_secs(2));
/// assert_eq!(config.lease_ttl_secs(), 3);
/// assert!(config.validate().is_ok());
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EtcdConfig {
    /// Client endpoints, `host:port` or `http://host:port`. Required, no default.
    /// The client talks to one endpoint at a time and moves to the next one
    /// when a request or stream fails or times out.
    pub endpoints: Vec<String>,
    /// Prepended to every lock name to form the etcd key prefix. Default: empty,
    /// so lock `NAME` uses keys `NAME/<lease id in hex>` exactly like etcd's own
    /// `concurrency.Mutex`, its Lock RPC and `etcdctl lock NAME`. With a prefix
    /// `P`, a Go service must lock `P + NAME` to exclude with us.
    pub key_prefix: String,
    /// TTL of the client's session lease: how long the server keeps the locks of
    /// a client that stopped keeping its session alive (crash, partition,
    /// pause). Default: 10 s. etcd leases are whole seconds: a fraction is
    /// rounded UP (2.5 s -> 3 s). With etcd's default `--election-timeout=1000`
    /// the server raises anything below about 2 s to its minimum (ceil(1.5 x
    /// election timeout)); the TTL the server granted is the one used.
    pub lease_ttl: Duration,
    /// Bound on establishing the client: connecting and granting the first
    /// session lease in [`crate::EtcdLock::connect`], in all. Default: 2 s.
    pub connect_timeout: Duration,
    /// Bound on every call, fail-over included: a request that fails or gets
    /// no answer on one endpoint moves on to the next within the same bound
    /// (an endpoint that failed is passed over for a backoff of its own), so
    /// a waiting acquire returns within its wait plus this. Also the bound on
    /// opening a watch or keep-alive stream; the session's guards are
    /// suspended while a keep-alive stays unanswered for
    /// `min(request_timeout, lease TTL / 3)`. Default: 2 s.
    pub request_timeout: Duration,
    /// User name for etcd authentication. Default: none (no authentication).
    pub user: Option<String>,
    /// Password for [`EtcdConfig::user`]. Default: none.
    pub password: Option<String>,
    /// TLS to every endpoint (https): the CA to trust (default: the
    /// system's roots) and a client certificate and key for mutual TLS.
    /// Default: none (plain http).
    pub tls: Option<TlsConfig>,
}

impl fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("key_prefix", &self.key_prefix)
            .field("lease_ttl", &self.lease_ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .finish()
    }
}

/// Default session lease TTL.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);
/// Default connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default request timeout.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest connect or request timeout accepted: one hour.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

impl EtcdConfig {
    /// A configuration for `endpoints` with every other field at its default.
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            key_prefix: String::new(),
            lease_ttl: DEFAULT_LEASE_TTL,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            user: None,
            password: None,
            tls: None,
        }
    }

    /// Sets [`EtcdConfig::tls`]: TLS on, with these files.
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sets [`EtcdConfig::key_prefix`].
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Sets [`EtcdConfig::lease_ttl`] (rounded up to whole seconds when used).
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// Sets [`EtcdConfig::connect_timeout`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`EtcdConfig::request_timeout`].
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets [`EtcdConfig::user`] and [`EtcdConfig::password`].
    pub fn user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self.password = Some(password.into());
        self
    }

    /// The session lease TTL in whole seconds, rounded up (at least 1).
    pub fn lease_ttl_secs(&self) -> i64 {
        let whole = self.lease_ttl.as_secs() + u64::from(self.lease_ttl.subsec_nanos() > 0);
        i64::try_from(whole.max(1)).unwrap_or(i64::MAX)
    }

    /// Checks the configuration; [`lock_core::LockErrorKind::InvalidArgument`] if
    /// something is off.
    pub fn validate(&self) -> Result<(), LockError> {
        if self.endpoints.is_empty() {
            return Err(LockError::invalid("etcd config: no endpoints"));
        }
        if let Some(bad) = self
            .endpoints
            .iter()
            .find(|e| e.trim().is_empty() || e.contains(char::is_whitespace))
        {
            return Err(LockError::invalid(format!(
                "etcd config: invalid endpoint {bad:?}"
            )));
        }
        let ms = Duration::from_millis(1);
        check_duration("etcd config: lease_ttl", self.lease_ttl, ms, MAX_TTL)?;
        check_duration(
            "etcd config: connect_timeout",
            self.connect_timeout,
            ms,
            MAX_TIMEOUT,
        )?;
        check_duration(
            "etcd config: request_timeout",
            self.request_timeout,
            ms,
            MAX_TIMEOUT,
        )?;
        if self.user.is_some() != self.password.is_some() {
            return Err(LockError::invalid(
                "etcd config: user and password go together",
            ));
        }
        if let Some(tls) = &self.tls {
            tls.validate()?;
        }
        if self
            .key_prefix
            .chars()
            .any(|c| c.is_control() || c.is_whitespace())
        {
            return Err(LockError::invalid(
                "etcd config: key_prefix contains whitespace or control characters",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::LockErrorKind;

    #[test]
    fn lease_ttl_rounds_up_to_whole_seconds() {
        let c = |ms| EtcdConfig::new(["a:1"]).lease_ttl(Duration::from_millis(ms));
        assert_eq!(c(1).lease_ttl_secs(), 1);
        assert_eq!(c(1000).lease_ttl_secs(), 1);
        assert_eq!(c(1001).lease_ttl_secs(), 2);
        assert_eq!(c(2500).lease_ttl_secs(), 3);
        assert_eq!(EtcdConfig::new(["a:1"]).lease_ttl_secs(), 10);
    }

    #[test]
    fn validation_catches_bad_configs() {
        let ok = EtcdConfig::new(["127.0.0.1:2379"]);
        assert!(ok.validate().is_ok());
        for bad in [
            EtcdConfig::new(Vec::<String>::new()),
            EtcdConfig::new([""]),
            ok.clone().lease_ttl(Duration::ZERO),
            ok.clone().lease_ttl(MAX_TTL + Duration::from_secs(1)),
            ok.clone().request_timeout(Duration::ZERO),
            ok.clone().connect_timeout(Duration::ZERO),
            EtcdConfig {
                user: Some("u".into()),
                ..ok.clone()
            },
            ok.clone().key_prefix("a\nb"),
            ok.clone().key_prefix("a b"),
            ok.clone().request_timeout(Duration::MAX),
        ] {
            assert_eq!(
                bad.validate().unwrap_err().kind(),
                LockErrorKind::InvalidArgument,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn debug_redacts_password() {
        let c = EtcdConfig::new(["a:1"]).user("root", "hunter2");
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
