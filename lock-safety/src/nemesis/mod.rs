//! The nemesis: random faults from a seed against real servers, a workload
//! of every lock operation, and one checker over the recorded history, as
//! Jepsen does it.
//!
//! A run ([`run`]) starts the backend's servers (and a PostgreSQL for the
//! fenced register), connects several clients, each behind proxies of its
//! own, lets them lock a few names while the [`Schedule`] of its seed does
//! its faults, then heals everything and checks:
//! 1. no two grants of one name that exclude each other (a mutex; a writer
//!    with anyone; more than N holders of N permits) were held at one
//!    moment, where a grant is held from the return of its call until the
//!    release call, the drop, or the first state of its guard that is not
//!    held (see [`Grant`]);
//! 2. on fenced backends, every grant's token is above the token of every
//!    grant the history proves earlier (see [`check`]);
//! 3. the fenced register in PostgreSQL accepted no stale write;
//! 4. once the faults stopped and the clients went idle (still connected),
//!    every name can be taken again, in every kind of lock, within the longest
//!    TTL the workload used plus one request timeout (plus slack): nothing of a finished
//!    acquisition is left blocking it;
//!
//! and that no call took longer than its bound (its wait, plus one request
//! timeout and slack). Violations print the seed, the grants with their
//! timelines and the faults around them.
//!
//! Backends are judged by their documented assumptions: a Redlock node is
//! restarted no sooner than the longest lease after it died, and a single
//! Redis that does not persist every write before answering may lose
//! grants when it restarts (those overlaps are reported apart).

mod checker;
mod faults;
mod history;
mod workload;

pub use checker::{check, Violation};
pub use faults::{Fault, Member, Schedule, Shape, Step};
pub use history::{FaultRecord, Grant, History};

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{AcquireOptions, LockMode, LockName, LockService};
use lock_testbed::PostgresServer;
use tokio::time::Instant;

use crate::fixture::{take, Kind, Servers, NEMESIS_MEMBERS};
use crate::{PgRegisters, Workload};

use faults::Target;
use workload::Shared;

/// What one run does.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// The backend.
    pub kind: Kind,
    /// The seed of the fault schedule and of the clients' choices.
    pub seed: u64,
    /// How long faults go on.
    pub duration: Duration,
    /// How many clients (each its own connection or session).
    pub clients: usize,
    /// How many lock names they share.
    pub names: usize,
}

impl Config {
    /// A run of `kind` with `seed` for `duration`, with 6 clients on 2 names.
    pub fn new(kind: Kind, seed: u64, duration: Duration) -> Config {
        Config {
            kind,
            seed,
            duration,
            clients: 6,
            names: 2,
        }
    }

    /// The run's shape, from which its schedule is generated.
    pub fn shape(&self) -> Shape {
        Shape {
            kind: self.kind,
            clients: self.clients,
            members: self.kind.members(NEMESIS_MEMBERS),
            duration: self.duration,
            max_ttl: self.kind.ttl() * 2,
        }
    }

    /// Its schedule of faults.
    pub fn schedule(&self) -> Schedule {
        Schedule::generate(self.seed, self.shape())
    }
}

/// A name that could not be taken again after the faults stopped.
#[derive(Clone, Debug)]
pub struct Blocked {
    /// The lock name.
    pub name: String,
    /// The kind of lock that could not be taken.
    pub mode: LockMode,
    /// What the attempt returned.
    pub outcome: String,
}

/// What a run found.
#[derive(Debug)]
pub struct Outcome {
    /// The run's configuration.
    pub config: Config,
    /// Its schedule.
    pub schedule: Schedule,
    /// The grants recorded.
    pub grants: usize,
    /// Counts of operations by outcome.
    pub operations: BTreeMap<String, u64>,
    /// Faults done, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// What the checker found.
    pub violations: Vec<Violation>,
    /// Overlaps the backend's documented guarantees allow (a single Redis
    /// restarted without its last writes; live leases revoked by an etcd
    /// server with etcd-io/etcd#15247), not counted as violations.
    pub excused: usize,
    /// Fenced writes accepted after a later holder had claimed the register.
    pub stale_accepted: u64,
    /// Fenced writes refused as stale.
    pub stale_rejected: u64,
    /// Names that could not be taken again after the faults.
    pub blocked: Vec<Blocked>,
    /// Calls that took longer than their bound.
    pub hung: Vec<String>,
    /// The violations with their grants and faults, in words.
    pub details: String,
}

