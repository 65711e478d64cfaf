//! The workloads: uncontended cycles, contention on one name, many guards
//! held with keep-alive, and readers with a writer on one read-write lock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use serde::Serialize;
use tokio::sync::Barrier;

use crate::servers::{process_cpu, rss_bytes, OpsSource};
use crate::stats::{self, Holding, Summary};
use crate::subject::{BenchResult, Connector, Held, Locker};

/// How many errors are kept, in words, per measurement.
const KEPT_ERRORS: usize = 3;
/// Bound on one acquire+release cycle of an uncontended run.
const CYCLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Tries per guard while a keep-alive run creates its guards: a busy
/// machine fails some at first (a Redlock node past its 50 ms, a timeout);
/// those are tried again after a backoff and counted, and only a guard that
/// fails every time fails the run.
pub const CREATE_ATTEMPTS: u32 = 5;

/// Errors seen during a measurement: a count and the first few messages.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Errors {
    /// How many operations failed.
    pub count: usize,
    /// The first few messages.
    pub first: Vec<String>,
}

impl Errors {
    fn push(&mut self, e: String) {
        self.count += 1;
        if self.first.len() < KEPT_ERRORS {
            self.first.push(e);
        }
    }

    fn merge(&mut self, other: Errors) {
        self.count += other.count;
        for e in other.first {
            if self.first.len() < KEPT_ERRORS {
                self.first.push(e);
            }
        }
    }

    /// True when nothing failed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

async fn connect_pool(connector: &dyn Connector, n: usize) -> BenchResult<Vec<Arc<dyn Locker>>> {
    join_all((0..n).map(|_| connector.connect()))
        .await
        .into_iter()
        .collect()
}

/// Parameters of an uncontended run.
#[derive(Clone, Debug)]
pub struct UncontendedParams {
    /// Concurrent tasks, each on its own lock name.
    pub tasks: usize,
    /// Tasks per backend client (the pool has `ceil(tasks / tasks_per_client)` clients).
    pub tasks_per_client: usize,
    /// How long the measured loop runs.
    pub duration: Duration,
    /// Unmeasured cycles per task first (connections, scripts, directories).
    pub warmup: usize,
    /// Name prefix, unique per run and subject.
    pub prefix: String,
}

/// The result of an uncontended run.
#[derive(Clone, Debug, Serialize)]
pub struct Uncontended {
    /// Concurrent tasks.
    pub tasks: usize,
    /// Backend clients shared by the tasks.
    pub clients: usize,
    /// acquire + release, one cycle.
    pub cycle: Option<Summary>,
    /// acquire alone.
    pub acquire: Option<Summary>,
    /// release alone.
    pub release: Option<Summary>,
    /// Completed cycles per second, all tasks together.
    pub throughput_per_s: f64,
    /// Completed cycles behind the throughput.
    pub cycles: usize,
    /// Length of the measured loop.
    pub elapsed_s: f64,
    /// This process's CPU time per completed cycle, µs: the client's own
    /// work (the servers are other processes), all its threads, the
    /// benchmark's loop included (the same for every subject).
    pub cpu_us_per_cycle: Option<f64>,
    /// Failed cycles.
    pub errors: Errors,
}

/// The raw samples of uncontended runs (one or several slices).
#[derive(Debug, Default)]
pub struct CycleSamples {
    tasks: usize,
    clients: usize,
    acquire: Vec<Duration>,
    release: Vec<Duration>,
    cycle: Vec<Duration>,
    last_end: Option<Instant>,
    /// Measured time, summed over slices.
    elapsed: Duration,
    /// This process's CPU time over the measured time, summed over slices
    /// (`None` where it could not be read).
    cpu: Option<Duration>,
    errors: Errors,
}

impl CycleSamples {
    fn extend(&mut self, other: CycleSamples) {
        self.acquire.extend(other.acquire);
        self.release.extend(other.release);
        self.cycle.extend(other.cycle);
        self.last_end = self.last_end.max(other.last_end);
        self.errors.merge(other.errors);
    }

