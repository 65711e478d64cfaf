//! The requests an acquisition costs, counted by the server on the
//! session (the four-letter word `cons`): an uncontended acquire + release,
//! and a waiter right behind the holder. (`requests_metrics.rs`: what the
//! client counts, in a binary of its own.)
//!
//! On the testbed's standalone server (tickTime 200 ms).

use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock};
use lock_testbed::ZkEnsemble;
use lock_zk::ZkLock;
use tokio::time::sleep;

mod support;
use support::{config, name, received, requests_per_cycle, server};

/// An uncontended acquire + release costs two requests (the create, which
/// counts the lock znode's children in its transaction, then the delete);
/// a waiter right behind the holder also lists and watches the holder's
/// node, and gets the lock when the holder's node goes, without listing
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_per_acquisition() {
    let server = server().await;
    let connect = server.connect_string();
    let session = Duration::from_secs(4);
    let holder = ZkLock::connect(config(&connect, session)).await.unwrap();
    let waiter = ZkLock::connect(config(&connect, session)).await.unwrap();
    let lock = name("requests");
    let opts = AcquireOptions::new().ttl(Duration::from_secs(4));
    // The lock's znode exists, and no heartbeat falls into the counts (one
    // per second: the counts are taken well within one).
    holder
        .acquire(&lock, &opts)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let server_ref: &'static ZkEnsemble = server;
    let count = |sid: String| tokio::task::spawn_blocking(move || received(server_ref, &sid));

    // A heartbeat may fall into one cycle; the others cost exactly two: the
    // create (counting the children in its transaction) and the delete.
    let per_cycle = requests_per_cycle(server, &holder, &lock, &opts).await;
    assert_eq!(
        per_cycle[0], 2,
        "requests per uncontended cycle: {per_cycle:?}"
    );

    let held = holder.acquire(&lock, &opts).await.unwrap();
    let wsid = waiter.session_id().unwrap();
    let before = count(wsid.clone()).await.unwrap();
    let waiting = {
        let (waiter, lock) = (waiter.clone(), lock.clone());
        let opts = opts.clone().wait(Duration::from_secs(10));
        tokio::spawn(async move { waiter.acquire(&lock, &opts).await })
    };
    sleep(Duration::from_millis(200)).await;
    assert!(held.release().await.unwrap());
    let g = waiting.await.unwrap().unwrap();
    let waited = count(wsid.clone()).await.unwrap() - before;
    assert!(g.release().await.unwrap());
    // the create (counting two children), the listing, the watch on the
    // holder's node, then the delete; and at most one heartbeat (one a
    // second) in either window, before the grant or before the release.
    let released = count(wsid).await.unwrap() - before;
    assert!(
        (3..=4).contains(&waited) && (4..=5).contains(&released) && released > waited,
        "waiter: {waited} requests until granted, {released} with its release"
    );
}