impl Outcome {
    /// Whether the run found nothing wrong.
    pub fn clean(&self) -> bool {
        self.violations.is_empty()
            && self.stale_accepted == 0
            && self.blocked.is_empty()
            && self.hung.is_empty()
    }

    /// One line: backend, seed, counts, verdict.
    pub fn summary(&self) -> String {
        let mut by_label: BTreeMap<&str, usize> = BTreeMap::new();
        for v in &self.violations {
            *by_label.entry(v.label()).or_default() += 1;
        }
        format!(
            "{} seed {}: {} grants, {} operations, {} faults; violations {:?}, overlaps the documented guarantees allow {}, stale writes accepted {} (rejected {}), names left blocked {}, calls past their bound {} => {}",
            self.config.kind.name(),
            self.config.seed,
            self.grants,
            self.operations.values().sum::<u64>(),
            self.faults.values().sum::<u64>(),
            by_label,
            self.excused,
            self.stale_accepted,
            self.stale_rejected,
            self.blocked.len(),
            self.hung.len(),
            if self.clean() { "clean" } else { "FOUND" },
        )
    }
}

/// How long to let the clients finish after the faults stop, on top of
/// their longest wait and hold.
const WIND_DOWN: Duration = Duration::from_secs(30);
/// Slack on every bound, for a busy machine.
const SLACK: Duration = Duration::from_millis(1500);

/// Runs the nemesis once. Needs a multi-threaded tokio runtime (server
/// control and the PostgreSQL register block their worker).
pub async fn run(config: Config) -> Outcome {
    let kind = config.kind;
    let schedule = config.schedule();
    let servers = blocking(|| Servers::start_for_nemesis(kind, schedule.persistence));
    let (registers, _db) = registers(kind).await;
    let mut clients = Vec::new();
    for _ in 0..config.clients {
        clients.push(Arc::new(servers.proxied_client(kind).await));
    }
    let names: Vec<LockName> = (0..config.names)
        .map(|i| {
            LockName::new(lock_testbed::unique_name(&format!(
                "nemesis-{}-{i}",
                kind.name()
            )))
            .expect("a valid lock name")
        })
        .collect();
    let history = History::new();
    let shared = Arc::new(Shared {
        names: names.clone(),
        ttl: kind.ttl(),
        overrun: kind.request_timeout() + SLACK,
        release_wait: kind
            .release_timeout()
            .saturating_sub(kind.request_timeout()),
        history: history.clone(),
        registers: registers.clone(),
        stop: Default::default(),
        counts: Default::default(),
        hung: Default::default(),
    });
    let target = Arc::new(Target {
        servers: Arc::new(Mutex::new(servers)),
        clients: clients.clone(),
    });

    let mut tasks = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        let seed = config.seed.wrapping_mul(31).wrapping_add(i as u64 + 1);
        tasks.push(tokio::spawn(workload::client(
            i,
            c.lock.clone(),
            shared.clone(),
            seed,
        )));
    }
    let stop = Arc::new(tokio::sync::Notify::new());
    let nemesis = {
        let (target, schedule, history, stop) = (
            target.clone(),
            schedule.clone(),
            history.clone(),
            stop.clone(),
        );
        tokio::spawn(async move { target.run(&schedule, &history, &stop).await })
    };
    tokio::time::sleep(config.duration).await;
    stop.notify_one();
    let _ = nemesis.await;
    heal_all(&target);
    shared.stop.store(true, Ordering::SeqCst);
    let wind_down = kind.ttl() * 6 + WIND_DOWN;
    for t in tasks {
        if tokio::time::timeout(wind_down, t).await.is_err() {
            shared
                .hung
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!(
                    "a client did not finish within {} s of the end",
                    wind_down.as_secs()
                ));
        }
    }
    // Background releases of dropped guards get one request timeout.
    tokio::time::sleep(kind.request_timeout() + Duration::from_millis(200)).await;

    let horizon = Instant::now();
    let blocked = retake_all(&target, kind, &names, config.shape().max_ttl).await;
    let grants = history.grants();
    let found = check(&grants, horizon, kind.fencing());
    let (violations, excused): (Vec<Violation>, Vec<Violation>) = found
        .into_iter()
        .partition(|v| !excused(v, &schedule, &history, kind));
    let stats = registers.stats();
    let mut faults = BTreeMap::new();
    for f in history.faults() {
        if let Some(step) = schedule
            .steps
            .iter()
            .find(|s| s.fault.to_string() == f.what)
        {
            *faults.entry(step.fault.kind()).or_default() += 1;
        }
    }
    let details = describe(&violations, &history, &config, kind);
    let outcome = Outcome {
        config,
        schedule,
        grants: grants.len(),
        operations: shared
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone(),
        faults,
        violations,
        excused: excused.len(),
        stale_accepted: stats.stale_accepted,
        stale_rejected: stats.stale_rejected,
        blocked,
        hung: shared
            .hung
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone(),
        details,
    };
    drop(clients);
    let target = Arc::into_inner(target);
    blocking(move || drop(target));
    outcome
}

