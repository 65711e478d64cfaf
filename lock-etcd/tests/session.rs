//! What a session means: one lease per client whatever the number of guards,
//! per-guard TTLs independent of the lease TTL, a guard's validity bounded by
//! the session's last confirmation, in-process turns on one name, and the loss
//! of every guard when the session expires.

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
            .lease_ttl(lease)
            .request_timeout(Duration::from_secs(1)),
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

/// A client cut off longer than its session lease loses every guard (their
/// validity runs out: the client cannot tell a dead lease from a silent
/// network), and once it is back it works with a new session (the server
/// expired the old lease meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_expiry_loses_every_guard_of_the_client() {
    let lease = Duration::from_secs(1);
    let proxy = Proxy::start(endpoints()[0].parse().unwrap()).expect("proxy");
    let a = EtcdLock::connect(
        EtcdConfig::new([proxy.addr().to_string()])
            .lease_ttl(lease)
            .request_timeout(Duration::from_millis(500)),
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
        assert_eq!(cause, LossCause::Expired);
    }
    // Long enough for the server to have expired the lease.
    sleep(lease * 2 + Duration::from_millis(600)).await;
    proxy.heal();
    let g3 = a
        .acquire(&names[0], &opts.clone().wait(Duration::from_secs(5)))
        .await
        .expect("new session");
    let (new_lease, _) = a.session_lease().await.unwrap();
    assert_ne!(new_lease, old_lease);
    assert!(g3.release().await.unwrap());
}

/// Every state a guard showed, with the instant it was seen.
type History = Arc<Mutex<Vec<(Instant, GuardState)>>>;

/// Records every state a guard goes through, with the instant it was seen.
fn record(g: &lock_core::LockGuard) -> (History, tokio::task::JoinHandle<()>) {
    let mut watch = g.subscribe();
    let states = Arc::new(Mutex::new(vec![(Instant::now(), g.state())]));
    let seen = states.clone();
    let task = tokio::spawn(async move {
        while watch.changed().await.is_ok() {
            let st = watch.borrow_and_update().clone();
            seen.lock().unwrap().push((Instant::now(), st));
        }
    });
    (states, task)
}

/// Waits until the guard's state is `Lost` (as the core set it, not merely
/// past its validity) and returns the cause.
async fn lost_cause(g: &lock_core::LockGuard) -> LossCause {
    let mut watch = g.subscribe();
    let st = watch
        .wait_for(|s| matches!(s, GuardState::Lost { .. }))
        .await
        .expect("keeper gone")
        .clone();
    match st {
        GuardState::Lost { cause } => cause,
        other => unreachable!("{other:?}"),
    }
}

/// A guard TTL of 30 s on a 2 s lease: the guard's validity never passes the
/// session's last confirmed keep-alive + the lease TTL. Every state the guard
/// shows at an instant `t` is valid until at most `t + lease` (the keep-alive
/// that vouched for it was sent before `t`); once the client's proxy is
/// blackholed at `b`, at most `b + lease`, and the guard is lost within about
/// the lease TTL, not its 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_validity_never_outlives_the_session() {
    let lease = Duration::from_secs(2);
    let proxy = Proxy::start(endpoints()[0].parse().unwrap()).expect("proxy");
    let a = EtcdLock::connect(
        EtcdConfig::new([proxy.addr().to_string()])
            .lease_ttl(lease)
            .request_timeout(Duration::from_millis(500)),
    )
    .await
    .unwrap();
    assert_eq!(a.session_lease().await.unwrap().1, lease);
    let n = name("session-bound");
    let g = a
        .acquire(&n, &AcquireOptions::new().ttl(Duration::from_secs(30)))
        .await
        .unwrap();
    let first = g.valid_until().expect("held");
    let (states, recorder) = record(&g);
    // Connected: held across two lease TTLs, validity always within one lease
    // TTL of now and moving forward with the keep-alives.
    let until = Instant::now() + lease * 2;
    while Instant::now() < until {
        let now = Instant::now();
        let v = g.valid_until().expect("lost while the session is fine");
        assert!(v > now, "{v:?} not after {now:?}");
        assert!(
            v <= now + lease,
            "valid {:?} ahead, lease {lease:?}",
            v - now
        );
        sleep(Duration::from_millis(50)).await;
    }
    let later = g.valid_until().expect("held");
    assert!(
        later > first + lease,
        "validity did not follow the keep-alives: {first:?} then {later:?}"
    );
    // Cut off: nothing vouches for the lease any more.
    let b = Instant::now();
    proxy.blackhole();
    let lost_after = loop {
        let now = Instant::now();
        match g.valid_until() {
            Some(v) => {
                assert!(
                    v <= b + lease,
                    "valid {:?} past the blackhole, lease {lease:?}",
                    v - b
                );
                assert!(
                    now < b + lease + Duration::from_millis(1500),
                    "still held {:?} after the blackhole",
                    now - b
                );
            }
            None => break now - b,
        }
        sleep(Duration::from_millis(10)).await;
    };
    let cause = timeout(Duration::from_secs(1), lost_cause(&g))
        .await
        .expect("not reported lost");
    println!(
        "lease {lease:?}, guard ttl 30 s: lost {lost_after:?} after the blackhole ({cause:?})"
    );
    assert_eq!(cause, LossCause::Expired);
    // The last keep-alive before the blackhole was sent at most a third of the
    // lease TTL earlier (plus scheduling): not lost before its bound.
    assert!(
        lost_after >= lease / 2,
        "lost {lost_after:?} after the blackhole: earlier than the session's bound"
    );
    recorder.abort();
    for (t, st) in states.lock().unwrap().iter() {
        if let Some(v) = st.valid_until() {
            assert!(v <= *t + lease, "{st:?} seen at {t:?}");
            if *t >= b {
                assert!(
                    v <= b + lease,
                    "{st:?} seen {:?} after the blackhole",
                    *t - b
                );
            }
        }
    }
}

