//! What a session means: one lease per client whatever the number of guards,
//! per-guard TTLs independent of the lease TTL, in-process turns on one name,
//! and the loss of every guard when the session expires.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::LeaseTimeToLiveOptions;
use lock_core::{AcquireOptions, DistributedLock, GuardState, LockName, LossCause};
use lock_etcd::{EtcdConfig, EtcdLock};
use lock_testbed::{shared_etcd, unique_name, Proxy};
use tokio::time::{sleep, timeout, Instant};

fn name(prefix: &str) -> LockName {
    LockName::new(unique_name(prefix)).expect("valid name")
}

fn endpoints() -> Vec<String> {
    shared_etcd()
        .unwrap_or_else(|e| panic!("these tests need etcd: {e}"))
        .endpoints()
}

async fn connect(lease: Duration) -> EtcdLock {
    EtcdLock::connect(
        EtcdConfig::new(endpoints())
            .with_lease_ttl(lease)
            .with_request_timeout(Duration::from_secs(1)),
    )
    .await
    .expect("connect to the test etcd")
}

/// Every guard of one client is a key on the client's one session lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_lease_per_client_whatever_the_number_of_guards() {
    let c = connect(Duration::from_secs(5)).await;
    let names: Vec<LockName> = (0..5).map(|_| name("session-many")).collect();
    let mut guards = Vec::new();
    for n in &names {
        guards.push(c.acquire(n, &AcquireOptions::new()).await.expect("acquire"));
    }
    let (lease, ttl) = c.session_lease().await.expect("live session");
    assert_eq!(ttl, Duration::from_secs(5));
    let mut admin = etcd_client::Client::connect(endpoints(), None)
        .await
        .unwrap();
    let info = admin
        .lease_time_to_live(lease, Some(LeaseTimeToLiveOptions::new().with_keys()))
        .await
        .unwrap();
    let mut keys: Vec<String> = info
        .keys()
        .iter()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    keys.sort();
    let mut expected: Vec<String> = names
        .iter()
        .map(|n| format!("{}{lease:x}", c.key_prefix(n)))
        .collect();
    expected.sort();
    assert_eq!(
        keys, expected,
        "every guard's key is on the one session lease"
    );
    for g in guards {
        assert!(g.release().await.unwrap());
    }
    let info = admin
        .lease_time_to_live(lease, Some(LeaseTimeToLiveOptions::new().with_keys()))
        .await
        .unwrap();
    assert!(
        info.keys().is_empty(),
        "keys left on the lease after release"
    );
    assert!(info.ttl() > 0, "the session outlives its guards");
}

/// With keep-alive off, a guard gives its lock up at its own TTL even though
/// the session lease (10 s here) lives on: the next client gets it then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_off_frees_at_the_guard_ttl_not_the_lease_ttl() {
    let (a, b) = (
        connect(Duration::from_secs(10)).await,
        connect(Duration::from_secs(10)).await,
    );
    let n = name("session-guard-ttl");
    let ttl = Duration::from_millis(1500);
    let t = Instant::now();
    let g = a
        .acquire(&n, &AcquireOptions::new().ttl(ttl).keep_alive(false))
        .await
        .unwrap();
    let cause = timeout(ttl + Duration::from_secs(1), g.lost())
        .await
        .expect("not lost at its TTL");
    assert_eq!(cause, LossCause::Expired);
    let g2 = b
        .acquire(&n, &AcquireOptions::new().wait(Duration::from_secs(5)))
        .await
        .expect("next client");
    let took = t.elapsed();
    println!("keep-alive off, ttl {ttl:?}, lease 10 s: next holder after {took:?}");
    assert!(took < ttl + Duration::from_secs(1), "freed after {took:?}");
    assert!(g2.release().await.unwrap());
}