    /// Adds another slice of the same subject and level.
    pub fn merge(&mut self, other: CycleSamples) {
        self.tasks = other.tasks;
        self.clients = other.clients;
        self.elapsed += other.elapsed;
        self.cpu = match (self.cpu, other.cpu) {
            (Some(a), Some(b)) => Some(a + b),
            (None, b) if self.cycle.is_empty() => b,
            _ => None,
        };
        self.extend(other);
    }

    /// Percentiles and throughput.
    pub fn finish(mut self) -> Uncontended {
        let cycles = self.cycle.len();
        Uncontended {
            tasks: self.tasks,
            clients: self.clients,
            cycle: Summary::of(&mut self.cycle),
            acquire: Summary::of(&mut self.acquire),
            release: Summary::of(&mut self.release),
            throughput_per_s: stats::rate(cycles as u64, self.elapsed),
            cycles,
            elapsed_s: self.elapsed.as_secs_f64(),
            cpu_us_per_cycle: self
                .cpu
                .filter(|_| cycles > 0)
                .map(|cpu| cpu.as_secs_f64() * 1e6 / cycles as f64),
            errors: self.errors,
        }
    }
}

async fn one_cycle(locker: &dyn Locker, name: &str) -> BenchResult<(Duration, Duration)> {
    let t0 = Instant::now();
    let held = locker
        .acquire(name, CYCLE_TIMEOUT / 2)
        .await?
        .ok_or_else(|| format!("uncontended acquire of {name} timed out: the lock was held"))?;
    let t1 = Instant::now();
    held.release().await?;
    Ok((t1 - t0, t1.elapsed()))
}

async fn bounded_cycle(locker: &dyn Locker, name: &str) -> BenchResult<(Duration, Duration)> {
    tokio::time::timeout(CYCLE_TIMEOUT, one_cycle(locker, name))
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "acquire+release of {name} took more than {CYCLE_TIMEOUT:?}"
            ))
        })
}

/// The backend clients of an uncontended run: one per `tasks_per_client` tasks.
pub async fn uncontended_pool(
    connector: &dyn Connector,
    p: &UncontendedParams,
) -> BenchResult<Vec<Arc<dyn Locker>>> {
    connect_pool(connector, p.tasks.div_ceil(p.tasks_per_client.max(1))).await
}

/// Runs `tasks` concurrent loops of acquire+release on `clients` (task `t`
/// uses client `t % clients.len()`), each task on its own name.
pub async fn uncontended(
    clients: &[Arc<dyn Locker>],
    p: &UncontendedParams,
) -> BenchResult<CycleSamples> {
    let n_clients = clients.len();
    if n_clients == 0 {
        return Err("no client to run with".into());
    }
    let barrier = Arc::new(Barrier::new(p.tasks + 1));
    let mut handles = Vec::new();
    for t in 0..p.tasks {
        let locker = clients[t % n_clients].clone();
        let name = format!("{}/t{t}", p.prefix);
        let barrier = barrier.clone();
        let (duration, warmup) = (p.duration, p.warmup);
        handles.push(tokio::spawn(async move {
            let mut s = CycleSamples::default();
            let mut warm_ok = true;
            for _ in 0..warmup {
                if let Err(e) = bounded_cycle(locker.as_ref(), &name).await {
                    s.errors.push(format!("warm-up: {e}"));
                    warm_ok = false;
                    break;
                }
            }
            barrier.wait().await;
            let deadline = Instant::now() + duration;
            while warm_ok && Instant::now() < deadline {
                match bounded_cycle(locker.as_ref(), &name).await {
                    Ok((acq, rel)) => {
                        s.acquire.push(acq);
                        s.release.push(rel);
                        s.cycle.push(acq + rel);
                        s.last_end = Some(Instant::now());
                    }
                    Err(e) => {
                        s.errors.push(e);
                        break;
                    }
                }
            }
            s
        }));
    }
    // The tasks warm up, then wait at the barrier; the clock starts when the
    // last one (and this one) arrives.
    barrier.wait().await;
    let started = Instant::now();
    let cpu_before = process_cpu();
    let mut all = CycleSamples {
        tasks: p.tasks,
        clients: n_clients,
        ..CycleSamples::default()
    };
    for h in handles {
        match h.await {
            Ok(s) => all.extend(s),
            Err(e) => all.errors.push(format!("task failed: {e}")),
        }
    }
    all.elapsed = all
        .last_end
        .map(|e| e.saturating_duration_since(started))
        .unwrap_or_default();
    all.cpu = cpu_before
        .zip(process_cpu())
        .map(|(before, after)| after.saturating_sub(before));
    Ok(all)
}

