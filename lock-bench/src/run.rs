//! The run: start the servers, measure every selected backend with its raw
//! protocol and peer, evaluate the targets.

use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lock_core::MemoryLock;

use crate::backends::{Ours, Target};
use crate::load::BusyLoad;
use crate::peers::{EtcdLockRpc, Rslock, ZkRecipe};
use crate::raw::{RawEtcd, RawRedis, RawZk};
use crate::report::{BackendReport, KeepAliveReport, ReadHeavyReport, Report, SubjectReport};
use crate::servers::{Needed, OpsSource, Servers, ETCD_MEMBERS, REDLOCK_NODES, ZK_SERVERS};
use crate::subject::{Connector, DistOptions, Kind, Locker};
use crate::workload::{
    self, ContendedParams, CycleSamples, KeepAliveParams, ReadHeavyParams, Renewals, Uncontended,
    UncontendedParams,
};
use crate::Args;

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
}

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
            ..Self::quick()
        }
    }

    fn describe(&self, quick: bool) -> Vec<(String, String)> {
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

/// One subject of a backend group.
struct Plan {
    label: String,
    kind: Kind,
    connector: Result<Arc<dyn Connector>, String>,
    contended: bool,
}

/// Our backend connected for the keep-alive runs, and its counters.
struct KeepAlivePlan {
    /// Our backend as a user gets it.
    conn: Result<Arc<dyn Connector>, String>,
    /// Where to count server ops.
    source: Option<OpsSource>,
    /// Its label in lock-core's request counter.
    requests: &'static str,
    /// Redis and Redlock: the same backend with renewal batching off, run
    /// after each guard count for the comparison in the same run.
    unbatched: Option<Result<Arc<dyn Connector>, String>>,
}

/// A backend group: our backend, its raw protocol, its peer.
struct Group {
    backend: &'static str,
    servers: String,
    subjects: Vec<Plan>,
    /// Our backend with keep-alive options, and where to count server ops.
    keep_alive: Option<KeepAlivePlan>,
    /// Our backend for the read-heavy run, where it has read-write locks.
    read_heavy: Option<Result<Arc<dyn Connector>, String>>,
}

fn server<'a, T>(s: &'a Option<Result<T, String>>, what: &str) -> Result<&'a T, String> {
    match s {
        Some(Ok(v)) => Ok(v),
        Some(Err(e)) => Err(format!("{what} did not start: {e}")),
        None => Err(format!("{what} was not started")),
    }
}

fn arc<C: Connector + 'static>(c: C) -> Arc<dyn Connector> {
    Arc::new(c)
}

/// The options of our backend in each kind of run.
struct RunOptions {
    /// The uncontended, contended and read-heavy runs.
    opts: DistOptions,
    /// The keep-alive runs.
    ka_opts: DistOptions,
    /// The keep-alive runs with renewal batching off (Redis and Redlock).
    ka_unbatched: DistOptions,
}

impl RunOptions {
    fn new(profile: &Profile) -> Self {
        let opts = DistOptions {
            ttl: profile.ttl,
            keep_alive: true,
            session_ttl: None,
            batch_renewals: true,
        };
        // Keep-alive runs: the session (etcd lease, ZooKeeper session) as short as
        // the guards' TTL, so that it is renewed as often as they are.
        let ka_opts = DistOptions {
            ttl: profile.ka_ttl,
            keep_alive: true,
            session_ttl: Some(profile.ka_ttl),
            batch_renewals: true,
        };
        let ka_unbatched = DistOptions {
            batch_renewals: false,
            ..ka_opts.clone()
        };
        Self {
            opts,
            ka_opts,
            ka_unbatched,
        }
    }
}

/// The keep-alive plan of `conn`, with no batching-off comparison.
fn plan(
    conn: Result<Arc<dyn Connector>, String>,
    source: Option<OpsSource>,
    requests: &'static str,
) -> KeepAlivePlan {
    KeepAlivePlan {
        conn,
        source,
        requests,
        unbatched: None,
    }
}

