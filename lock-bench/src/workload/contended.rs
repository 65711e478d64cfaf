//! Contention: clients waiting for one name, and the hand-offs between them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::Barrier;

use super::uncontended::bounded_cycle;
use super::{connect_pool, Errors};
use crate::stats::{self, Holding, Summary};
use crate::subject::{BenchResult, Connector};

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