/// Parameters of a contended run.
#[derive(Clone, Debug)]
pub struct ContendedParams {
    /// Clients contending for the one name, each with its own connection.
    pub contenders: usize,
    /// How long the measured loop runs.
    pub duration: Duration,
    /// The longest one acquire may wait.
    pub wait: Duration,
    /// The lock name.
    pub name: String,
}

/// The result of a contended run.
#[derive(Clone, Debug, Serialize)]
pub struct Contended {
    /// Clients on the one name.
    pub contenders: usize,
    /// Acquisitions granted during the measured loop.
    pub acquisitions: usize,
    /// Acquisitions per second.
    pub throughput_per_s: f64,
    /// Release (call) to the next holder's acquire returning.
    pub handoff: Option<Summary>,
    /// acquire call to holding.
    pub wait: Option<Summary>,
    /// The longest wait, ms.
    pub longest_wait_ms: Option<f64>,
    /// Share of hand-offs that went to a different client.
    pub to_other_share: Option<f64>,
    /// Hand-offs behind `to_other_share` (hand-off latencies + overlaps).
    pub transitions: usize,
    /// Holdings granted before the previous holder started releasing.
    pub overlaps: usize,
    /// Acquires that gave up after `wait`.
    pub timeouts: usize,
    /// Failed acquires or releases.
    pub errors: Errors,
}

/// `contenders` clients loop acquire (wait) -> release on one name.
pub async fn contended(
    connector: Arc<dyn Connector>,
    p: &ContendedParams,
) -> BenchResult<Contended> {
    let clients = connect_pool(connector.as_ref(), p.contenders).await?;
    // Warm each client on a name of its own (connections, scripts, parents).
    let mut warm_errors = Errors::default();
    for (i, c) in clients.iter().enumerate() {
        if let Err(e) = bounded_cycle(c.as_ref(), &format!("{}-warm{i}", p.name)).await {
            warm_errors.push(format!("warm-up: {e}"));
        }
    }
    if !warm_errors.is_empty() {
        return Err(warm_errors.first.join("; "));
    }
    let barrier = Arc::new(Barrier::new(p.contenders + 1));
    let mut handles = Vec::new();
    for (id, locker) in clients.into_iter().enumerate() {
        let barrier = barrier.clone();
        let name = p.name.clone();
        let (wait, duration) = (p.wait, p.duration);
        handles.push(tokio::spawn(async move {
            let mut holdings = Vec::new();
            let mut timeouts = 0;
            let mut errors = Errors::default();
            barrier.wait().await;
            let deadline = Instant::now() + duration;
            while Instant::now() < deadline {
                let requested = Instant::now();
                match locker.acquire(&name, wait).await {
                    Ok(Some(held)) => {
                        let acquired = Instant::now();
                        let release_started = Instant::now();
                        let released = held.release().await;
                        holdings.push(Holding {
                            client: id,
                            requested,
                            acquired,
                            release_started,
                        });
                        if let Err(e) = released {
                            errors.push(e);
                            break;
                        }
                    }
                    Ok(None) => timeouts += 1,
                    Err(e) => {
                        errors.push(e);
                        break;
                    }
                }
            }
            (holdings, timeouts, errors)
        }));
    }
    barrier.wait().await;
    let deadline = Instant::now() + p.duration;
    let mut holdings = Vec::new();
    let mut timeouts = 0;
    let mut errors = Errors::default();
    let bound = tokio::time::Instant::from_std(deadline) + p.wait + Duration::from_secs(10);
    for h in handles {
        let abort = h.abort_handle();
        match tokio::time::timeout_at(bound, h).await {
            Ok(Ok((hs, t, e))) => {
                holdings.extend(hs);
                timeouts += t;
                errors.merge(e);
            }
            Ok(Err(e)) => errors.push(format!("contender task failed: {e}")),
            Err(_) => {
                abort.abort();
                errors.push("a contender did not finish its last cycle in time".to_string());
            }
        }
    }
    // Only what was granted within the measured loop counts.
    holdings.retain(|h| h.acquired <= deadline);
    let acquisitions = holdings.len();
    let mut h = stats::handoffs(holdings);
    Ok(Contended {
        contenders: p.contenders,
        acquisitions,
        throughput_per_s: stats::rate(acquisitions as u64, p.duration),
        longest_wait_ms: h.longest_wait().map(|d| d.as_secs_f64() * 1e3),
        to_other_share: h.share_to_other(),
        transitions: h.latencies.len() + h.overlaps,
        overlaps: h.overlaps,
        handoff: Summary::of(&mut h.latencies),
        wait: Summary::of(&mut h.waits),
        timeouts,
        errors,
    })
}

