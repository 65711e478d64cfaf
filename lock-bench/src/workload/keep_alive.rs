//! Many guards held at once with keep-alive: the server traffic, client
//! requests and client memory they cost.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{Errors, CYCLE_TIMEOUT};
use crate::servers::{rss_bytes, OpsSource};
use crate::stats;
use crate::subject::{BenchResult, Held, Locker};

/// Tries per guard while a keep-alive run creates its guards: a busy
/// machine fails some at first (a Redlock node past its 50 ms, a timeout);
/// those are tried again after a backoff and counted, and only a guard that
/// fails every time fails the run.
pub const CREATE_ATTEMPTS: u32 = 5;

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