/// The fenced register: in PostgreSQL for fenced backends (and the server,
/// kept alive by the caller), in memory for Redlock, which has no tokens.
async fn registers(kind: Kind) -> (Arc<Workload>, Db) {
    if !kind.fencing() {
        return (Arc::new(Workload::new()), Db(None));
    }
    let server = blocking(|| PostgresServer::start().expect("start PostgreSQL"));
    let store = PgRegisters::connect(server.url())
        .await
        .expect("connect to PostgreSQL");
    (Arc::new(Workload::in_postgres(store)), Db(Some(server)))
}

/// A PostgreSQL stopped off the async workers when dropped.
struct Db(Option<PostgresServer>);

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(server) = self.0.take() {
            blocking(move || drop(server));
        }
    }
}

/// Heals every client's proxies (the schedule healed its own faults; this
/// makes sure, whatever stopped it).
fn heal_all(target: &Target) {
    for c in &target.clients {
        c.heal();
    }
}

/// An overlap the backend's documented guarantees allow:
/// - on a single Redis restarted without its last writes, a grant the
///   server may have made before the restart (its call began before it)
///   with one that returned after the server died;
/// - on etcd, a holder whose key went when an etcd member that resumed
///   revoked live leases (a server bug of etcd before 3.4.31 and 3.5.13,
///   documented in lock-etcd), with a grant that returned after it resumed.
fn excused(v: &Violation, schedule: &Schedule, history: &History, kind: Kind) -> bool {
    let Violation::Overlap { first, second } = v else {
        return false;
    };
    let faults = history.faults();
    if schedule.excuses_overlaps(kind) {
        let asked = first.called.min(second.called);
        let returned = first.returned.max(second.returned);
        return faults.iter().any(|f| {
            f.what.contains("killed")
                && asked < f.healed.unwrap_or(f.applied)
                && returned > f.applied
        });
    }
    if kind == Kind::Etcd {
        let window = kind.ttl();
        return faults.iter().any(|f| {
            f.what.starts_with(faults::REVOKED_ON_RESUME)
                && [first, second].iter().any(|g| {
                    g.end
                        .is_some_and(|e| e >= f.applied && e <= f.applied + window)
                        && g.end_cause.contains("Lost")
                })
                && second.returned >= f.applied
        });
    }
    false
}

