//! What followers see of a leader: [`LeaderInfo`], and the limit on a
//! published value.

use std::time::SystemTime;

use crate::error::{LockError, Result};
use crate::fencing::FencingToken;

/// The longest value a leader may publish, in bytes: 64 KiB (an address,
/// a JSON description; etcd and ZooKeeper keep values up to about 1 MiB,
/// but every follower reads it on every change).
pub const MAX_LEADER_VALUE_LEN: usize = 64 * 1024;

/// The leader of an election, as the server shows it to everyone.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// What the leader published (at its campaign, or its last proclaim).
    pub value: String,
    /// The epoch of its term: the fencing token of the term, strictly above
    /// every earlier term's on this election (`None` on backends without
    /// fencing tokens: Redlock).
    pub epoch: Option<FencingToken>,
    /// When the term started, by the server's or the leader's wall clock,
    /// where the backend records it (`None` where it does not: etcd keeps
    /// no time with a key).
    pub since: Option<SystemTime>,
}

impl LeaderInfo {
    /// A leader that published `value` in the term `epoch`.
    pub fn new(value: impl Into<String>, epoch: Option<FencingToken>) -> Self {
        Self {
            value: value.into(),
            epoch,
            since: None,
        }
    }

    /// Sets when the term started (see [`LeaderInfo::since`]).
    pub fn with_since(mut self, since: SystemTime) -> Self {
        self.since = Some(since);
        self
    }
}

/// Checks a value a leader publishes: at most [`MAX_LEADER_VALUE_LEN`]
/// bytes.
pub(crate) fn check_value(value: String) -> Result<String> {
    if value.len() > MAX_LEADER_VALUE_LEN {
        return Err(LockError::invalid(format!(
            "a leader's value is {} bytes; the maximum is {MAX_LEADER_VALUE_LEN}",
            value.len()
        )));
    }
    Ok(value)
}