/// With keep-alive on, a guard TTL longer than the lease TTL is fine: the lock
/// lives as long as the session, and the guard stays held past several lease TTLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_holds_a_guard_ttl_longer_than_the_lease() {
    let lease = Duration::from_secs(1);
    let (a, b) = (connect(lease).await, connect(lease).await);
    assert_eq!(
        a.session_lease().await.expect("session").1,
        lease,
        "1 s leases work on the testbed"
    );
    let n = name("session-long-ttl");
    let g = a
        .acquire(&n, &AcquireOptions::new().ttl(Duration::from_secs(30)))
        .await
        .unwrap();
    let mut watch = g.subscribe();
    let states = Arc::new(Mutex::new(Vec::new()));
    let seen = states.clone();
    let recorder = tokio::spawn(async move {
        while watch.changed().await.is_ok() {
            let st = watch.borrow_and_update().clone();
            seen.lock().unwrap().push(st);
        }
    });
    sleep(lease * 4).await;
    assert!(
        matches!(g.state(), GuardState::Held { .. }),
        "{:?}",
        g.state()
    );
    assert!(b
        .try_acquire(&n, &AcquireOptions::new())
        .await
        .unwrap()
        .is_none());
    assert!(g.release().await.unwrap());
    recorder.abort();
    let states = states.lock().unwrap().clone();
    assert!(
        !states.iter().any(|s| matches!(s, GuardState::Lost { .. })),
        "{states:?}"
    );
}

/// Two guards of one client on one name exclude each other; the second waits
/// its turn in the process, FIFO.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_client_same_name_takes_turns() {
    let c = connect(Duration::from_secs(5)).await;
    let n = name("session-same-name");
    let opts = AcquireOptions::new().wait(Duration::from_secs(10));
    let first = c.acquire(&n, &opts).await.unwrap();
    assert!(
        c.try_acquire(&n, &opts).await.unwrap().is_none(),
        "same client got the lock twice"
    );
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..3 {
        let (c, n, opts, order) = (c.clone(), n.clone(), opts.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let g = c.acquire(&n, &opts).await.expect("turn");
            order.lock().unwrap().push((i, g.fencing_token()));
            sleep(Duration::from_millis(10)).await;
            assert!(g.release().await.unwrap());
        }));
        sleep(Duration::from_millis(50)).await;
    }
    let t0 = first.fencing_token();
    assert!(first.release().await.unwrap());
    for t in tasks {
        t.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order.iter().map(|o| o.0).collect::<Vec<_>>(), vec![0, 1, 2]);
    let mut last = t0;
    for (_, token) in order {
        assert!(token > last, "{token:?} after {last:?}");
        last = token;
    }
}

/// When the session expires, every guard of the client is lost with
/// `SessionExpired`, and the client later works with a new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_expiry_loses_every_guard_of_the_client() {
    let lease = Duration::from_secs(1);
    let proxy = Proxy::start(endpoints()[0].parse().unwrap()).expect("proxy");
    let a = EtcdLock::connect(
        EtcdConfig::new([proxy.addr().to_string()])
            .with_lease_ttl(lease)
            .with_request_timeout(Duration::from_millis(500)),
    )
    .await
    .unwrap();
    let (old_lease, _) = a.session_lease().await.unwrap();
    let names = [name("session-expiry"), name("session-expiry")];
    let opts = AcquireOptions::new().ttl(Duration::from_secs(30));
    let g1 = a.acquire(&names[0], &opts).await.unwrap();
    let g2 = a.acquire(&names[1], &opts).await.unwrap();
    proxy.blackhole();
    for g in [&g1, &g2] {
        let cause = timeout(lease + Duration::from_secs(1), g.lost())
            .await
            .expect("guard not lost");
        assert_eq!(cause, LossCause::SessionExpired);
    }
    assert!(
        a.session_lease().await.is_none(),
        "an expired session is not reported live"
    );
    proxy.heal();
    let g3 = a
        .acquire(&names[0], &opts.clone().wait(Duration::from_secs(5)))
        .await
        .expect("new session");
    let (new_lease, _) = a.session_lease().await.unwrap();
    assert_ne!(new_lease, old_lease);
    assert!(g3.release().await.unwrap());
}
