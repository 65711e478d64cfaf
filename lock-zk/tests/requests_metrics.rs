//! lock-zk counts every request it sends in lock-core's
//! `distlock_requests_total` (label `backend` = `zookeeper`, `op` = the
//! request): what the server received on the session is what the client
//! counted. In a binary of its own: it installs the process's `metrics`
//! recorder.

use std::collections::BTreeMap;
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, ReadWriteLock};
use lock_testbed::ZkEnsemble;
use lock_zk::{ZkConfig, ZkLock};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

mod support;
use support::{name, received, server};

/// The requests counted since the last call, by `op` (a snapshot takes
/// the counts and starts them again from zero).
fn counted(snapshotter: &Snapshotter) -> BTreeMap<String, u64> {
    let mut by_op = BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        if key.name() != lock_core::metrics::REQUESTS
            || !key
                .labels()
                .any(|l| l.key() == "backend" && l.value() == "zookeeper")
        {
            continue;
        }
        let op = key
            .labels()
            .find(|l| l.key() == "op")
            .map(|l| l.value().to_string())
            .unwrap_or_default();
        if let DebugValue::Counter(n) = value {
            *by_op.entry(op).or_default() += n;
        }
    }
    by_op
}

fn total(by_op: &BTreeMap<String, u64>) -> u64 {
    by_op.values().sum()
}

/// An uncontended cycle counts its create and its delete, and nothing else
/// but heartbeats (`keep-alive`), and the server received as many requests
/// on the session as the client counted (heartbeats included); a waiter
/// also counts its listing and its watch, and its client's next
/// acquisition sends the listing with the create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_sent_is_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this binary");
    let server = server().await;
    let connect = server.connect_string();
    let config = || ZkConfig::new(&connect).session_timeout(Duration::from_secs(4));
    let holder = ZkLock::connect(config()).await.unwrap();
    let lock = name("counted");
    let opts = AcquireOptions::new().ttl(Duration::from_secs(4));
    // The lock's znode exists from here on.
    let g = holder.acquire(&lock, &opts).await.unwrap();
    assert!(g.release().await.unwrap());
    let server_ref: &'static ZkEnsemble = server;
    let on_server = |sid: String| tokio::task::spawn_blocking(move || received(server_ref, &sid));
    let sid = holder.session_id().unwrap();

    // Only this session is open: what it sent is what the client counted.
    let mut matched = 0;
    for _ in 0..3 {
        counted(&snapshotter);
        let server_before = on_server(sid.clone()).await.unwrap();
        let g = holder.acquire(&lock, &opts).await.unwrap();
        assert!(g.release().await.unwrap());
        let cycle = counted(&snapshotter);
        let server_sent = on_server(sid.clone()).await.unwrap() - server_before;
        let n = |op: &str| cycle.get(op).copied().unwrap_or(0);
        assert_eq!((n("create"), n("delete")), (1, 1), "{cycle:?}");
        assert_eq!(total(&cycle), 2 + n("keep-alive"), "{cycle:?}");
        if total(&cycle) == server_sent {
            matched += 1;
        }
    }
    // A heartbeat sent just before a count and answered after it is
    // counted by the client in one cycle and by the server in the next.
    assert!(
        matched >= 2,
        "client and server counts matched in {matched} of 3 cycles"
    );

    // A waiter: the create (which counts two children), the listing, the
    // watch on the holder's node; then its release. The holder, held for
    // 200 ms, set its watch on its own node (50 ms after the grant).
    let waiter = ZkLock::connect(config()).await.unwrap();
    let held = holder.acquire(&lock, &opts).await.unwrap();
    counted(&snapshotter);
    let waiting = {
        let (waiter, lock) = (waiter.clone(), lock.clone());
        let opts = opts.clone().wait(Duration::from_secs(10));
        tokio::spawn(async move { waiter.acquire(&lock, &opts).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(held.release().await.unwrap());
    let g = waiting.await.unwrap().unwrap();
    assert!(g.release().await.unwrap());
    let after = counted(&snapshotter);
    let delta = |op: &str| after.get(op).copied().unwrap_or(0);
    assert_eq!(
        (
            delta("create"),
            delta("list"),
            delta("watch"),
            delta("delete")
        ),
        (1, 1, 2, 2),
        "{after:?}"
    );

    // The waiter's client found company last: its next acquisition sends
    // the listing right behind the create (one round trip), which shows it
    // alone, so the one after that counts again.
    for listings in [1, 0] {
        counted(&snapshotter);
        let g = waiter.acquire(&lock, &opts).await.unwrap();
        assert!(g.release().await.unwrap());
        let cycle = counted(&snapshotter);
        let n = |op: &str| cycle.get(op).copied().unwrap_or(0);
        assert_eq!(
            (n("create"), n("list"), n("delete")),
            (1, listings, 1),
            "{cycle:?}"
        );
    }

    // Read-write lock grants: one shown holding at its create keeps its
    // czxid as its token, with no stamp (a reader alone, and a reader
    // joining another, whose listing's pzxid is its own czxid); a reader
    // queued behind a writer is stamped once (its token must be above the
    // writer's, see `Backend::stamp`).
    let rw = name("counted-rw");
    let first = holder.acquire_read(&rw, &opts).await.unwrap();
    counted(&snapshotter);
    let second = waiter.acquire_read(&rw, &opts).await.unwrap();
    let joined = counted(&snapshotter);
    assert_eq!(joined.get("stamp"), None, "{joined:?}");
    assert!(second.fencing_token() > first.fencing_token());
    assert!(first.release().await.unwrap() && second.release().await.unwrap());
    counted(&snapshotter);
    let alone = holder.acquire_read(&rw, &opts).await.unwrap();
    let cycle = counted(&snapshotter);
    assert_eq!(
        (cycle.get("create").copied(), cycle.get("stamp")),
        (Some(1), None),
        "{cycle:?}"
    );
    assert!(alone.release().await.unwrap());
    let writer = holder.acquire_write(&rw, &opts).await.unwrap();
    let written = writer.fencing_token();
    counted(&snapshotter);
    let reading = {
        let (waiter, rw) = (waiter.clone(), rw.clone());
        let opts = opts.clone().wait(Duration::from_secs(10));
        tokio::spawn(async move { waiter.acquire_read(&rw, &opts).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(writer.release().await.unwrap());
    let reader = reading.await.unwrap().unwrap();
    let queued = counted(&snapshotter);
    assert_eq!(queued.get("stamp").copied(), Some(1), "{queued:?}");
    assert!(reader.fencing_token() > written);
    assert!(reader.release().await.unwrap());
}
