//! Where a guard stands, and why a guard lost its lock.

use std::fmt;

use tokio::time::Instant;

use crate::clock::{self, SuspendMark};

/// Why a guard lost its lock.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossCause {
    /// Its validity passed without a successful renewal (server unreachable,
    /// process paused, keep-alive off).
    Expired,
    /// The server says the lock is no longer ours: the key or node was deleted,
    /// or another owner holds it.
    NotOwner,
    /// The session (ZooKeeper) or lease (etcd) behind the lock expired.
    SessionExpired,
}

impl fmt::Display for LossCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Expired => "validity expired without renewal",
            Self::NotOwner => "the lock was deleted or taken over on the server",
            Self::SessionExpired => "the session or lease expired",
        })
    }
}

impl LossCause {
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::NotOwner => "not_owner",
            Self::SessionExpired => "session_expired",
        }
    }
}

/// Where a guard stands. States only move forward: held <-> suspended -> lost,
/// or -> released.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GuardState {
    /// Held, and confirmed by the server, until `valid_until`.
    Held {
        /// End of validity (monotonic, drift-adjusted).
        valid_until: Instant,
    },
    /// The last renewal failed or the connection is down; the lock is still
    /// ours until `valid_until` unless the server says otherwise. Stop doing
    /// anything that cannot be undone until it is held again.
    Suspended {
        /// End of validity (monotonic, drift-adjusted).
        valid_until: Instant,
        /// Why, in words.
        reason: String,
    },
    /// The lock is gone; others may hold it now.
    Lost {
        /// Why.
        cause: LossCause,
    },
    /// Released by its owner.
    Released,
}

impl GuardState {
    /// `valid_until` of a held or suspended guard.
    pub fn valid_until(&self) -> Option<Instant> {
        match self {
            Self::Held { valid_until } | Self::Suspended { valid_until, .. } => Some(*valid_until),
            _ => None,
        }
    }

    /// Moves the validity earlier by the time the machine spent suspended
    /// since `mark`.
    pub(crate) fn corrected(self, mark: SuspendMark) -> Self {
        match self {
            Self::Held { valid_until } => Self::Held {
                valid_until: clock::corrected(valid_until, mark),
            },
            Self::Suspended {
                valid_until,
                reason,
            } => Self::Suspended {
                valid_until: clock::corrected(valid_until, mark),
                reason,
            },
            other => other,
        }
    }

    /// Applies the rule that a guard is never held past its validity.
    pub(crate) fn at(self, now: Instant) -> Self {
        match self.valid_until() {
            Some(v) if now >= v => Self::Lost {
                cause: LossCause::Expired,
            },
            _ => self,
        }
    }
}