/// How the renewals of a keep-alive run's guards are sent: the two variants
/// each guard count is measured in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewals {
    /// The backend's default configuration (Redis and Redlock batch a
    /// client's renewals per node): what the keep-alive targets judge.
    Batched,
    /// Renewal batching off, one request per renewal: the comparison,
    /// measured on Redis and Redlock only.
    Unbatched,
}

impl Renewals {
    /// The variant in words, as the report and the JSON results show it.
    pub fn label(self) -> &'static str {
        match self {
            Renewals::Batched => "default",
            Renewals::Unbatched => "batching off (one request per renewal)",
        }
    }

    /// The short tag in the names of the variant's locks.
    pub fn tag(self) -> &'static str {
        match self {
            Renewals::Batched => "k",
            Renewals::Unbatched => "u",
        }
    }
}

impl std::fmt::Display for Renewals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

impl Serialize for Renewals {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.label())
    }
}

/// Parameters of a keep-alive run.
#[derive(Clone, Debug)]
pub struct KeepAliveParams {
    /// Guards held at once.
    pub guards: usize,
    /// Concurrent tasks creating and releasing them.
    pub creators: usize,
    /// How long the server counter is read while they are held.
    pub window: Duration,
    /// The acquisitions are paced over this long (guard i not before
    /// i/guards of it), so that every guard count starts with its renewals
    /// spread over the interval as in a process that holds guards taken at
    /// different times, not all in phase (which would favour a small count
    /// created in a few ms: its renewals would all fall in the same windows).
    pub spread: Duration,
    /// Name prefix.
    pub prefix: String,
    /// The backend's label in [`lock_core::metrics::REQUESTS`], whose client
    /// requests are counted over the window (`None`: not counted).
    pub requests: Option<&'static str>,
    /// How the guards' renewals are sent.
    pub renewals: Renewals,
}

