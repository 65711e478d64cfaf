//! How long and how large a run is: the quick and the full profile, and the
//! profile in words for the report.

use std::time::Duration;

/// Sizes and durations of a run.
#[derive(Clone, Debug)]
pub struct Profile {
    /// Concurrent tasks of the uncontended runs.
    pub levels: Vec<usize>,
    /// Tasks sharing one backend client.
    pub tasks_per_client: usize,
    /// Measured loop of one uncontended run (all rounds together).
    pub uncontended: Duration,
    /// The uncontended loop is split into this many rounds, the subjects of a
    /// backend taking turns, so that a load change on the machine does not
    /// favour one of them.
    pub rounds: u32,
    /// Unmeasured cycles per task first.
    pub warmup: usize,
    /// Unmeasured rounds first at every level, the subjects taking turns as
    /// in the measured ones: the servers warm up (ZooKeeper's JVM compiles
    /// its hot paths over the first seconds of load) for every subject, so
    /// the subject that happens to run first is not measured on a cold
    /// server.
    pub warmup_rounds: u32,
    /// Clients on the one contended name.
    pub contenders: usize,
    /// Measured loop of one contended run.
    pub contended: Duration,
    /// The longest one contended acquire may wait.
    pub wait: Duration,
    /// Lease TTL of the uncontended and contended runs.
    pub ttl: Duration,
    /// Lease TTL of the keep-alive runs (renewed every TTL/3).
    pub ka_ttl: Duration,
    /// Guards held at once, one run each.
    pub ka_guards: Vec<usize>,
    /// Backend clients (sessions) holding them.
    pub ka_sessions: usize,
    /// Concurrent tasks creating and releasing them.
    pub ka_creators: usize,
    /// Idle window of the server counter.
    pub ka_idle: Duration,
    /// Window of the server counter with the guards held.
    pub ka_window: Duration,
    /// Reader clients of the read-heavy run.
    pub rh_readers: usize,
    /// Writer clients of the read-heavy run.
    pub rh_writers: usize,
    /// How long each read-heavy holder holds.
    pub rh_hold: Duration,
    /// Measured loop of the read-heavy run.
    pub rh_duration: Duration,
    /// Busy processes running while ours and the raw protocol are measured
    /// again (`--load`; 0: no second pass).
    pub load: usize,
    /// Rounds (leader kills) per election of the failover runs.
    pub failover_rounds: u32,
    /// How long the next candidate campaigns before the leader is killed.
    pub failover_settle: Duration,
    /// Bound on one campaign of the failover runs.
    pub failover_wait: Duration,
}

/// The term's lease of the failover runs on Redis.
pub const FAILOVER_TTL_REDIS: Duration = Duration::from_secs(1);
/// The session lease of the failover runs on etcd (the shortest etcd grants).
pub const FAILOVER_TTL_ETCD: Duration = Duration::from_secs(2);
/// The session of the failover runs on ZooKeeper.
pub const FAILOVER_TTL_ZK: Duration = Duration::from_secs(2);

/// The numbers of tasks the uncontended runs measure.
pub const LEVELS: [usize; 3] = [1, 8, 64];

impl Profile {
    /// The CI smoke test: every measurement, small samples, under a minute.
    pub fn quick() -> Self {
        Self {
            levels: LEVELS.to_vec(),
            tasks_per_client: 8,
            uncontended: Duration::from_millis(250),
            rounds: 2,
            warmup: 2,
            warmup_rounds: 1,
            contenders: 8,
            contended: Duration::from_millis(500),
            wait: Duration::from_secs(5),
            ttl: Duration::from_secs(10),
            ka_ttl: Duration::from_secs(3),
            ka_guards: vec![50, 200],
            ka_sessions: 8,
            ka_creators: 64,
            ka_idle: Duration::from_secs(1),
            ka_window: Duration::from_secs(2),
            rh_readers: 7,
            rh_writers: 1,
            rh_hold: Duration::from_millis(2),
            rh_duration: Duration::from_millis(500),
            load: 0,
            failover_rounds: 3,
            failover_settle: Duration::from_millis(300),
            failover_wait: Duration::from_secs(30),
        }
    }

