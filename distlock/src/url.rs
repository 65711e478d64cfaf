//! Lock service URLs: `memory://`, `redis://`, `redlock://`, `etcd://`, `zk://`.
//!
//! Parsing is independent of the enabled features: a URL of a backend whose
//! feature is off parses fine, and [`LockUrl::connect`] then says which
//! feature to enable. The parser is in `parse.rs`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use lock_core::LockError;

use crate::duration::parse_duration;
pub use crate::scheme::Scheme;

/// One server address of a URL.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// Host name or IP address (an IPv6 address without its brackets).
    pub host: String,
    /// Port (the scheme's default when the URL has none).
    pub port: u16,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// A parsed lock service URL.
///
/// Grammar (see the crate docs for every option):
///
/// ```text
/// memory://
/// redis://[[user]:password@]host[:port][/db][?options]
/// redlock://[[user]:password@]host[:port],host[:port],...[/db][?options]
/// etcd://[user:password@]host[:port][,host[:port]...][/prefix][?options]
/// zk://[user:password@]host[:port][,host[:port]...][/base][?options]
/// options = name=value[&name=value...]   (values percent-decoded)
/// ```
///
/// ```
/// use distlock::{LockUrl, Scheme};
/// let url: LockUrl = "etcd://127.0.0.1,127.0.0.2:2479/jobs?lease_ttl=5s".parse().unwrap();
/// assert_eq!(url.scheme(), Scheme::Etcd);
/// assert_eq!(url.endpoints().len(), 2);
/// assert_eq!(url.endpoints()[0].to_string(), "127.0.0.1:2379");
/// assert_eq!(url.option("lease_ttl"), Some("5s"));
/// assert!("redis://h:notaport".parse::<LockUrl>().is_err());
/// ```
///
/// Its `Display` and `Debug` hide the password.
#[derive(Clone, PartialEq, Eq)]
pub struct LockUrl {
    // Filled in by the parser (`parse.rs`).
    pub(crate) scheme: Scheme,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) endpoints: Vec<Endpoint>,
    /// The decoded path, `""` when the URL has none.
    pub(crate) path: String,
    pub(crate) options: BTreeMap<String, String>,
}

impl LockUrl {
    /// The backend.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The servers, in URL order (empty for `memory://`).
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// The user name, percent-decoded, if any.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// Whether the URL carries a password (it is never shown).
    pub fn has_password(&self) -> bool {
        self.password.is_some()
    }

    /// The percent-decoded path (`""` when absent).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The value of query option `name`, percent-decoded, if given.
    pub fn option(&self, name: &str) -> Option<&str> {
        self.options.get(name).map(String::as_str)
    }

    /// The password, if any: for the backends' configurations only (it is
    /// never shown).
    #[cfg_attr(
        not(any(
            feature = "redis",
            feature = "redlock",
            feature = "etcd",
            feature = "zk"
        )),
        allow(dead_code)
    )]
    pub(crate) fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// A duration option (already validated by [`LockUrl::parse`]).
    #[cfg_attr(
        not(any(
            feature = "redis",
            feature = "redlock",
            feature = "etcd",
            feature = "zk"
        )),
        allow(dead_code)
    )]
    pub(crate) fn duration(&self, name: &str) -> Option<Duration> {
        self.option(name).and_then(|v| parse_duration(v).ok())
    }

    /// The URL without its password, for messages and logs.
    pub fn redacted(&self) -> String {
        self.to_string()
    }
}
impl fmt::Display for LockUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme)?;
        if self.user.is_some() || self.password.is_some() {
            if let Some(user) = &self.user {
                f.write_str(&encode_component(user))?;
            }
            if self.password.is_some() {
                f.write_str(":***")?;
            }
            f.write_str("@")?;
        }
        for (i, e) in self.endpoints.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{e}")?;
        }
        f.write_str(&self.path)?;
        for (i, (k, v)) in self.options.iter().enumerate() {
            write!(
                f,
                "{}{k}={}",
                if i == 0 { '?' } else { '&' },
                percent_encode(v)
            )?;
        }
        Ok(())
    }
}

impl fmt::Debug for LockUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LockUrl").field(&self.to_string()).finish()
    }
}
/// Encodes everything but the unreserved characters (for userinfo).
pub(crate) fn encode_component(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Encodes everything but unreserved characters and `/` `:` (for query values).
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/' | b':') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl LockUrl {
    /// The TLS settings of the URL: `Some` when `tls=true`, the scheme is
    /// `rediss`, or a CA is given (`ca`, and `cert`/`key` for mutual TLS).
    pub fn tls(&self) -> Option<lock_core::TlsConfig> {
        let on = self.option("tls") == Some("true")
            || (self.option("tls").is_none() && self.option("ca").is_some());
        if !on {
            return None;
        }
        let mut tls = lock_core::TlsConfig::new();
        if let Some(ca) = self.option("ca") {
            tls = tls.ca(ca);
        }
        if let Some(cert) = self.option("cert") {
            tls = tls.cert(cert);
        }
        if let Some(key) = self.option("key") {
            tls = tls.key(key);
        }
        Some(tls)
    }

    #[cfg_attr(
        not(any(
            feature = "redis",
            feature = "redlock",
            feature = "etcd",
            feature = "zk"
        )),
        allow(dead_code)
    )]
    /// Fails unless this is a URL of `scheme` (for the configurations of
    /// one backend).
    pub(crate) fn expect(&self, scheme: Scheme) -> Result<(), LockError> {
        if self.scheme == scheme {
            Ok(())
        } else {
            Err(LockError::invalid(format!(
                "{} is a {}:// URL, not a {scheme}:// one",
                self.redacted(),
                self.scheme
            )))
        }
    }
}
