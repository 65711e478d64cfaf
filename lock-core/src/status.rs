//! What a backend can tell about a lock without taking it, and what a force
//! release removed.

use std::time::Duration;

use crate::fencing::FencingToken;
use crate::holder::Holder;

/// What a backend can tell about a lock without taking it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// Whether someone holds it now.
    pub held: bool,
    /// The holder's fencing token where the backend can tell it; on Redis it
    /// is the last token issued, which is the holder's only while the holder
    /// is one of our clients (a foreign client such as redis-py does not
    /// advance the counter).
    pub token: Option<FencingToken>,
    /// The remaining server-side TTL, where known.
    pub ttl_remaining: Option<Duration>,
    /// The number of waiters, where known (etcd, ZooKeeper contender keys).
    pub waiters: Option<usize>,
    /// An identifier of the holder where the backend has one (the etcd
    /// lease id, the ZooKeeper session id of the holder's node), for operators.
    pub owner: Option<String>,
    /// Who holds it, as the holder described itself at acquire (host,
    /// process id, note), where the backend stores it and the holder was
    /// a distlock client; `None` otherwise (another client's entry, or one
    /// whose stored text cannot be read).
    pub holder: Option<Holder>,
}

impl LockStatus {
    /// A status that says only whether the lock is held.
    pub fn new(held: bool) -> Self {
        Self {
            held,
            ..Self::default()
        }
    }

    /// Sets the token.
    pub fn with_token(mut self, token: Option<FencingToken>) -> Self {
        self.token = token;
        self
    }

    /// Sets the remaining TTL.
    pub fn with_ttl_remaining(mut self, ttl: Option<Duration>) -> Self {
        self.ttl_remaining = ttl;
        self
    }

    /// Sets the number of waiters.
    pub fn with_waiters(mut self, waiters: Option<usize>) -> Self {
        self.waiters = waiters;
        self
    }

    /// Sets the holder's identifier.
    pub fn with_owner(mut self, owner: Option<String>) -> Self {
        self.owner = owner;
        self
    }

    /// Sets the holder's description.
    pub fn with_holder(mut self, holder: Option<Holder>) -> Self {
        self.holder = holder;
        self
    }
}

/// What a force release removed from one lock name: how many holders of each
/// kind of lock (a name's mutex, read-write lock and semaphore are kept apart,
/// see [`crate::LockMode`]). All zero when nobody held the name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForceReleased {
    /// The mutex's holder removed (0 or 1).
    pub mutex: usize,
    /// The read-write lock's holders removed (readers, or one writer).
    pub read_write: usize,
    /// The semaphore's permits removed (one per holder).
    pub permits: usize,
}

impl ForceReleased {
    /// Nothing removed.
    pub fn none() -> Self {
        Self::default()
    }

    /// Sets the number of mutex holders removed.
    pub fn with_mutex(mut self, n: usize) -> Self {
        self.mutex = n;
        self
    }

    /// Sets the number of read-write lock holders removed.
    pub fn with_read_write(mut self, n: usize) -> Self {
        self.read_write = n;
        self
    }

    /// Sets the number of semaphore permits removed.
    pub fn with_permits(mut self, n: usize) -> Self {
        self.permits = n;
        self
    }

    /// Every holder removed, of any kind.
    pub fn total(&self) -> usize {
        self.mutex
            .saturating_add(self.read_write)
            .saturating_add(self.permits)
    }

    /// Whether anyone was removed.
    pub fn removed_any(&self) -> bool {
        self.total() > 0
    }
}

impl std::fmt::Display for ForceReleased {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.removed_any() {
            return f.write_str("nothing held");
        }
        let mut parts = Vec::new();
        if self.mutex > 0 {
            parts.push("the mutex holder".to_string());
        }
        if self.read_write > 0 {
            parts.push(format!("{} read-write holder(s)", self.read_write));
        }
        if self.permits > 0 {
            parts.push(format!("{} semaphore permit(s)", self.permits));
        }
        write!(f, "removed {}", parts.join(", "))
    }
}