/// Our backend on `t` with the options `o`.
fn ours(t: &Result<Target, String>, o: &DistOptions) -> Result<Arc<dyn Connector>, String> {
    t.clone().map(|t| arc(Ours::new(t, o.clone())))
}

/// The raw Redis protocol on `urls`, with a fencing counter or without.
fn raw_redis(
    urls: &Result<Vec<String>, String>,
    fenced: bool,
) -> Result<Arc<dyn Connector>, String> {
    urls.clone().map(|urls| arc(RawRedis { urls, fenced }))
}

/// The groups of the selected backends, in the order of `args.backends`.
fn groups(args: &Args, profile: &Profile, servers: &Servers) -> Vec<Group> {
    let o = RunOptions::new(profile);
    args.backends
        .iter()
        .filter_map(|b| match b.as_str() {
            "memory" => Some(memory_group(&o)),
            "redis" => Some(redis_group(&o, servers)),
            "redlock" => Some(redlock_group(&o, profile, servers)),
            "etcd" => Some(etcd_group(&o, servers)),
            "zk" => Some(zk_group(&o, servers)),
            _ => None,
        })
        .collect()
}

/// Our in-process backend alone (no server, no raw protocol, no peer).
fn memory_group(o: &RunOptions) -> Group {
    let t = Ok(Target::Memory(MemoryLock::new()));
    Group {
        backend: "memory",
        servers: "in process".into(),
        subjects: vec![Plan {
            label: "distlock memory".into(),
            kind: Kind::Ours,
            connector: ours(&t, &o.opts),
            contended: true,
        }],
        keep_alive: Some(plan(ours(&t, &o.ka_opts), None, "memory")),
        read_heavy: Some(ours(&t, &o.opts)),
    }
}

/// One Redis: ours, the raw protocol and the raw protocol with a fencing counter.
fn redis_group(o: &RunOptions, servers: &Servers) -> Group {
    let url = server(&servers.redis, "redis-server").map(|s| s.url());
    let t = url.clone().map(Target::Redis);
    let urls = url.clone().map(|u| vec![u]);
    Group {
        backend: "redis",
        servers: "1 redis-server".into(),
        subjects: vec![
            Plan {
                label: "distlock redis".into(),
                kind: Kind::Ours,
                connector: ours(&t, &o.opts),
                contended: true,
            },
            Plan {
                label: "raw SET NX PX + EVALSHA del".into(),
                kind: Kind::Raw,
                connector: raw_redis(&urls, false),
                contended: false,
            },
            Plan {
                label: "raw + fencing counter (MULTI SET NX PX, INCR)".into(),
                kind: Kind::Fenced,
                connector: raw_redis(&urls, true),
                contended: false,
            },
        ],
        keep_alive: Some(KeepAlivePlan {
            unbatched: Some(ours(&t, &o.ka_unbatched)),
            ..plan(
                ours(&t, &o.ka_opts),
                url.ok().map(|u| OpsSource::Redis(vec![u])),
                "redis",
            )
        }),
        read_heavy: Some(ours(&t, &o.opts)),
    }
}

/// Redlock on independent Redis nodes: ours, the raw protocol and the raw protocol with a fencing counter on every node, rslock.
fn redlock_group(o: &RunOptions, profile: &Profile, servers: &Servers) -> Group {
    let urls = server(&servers.redis_set, "5 redis-servers").map(|s| s.urls());
    let t = urls.clone().map(Target::Redlock);
    Group {
        backend: "redlock",
        servers: format!("{REDLOCK_NODES} independent redis-servers"),
        subjects: vec![
            Plan {
                label: "distlock redlock".into(),
                kind: Kind::Ours,
                connector: ours(&t, &o.opts),
                contended: true,
            },
            Plan {
                label: format!("raw SET NX PX + EVALSHA del, {REDLOCK_NODES} nodes in parallel"),
                kind: Kind::Raw,
                connector: raw_redis(&urls, false),
                contended: false,
            },
            Plan {
                label: format!(
                    "raw + fencing counter (MULTI SET NX PX, INCR), {REDLOCK_NODES} nodes"
                ),
                kind: Kind::Fenced,
                connector: raw_redis(&urls, true),
                contended: false,
            },
            Plan {
                label: "rslock 0.10".into(),
                kind: Kind::Peer,
                connector: urls.clone().map(|urls| {
                    arc(Rslock {
                        urls,
                        ttl: profile.ttl,
                    })
                }),
                contended: true,
            },
        ],
        keep_alive: Some(KeepAlivePlan {
            unbatched: Some(ours(&t, &o.ka_unbatched)),
            ..plan(
                ours(&t, &o.ka_opts),
                urls.ok().map(OpsSource::Redis),
                "redlock",
            )
        }),
        read_heavy: None,
    }
}