/// Takes every name again, in every kind of lock the backend offers, with a
/// new client, while the workload's clients stay connected and idle: each
/// within the longest lease the workload held (`max_ttl`: a release lost
/// to the last fault leaves a key that long) plus one request timeout.
async fn retake_all(
    target: &Target,
    kind: Kind,
    names: &[LockName],
    max_ttl: Duration,
) -> Vec<Blocked> {
    let addrs = target
        .servers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .addrs();
    let fresh = Servers::connect(kind, &addrs).await;
    let within = max_ttl + kind.request_timeout() + SLACK;
    let opts = AcquireOptions::new().ttl(kind.ttl()).wait(within);
    let mut blocked = Vec::new();
    for name in names {
        for mode in workload::modes(&*fresh) {
            let mode = match mode {
                LockMode::Read => continue,
                m => m,
            };
            let started = Instant::now();
            let r = tokio::time::timeout(within + SLACK, retake(&*fresh, name, &opts, mode)).await;
            let outcome = match r {
                Ok(Ok(guards)) => {
                    let took = started.elapsed();
                    for g in guards {
                        let _ = g.release().await;
                    }
                    if took <= within {
                        continue;
                    }
                    format!("taken only after {} ms", took.as_millis())
                }
                Ok(Err(e)) => format!("{e}"),
                Err(_) => "the call did not return".to_string(),
            };
            // Who the backend says holds it, for whoever replays the seed.
            let holder = match fresh.inspect(name).await {
                Ok(s) => format!(
                    "; held {}, owner {}, token {}, ttl left {}, waiters {}",
                    s.held,
                    s.owner.as_deref().unwrap_or("-"),
                    s.token.map_or("-".into(), |t| t.to_string()),
                    s.ttl_remaining
                        .map_or("-".into(), |t| format!("{} ms", t.as_millis())),
                    s.waiters.map_or("-".into(), |w| w.to_string()),
                ),
                Err(e) => format!("; inspect: {e}"),
            };
            let outcome = format!("{outcome}{holder}");
            blocked.push(Blocked {
                name: name.as_str().to_string(),
                mode,
                outcome: format!(
                    "{outcome} (bound: longest TTL + request timeout + slack = {} ms)",
                    within.as_millis()
                ),
            });
        }
    }
    blocked
}

/// Takes `name` in `mode` with every permit a semaphore has.
async fn retake(
    lock: &dyn LockService,
    name: &LockName,
    opts: &AcquireOptions,
    mode: LockMode,
) -> lock_core::Result<Vec<lock_core::LockGuard>> {
    match mode {
        LockMode::Permit { permits } => {
            let mut all = Vec::new();
            for _ in 0..permits {
                all.push(lock.acquire_permit(name, permits, opts).await?);
            }
            Ok(all)
        }
        other => Ok(vec![take(lock, name, opts, other).await?]),
    }
}

/// The violations in words: the seed, each grant's timeline, the faults
/// around them.
fn describe(violations: &[Violation], history: &History, config: &Config, kind: Kind) -> String {
    let mut out = String::new();
    for v in violations.iter().take(10) {
        let _ = writeln!(
            out,
            "{} seed {}: {v} at {:.0} ms",
            kind.name(),
            config.seed,
            history.ms(v.at())
        );
        let grants = v.grants();
        for g in &grants {
            let _ = writeln!(
                out,
                "  grant #{} client {} {} token {} via {}: called {:.0} ms, returned {:.0} ms, ended {} ({})",
                g.id,
                g.client,
                g.mode,
                g.token.map_or("-".to_string(), |t| t.to_string()),
                g.via,
                history.ms(g.called),
                history.ms(g.returned),
                g.end.map_or("never".to_string(), |e| format!("{:.0} ms", history.ms(e))),
                g.end_cause
            );
        }
        let from = grants.iter().map(|g| g.called).min().unwrap_or(v.at());
        for f in history.faults_around(from, v.at(), kind.ttl() * 2) {
            let _ = writeln!(out, "  fault: {f}");
        }
    }
    if violations.len() > 10 {
        let _ = writeln!(out, "  ... and {} more", violations.len() - 10);
    }
    out
}

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}
