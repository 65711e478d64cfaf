//! The one error type of distlock: [`LockError`] with a [`LockErrorKind`].

use std::borrow::Cow;
use std::fmt;

/// What went wrong, in terms a caller can act on. Every backend maps its client
/// errors into these kinds in one place; no client crate's error type leaks out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockErrorKind {
    /// Bad input: an invalid lock name, a zero or oversized TTL, an invalid
    /// configuration. Retrying the same call fails again.
    InvalidArgument,
    /// The wait elapsed before the lock could be acquired (it is held by others).
    Timeout,
    /// The server (or too many Redlock nodes) could not be reached or did not
    /// answer in time. Retrying later may succeed.
    Unavailable,
    /// The lock was lost while it was needed: its validity passed without a
    /// renewal, it was deleted or taken over, or the session or lease expired.
    Lost,
    /// The operation needs a held lock, but the guard was already released.
    NotHeld,
    /// Credentials were rejected by the server.
    Unauthorized,
    /// The server answered something this library does not understand.
    Protocol,
    /// The backend cannot offer this primitive honestly (e.g. a read-write
    /// lock or a semaphore on Redlock); see [`crate::Capabilities`].
    Unsupported,
    /// The call would wait for itself forever (upgrading a read guard to a
    /// write guard: two readers upgrading at once wait for each other).
    WouldDeadlock,
    /// A bug or an unexpected internal condition (a panicked background task, ...).
    Internal,
}

impl LockErrorKind {
    /// A short, stable, lowercase name of the kind (used in metrics labels).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidArgument => "invalid_argument",
            Self::Timeout => "timeout",
            Self::Unavailable => "unavailable",
            Self::Lost => "lost",
            Self::NotHeld => "not_held",
            Self::Unauthorized => "unauthorized",
            Self::Protocol => "protocol",
            Self::Unsupported => "unsupported",
            Self::WouldDeadlock => "would_deadlock",
            Self::Internal => "internal",
        }
    }
}

impl fmt::Display for LockErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why one node of a multi-node backend (Redlock) did not grant or confirm a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeFailureReason {
    /// The lock is held by someone else on that node.
    Taken,
    /// The node did not answer within its per-node timeout.
    TimedOut,
    /// The node could not be connected to, or the connection broke.
    Unreachable,
    /// The node answered with an error.
    Error,
}

impl fmt::Display for NodeFailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Taken => "taken",
            Self::TimedOut => "timed out",
            Self::Unreachable => "unreachable",
            Self::Error => "error",
        })
    }
}

/// One node's part in a failed multi-node operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFailure {
    /// The node's address as configured (e.g. `127.0.0.1:6379`).
    pub node: String,
    /// Why it failed.
    pub reason: NodeFailureReason,
    /// The server's or client's own words, if any.
    pub detail: String,
}

impl fmt::Display for NodeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.node, self.reason)?;
        if !self.detail.is_empty() {
            write!(f, " ({})", self.detail)?;
        }
        Ok(())
    }
}

/// The error of every fallible distlock operation.
///
/// Match on [`LockError::kind`]; use [`LockError::is_retryable`] to decide
/// whether trying again later can help.
#[derive(Debug)]
pub struct LockError {
    kind: LockErrorKind,
    message: Cow<'static, str>,
    nodes: Vec<NodeFailure>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl LockError {
    /// A new error of `kind` with a human-readable message.
    pub fn new(kind: LockErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            kind,
            message: message.into(),
            nodes: Vec::new(),
            source: None,
        }
    }

    /// Shorthand for an [`LockErrorKind::InvalidArgument`] error.
    pub fn invalid(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(LockErrorKind::InvalidArgument, message)
    }

    /// Shorthand for an [`LockErrorKind::Unavailable`] error.
    pub fn unavailable(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(LockErrorKind::Unavailable, message)
    }

    /// Attaches the underlying cause (a client crate's error, an I/O error, ...).
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// Attaches the per-node failures of a multi-node operation.
    pub fn with_nodes(mut self, nodes: Vec<NodeFailure>) -> Self {
        self.nodes = nodes;
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> LockErrorKind {
        self.kind
    }

    /// The message, without the source chain.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Per-node failures, for multi-node backends (empty otherwise).
    pub fn nodes(&self) -> &[NodeFailure] {
        &self.nodes
    }

    /// Whether the same call may succeed if tried again later: true for
    /// [`Timeout`](LockErrorKind::Timeout), [`Unavailable`](LockErrorKind::Unavailable)
    /// and [`Lost`](LockErrorKind::Lost).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            LockErrorKind::Timeout | LockErrorKind::Unavailable | LockErrorKind::Lost
        )
    }
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)?;
        if !self.nodes.is_empty() {
            f.write_str(" [")?;
            for (i, n) in self.nodes.iter().enumerate() {
                if i > 0 {
                    f.write_str("; ")?;
                }
                write!(f, "{n}")?;
            }
            f.write_str("]")?;
        }
        if let Some(src) = &self.source {
            write!(f, ": {src}")?;
        }
        Ok(())
    }
}

impl std::error::Error for LockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// The result type of distlock operations.
pub type Result<T, E = LockError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_nodes_and_source() {
        let err = LockError::unavailable("no quorum")
            .with_nodes(vec![NodeFailure {
                node: "127.0.0.1:1".into(),
                reason: NodeFailureReason::TimedOut,
                detail: String::new(),
            }])
            .with_source(std::io::Error::other("boom"));
        assert_eq!(
            err.to_string(),
            "unavailable: no quorum [127.0.0.1:1: timed out]: boom"
        );
        assert!(err.is_retryable());
        assert!(!LockError::invalid("x").is_retryable());
    }
}
