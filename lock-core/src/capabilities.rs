//! What a backend guarantees, so callers (and the conformance suite) can tell.

/// Whether and how a backend hands out fencing tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fencing {
    /// No fencing token (`LockGuard::fencing_token()` is `None`). Redlock: its
    /// independent nodes cannot agree on a counter.
    None,
    /// Strictly increasing tokens, kept across server restarts and failovers
    /// (etcd revisions, ZooKeeper zxids: replicated, durable state).
    Durable,
    /// Strictly increasing tokens while the server keeps its data; a restart
    /// without persistence or a failover to an asynchronous replica can reset
    /// the counter (a plain Redis counter: durable only with `appendonly yes`
    /// and `appendfsync always`; `lock-redis` puts a clock floor under its
    /// counter and reports [`Fencing::ServerClock`]).
    RequiresPersistence,
    /// Strictly increasing as long as the server's wall clock never steps
    /// back: each token is at least the server's clock in microseconds, so
    /// tokens keep increasing across restarts without persistence, snapshot
    /// reloads, lost AOF writes and failovers to a replica whose clock agrees
    /// (single Redis). A clock stepped back by more than the time the lock
    /// state was lost can repeat tokens.
    ServerClock,
    /// Strictly increasing within this process only (the in-memory backend).
    InProcess,
}

impl Fencing {
    /// Whether guards carry a token at all.
    pub fn has_tokens(self) -> bool {
        !matches!(self, Fencing::None)
    }
}

/// The guarantees of one backend. Fields are public for reading; backends build
/// it with [`Capabilities::new`] and the `with_*` methods.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// The backend's short name (`memory`, `redis`, `redlock`, `etcd`, `zookeeper`).
    pub backend: &'static str,
    /// Fencing tokens and their durability.
    pub fencing: Fencing,
    /// Waiters get the lock in the order they started waiting.
    pub fifo: bool,
    /// The server pushes events (key deleted, session expired) that mark a
    /// guard lost before its next renewal would notice.
    pub loss_events: bool,
    /// Waiting is woken by the server (notification, watch) rather than polled.
    pub notified_wait: bool,
    /// The backend talks to a server over the network (so it can be unreachable).
    pub remote: bool,
    /// How many server failures the backend tolerates while keeping locks safe,
    /// in words (e.g. "none", "a minority of 2N+1 members").
    pub fault_tolerance: &'static str,
    /// Read-write locks ([`crate::ReadWriteLock`]) are offered.
    pub read_write: bool,
    /// Semaphores ([`crate::Semaphore`]) are offered.
    pub semaphore: bool,
    /// The holder of a mutex describes itself at acquire (host, process
    /// id, note: [`crate::Holder`]) and `inspect` and `list` show it
    /// ([`crate::LockStatus::holder`]).
    pub describes_holder: bool,
    /// Leader elections ([`crate::LeaderElection`]) are offered: campaign,
    /// proclaim, resign, and followers' `leader` and `observe`.
    pub election: bool,
}

impl Capabilities {
    /// The capabilities of a backend named `backend` that promises nothing yet.
    pub fn new(backend: &'static str) -> Self {
        Self {
            backend,
            fencing: Fencing::None,
            fifo: false,
            loss_events: false,
            notified_wait: false,
            remote: false,
            fault_tolerance: "none",
            read_write: false,
            semaphore: false,
            describes_holder: false,
            election: false,
        }
    }

    /// Sets [`Capabilities::fencing`].
    pub fn with_fencing(mut self, fencing: Fencing) -> Self {
        self.fencing = fencing;
        self
    }

    /// Sets [`Capabilities::fifo`].
    pub fn with_fifo(mut self, fifo: bool) -> Self {
        self.fifo = fifo;
        self
    }

    /// Sets [`Capabilities::loss_events`].
    pub fn with_loss_events(mut self, on: bool) -> Self {
        self.loss_events = on;
        self
    }

    /// Sets [`Capabilities::notified_wait`].
    pub fn with_notified_wait(mut self, on: bool) -> Self {
        self.notified_wait = on;
        self
    }

    /// Sets [`Capabilities::remote`].
    pub fn with_remote(mut self, on: bool) -> Self {
        self.remote = on;
        self
    }

    /// Sets [`Capabilities::read_write`].
    pub fn with_read_write(mut self, on: bool) -> Self {
        self.read_write = on;
        self
    }

    /// Sets [`Capabilities::semaphore`].
    pub fn with_semaphore(mut self, on: bool) -> Self {
        self.semaphore = on;
        self
    }

    /// Sets [`Capabilities::describes_holder`].
    pub fn with_describes_holder(mut self, on: bool) -> Self {
        self.describes_holder = on;
        self
    }

    /// Sets [`Capabilities::election`].
    pub fn with_election(mut self, on: bool) -> Self {
        self.election = on;
        self
    }

    /// Sets [`Capabilities::fault_tolerance`].
    pub fn with_fault_tolerance(mut self, words: &'static str) -> Self {
        self.fault_tolerance = words;
        self
    }
}