/// The etcd cluster: ours, the raw protocol, the raw protocol with a compared delete, etcd's Lock RPC.
fn etcd_group(o: &RunOptions, servers: &Servers) -> Group {
    let eps = server(&servers.etcd, "etcd cluster").map(|c| c.endpoints());
    let t = eps.clone().map(Target::Etcd);
    Group {
        backend: "etcd",
        servers: format!("etcd, {ETCD_MEMBERS} members"),
        subjects: vec![
            Plan {
                label: "distlock etcd".into(),
                kind: Kind::Ours,
                connector: ours(&t, &o.opts),
                contended: true,
            },
            Plan {
                label: "raw txn put-if-absent (lease) + delete".into(),
                kind: Kind::Raw,
                connector: eps.clone().map(|endpoints| {
                    arc(RawEtcd {
                        endpoints,
                        compared: false,
                    })
                }),
                contended: false,
            },
            Plan {
                label:
                    "raw txn put-if-absent (lease) + compared delete (txn on the create revision)"
                        .into(),
                kind: Kind::Checked,
                connector: eps.clone().map(|endpoints| {
                    arc(RawEtcd {
                        endpoints,
                        compared: true,
                    })
                }),
                contended: false,
            },
            Plan {
                label: "etcd Lock RPC (v3lock)".into(),
                kind: Kind::Peer,
                connector: eps.clone().map(|endpoints| arc(EtcdLockRpc { endpoints })),
                contended: true,
            },
        ],
        keep_alive: Some(plan(
            ours(&t, &o.ka_opts),
            eps.ok().map(OpsSource::Etcd),
            "etcd",
        )),
        read_heavy: Some(ours(&t, &o.opts)),
    }
}

/// The ZooKeeper ensemble: ours, the raw protocol, zookeeper-client's lock recipe.
fn zk_group(o: &RunOptions, servers: &Servers) -> Group {
    let ens = server(&servers.zk, "ZooKeeper ensemble");
    let cs = ens
        .as_ref()
        .map(|e| e.connect_string())
        .map_err(|e| e.clone());
    let eps = ens.map(|e| e.endpoints());
    let t = cs.clone().map(Target::Zk);
    Group {
            backend: "zk",
            servers: format!(
                "ZooKeeper, {ZK_SERVERS} servers (every subject deals them to its clients in the same turn)"
            ),
            subjects: vec![
                Plan {
                    label: "distlock zk".into(),
                    kind: Kind::Ours,
                    connector: ours(&t, &o.opts),
                    contended: true,
                },
                Plan {
                    label: "raw create ephemeral-sequential + delete".into(),
                    kind: Kind::Raw,
                    connector: cs.clone().map(|connect_string| {
                        arc(RawZk {
                            servers: crate::placement::Deal::new(&connect_string),
                            root: "/bench-raw".into(),
                        })
                    }),
                    contended: false,
                },
                Plan {
                    label: "zookeeper-client lock recipe".into(),
                    kind: Kind::Peer,
                    connector: cs.clone().map(|connect_string| {
                        arc(ZkRecipe {
                            servers: crate::placement::Deal::new(&connect_string),
                            root: "/bench-peer".into(),
                        })
                    }),
                    contended: true,
                },
            ],
            keep_alive: Some(plan(
                ours(&t, &o.ka_opts),
                eps.ok().map(OpsSource::Zk),
                "zookeeper",
            )),
            read_heavy: Some(ours(&t, &o.opts)),
        }
}

