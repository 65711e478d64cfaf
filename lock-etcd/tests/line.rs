//! The line of mutex waiters: a hand-off goes to the next in line and to
//! nobody behind it, a waiter that gives up in the middle passes nothing on,
//! a waiter whose own key goes queues again instead of taking the lock. A
//! waiting acquire that is dropped leaves no key; with eight waiting
//! clients, each release hands the lock to the next in order, quickly.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{DeleteOptions, GetOptions, SortOrder, SortTarget};
use lock_core::{AcquireOptions, DistributedLock, LockGuard, LockName};
use lock_etcd::{EtcdConfig, EtcdLock};
use lock_testbed::shared_etcd;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, Instant};

mod support;
// `connect` is this file's client of the shared etcd; the shared helper that
// connects with a given configuration is `connect_with` here.
use support::{config, connect as connect_with, eventually, keys_under, name};

fn endpoints() -> Vec<String> {
    shared_etcd()
        .unwrap_or_else(|e| panic!("these tests need etcd: {e}"))
        .endpoints()
}

async fn connect() -> EtcdLock {
    EtcdLock::connect(
        EtcdConfig::new(endpoints())
            .lease_ttl(Duration::from_secs(5))
            .request_timeout(Duration::from_secs(1)),
    )
    .await
    .expect("connect to the test etcd")
}

fn opts(wait: Duration) -> AcquireOptions {
    AcquireOptions::new().ttl(Duration::from_secs(5)).wait(wait)
}

/// The contender keys of `name`, oldest first.
async fn line_of(c: &EtcdLock, name: &LockName) -> Vec<String> {
    let mut admin = etcd_client::Client::connect(endpoints(), None)
        .await
        .expect("admin client");
    let opts = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_keys_only();
    admin
        .get(c.key_prefix(name), Some(opts))
        .await
        .expect("list keys")
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect()
}

/// Starts `c` waiting for `name` and returns once its key is in the line
/// (`len` keys in all).
async fn queue(
    c: &EtcdLock,
    name: &LockName,
    wait: Duration,
    len: usize,
) -> JoinHandle<Option<LockGuard>> {
    let task = {
        let (c, name) = (c.clone(), name.clone());
        tokio::spawn(async move { c.acquire(&name, &opts(wait)).await.ok() })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while line_of(c, name).await.len() < len {
        assert!(Instant::now() < deadline, "the waiter never queued");
        sleep(Duration::from_millis(10)).await;
    }
    // Let it set up its watches.
    sleep(Duration::from_millis(100)).await;
    task
}

/// H holds, W1 and W2 wait: H's release goes to W1 alone; W2 gets the lock
/// only when W1 releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_goes_to_the_next_in_line_only() {
    let (h, w1, w2) = (connect().await, connect().await, connect().await);
    let n = name("line-next");
    let held = h.acquire(&n, &opts(Duration::ZERO)).await.unwrap();
    let first = queue(&w1, &n, Duration::from_secs(10), 2).await;
    let second = queue(&w2, &n, Duration::from_secs(10), 3).await;
    assert!(held.release().await.unwrap());
    let g1 = timeout(Duration::from_secs(2), first)
        .await
        .expect("the next in line did not get the lock")
        .unwrap()
        .expect("the next in line got no guard");
    sleep(Duration::from_millis(300)).await;
    assert!(
        !second.is_finished(),
        "the second waiter got the lock while the first held it"
    );
    assert!(g1.is_held());
    let t1 = g1.fencing_token().unwrap();
    assert!(g1.release().await.unwrap());
    let g2 = timeout(Duration::from_secs(2), second)
        .await
        .expect("the second waiter did not get the lock")
        .unwrap()
        .expect("the second waiter got no guard");
    assert!(g2.fencing_token().unwrap() > t1);
    assert!(g2.release().await.unwrap());
}

