//! The kinds of lock a name can be used as: a mutex, a read-write lock, a
//! semaphore, or a leader election.

use crate::error::Result;

/// The largest number of permits a semaphore may have: 100,000.
pub const MAX_PERMITS: u32 = 100_000;

/// Which kind of lease a request asks for. A name is used as one kind of
/// lock: a mutex, a read-write lock or a semaphore (the kinds keep their
/// state apart on the server and do not exclude each other).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockMode {
    /// A mutex: one holder at a time ([`crate::DistributedLock`]).
    Exclusive,
    /// The read side of a read-write lock: shared with other readers, never
    /// with a writer ([`crate::ReadWriteLock`]).
    Read,
    /// The write side of a read-write lock: alone.
    Write,
    /// One of `permits` permits of a semaphore ([`crate::Semaphore`]).
    Permit {
        /// How many holders the semaphore admits at once (1 ..= [`MAX_PERMITS`]).
        permits: u32,
    },
    /// A term of a leader election ([`crate::LeaderElection`]): one leader at
    /// a time, who publishes a value; the election of a name keeps its state
    /// apart from the mutex of that name.
    Leader,
}

impl LockMode {
    /// A short, stable, lowercase name (for logs and metrics labels).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exclusive => "exclusive",
            Self::Read => "read",
            Self::Write => "write",
            Self::Permit { .. } => "permit",
            Self::Leader => "leader",
        }
    }

    /// Checks the permit count of a semaphore mode.
    pub fn validate(self) -> Result<Self> {
        match self {
            Self::Permit { permits } if permits == 0 || permits > MAX_PERMITS => {
                Err(crate::LockError::invalid(format!(
                    "a semaphore needs 1 ..= {MAX_PERMITS} permits, not {permits}"
                )))
            }
            other => Ok(other),
        }
    }
}

impl std::fmt::Display for LockMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Permit { permits } => write!(f, "permit of {permits}"),
            other => f.write_str(other.as_str()),
        }
    }
}
