//! The query options of lock service URLs: what each takes, and the ones
//! several backends share.

/// What kind of value an option takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OptionKind {
    /// A positive duration (`500ms`, `2s`).
    Duration,
    /// A non-negative integer.
    Count,
    /// A non-negative integer or `none`.
    CountOrNone,
    /// Any text (percent-decoded).
    Text,
    /// `true` or `false`.
    Bool,
}

/// One query option.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OptionSpec {
    /// Its name in the query.
    pub(crate) name: &'static str,
    /// The value it takes.
    pub(crate) kind: OptionKind,
}

/// An option named `name` taking `kind`.
pub(crate) const fn option(name: &'static str, kind: OptionKind) -> OptionSpec {
    OptionSpec { name, kind }
}

/// How long connecting may take.
pub(crate) const CONNECT_TIMEOUT: OptionSpec = option("connect_timeout", OptionKind::Duration);
/// How long one request may take.
pub(crate) const REQUEST_TIMEOUT: OptionSpec = option("request_timeout", OptionKind::Duration);
/// The prefix of every key.
pub(crate) const PREFIX: OptionSpec = option("prefix", OptionKind::Text);
/// Refuse a Redis whose eviction policy could drop a lock.
pub(crate) const REQUIRE_NOEVICTION: OptionSpec = option("require_noeviction", OptionKind::Bool);
/// TLS on or off.
pub(crate) const TLS: OptionSpec = option("tls", OptionKind::Bool);
/// The CA file that checks the servers (turns TLS on).
pub(crate) const CA: OptionSpec = option("ca", OptionKind::Text);
/// The client certificate file (mutual TLS).
pub(crate) const CERT: OptionSpec = option("cert", OptionKind::Text);
/// The client key file (mutual TLS).
pub(crate) const KEY: OptionSpec = option("key", OptionKind::Text);
/// How many replicas must confirm an acquisition (`WAIT`).
pub(crate) const SYNC_REPLICAS: OptionSpec = option("sync_replicas", OptionKind::Count);
/// How long to wait for them.
pub(crate) const SYNC_TIMEOUT: OptionSpec = option("sync_timeout", OptionKind::Duration);