/// H holds, W1 waits briefly and gives up, W2 waits behind it: W1's key
/// going does not give W2 the lock while H holds it; H's release does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_giving_up_in_the_middle_passes_nothing_on() {
    let (h, w1, w2) = (connect().await, connect().await, connect().await);
    let n = name("line-give-up");
    let held = h.acquire(&n, &opts(Duration::ZERO)).await.unwrap();
    let quitter = queue(&w1, &n, Duration::from_millis(700), 2).await;
    let waiter = queue(&w2, &n, Duration::from_secs(10), 3).await;
    assert!(
        quitter.await.unwrap().is_none(),
        "the quitter got the lock while it was held"
    );
    sleep(Duration::from_millis(300)).await;
    assert_eq!(line_of(&h, &n).await.len(), 2, "the quitter's key stayed");
    assert!(
        !waiter.is_finished(),
        "the waiter behind the quitter got the lock while it was held"
    );
    assert!(held.is_held());
    assert!(held.release().await.unwrap());
    let g = timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the waiter did not get the lock after the release")
        .unwrap()
        .expect("the waiter got no guard");
    assert!(g.release().await.unwrap());
}

/// The holder's key goes behind its back (as with an expired lease): the
/// next in line gets the lock, the one behind it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holders_key_going_hands_off_to_the_next_only() {
    let (h, w1, w2) = (connect().await, connect().await, connect().await);
    let n = name("line-holder-gone");
    let held = h.acquire(&n, &opts(Duration::ZERO)).await.unwrap();
    let first = queue(&w1, &n, Duration::from_secs(10), 2).await;
    let second = queue(&w2, &n, Duration::from_secs(10), 3).await;
    let holder_key = line_of(&h, &n).await[0].clone();
    let mut admin = etcd_client::Client::connect(endpoints(), None)
        .await
        .unwrap();
    admin.delete(holder_key, None).await.unwrap();
    let g1 = timeout(Duration::from_secs(2), first)
        .await
        .expect("the next in line did not get the lock")
        .unwrap()
        .expect("the next in line got no guard");
    timeout(Duration::from_secs(2), held.lost())
        .await
        .expect("the old holder never learnt of its loss");
    sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "the second waiter got the lock too");
    assert!(g1.release().await.unwrap());
    let g2 = timeout(Duration::from_secs(2), second)
        .await
        .expect("the second waiter did not get the lock")
        .unwrap()
        .expect("the second waiter got no guard");
    assert!(g2.release().await.unwrap());
}

/// A waiter's own key goes behind its back: when the holder releases, it
/// does not take the lock on the strength of the release (its key is gone);
/// it queues again and gets the lock with a key that exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_key_went_queues_again() {
    let (h, w) = (connect().await, connect().await);
    let n = name("line-own-gone");
    let held = h.acquire(&n, &opts(Duration::ZERO)).await.unwrap();
    let waiter = queue(&w, &n, Duration::from_secs(10), 2).await;
    let line = line_of(&h, &n).await;
    let mut admin = etcd_client::Client::connect(endpoints(), None)
        .await
        .unwrap();
    admin
        .delete(line[1].clone(), Some(DeleteOptions::new()))
        .await
        .unwrap();
    // It queues again behind the holder.
    let deadline = Instant::now() + Duration::from_secs(3);
    while line_of(&h, &n).await.len() < 2 {
        assert!(Instant::now() < deadline, "the waiter did not queue again");
        sleep(Duration::from_millis(10)).await;
    }
    assert!(!waiter.is_finished());
    assert!(held.release().await.unwrap());
    let g = timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the waiter did not get the lock")
        .unwrap()
        .expect("the waiter got no guard");
    assert!(g.is_held());
    let line = line_of(&h, &n).await;
    assert_eq!(line.len(), 1, "the holder's key is not the only one");
    assert!(g.release().await.unwrap());
}

