//! Helpers shared by the lock-etcd integration tests.
// Each test binary uses a subset of them.
#![allow(dead_code)]

pub mod conformance;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{GetOptions, SortOrder, SortTarget};
use lock_core::{GuardState, LockGuard, LockName};
use lock_etcd::{EtcdConfig, EtcdLock};
use lock_testbed::{unique_name, EtcdCluster, Proxy};
use tokio::time::{sleep, Instant};

pub fn name(prefix: &str) -> LockName {
    LockName::new(unique_name(prefix)).expect("valid name")
}

pub fn config(endpoints: Vec<String>, lease: Duration) -> EtcdConfig {
    EtcdConfig::new(endpoints)
        .lease_ttl(lease)
        .request_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(5))
}

pub async fn connect(cfg: EtcdConfig) -> EtcdLock {
    EtcdLock::connect(cfg)
        .await
        .expect("connect to the test etcd")
}

/// Starts a cluster on a blocking thread (the testbed API is synchronous).
pub async fn start_cluster(members: usize) -> EtcdCluster {
    tokio::task::spawn_blocking(move || EtcdCluster::start(members))
        .await
        .expect("start thread")
        .unwrap_or_else(|e| panic!("starting a {members}-member etcd cluster: {e}"))
}

pub async fn keys_under(endpoints: &[String], prefix: &str) -> Vec<String> {
    let mut c = etcd_client::Client::connect(endpoints, None)
        .await
        .expect("admin client");
    let opts = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_keys_only();
    let resp = c.get(prefix, Some(opts)).await.expect("list keys");
    resp.kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect()
}

/// Polls `cond` every 20 ms until it holds or `limit` passes.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if cond().await {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        sleep(Duration::from_millis(20)).await;
    }
}

/// Watches a guard's state and records whether it was ever lost.
pub fn never_lost(guard: &LockGuard) -> (Arc<Mutex<Vec<GuardState>>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut rx = guard.subscribe();
    let s = seen.clone();
    let task = tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            let st = rx.borrow_and_update().clone();
            s.lock().unwrap().push(st);
        }
    });
    (seen, task)
}

/// A 3-member cluster, a proxy in front of its leader, and the endpoints of
/// a client that talks to the leader through the proxy first (it pins the
/// leader at connect) and to the two other members directly.
pub async fn cluster_behind_a_proxy() -> (EtcdCluster, Proxy, Vec<String>) {
    let cluster = start_cluster(3).await;
    let leader = tokio::task::block_in_place(|| cluster.leader()).expect("leader");
    let eps = cluster.endpoints();
    let proxy = Proxy::start(eps[leader].parse().unwrap()).expect("proxy");
    let mut through = vec![proxy.addr().to_string()];
    through.extend(
        eps.iter()
            .enumerate()
            .filter(|(i, _)| *i != leader)
            .map(|(_, e)| e.clone()),
    );
    (cluster, proxy, through)
}