/// With keep-alive off, a guard TTL longer than the lease TTL (5 s on a 2 s
/// lease) holds for its own TTL while the session keeps confirming, then is
/// `Lost(Expired)` and the lock is given up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_off_holds_its_ttl_longer_than_the_lease() {
    let lease = Duration::from_secs(2);
    let (a, b) = (connect(lease).await, connect(lease).await);
    let (lease_id, _) = a.session_lease().await.expect("session");
    let n = name("session-off-long");
    let ttl = Duration::from_secs(5);
    let t = Instant::now();
    let g = a
        .acquire(&n, &AcquireOptions::new().ttl(ttl).keep_alive(false))
        .await
        .unwrap();
    let (states, recorder) = record(&g);
    while t.elapsed() < ttl - Duration::from_millis(400) {
        assert!(
            matches!(g.state(), GuardState::Held { .. }),
            "after {:?}: {:?}",
            t.elapsed(),
            g.state()
        );
        assert!(b
            .try_acquire(&n, &AcquireOptions::new())
            .await
            .unwrap()
            .is_none());
        sleep(Duration::from_millis(250)).await;
    }
    let cause = timeout(Duration::from_secs(2), lost_cause(&g))
        .await
        .expect("not lost at its TTL");
    let lost_at = t.elapsed();
    assert_eq!(cause, LossCause::Expired);
    assert!(
        lost_at >= ttl - Duration::from_millis(200),
        "lost after {lost_at:?}, before its TTL"
    );
    assert_eq!(
        a.session_lease().await.map(|s| s.0),
        Some(lease_id),
        "the session lives on"
    );
    let g2 = b
        .acquire(&n, &AcquireOptions::new().wait(Duration::from_secs(5)))
        .await
        .expect("next client");
    let took = t.elapsed();
    println!("keep-alive off, ttl {ttl:?}, lease {lease:?}: lost after {lost_at:?}, next holder after {took:?}");
    assert!(took < ttl + Duration::from_secs(1), "freed after {took:?}");
    assert!(g2.release().await.unwrap());
    recorder.abort();
    let states = states.lock().unwrap().clone();
    let lost_early = states
        .iter()
        .filter(|(_, s)| !matches!(s, GuardState::Held { .. }))
        .find(|(at, _)| *at - t < ttl - Duration::from_millis(200));
    assert!(lost_early.is_none(), "{lost_early:?} in {states:?}");
}

/// A process paused (GC, swap, SIGSTOP) until etcd freed its lock wakes up
/// with a guard that is not held, although the guard's own TTL (30 s) is far
/// from over: its validity was bounded by the session's last confirmation.
/// The pause is this test's only runtime thread blocked while another thread
/// waits for the server to delete our key.
#[tokio::test(flavor = "current_thread")]
async fn paused_past_the_lease_wakes_up_not_held() {
    let lease = Duration::from_secs(1);
    let a = connect(lease).await;
    let n = name("session-paused");
    let g = a
        .acquire(&n, &AcquireOptions::new().ttl(Duration::from_secs(30)))
        .await
        .unwrap();
    let (lease_id, _) = a.session_lease().await.expect("session");
    let key = format!("{}{lease_id:x}", a.key_prefix(&n));
    assert!(g.is_held());
    let eps = endpoints();
    let paused_at = Instant::now();
    // The pause: nothing of this runtime runs until the server freed the lock.
    let freed_after = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let mut admin = etcd_client::Client::connect(eps, None).await.unwrap();
            loop {
                let resp = admin.get(key.as_str(), None).await.unwrap();
                if resp.kvs().is_empty() {
                    return paused_at.elapsed();
                }
                assert!(
                    paused_at.elapsed() < Duration::from_secs(10),
                    "etcd never freed the paused client's lock"
                );
                sleep(Duration::from_millis(50)).await;
            }
        })
    })
    .join()
    .expect("checker thread");
    // Awake, before any other task of this process ran.
    let held = g.is_held();
    let state = g.state();
    println!("lease {lease:?}, guard ttl 30 s: etcd freed the lock {freed_after:?} into the pause; on waking: {state:?}");
    assert!(!held, "held after the server freed the lock: {state:?}");
    assert_eq!(g.valid_until(), None);
    let cause = timeout(Duration::from_secs(2), lost_cause(&g))
        .await
        .expect("loss not reported after waking");
    assert!(
        matches!(cause, LossCause::SessionExpired | LossCause::Expired),
        "{cause:?}"
    );
}
