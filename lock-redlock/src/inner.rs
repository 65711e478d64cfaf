//! What every clone of a [`RedlockLock`](crate::RedlockLock) shares: the
//! nodes, the quorum, the configuration, the scripts and the notifier, and
//! the values every part of the backend derives from them.

use std::sync::Arc;
use std::time::Duration;

use lock_core::LockName;
use lock_redis::kit::notify::Notifier;
use lock_redis::kit::scripts::Scripts;

use crate::config::RedlockConfig;
use crate::node::{NameKeys, Node};

/// The nodes and what the client's rounds, waits and leases on them share.
pub(crate) struct Inner {
    /// One per configured node, in configuration order.
    pub(crate) nodes: Vec<Node>,
    /// How many nodes must agree: `N / 2 + 1`.
    pub(crate) quorum: usize,
    pub(crate) config: RedlockConfig,
    pub(crate) scripts: Scripts,
    /// Wakes the waiters on a release or on their turn in line.
    pub(crate) notifier: Notifier,
}

impl Inner {
    /// The keys of lock `name` on every node (the prefix plus the name).
    pub(crate) fn keys(&self, name: &LockName) -> Arc<NameKeys> {
        NameKeys::of(format!("{}{}", self.config.key_prefix, name.as_str()).into())
    }

    /// Every node's index, for a request to all of them.
    pub(crate) fn all(&self) -> std::ops::Range<usize> {
        0..self.nodes.len()
    }

    /// How long a request that must reach its node (a release, an
    /// extension) may keep trying in the background after the caller has
    /// stopped waiting for it.
    pub(crate) fn background_bound(&self) -> Duration {
        self.config.connect_timeout.max(self.config.node_timeout)
    }
}
