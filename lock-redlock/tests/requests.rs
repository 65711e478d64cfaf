//! How long an uncontended acquire + release takes over five local nodes:
//! about one round trip each (all nodes are asked at once, and each step
//! returns as soon as a quorum answered).

use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockName};
use lock_redlock::{RedlockConfig, RedlockLock};
use lock_testbed::{unique_name, RedisSet};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_acquire_and_release_take_about_one_round_trip_each() {
    let set =
        RedisSet::start(5).unwrap_or_else(|e| panic!("five Redis servers did not start: {e}"));
    // The node timeout only bounds faults; raised above the default 50 ms
    // because other builds load this machine (the happy path never waits it).
    let cfg = RedlockConfig::new(set.urls()).node_timeout(Duration::from_millis(250));
    let locks = RedlockLock::connect(cfg).await.expect("connect");
    let name = LockName::new(unique_name("latency")).unwrap();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .keep_alive(false);
    // Warm up (script cache, connections).
    for _ in 0..20 {
        assert!(locks
            .acquire(&name, &opts)
            .await
            .unwrap()
            .release()
            .await
            .unwrap());
    }
    const PAIRS: u32 = 500;
    let mut acquire = Vec::with_capacity(PAIRS as usize);
    let mut release = Vec::with_capacity(PAIRS as usize);
    let started = Instant::now();
    for _ in 0..PAIRS {
        let t = Instant::now();
        let g = locks
            .acquire(&name, &opts)
            .await
            .expect("uncontended acquire");
        acquire.push(t.elapsed());
        let t = Instant::now();
        assert!(g.release().await.expect("release"));
        release.push(t.elapsed());
    }
    let total = started.elapsed();
    acquire.sort();
    release.sort();
    let pct = |v: &[Duration], p: usize| v[(v.len() * p / 100).min(v.len() - 1)];
    println!(
        "{PAIRS} acquire+release pairs in {total:?} ({:.0} pairs/s); acquire p50 {:?} p99 {:?}; release p50 {:?} p99 {:?}",
        f64::from(PAIRS) / total.as_secs_f64(),
        pct(&acquire, 50),
        pct(&acquire, 99),
        pct(&release, 50),
        pct(&release, 99),
    );
    // Loose bounds (debug build, shared 2-core machine); the numbers are printed.
    assert!(
        pct(&acquire, 50) < Duration::from_millis(5),
        "{:?}",
        pct(&acquire, 50)
    );
    assert!(
        pct(&release, 50) < Duration::from_millis(5),
        "{:?}",
        pct(&release, 50)
    );
}