fn slug(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect::<String>()
        .split('-')
        .filter(|s| !s.is_empty())
        .take(3)
        .collect::<Vec<_>>()
        .join("-")
}

fn progress(steps: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(steps), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {wide_msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Runs everything; returns the report and the servers (to stop after the
/// runtime has shut down).
pub async fn run(args: &Args) -> (Report, Servers) {
    let started = Instant::now();
    let profile = Profile {
        load: args.load,
        ..if args.quick {
            Profile::quick()
        } else {
            Profile::full()
        }
    };
    let needed = Needed {
        redis: args.backends.iter().any(|b| b == "redis"),
        redis_set: args.backends.iter().any(|b| b == "redlock"),
        etcd: args.backends.iter().any(|b| b == "etcd"),
        zk: args.backends.iter().any(|b| b == "zk"),
    };
    let run_id = format!("bench-{}", std::process::id());

    let bar = progress(1);
    bar.set_message("starting servers");
    let servers = start_servers(needed).await;
    let server_start_s = started.elapsed().as_secs_f64();

    let groups = groups(args, &profile, &servers);
    bar.set_length(total_steps(&groups, &profile));
    bar.inc(1);

    let mut backends = Vec::new();
    for g in groups {
        backends.push(measure_backend(g, &profile, &run_id, &bar).await);
    }
    bar.finish_and_clear();

    let targets = crate::targets::evaluate(&backends, &args.memory_baseline);
    let failures = backends.iter().flat_map(|b| b.failures()).collect();
    let report = Report {
        mode: if args.quick {
            "quick".into()
        } else {
            "full".into()
        },
        profile: {
            let mut p = profile.describe(args.quick);
            p.push(("server data dirs".into(), args.data_dir_description()));
            p
        },
        backends,
        targets,
        failures,
        total_s: started.elapsed().as_secs_f64(),
        server_start_s,
    };
    (report, servers)
}

/// Starts the servers `needed`, off the async threads; a start-up task that
/// failed counts as every server failing to start.
async fn start_servers(needed: Needed) -> Servers {
    tokio::task::spawn_blocking(move || Servers::start(needed))
        .await
        .unwrap_or_else(|e| {
            let msg = format!("the server start-up task failed: {e}");
            Servers {
                redis: needed.redis.then(|| Err(msg.clone())),
                redis_set: needed.redis_set.then(|| Err(msg.clone())),
                etcd: needed.etcd.then(|| Err(msg.clone())),
                zk: needed.zk.then(|| Err(msg.clone())),
            }
        })
}

/// The steps of the progress bar: the server start-up, every measured and
/// warm-up round of every level of every subject (and of the loaded pass),
/// the contended runs, every keep-alive guard count and the read-heavy runs.
fn total_steps(groups: &[Group], profile: &Profile) -> u64 {
    let per_level = profile.levels.len() as u64 * u64::from(profile.warmup_rounds + profile.rounds);
    groups
        .iter()
        .map(|g| {
            let loaded = if profile.load > 0 {
                loaded_subjects(&g.subjects).len() as u64
            } else {
                0
            };
            g.subjects
                .iter()
                .map(|s| per_level + u64::from(s.contended))
                .sum::<u64>()
                + loaded * per_level
                + profile.ka_guards.len() as u64
                + u64::from(g.read_heavy.is_some())
        })
        .sum::<u64>()
        + 1
}

/// Everything measured for one backend group: its subjects, then the
/// read-heavy and keep-alive runs of our backend.
async fn measure_backend(
    g: Group,
    profile: &Profile,
    run_id: &str,
    bar: &ProgressBar,
) -> BackendReport {
    let Group {
        backend,
        servers: desc,
        subjects: plans,
        keep_alive,
        read_heavy,
    } = g;
    // Each measurement runs in its own task: a panic in a client crate
    // becomes a failed row, not a crashed benchmark.
    let labels: Vec<(String, Kind)> = plans.iter().map(|p| (p.label.clone(), p.kind)).collect();
    let task = tokio::spawn(measure_group(
        backend,
        plans,
        profile.clone(),
        run_id.to_string(),
        bar.clone(),
    ));
    let subjects = match task.await {
        Ok(s) => s,
        Err(e) => labels
            .into_iter()
            .map(|(label, kind)| {
                let mut r = SubjectReport::new(label, kind);
                r.error = Some(format!("the measurement task failed: {e}"));
                r
            })
            .collect(),
    };
    let mut rep = BackendReport {
        backend: backend.to_string(),
        servers: desc,
        subjects,
        keep_alive: None,
        read_heavy: None,
    };
    if let Some(conn) = read_heavy {
        bar.set_message(format!("{backend}: read-heavy"));
        rep.read_heavy = Some(measure_read_heavy(conn, profile, run_id).await);
        bar.inc(1);
    }
    if let Some(plan) = keep_alive {
        bar.set_message(format!("{backend}: keep-alive"));
        let task = tokio::spawn(measure_keep_alive(
            plan,
            profile.clone(),
            run_id.to_string(),
            backend,
            bar.clone(),
        ));
        rep.keep_alive = Some(match task.await {
            Ok(k) => k,
            Err(e) => KeepAliveReport {
                ops_source: None,
                idle_ops_per_s: None,
                idle_ops: None,
                idle_requests_per_s: None,
                idle_window_s: profile.ka_idle.as_secs_f64(),
                ttl_s: profile.ka_ttl.as_secs_f64(),
                runs: Vec::new(),
                error: Some(format!("the measurement task failed: {e}")),
            },
        });
    }
    rep
}

/// The read-heavy run of our backend, in a task of its own.
async fn measure_read_heavy(
    conn: Result<Arc<dyn Connector>, String>,
    profile: &Profile,
    run_id: &str,
) -> ReadHeavyReport {
    let p = ReadHeavyParams {
        readers: profile.rh_readers,
        writers: profile.rh_writers,
        hold: profile.rh_hold,
        duration: profile.rh_duration,
        wait: profile.wait,
        name: format!("{run_id}/read-heavy"),
    };
    let run = match conn {
        Ok(c) => tokio::spawn(async move { workload::read_heavy(c, &p).await })
            .await
            .unwrap_or_else(|e| Err(format!("the measurement task failed: {e}"))),
        Err(e) => Err(e),
    };
    match run {
        Ok(r) => ReadHeavyReport {
            run: Some(r),
            error: None,
        },
        Err(e) => ReadHeavyReport {
            run: None,
            error: Some(e),
        },
    }
}

/// The subjects measured again under `--load`: ours and the raw protocol,
/// where the group has both (their ratio is what the load may not move).
fn loaded_subjects(plans: &[Plan]) -> Vec<usize> {
    let has = |kind| plans.iter().any(|p| p.kind == kind);
    if !(has(Kind::Ours) && has(Kind::Raw)) {
        return Vec::new();
    }
    plans
        .iter()
        .enumerate()
        .filter(|(_, p)| matches!(p.kind, Kind::Ours | Kind::Raw))
        .map(|(i, _)| i)
        .collect()
}

/// One pass over the uncontended levels of a backend group.
#[derive(Clone, Copy)]
struct Levels<'a> {
    backend: &'static str,
    profile: &'a Profile,
    run_id: &'a str,
    bar: &'a ProgressBar,
    /// Added to the lock names (a pass under load uses names of its own).
    tag: &'a str,
}

impl Levels<'_> {
    /// Every level for the subjects `which` of `plans`, in rounds in which
    /// they take turns; a subject that fails gets its error in `reports`
    /// and no further turns. Returns each measured subject's levels.
    async fn run(
        &self,
        plans: &[Plan],
        which: &[usize],
        reports: &mut [SubjectReport],
    ) -> Vec<(usize, Vec<Uncontended>)> {
        let profile = self.profile;
        let mut out: Vec<(usize, Vec<Uncontended>)> =
            which.iter().map(|&i| (i, Vec::new())).collect();
        let slice = profile.uncontended / profile.rounds.max(1);
        for &tasks in &profile.levels {
            let params = |plan: &Plan, warmup: usize| UncontendedParams {
                tasks,
                tasks_per_client: profile.tasks_per_client,
                duration: slice,
                warmup,
                prefix: format!("{}/{}/u{tasks}{}", self.run_id, slug(&plan.label), self.tag),
            };
            // One pool of clients per subject for all the rounds of this level.
            let mut pools: Vec<Option<Vec<Arc<dyn Locker>>>> = Vec::new();
            for &i in which {
                let plan = &plans[i];
                let pool = match (&plan.connector, &reports[i].error) {
                    (Ok(conn), None) => {
                        self.bar.set_message(format!(
                            "{}: {} connecting x{tasks}",
                            self.backend, plan.label
                        ));
                        match workload::uncontended_pool(conn.as_ref(), &params(plan, 0)).await {
                            Ok(pool) => Some(pool),
                            Err(e) => {
                                reports[i].error = Some(e);
                                None
                            }
                        }
                    }
                    _ => None,
                };
                pools.push(pool);
            }
            let mut samples: Vec<CycleSamples> =
                which.iter().map(|_| CycleSamples::default()).collect();
            for round in 0..profile.warmup_rounds + profile.rounds.max(1) {
                let measured = round >= profile.warmup_rounds;
                for (k, &i) in which.iter().enumerate() {
                    self.bar.inc(1);
                    let plan = &plans[i];
                    let (Some(pool), None) = (&pools[k], &reports[i].error) else {
                        continue;
                    };
                    let what = match (measured, self.tag.is_empty()) {
                        (false, _) => "warming up",
                        (true, true) => "uncontended",
                        (true, false) => "uncontended under load",
                    };
                    self.bar
                        .set_message(format!("{}: {} {what} x{tasks}", self.backend, plan.label));
                    let warmup = if round == 0 { profile.warmup } else { 0 };
                    match workload::uncontended(pool, &params(plan, warmup)).await {
                        Ok(s) if measured => samples[k].merge(s),
                        Ok(_) => {}
                        Err(e) => reports[i].error = Some(e),
                    }
                }
            }
            drop(pools);
            for ((i, levels), s) in out.iter_mut().zip(samples) {
                if reports[*i].error.is_none() {
                    levels.push(s.finish());
                }
            }
        }
        out
    }
}

/// Measures the subjects of one backend: the uncontended levels in rounds
/// (the subjects taking turns); with `--load`, the levels of ours and the
/// raw protocol again while the busy processes run; then each contended run.
async fn measure_group(
    backend: &'static str,
    plans: Vec<Plan>,
    profile: Profile,
    run_id: String,
    bar: ProgressBar,
) -> Vec<SubjectReport> {
    let mut reports: Vec<SubjectReport> = plans
        .iter()
        .map(|p| {
            let mut r = SubjectReport::new(p.label.clone(), p.kind);
            r.error = p.connector.as_ref().err().cloned();
            r
        })
        .collect();
    let every: Vec<usize> = (0..plans.len()).collect();
    let quiet = Levels {
        backend,
        profile: &profile,
        run_id: &run_id,
        bar: &bar,
        tag: "",
    };
    for (i, measured) in quiet.run(&plans, &every, &mut reports).await {
        reports[i].uncontended = measured;
    }
    let compared = loaded_subjects(&plans);
    if profile.load > 0 && !compared.is_empty() {
        bar.set_message(format!(
            "{backend}: starting {} busy processes",
            profile.load
        ));
        match BusyLoad::start(profile.load) {
            Ok(load) => {
                let loaded = Levels {
                    tag: "-loaded",
                    ..quiet
                };
                for (i, measured) in loaded.run(&plans, &compared, &mut reports).await {
                    reports[i].loaded = measured;
                }
                drop(load);
            }
            Err(e) => {
                for &i in &compared {
                    reports[i].load_error = Some(e.clone());
                }
            }
        }
    }
    for (i, plan) in plans.iter().enumerate() {
        if !plan.contended {
            continue;
        }
        bar.inc(1);
        let (Ok(conn), None) = (&plan.connector, &reports[i].error) else {
            continue;
        };
        bar.set_message(format!(
            "{}: {} contended x{}",
            backend, plan.label, profile.contenders
        ));
        let p = ContendedParams {
            contenders: profile.contenders,
            duration: profile.contended,
            wait: profile.wait,
            name: format!("{run_id}/{}/contended", slug(&plan.label)),
        };
        match workload::contended(conn.clone(), &p).await {
            Ok(c) => reports[i].contended = Some(c),
            Err(e) => reports[i].error = Some(e),
        }
    }
    reports
}

async fn measure_keep_alive(
    plan: KeepAlivePlan,
    profile: Profile,
    run_id: String,
    backend: &'static str,
    bar: ProgressBar,
) -> KeepAliveReport {
    let KeepAlivePlan {
        conn,
        source,
        requests,
        unbatched,
    } = plan;
    let mut rep = KeepAliveReport {
        ops_source: source.as_ref().map(|s| s.describe().to_string()),
        idle_ops_per_s: None,
        idle_ops: None,
        idle_requests_per_s: None,
        idle_window_s: profile.ka_idle.as_secs_f64(),
        ttl_s: profile.ka_ttl.as_secs_f64(),
        runs: Vec::new(),
        error: None,
    };
    let steps = profile.ka_guards.len() as u64;
    let connect = |conn: Result<Arc<dyn Connector>, String>| async move {
        let conn = conn?;
        futures::future::join_all((0..profile.ka_sessions).map(|_| conn.connect()))
            .await
            .into_iter()
            .collect::<Result<Vec<Arc<dyn Locker>>, String>>()
    };
    let clients = match connect(conn).await {
        Ok(c) => c,
        Err(e) => {
            rep.error = Some(e);
            bar.inc(steps);
            return rep;
        }
    };
    let baseline = match unbatched {
        Some(conn) => match connect(conn).await {
            Ok(c) => Some(c),
            Err(e) => {
                rep.error = Some(format!("batching off: {e}"));
                bar.inc(steps);
                return rep;
            }
        },
        None => None,
    };
    // Let the sessions settle (first keep-alives, pings), then the idle rate.
    tokio::time::sleep(Duration::from_millis(300)).await;
    if let Some(src) = &source {
        let before = crate::requests::sent(requests);
        let t0 = Instant::now();
        match workload::ops_rate(src, profile.ka_idle).await {
            Ok((rate, ops)) => {
                rep.idle_ops_per_s = Some(rate);
                rep.idle_ops = Some(ops);
            }
            Err(e) => {
                rep.error = Some(format!("server counter: {e}"));
                bar.inc(steps);
                return rep;
            }
        }
        if let (Some(b), Some(a)) = (before, crate::requests::sent(requests)) {
            rep.idle_requests_per_s = Some(crate::stats::rate(a.saturating_sub(b), t0.elapsed()));
        }
    }
    for &guards in &profile.ka_guards {
        bar.set_message(format!("{backend}: keep-alive with {guards} guards"));
        let variants = std::iter::once((&clients, Renewals::Batched))
            .chain(baseline.as_ref().map(|b| (b, Renewals::Unbatched)));
        for (clients, renewals) in variants {
            let p = KeepAliveParams {
                guards,
                creators: profile.ka_creators,
                window: profile.ka_window,
                spread: profile.ka_ttl / 3,
                prefix: format!("{run_id}/keepalive/{}{guards}", renewals.tag()),
                requests: Some(requests),
                renewals,
            };
            match workload::keep_alive(clients, source.as_ref(), &p).await {
                Ok(k) => rep.runs.push(k),
                Err(e) => rep.error = Some(e),
            }
        }
        bar.inc(1);
    }
    rep
}