/// The result of a keep-alive run.
#[derive(Clone, Debug, Serialize)]
pub struct KeepAlive {
    /// Guards held at once.
    pub guards: usize,
    /// Backend clients holding them.
    pub sessions: usize,
    /// Time to acquire them all.
    pub create_s: f64,
    /// Acquisitions tried again while the guards were created (a transient
    /// failure of an overloaded machine: a node that answered late, a
    /// timeout); each guard gets [`CREATE_ATTEMPTS`] tries.
    pub create_retries: usize,
    /// Server operations per second while they were held (measured window).
    pub hold_ops_per_s: Option<f64>,
    /// Server operations counted in the window.
    pub hold_ops: Option<u64>,
    /// Client requests per second while they were held (lock-core's
    /// `distlock_requests_total` of this backend, measured window).
    pub hold_requests_per_s: Option<f64>,
    /// Client requests counted in the window.
    pub hold_requests: Option<u64>,
    /// How the renewals were sent (batched, or one request each).
    pub renewals: Renewals,
    /// The window, s.
    pub window_s: f64,
    /// Resident memory growth of this process per guard, bytes (depends on
    /// what earlier runs freed, which is reused first).
    pub rss_per_guard_bytes: Option<f64>,
    /// Live heap growth of this process per guard, bytes: what the client
    /// keeps for each guard held (counted by the global allocator).
    pub heap_per_guard_bytes: Option<f64>,
    /// Guards no longer held at the end of the window.
    pub lost: usize,
    /// Failed acquires or releases.
    pub errors: Errors,
}

/// Acquires `name` for a keep-alive run, up to [`CREATE_ATTEMPTS`] times
/// (100 ms, 200 ms, ... between them), adding each retry to `retries`; the
/// last failure if every try failed.
async fn create_one(
    locker: &dyn Locker,
    name: &str,
    retries: &mut usize,
) -> BenchResult<Box<dyn Held>> {
    let mut attempt = 0;
    loop {
        let failure = match tokio::time::timeout(
            CYCLE_TIMEOUT,
            locker.acquire(name, CYCLE_TIMEOUT / 2),
        )
        .await
        {
            Ok(Ok(Some(h))) => return Ok(h),
            Ok(Ok(None)) => format!("acquire {name}: timed out"),
            Ok(Err(e)) => e,
            Err(_) => format!("acquire {name}: took more than {CYCLE_TIMEOUT:?}"),
        };
        attempt += 1;
        if attempt >= CREATE_ATTEMPTS {
            return Err(format!("{failure} (after {attempt} tries)"));
        }
        *retries += 1;
        tokio::time::sleep(Duration::from_millis(100) * 2u32.pow(attempt - 1)).await;
    }
}

/// Reads the server counter over `window`: operations per second and count.
pub async fn ops_rate(source: &OpsSource, window: Duration) -> BenchResult<(f64, u64)> {
    let before = source.read().await?;
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let after = source.read().await?;
    let ops = after.saturating_sub(before);
    Ok((stats::rate(ops, t0.elapsed()), ops))
}

/// How long after the last guard is created the keep-alive window opens.
pub const KEEP_ALIVE_SETTLE: Duration = Duration::from_millis(250);

/// Holds `guards` locks with keep-alive on `clients` and measures the server
/// traffic and client memory it costs (traffic from [`KEEP_ALIVE_SETTLE`]
/// after the last guard was created).
pub async fn keep_alive(
    clients: &[Arc<dyn Locker>],
    source: Option<&OpsSource>,
    p: &KeepAliveParams,
) -> BenchResult<KeepAlive> {
    // The bench's own list of the guards is allocated before counting.
    let held: Arc<Mutex<Vec<Box<dyn Held>>>> = Arc::new(Mutex::new(Vec::with_capacity(p.guards)));
    let rss_before = rss_bytes();
    let heap_before = crate::heap::live_bytes();
    let created = Instant::now();
    let (mut errors, create_retries) = create_guards(clients, p, &held, created).await;
    let create_s = created.elapsed().as_secs_f64();
    let rss_after = rss_bytes();
    let heap_after = crate::heap::live_bytes();
    let guards: Vec<Box<dyn Held>> = held
        .lock()
        .map(|mut v| std::mem::take(&mut *v))
        .unwrap_or_default();
    let count = guards.len();
    let mut result = KeepAlive {
        guards: count,
        sessions: clients.len(),
        create_s,
        create_retries,
        hold_ops_per_s: None,
        hold_ops: None,
        hold_requests_per_s: None,
        hold_requests: None,
        renewals: p.renewals,
        window_s: p.window.as_secs_f64(),
        rss_per_guard_bytes: match (rss_before, rss_after) {
            (Some(b), Some(a)) if count > 0 => Some(a.saturating_sub(b) as f64 / count as f64),
            _ => None,
        },
        heap_per_guard_bytes: (count > 0)
            .then(|| heap_after.saturating_sub(heap_before).max(0) as f64 / count as f64),
        lost: 0,
        errors: Errors::default(),
    };
    if errors.is_empty() {
        measure_hold(source, p, &mut result, &mut errors).await;
    }
    result.lost = guards.iter().filter(|g| !g.is_held()).count();
    errors.merge(release_all(guards, p.creators).await);
    result.errors = errors;
    Ok(result)
}