    /// The default run (a few minutes).
    pub fn full() -> Self {
        Self {
            uncontended: Duration::from_secs(3),
            rounds: 6,
            warmup: 20,
            contended: Duration::from_secs(5),
            ka_guards: vec![1_000, 10_000],
            ka_idle: Duration::from_secs(3),
            ka_window: Duration::from_secs(5),
            rh_duration: Duration::from_secs(5),
            failover_rounds: 30,
            ..Self::quick()
        }
    }

    /// The TTL of the failover runs on `backend` (the term's lease on
    /// Redis, the session on etcd and ZooKeeper); `None` where there is no
    /// election to kill (memory: no process of its own).
    pub fn failover_ttl(&self, backend: crate::backend::Backend) -> Option<Duration> {
        use crate::backend::Backend;
        match backend {
            Backend::Redis | Backend::Redlock => Some(FAILOVER_TTL_REDIS),
            Backend::Etcd => Some(FAILOVER_TTL_ETCD),
            Backend::Zk => Some(FAILOVER_TTL_ZK),
            Backend::Memory => None,
        }
    }

    /// The profile in words, for the report (`quick`: the quick run).
    pub(super) fn describe(&self, quick: bool) -> Vec<(String, String)> {
        let s = |v: Duration| format!("{:.2} s", v.as_secs_f64());
        vec![
            ("mode".into(), if quick { "quick (--quick)".into() } else { "full".into() }),
            (
                "uncontended".into(),
                format!(
                    "{} per level in {} round(s) taken in turn by a backend's subjects, after {} unmeasured round(s) of the same length taken the same way, tasks {:?}, one backend client per {} tasks, {} warm-up cycles per task first, TTL {}",
                    s(self.uncontended),
                    self.rounds,
                    self.warmup_rounds,
                    self.levels,
                    self.tasks_per_client,
                    self.warmup,
                    s(self.ttl)
                ),
            ),
            (
                "contended".into(),
                format!(
                    "{} clients (one connection each) on one name for {}, no hold time, wait bound {}",
                    self.contenders,
                    s(self.contended),
                    s(self.wait)
                ),
            ),
            (
                "read-heavy".into(),
                format!(
                    "{} readers + {} writer (one connection each) on one read-write lock for {}, each holding {}, wait bound {}",
                    self.rh_readers,
                    self.rh_writers,
                    s(self.rh_duration),
                    s(self.rh_hold),
                    s(self.wait)
                ),
            ),
            (
                "keep-alive".into(),
                format!(
                    "guards {:?} on {} sessions, acquired evenly over one renewal interval (TTL/3), TTL {} (renewed every TTL/3), idle window {}, holding window {}",
                    self.ka_guards,
                    self.ka_sessions,
                    s(self.ka_ttl),
                    s(self.ka_idle),
                    s(self.ka_window)
                ),
            ),
            (
                "failover".into(),
                format!(
                    "{} rounds per election (Redis, Redlock, etcd, ZooKeeper; memory has no process to kill), all elections at once; TTL: Redis and Redlock term {}, etcd session lease {}, ZooKeeper session {}; the next candidate campaigns {} before the kill, campaign bound {}",
                    self.failover_rounds,
                    s(FAILOVER_TTL_REDIS),
                    s(FAILOVER_TTL_ETCD),
                    s(FAILOVER_TTL_ZK),
                    s(self.failover_settle),
                    s(self.failover_wait)
                ),
            ),
            (
                "load".into(),
                if self.load == 0 {
                    "none (no --load)".into()
                } else {
                    format!(
                        "the uncontended levels of ours and the raw protocol again while {} busy processes (one spinning core each) run",
                        self.load
                    )
                },
            ),
            (
                "machine".into(),
                format!(
                    "{} CPUs seen by this process; servers and clients share them",
                    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
                ),
            ),
        ]
    }
}
