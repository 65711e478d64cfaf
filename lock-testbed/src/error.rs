//! The one error type of this crate.

use std::io;
use std::time::Duration;

/// Everything that can go wrong while starting, probing or faulting a server.
///
/// Every message says what happened and, where there is one, what to do about it
/// (which Debian package to install, which environment variable to set, which log to
/// read). Start-up failures carry the tail of the server's log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestbedError {
    /// A server binary, `java` or a ZooKeeper jar is missing.
    #[error(
        "{what} not found: install the Debian package `{package}` \
         (`cargo xtask test` installs it) or set {env} (looked at: {looked_at})"
    )]
    NotInstalled {
        /// What is missing, e.g. `redis-server` or `/usr/share/java/zookeeper.jar`.
        what: String,
        /// Where it was looked for (a path, or "on PATH").
        looked_at: String,
        /// The Debian package that provides it.
        package: &'static str,
        /// The environment variable that overrides the location.
        env: &'static str,
    },
    /// Spawning a server process failed.
    #[error("could not start {what}: {source}")]
    Spawn {
        /// Which server.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A server did not become ready in time, or exited during start-up.
    #[error("{what} not ready after {waited:?}: {detail}{}", log_section(.log_tail))]
    NotReady {
        /// Which server (name and address).
        what: String,
        /// How long it was waited for.
        waited: Duration,
        /// What the last readiness probe saw, or the exit status.
        detail: String,
        /// The last lines of the server's log.
        log_tail: String,
    },
    /// A fault or lifecycle method was called on a server started elsewhere.
    #[error(
        "{what} was started elsewhere (given by environment variable): `{operation}` \
         is not possible on it; start a server of your own for fault tests"
    )]
    External {
        /// Which server.
        what: String,
        /// The method that cannot be applied.
        operation: &'static str,
    },
    /// A fault method was called on a member that is not running (killed).
    #[error("{what} is not running (killed): `{operation}` needs it running; call restart first")]
    NotRunning {
        /// Which server.
        what: String,
        /// The method that was called.
        operation: &'static str,
    },
    /// A member index beyond the cluster size.
    #[error("member index {index} out of range: there are {members} members")]
    NoSuchMember {
        /// The index asked for.
        index: usize,
        /// The number of members.
        members: usize,
    },
    /// No leader could be found in time.
    #[error("no leader found in {what}: {detail}")]
    NoLeader {
        /// Which cluster.
        what: String,
        /// What the members answered.
        detail: String,
    },
    /// A network or file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A server answered something this crate could not understand, or refused a request.
    #[error("{context}: unexpected answer: {detail}")]
    Protocol {
        /// What was being done.
        context: String,
        /// What was received.
        detail: String,
    },
    /// An environment variable of this crate holds a value that cannot be used.
    #[error("environment variable {var}={value:?} cannot be used: {reason}")]
    BadEnv {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// Why it cannot be used.
        reason: String,
    },
}

impl TestbedError {
    /// True when the error is a read, write or connect timeout (for example a request
    /// to a paused server, or through a blackholed [`Proxy`](crate::Proxy)).
    pub fn is_timeout(&self) -> bool {
        matches!(self, TestbedError::Io { source, .. }
            if matches!(source.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock))
    }

    /// True when the error is a broken connection: refused, reset, aborted, a broken
    /// pipe, or the peer closing before the whole reply arrived.
    pub fn is_connection_error(&self) -> bool {
        matches!(self, TestbedError::Io { source, .. }
        if matches!(
            source.kind(),
            io::ErrorKind::ConnectionRefused
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::UnexpectedEof
                | io::ErrorKind::NotConnected
        ))
    }

    /// The underlying OS error, if there is one.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            TestbedError::Io { source, .. } | TestbedError::Spawn { source, .. } => Some(source),
            _ => None,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> TestbedError {
        TestbedError::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn protocol(context: impl Into<String>, detail: impl Into<String>) -> TestbedError {
        TestbedError::Protocol {
            context: context.into(),
            detail: detail.into(),
        }
    }
}

/// The "last lines of its log" part of [`TestbedError::NotReady`]'s message.
fn log_section(log_tail: &str) -> String {
    if log_tail.is_empty() {
        " (its log is empty)".to_string()
    } else {
        format!("\n--- last lines of its log ---\n{log_tail}")
    }
}
