//! Readers and a writer on one read-write lock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::Barrier;

use super::{connect_pool, Errors, CYCLE_TIMEOUT};
use crate::stats::{self, Summary};
use crate::subject::{BenchResult, Connector};

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