/// Acquires the `p.guards` guards of a keep-alive run into `held`, with
/// `p.creators` tasks, guard i not before `created` plus i/guards of
/// `p.spread`; the failures and the number of acquisitions tried again.
async fn create_guards(
    clients: &[Arc<dyn Locker>],
    p: &KeepAliveParams,
    held: &Arc<Mutex<Vec<Box<dyn Held>>>>,
    created: Instant,
) -> (Errors, usize) {
    let next = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for _ in 0..p.creators.max(1) {
        let (next, held, clients) = (next.clone(), held.clone(), clients.to_vec());
        let (guards, prefix, spread) = (p.guards, p.prefix.clone(), p.spread);
        handles.push(tokio::spawn(async move {
            let (mut errors, mut retries) = (Errors::default(), 0usize);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= guards {
                    break;
                }
                let not_before = created + spread.mul_f64(i as f64 / guards as f64);
                tokio::time::sleep_until(tokio::time::Instant::from_std(not_before)).await;
                let name = format!("{prefix}/g{i}");
                let locker = &clients[i % clients.len()];
                match create_one(locker.as_ref(), &name, &mut retries).await {
                    Ok(h) => {
                        if let Ok(mut v) = held.lock() {
                            v.push(h);
                        }
                    }
                    Err(e) => {
                        errors.push(e);
                        break;
                    }
                }
            }
            (errors, retries)
        }));
    }
    let (mut errors, mut create_retries) = (Errors::default(), 0);
    for h in handles {
        match h.await {
            Ok((e, retries)) => {
                errors.merge(e);
                create_retries += retries;
            }
            Err(e) => errors.push(format!("creator task failed: {e}")),
        }
    }
    (errors, create_retries)
}

/// Reads the server counter (or waits) over `p.window` while the guards
/// are held, from [`KEEP_ALIVE_SETTLE`] on, and the client requests sent
/// meanwhile, into `result`; a counter that failed goes to `errors`.
async fn measure_hold(
    source: Option<&OpsSource>,
    p: &KeepAliveParams,
    result: &mut KeepAlive,
    errors: &mut Errors,
) {
    // Steady state only: the acquisitions' own follow-up requests (a
    // ZooKeeper guard's watch on its node, set 50 ms after the grant)
    // are done before the window opens.
    tokio::time::sleep(KEEP_ALIVE_SETTLE).await;
    let requests_before = p.requests.and_then(crate::requests::sent);
    let t0 = Instant::now();
    match source {
        Some(src) => match ops_rate(src, p.window).await {
            Ok((rate, ops)) => {
                result.hold_ops_per_s = Some(rate);
                result.hold_ops = Some(ops);
            }
            Err(e) => errors.push(format!("server counter: {e}")),
        },
        None => tokio::time::sleep(p.window).await,
    }
    let requests_after = p.requests.and_then(crate::requests::sent);
    if let (Some(b), Some(a)) = (requests_before, requests_after) {
        let n = a.saturating_sub(b);
        result.hold_requests = Some(n);
        result.hold_requests_per_s = Some(stats::rate(n, t0.elapsed()));
    }
}

