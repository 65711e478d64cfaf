//! Exporting distlock's metrics to Prometheus, with histogram buckets fitted
//! to lock latencies (acquisitions from a tenth of a millisecond; holds up to
//! minutes).
//!
//! Runs on the in-process backend and prints what Prometheus would scrape:
//! `cargo run -p lock-core --example prometheus`. In a service, build the
//! exporter with an HTTP listener instead (feature `http-listener` of
//! `metrics-exporter-prometheus`, `.with_http_listener(...)`); the alert
//! rules are in the `lock_core::metrics` docs.

use std::time::Duration;

use lock_core::metrics as m;
use lock_core::{AcquireOptions, DistributedLock, DistributedLockExt, MemoryLock};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

/// Acquisition latency: 100 µs (a local Redis) to 30 s (a long wait).
const ACQUIRE_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];
/// Hold duration: 1 ms to 10 minutes.
const HOLD_BUCKETS: &[f64] = &[
    0.001, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prometheus = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(m::ACQUISITION_TIME.into()), ACQUIRE_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(m::HOLD_DURATION.into()), HOLD_BUCKETS)?
        .install_recorder()?;
    m::describe();

    let locks = MemoryLock::new();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_millis(50));
    for job in ["reports/daily", "reports/daily", "cache/refresh"] {
        locks
            .with_lock(&job.parse()?, &opts, |_guard| async {
                tokio::time::sleep(Duration::from_millis(5)).await;
            })
            .await?;
    }
    let held = locks.acquire(&"reports/daily".parse()?, &opts).await?;
    let contended = locks.acquire(&"reports/daily".parse()?, &opts).await;
    assert!(
        contended.is_err(),
        "the lock is held: the second acquire times out"
    );
    held.release().await?;

    print!("{}", prometheus.render());
    Ok(())
}
