//! Uncontended cycles: concurrent tasks, each acquiring and releasing a
//! name of its own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::Barrier;

use super::{connect_pool, Errors, CYCLE_TIMEOUT};
use crate::servers::process_cpu;
use crate::stats::{self, Summary};
use crate::subject::{BenchResult, Connector, Locker};

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

/// One acquire+release of `name`, within [`CYCLE_TIMEOUT`]: how long the
/// acquire and the release took.
pub(super) async fn bounded_cycle(
    locker: &dyn Locker,
    name: &str,
) -> BenchResult<(Duration, Duration)> {
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