/// Releases `guards` concurrently, in chunks over `creators` tasks; the
/// releases that failed (a guard already lost is not counted again).
async fn release_all(mut guards: Vec<Box<dyn Held>>, creators: usize) -> Errors {
    let count = guards.len();
    let mut errors = Errors::default();
    let per = count.div_ceil(creators.max(1)).max(1);
    let mut releases = Vec::new();
    while !guards.is_empty() {
        let chunk: Vec<Box<dyn Held>> = guards.drain(..per.min(guards.len())).collect();
        releases.push(tokio::spawn(async move {
            let mut errors = Errors::default();
            for g in chunk {
                let lost = !g.is_held();
                if let Err(e) = g.release().await {
                    // A guard already counted as lost cannot be released; that is
                    // reported as `lost`, not twice.
                    if !lost {
                        errors.push(e);
                    }
                }
            }
            errors
        }));
    }
    for r in releases {
        match r.await {
            Ok(e) => errors.merge(e),
            Err(e) => errors.push(format!("release task failed: {e}")),
        }
    }
    errors
}

/// Parameters of a read-heavy run on one read-write lock.
#[derive(Clone, Debug)]
pub struct ReadHeavyParams {
    /// Clients taking the read side, each with its own connection.
    pub readers: usize,
    /// Clients taking the write side.
    pub writers: usize,
    /// How long every holder holds (readers overlap within it).
    pub hold: Duration,
    /// How long the measured loop runs.
    pub duration: Duration,
    /// The longest one acquire may wait.
    pub wait: Duration,
    /// The lock name.
    pub name: String,
}

/// The result of a read-heavy run.
#[derive(Clone, Debug, Serialize)]
pub struct ReadHeavy {
    /// Reader clients.
    pub readers: usize,
    /// Writer clients.
    pub writers: usize,
    /// Hold time of every holding, ms.
    pub hold_ms: f64,
    /// Read holdings granted during the measured loop.
    pub reads: usize,
    /// Write holdings granted during the measured loop.
    pub writes: usize,
    /// Read holdings per second.
    pub reads_per_s: f64,
    /// Write holdings per second.
    pub writes_per_s: f64,
    /// acquire call to holding, readers.
    pub read_wait: Option<Summary>,
    /// acquire call to holding, writers (a starved writer shows here).
    pub write_wait: Option<Summary>,
    /// The most readers seen holding at once.
    pub most_readers_together: usize,
    /// Holdings granted while a conflicting holder had not started releasing
    /// (a writer with anyone): must be 0.
    pub violations: usize,
    /// Acquires that gave up after `wait`.
    pub timeouts: usize,
    /// Failed acquires or releases.
    pub errors: Errors,
}

/// Who holds the read-write lock now, as seen by this process (every
/// client is in it): a holder counts from its grant until it starts releasing.
#[derive(Default)]
struct Occupancy {
    readers: AtomicUsize,
    writers: AtomicUsize,
    most_readers: AtomicUsize,
    violations: AtomicUsize,
}