/// A waiting acquire that is dropped (aborted task, or a timeout around it)
/// leaves no key under `NAME/`: only the holder's key remains, then none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_waiting_acquire_leaves_no_key() {
    let etcd = shared_etcd().expect("shared etcd");
    let eps = etcd.endpoints();
    let lease = Duration::from_secs(2);
    let (a, b) = (
        connect_with(config(eps.clone(), lease)).await,
        connect_with(config(eps.clone(), lease)).await,
    );
    let n = name("dropwait");
    let prefix = a.key_prefix(&n);
    let opts = AcquireOptions::new()
        .ttl(lease)
        .wait(Duration::from_secs(30));
    let g = a.acquire(&n, &opts).await.expect("acquire");
    let (a_lease, _) = a.session_lease().await.expect("session");
    let a_key = format!("{prefix}{a_lease:x}");
    assert_eq!(keys_under(&eps, &prefix).await, vec![a_key.clone()]);

    // 1. An aborted task.
    let waiting = {
        let (b, n, opts) = (b.clone(), n.clone(), opts.clone());
        tokio::spawn(async move { b.acquire(&n, &opts).await.map(|_| ()) })
    };
    eventually(Duration::from_secs(2), "waiter queued", || async {
        keys_under(&eps, &prefix).await.len() == 2
    })
    .await;
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    eventually(
        Duration::from_secs(2),
        "aborted waiter's key removed",
        || async { keys_under(&eps, &prefix).await == vec![a_key.clone()] },
    )
    .await;

    // 2. A future dropped by a timeout around it.
    let dropped = timeout(Duration::from_millis(300), b.acquire(&n, &opts)).await;
    assert!(dropped.is_err(), "acquired a held lock");
    eventually(
        Duration::from_secs(2),
        "timed-out waiter's key removed",
        || async { keys_under(&eps, &prefix).await == vec![a_key.clone()] },
    )
    .await;

    assert!(g.release().await.unwrap());
    eventually(Duration::from_secs(2), "all keys gone", || async {
        keys_under(&eps, &prefix).await.is_empty()
    })
    .await;
    // The next acquirer is not delayed by the cancelled waiters.
    let t = Instant::now();
    let g2 = b
        .acquire(&n, &opts.clone().wait(Duration::from_secs(1)))
        .await
        .expect("free lock");
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    assert!(g2.release().await.unwrap());
}

/// FIFO hand-off: with K queued waiters on separate clients, each release
/// hands the lock to the next waiter in order, quickly (a watch event, not a poll).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_handoff_is_ordered_and_fast() {
    const K: usize = 8;
    let etcd = shared_etcd().expect("shared etcd");
    let eps = etcd.endpoints();
    let lease = Duration::from_secs(5);
    let n = name("handoff");
    let opts = AcquireOptions::new()
        .ttl(lease)
        .wait(Duration::from_secs(30));
    let holder = connect_with(config(eps.clone(), lease)).await;
    let g = holder.acquire(&n, &opts).await.expect("acquire");
    // (waiter index, acquired at, release started at)
    let log = Arc::new(Mutex::new(Vec::<(usize, Instant, Instant)>::new()));
    let mut tasks = Vec::new();
    for i in 0..K {
        let c = connect_with(config(eps.clone(), lease)).await;
        let (name, opts, log) = (n.clone(), opts.clone(), log.clone());
        tasks.push(tokio::spawn(async move {
            let g = c.acquire(&name, &opts).await.expect("waiter");
            let got = Instant::now();
            let releasing = Instant::now();
            log.lock().unwrap().push((i, got, releasing));
            assert!(g.release().await.unwrap());
        }));
        // Let each waiter queue before the next one starts.
        eventually(Duration::from_secs(2), "waiter queued", || async {
            keys_under(&eps, &holder.key_prefix(&n)).await.len() == i + 2
        })
        .await;
    }
    let first_release = Instant::now();
    assert!(g.release().await.unwrap());
    for t in tasks {
        t.await.expect("waiter task");
    }
    let log = log.lock().unwrap().clone();
    let order: Vec<usize> = log.iter().map(|e| e.0).collect();
    assert_eq!(order, (0..K).collect::<Vec<_>>(), "not FIFO");
    let mut handoffs = vec![log[0].1 - first_release];
    handoffs.extend(log.windows(2).map(|w| w[1].1 - w[0].2));
    let mut sorted = handoffs.clone();
    sorted.sort();
    println!(
        "hand-offs over {K} waiters: min {:?}, median {:?}, max {:?} (all: {handoffs:?})",
        sorted[0],
        sorted[K / 2],
        sorted[K - 1]
    );
    assert!(
        sorted[K - 1] < Duration::from_secs(1),
        "a hand-off took {:?}",
        sorted[K - 1]
    );
}
