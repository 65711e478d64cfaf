//! Every metric of `lock_core::metrics` is emitted, with its labels, and has
//! a description and a unit: a debugging recorder watches a scripted run on
//! `MemoryLock` and on a backend whose renewals fail.

use std::collections::HashMap;
use std::time::Duration;

use lock_core::backend::{Lease, LeaseHandle, LeaseRequest, LockBackend, Renewal};
use lock_core::metrics as m;
use lock_core::{
    async_trait, AcquireOptions, Capabilities, DistributedLock, LockError, LockName, LockStatus,
    MemoryLock, Result, TokenFence,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tokio::time::Instant;

/// A lease whose renewals always fail: its guard is suspended, then lost.
struct Failing;

#[async_trait]
impl LeaseHandle for Failing {
    async fn renew(&self, _ttl: Duration) -> Result<Renewal> {
        Err(LockError::unavailable("scripted outage"))
    }
    async fn release(&self) -> Result<bool> {
        Ok(true)
    }
}

struct Outage;

#[async_trait]
impl LockBackend for Outage {
    fn backend_capabilities(&self) -> Capabilities {
        Capabilities::new("outage")
    }
    async fn try_lock(&self, req: &LeaseRequest) -> Result<Option<Lease>> {
        Ok(Some(Lease::new(
            Box::new(Failing),
            Instant::now() + req.ttl,
        )))
    }
    async fn inspect(&self, _name: &LockName) -> Result<LockStatus> {
        Ok(LockStatus::new(false))
    }
}

/// One metric's labels (over every series), whether every series had a
/// description and a unit, and a value.
type Seen = (Vec<(String, String)>, bool, DebugValue);

#[test]
fn every_metric_is_emitted_described_and_labelled() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");
    m::describe();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let locks = MemoryLock::new();
        let name = LockName::new("metrics").unwrap();
        let opts = AcquireOptions::new()
            .ttl(Duration::from_millis(200))
            .keep_alive(false);
        let held = locks.acquire(&name, &opts).await.unwrap();
        assert!(locks.try_acquire(&name, &opts).await.unwrap().is_none());
        assert!(locks
            .acquire(&name, &opts.clone().wait(Duration::from_millis(20)))
            .await
            .is_err());
        assert!(locks
            .acquire(&name, &opts.clone().ttl(Duration::ZERO))
            .await
            .is_err());
        // Past 80% of the TTL without a renewal, then lost by expiry.
        let cause = held.lost().await;
        assert_eq!(cause, lock_core::LossCause::Expired);
        let again = locks.acquire(&name, &opts).await.unwrap();
        assert!(again.release().await.unwrap());

        let outage = Outage;
        let suspended = outage
            .acquire(
                &name,
                &AcquireOptions::new().ttl(Duration::from_millis(300)),
            )
            .await
            .unwrap();
        let mut states = suspended.subscribe();
        states
            .wait_for(|s| matches!(s, lock_core::GuardState::Suspended { .. }))
            .await
            .unwrap();
        let fence = TokenFence::new();
        fence.admit(lock_core::FencingToken::new(2)).unwrap();
        assert!(fence.admit(lock_core::FencingToken::new(1)).is_err());
        m::count_request("outage", "renew");
        suspended.lost().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    });

    let mut seen: HashMap<String, Seen> = HashMap::new();
    for (key, unit, description, value) in snapshotter.snapshot().into_vec() {
        let labels = key
            .key()
            .labels()
            .map(|l| (l.key().to_string(), l.value().to_string()))
            .collect::<Vec<_>>();
        let name = key.key().name().to_string();
        let described = unit.is_some() && description.is_some();
        let entry = seen.entry(name).or_insert((Vec::new(), described, value));
        entry.0.extend(labels);
        entry.1 &= described;
    }
    for metric in [
        m::ACQUISITION_TIME,
        m::ATTEMPTS,
        m::CONTENDED,
        m::TIMEOUTS,
        m::ERRORS,
        m::HOLD_DURATION,
        m::FENCING_REJECTS,
        m::LOSSES,
        m::HELD,
        m::SUSPENDED,
        m::LATE_RENEWALS,
        m::REQUESTS,
    ] {
        let (labels, described, _) = seen
            .get(metric)
            .unwrap_or_else(|| panic!("{metric} was never emitted; seen: {:?}", seen.keys()));
        assert!(described, "{metric} has no description or unit");
        let has = |k: &str, v: &str| labels.iter().any(|(lk, lv)| lk == k && lv == v);
        match metric {
            m::FENCING_REJECTS => assert!(has("storage", "memory"), "{metric}: {labels:?}"),
            m::ERRORS => assert!(has("kind", "invalid_argument"), "{metric}: {labels:?}"),
            m::LOSSES => assert!(has("cause", "expired"), "{metric}: {labels:?}"),
            m::SUSPENDED => assert!(has("backend", "outage"), "{metric}: {labels:?}"),
            m::REQUESTS => assert!(has("op", "renew"), "{metric}: {labels:?}"),
            _ => assert!(
                labels.iter().any(|(k, _)| k == "backend"),
                "{metric} has no backend label: {labels:?}"
            ),
        }
    }
    // Every guard has ended: the gauges are back to zero.
    for gauge in [m::HELD, m::SUSPENDED] {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            if key.key().name() == gauge {
                assert_eq!(value, DebugValue::Gauge(0.0.into()), "{gauge} {key:?}");
            }
        }
    }
}