impl Occupancy {
    fn enter(&self, side: crate::subject::Side) {
        use crate::subject::Side;
        let (readers, writers) = match side {
            Side::Read => (
                self.readers.fetch_add(1, Ordering::SeqCst) + 1,
                self.writers.load(Ordering::SeqCst),
            ),
            Side::Write => (
                self.readers.load(Ordering::SeqCst),
                self.writers.fetch_add(1, Ordering::SeqCst) + 1,
            ),
        };
        self.most_readers.fetch_max(readers, Ordering::SeqCst);
        if writers > 1 || (writers == 1 && readers > 0) {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn leave(&self, side: crate::subject::Side) {
        match side {
            crate::subject::Side::Read => self.readers.fetch_sub(1, Ordering::SeqCst),
            crate::subject::Side::Write => self.writers.fetch_sub(1, Ordering::SeqCst),
        };
    }
}

/// `readers` + `writers` clients loop acquire (wait) -> hold -> release on
/// one read-write lock.
pub async fn read_heavy(
    connector: Arc<dyn Connector>,
    p: &ReadHeavyParams,
) -> BenchResult<ReadHeavy> {
    use crate::subject::Side;
    let clients = connect_pool(connector.as_ref(), p.readers + p.writers).await?;
    // Warm each client (connections, scripts, parents) on a name of its own.
    for (i, c) in clients.iter().enumerate() {
        let warm = format!("{}-warm{i}", p.name);
        match tokio::time::timeout(CYCLE_TIMEOUT, c.acquire_side(&warm, Side::Write, p.wait)).await
        {
            Ok(Ok(Some(held))) => held.release().await?,
            Ok(Ok(None)) => return Err(format!("warm-up: {warm} was held")),
            Ok(Err(e)) => return Err(format!("warm-up: {e}")),
            Err(_) => return Err(format!("warm-up: no answer within {CYCLE_TIMEOUT:?}")),
        }
    }
    let occupancy = Arc::new(Occupancy::default());
    let barrier = Arc::new(Barrier::new(clients.len() + 1));
    let mut handles = Vec::new();
    for (i, locker) in clients.into_iter().enumerate() {
        let side = if i < p.writers {
            Side::Write
        } else {
            Side::Read
        };
        let (barrier, occupancy, name) = (barrier.clone(), occupancy.clone(), p.name.clone());
        let (wait, hold, duration) = (p.wait, p.hold, p.duration);
        handles.push(tokio::spawn(async move {
            let mut waits = Vec::new();
            let mut timeouts = 0;
            let mut errors = Errors::default();
            barrier.wait().await;
            let deadline = Instant::now() + duration;
            while Instant::now() < deadline {
                let requested = Instant::now();
                match locker.acquire_side(&name, side, wait).await {
                    Ok(Some(held)) => {
                        let acquired = Instant::now();
                        occupancy.enter(side);
                        tokio::time::sleep(hold).await;
                        occupancy.leave(side);
                        if acquired <= deadline {
                            waits.push(acquired - requested);
                        }
                        if let Err(e) = held.release().await {
                            errors.push(e);
                            break;
                        }
                    }
                    Ok(None) => timeouts += 1,
                    Err(e) => {
                        errors.push(e);
                        break;
                    }
                }
            }
            (side, waits, timeouts, errors)
        }));
    }
    barrier.wait().await;
    let bound = tokio::time::Instant::now() + p.duration + p.wait + Duration::from_secs(10);
    let (mut read_waits, mut write_waits) = (Vec::new(), Vec::new());
    let mut timeouts = 0;
    let mut errors = Errors::default();
    for h in handles {
        let abort = h.abort_handle();
        match tokio::time::timeout_at(bound, h).await {
            Ok(Ok((side, w, t, e))) => {
                match side {
                    Side::Read => read_waits.extend(w),
                    Side::Write => write_waits.extend(w),
                }
                timeouts += t;
                errors.merge(e);
            }
            Ok(Err(e)) => errors.push(format!("task failed: {e}")),
            Err(_) => {
                abort.abort();
                errors.push("a client did not finish its last cycle in time".to_string());
            }
        }
    }
    let (reads, writes) = (read_waits.len(), write_waits.len());
    Ok(ReadHeavy {
        readers: p.readers,
        writers: p.writers,
        hold_ms: p.hold.as_secs_f64() * 1e3,
        reads,
        writes,
        reads_per_s: stats::rate(reads as u64, p.duration),
        writes_per_s: stats::rate(writes as u64, p.duration),
        read_wait: Summary::of(&mut read_waits),
        write_wait: Summary::of(&mut write_waits),
        most_readers_together: occupancy.most_readers.load(Ordering::SeqCst),
        violations: occupancy.violations.load(Ordering::SeqCst),
        timeouts,
        errors,
    })
}
