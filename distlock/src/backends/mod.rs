//! One description per backend: how its URLs are written (scheme names,
//! servers, credentials, path, options), which cargo feature builds it in,
//! and how to connect to it. The URL parser, [`crate::Scheme`] and
//! [`crate::connect`] read these descriptions; adding a backend is a new
//! file here, one line in [`ALL`] and a variant of [`Scheme`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use lock_core::{LockError, LockErrorKind, LockService};

use crate::duration::format_duration;
use crate::scheme::Scheme;
use crate::url::LockUrl;

mod etcd;
mod memory;
mod options;
mod redis;
mod redis_cluster;
mod redis_sentinel;
mod redlock;
mod zk;

pub(crate) use options::{OptionKind, OptionSpec};

/// Every backend, in documentation order.
pub(crate) const ALL: [&Descriptor; 7] = [
    &memory::MEMORY,
    &redis::REDIS,
    &redis_sentinel::REDIS_SENTINEL,
    &redis_cluster::REDIS_CLUSTER,
    &redlock::REDLOCK,
    &etcd::ETCD,
    &zk::ZK,
];

/// A scheme's facts are its backend's description.
impl Scheme {
    /// The description of this backend: everything the facade knows of it.
    pub(crate) fn descriptor(self) -> &'static Descriptor {
        // `ALL` lists the backends in the order of `Scheme`'s variants
        // (checked by `every_backend_is_described_once`).
        ALL[self as usize]
    }

    /// The scheme as written in URLs (`zk` for ZooKeeper).
    pub fn as_str(self) -> &'static str {
        self.descriptor().names[0]
    }

    /// The cargo feature of `distlock` that builds this backend in
    /// (`None` for `memory`, which is always there).
    pub fn feature(self) -> Option<&'static str> {
        self.descriptor().feature
    }

    /// Whether this build of `distlock` has the backend.
    pub fn is_enabled(self) -> bool {
        self.descriptor().enabled
    }

    /// The port used when a host has none.
    pub fn default_port(self) -> Option<u16> {
        self.descriptor().default_port
    }

    /// The query options URLs of this scheme accept.
    pub fn options(self) -> Vec<&'static str> {
        self.descriptor().options.iter().map(|o| o.name).collect()
    }
}

/// What the facade knows of one backend.
pub(crate) struct Descriptor {
    /// The backend.
    pub(crate) scheme: Scheme,
    /// How URLs name it, lowercase: the canonical name first, then aliases.
    pub(crate) names: &'static [&'static str],
    /// Names that also turn TLS on (`rediss`).
    pub(crate) tls_names: &'static [&'static str],
    /// The cargo feature of `distlock` that builds it in (`None`: always).
    pub(crate) feature: Option<&'static str>,
    /// Whether this build has it.
    pub(crate) enabled: bool,
    /// The port of a host written without one.
    pub(crate) default_port: Option<u16>,
    /// How many servers a URL lists.
    pub(crate) servers: Servers,
    /// What a URL's `user:password@` may be.
    pub(crate) credentials: Credentials,
    /// The query options its URLs accept, in the order error messages list
    /// them.
    pub(crate) options: &'static [OptionSpec],
    /// Checks the URL's path (and options that go with it); the reason in
    /// words when it is wrong.
    pub(crate) check: fn(&LockUrl) -> Result<(), String>,
    /// Connects to the service a URL of this backend names (called only
    /// when the backend is enabled).
    pub(crate) connect: fn(&LockUrl) -> Connecting<'_>,
}

/// A backend's connect under way.
pub(crate) type Connecting<'a> = BoxFuture<'a, Result<Arc<dyn LockService>, LockError>>;

/// How many servers a backend's URL lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Servers {
    /// None: in-process (`memory://`), and no path either.
    None,
    /// Exactly one; `hint` follows the error of a URL with more.
    One {
        /// What to use for several servers, followed by the URL's hosts.
        hint: &'static str,
    },
    /// One or more.
    Many,
}

/// What a backend's URL may carry as `user:password@`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Credentials {
    /// Nothing.
    None,
    /// A user, a password, or both.
    Any,
    /// Both or nothing.
    Pair,
}

/// The error for a URL whose backend is not compiled in.
pub(crate) fn feature_disabled(url: &LockUrl) -> LockError {
    let scheme = url.scheme();
    let feature = scheme.feature().unwrap_or("?");
    LockError::invalid(format!(
        "{scheme}:// URLs need the {scheme} backend, which this build of distlock does not have: \
         enable the \"{feature}\" feature of distlock"
    ))
}

/// How much longer than its own connect timeout a backend may take before
/// [`crate::connect`] gives up on it: a safety net, so that no URL can make
/// `connect` hang.
const CONNECT_SLACK: Duration = Duration::from_secs(2);

/// Runs a backend's connect with a hard bound of its connect timeout plus
/// [`CONNECT_SLACK`], and hands the lock service out shared.
#[cfg_attr(
    not(any(
        feature = "redis",
        feature = "redlock",
        feature = "etcd",
        feature = "zk"
    )),
    allow(dead_code)
)]
async fn bounded<T: LockService + 'static>(
    url: &LockUrl,
    connect_timeout: Duration,
    fut: impl Future<Output = Result<T, LockError>>,
) -> Result<Arc<dyn LockService>, LockError> {
    match tokio::time::timeout(connect_timeout + CONNECT_SLACK, fut).await {
        Ok(result) => Ok(Arc::new(result?)),
        Err(_) => Err(LockError::new(
            LockErrorKind::Unavailable,
            format!(
                "could not connect to {url} within {} (connect_timeout {})",
                format_duration(connect_timeout + CONNECT_SLACK),
                format_duration(connect_timeout)
            ),
        )),
    }
}

/// The connect of a backend this build does not have.
#[cfg_attr(
    all(
        feature = "redis",
        feature = "redlock",
        feature = "etcd",
        feature = "zk"
    ),
    allow(dead_code)
)]
fn disabled(url: &LockUrl) -> Connecting<'_> {
    Box::pin(async move { Err(feature_disabled(url)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backend_is_described_once() {
        assert_eq!(ALL.len(), Scheme::ALL.len());
        for (i, d) in ALL.iter().enumerate() {
            assert_eq!(
                d.scheme,
                Scheme::ALL[i],
                "ALL is in the order of Scheme::ALL"
            );
            assert_eq!(
                d.scheme as usize, i,
                "Scheme::ALL is in the order of the variants"
            );
            assert_eq!(d.scheme.descriptor().scheme, d.scheme);
            assert_eq!(d.names[0], d.scheme.as_str());
            for other in &ALL[i + 1..] {
                assert_ne!(d.scheme, other.scheme);
                for name in d.names.iter().chain(d.tls_names) {
                    assert!(
                        !other.names.contains(name) && !other.tls_names.contains(name),
                        "{name} names two backends"
                    );
                }
            }
            let mut seen = std::collections::HashSet::new();
            for o in d.options {
                assert!(seen.insert(o.name), "{} lists {} twice", d.scheme, o.name);
            }
            assert_eq!(d.servers == Servers::None, d.default_port.is_none());
            assert_eq!(d.feature.is_none(), d.scheme == Scheme::Memory);
        }
    }
}
