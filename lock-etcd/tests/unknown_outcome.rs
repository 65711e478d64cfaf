//! Requests whose outcome the client does not know (issue 31): a mutation
//! that timed out may still be applied later, after the call gave up. On
//! etcd clusters of their own, with a proxy that delays one member's
//! traffic: a late delete never removes a newer key of ours, a late put
//! never leaves an orphan key on our live lease, a downgrade whose reply
//! was lost is not reported lost, watches asked for while the watch stream
//! reopens are made, and every call keeps to its bound (wait + one request
//! timeout).

use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockName};
use lock_etcd::{EtcdConfig, EtcdLock};
use lock_testbed::{unique_name, EtcdCluster, Proxy};
use tokio::time::{sleep, Instant};

fn name(prefix: &str) -> LockName {
    LockName::new(unique_name(prefix)).expect("valid name")
}

async fn connect(cfg: EtcdConfig) -> EtcdLock {
    EtcdLock::connect(cfg)
        .await
        .expect("connect to the test etcd")
}

/// Starts a cluster on a blocking thread (the testbed API is synchronous).
async fn start_cluster(members: usize) -> EtcdCluster {
    tokio::task::spawn_blocking(move || EtcdCluster::start(members))
        .await
        .expect("start thread")
        .unwrap_or_else(|e| panic!("starting a {members}-member etcd cluster: {e}"))
}

const REQUEST: Duration = Duration::from_secs(1);
const LEASE: Duration = Duration::from_secs(10);

fn config(endpoints: Vec<String>) -> EtcdConfig {
    EtcdConfig::new(endpoints)
        .lease_ttl(LEASE)
        .request_timeout(REQUEST)
        .connect_timeout(Duration::from_secs(5))
}

fn opts() -> AcquireOptions {
    AcquireOptions::new().ttl(LEASE)
}

/// Item 4: waiters and guards whose watches are asked for while the watch
/// stream reopens (its connection was reset while it carried many
/// watches, whose re-creation takes a while through a slow link) get them:
/// every waiter is granted its lock once the holder releases, none fails
/// with "watch not created", and a guard granted then hears that its key
/// was deleted. The request timeout leaves room for re-creating the many
/// watches on a busy machine: a watch that is never made fails either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_asked_for_while_the_stream_reopens_are_made() {
    let cluster = start_cluster(1).await;
    let proxy = Proxy::start(cluster.endpoints()[0].parse().unwrap()).expect("proxy");
    let request = Duration::from_secs(3);
    let a = connect(config(vec![proxy.addr().to_string()]).request_timeout(request)).await;
    let b = connect(config(cluster.endpoints())).await;
    let admin = cluster.endpoints();
    // Many held keys, each with a watch of its own on a's stream: reopening
    // the stream re-creates them all, which takes a while.
    let mut guards = Vec::new();
    for _ in 0..1500 {
        let g = a
            .try_acquire(&name("reopen-many"), &opts())
            .await
            .expect("acquire")
            .expect("a fresh name");
        guards.push(g);
    }
    sleep(Duration::from_millis(300)).await;
    let mut held_by_b = Vec::new();
    let mut waiters = Vec::new();
    let mut fresh = Vec::new();
    // Names for b first: the reset below must not catch b's requests.
    let names: Vec<LockName> = (0..150).map(|_| name("reopen-wait")).collect();
    for n in &names {
        held_by_b.push(b.acquire(n, &opts()).await.expect("b holds"));
    }
    proxy.set_latency(Duration::from_millis(100));
    proxy.reset_all();
    // While the stream reopens: new waiters (one queue watch each) and new
    // guards (a key watch each, 50 ms after their grant), a few every 5 ms.
    for n in names {
        let a2 = a.clone();
        waiters.push(tokio::spawn(async move {
            a2.acquire(&n, &opts().wait(Duration::from_secs(30))).await
        }));
        let a2 = a.clone();
        fresh.push(tokio::spawn(async move {
            a2.try_acquire(&name("reopen-fresh"), &opts()).await
        }));
        sleep(Duration::from_millis(5)).await;
    }
    let mut fresh_guards = Vec::new();
    for (i, g) in fresh.into_iter().enumerate() {
        let g = g
            .await
            .expect("fresh task")
            .unwrap_or_else(|e| panic!("fresh guard {i}: acquire while reopening: {e}"))
            .expect("a fresh name");
        fresh_guards.push(g);
    }
    let fresh = fresh_guards;
    sleep(Duration::from_millis(400)).await;
    proxy.heal();
    sleep(Duration::from_secs(1)).await;
    for g in held_by_b {
        assert!(g.release().await.expect("b releases"));
    }
    for (i, w) in waiters.into_iter().enumerate() {
        let g = w
            .await
            .expect("waiter task")
            .unwrap_or_else(|e| panic!("waiter {i}: {e}"));
        assert!(g.is_held());
        drop(g);
    }
    // Every fresh guard's key deleted behind its back: each must hear it.
    let mut admin = etcd_client::Client::connect(&admin, None)
        .await
        .expect("admin client");
    for g in &fresh {
        let key = g
            .server_key()
            .expect("an etcd guard knows its key")
            .to_string();
        admin
            .delete(key, None)
            .await
            .expect("delete behind a guard");
    }
    let deadline = Instant::now() + LEASE;
    for (i, g) in fresh.iter().enumerate() {
        while g.is_held() {
            assert!(
                Instant::now() < deadline,
                "guard {i} never heard its key was deleted: {:?}",
                g.state()
            );
            sleep(Duration::from_millis(20)).await;
        }
    }
    drop(guards);
}
