//! Renewal batching on a real redis-server (issue #15): the renewals of a
//! client's guards go as a few requests per interval however many guards it
//! holds; a guard whose key is deleted (or replaced by a key of another type)
//! behind its back is lost (or fails) alone while the others in its batch
//! stay held; a batch larger than the limit is split and every renewal in it
//! still happens; a batch whose connection is cut surfaces to every guard in
//! it as suspended, then lost, as a single renewal always did.

use std::time::Duration;

use futures::future::join_all;
use lock_conformance::many::{hold, release_all};
use lock_core::{AcquireOptions, GuardState, LockErrorKind, LockGuard, LossCause};
use lock_redis::{RedisLock, RedisLockConfig, RenewBatching};
use lock_testbed::{Proxy, RedisServer, RespValue};
use tokio::time::{sleep, timeout, Instant};

/// Allowance for scheduling on a busy 2-core machine.
const SLACK: Duration = Duration::from_millis(700);

/// Runs a synchronous testbed call off the async workers.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

async fn start_server() -> RedisServer {
    blocking(RedisServer::start)
        .await
        .unwrap_or_else(|e| panic!("starting redis-server: {e}"))
}

async fn cmd(server: &RedisServer, args: &[&str]) -> RespValue {
    server
        .cmd_async(args)
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// `EVALSHA` calls the server has run so far: every renewal request is one,
/// and nothing else runs while the tests count.
async fn evalsha_calls(server: &RedisServer) -> u64 {
    server
        .calls_async("evalsha")
        .await
        .expect("INFO commandstats")
}

/// The remaining ms of `key` (-2: gone).
async fn pttl(server: &RedisServer, key: &str) -> i64 {
    match cmd(server, &["PTTL", key]).await {
        RespValue::Int(n) => n,
        other => panic!("PTTL {key}: {other:?}"),
    }
}

async fn client(url: &str, batching: RenewBatching) -> RedisLock {
    RedisLock::connect(
        RedisLockConfig::new(url)
            .request_timeout(Duration::from_millis(200))
            .renew_batching(batching),
    )
    .await
    .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// How many renewal requests `guards` cause over `window`, counted by the server.
async fn requests_over(server: &RedisServer, window: Duration) -> u64 {
    let before = evalsha_calls(server).await;
    sleep(window).await;
    evalsha_calls(server).await - before
}

/// N guards held by one client cost O(1) renewal requests per interval: with
/// 100 and with 1,000 guards the server runs at most one request per batching
/// window; the same 1,000 guards with batching off cost about one request per
/// guard per interval. Every guard stays held throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_guards_cost_a_bounded_number_of_requests_per_interval() {
    let server = start_server().await;
    let ttl = Duration::from_millis(1500);
    let interval = ttl / 3;
    let opts = AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(30));
    let batching = RenewBatching::default();
    let window = batching.wait_for(ttl);
    let measured = Duration::from_secs(3);
    // Batches leave at least `window` apart (the window for this TTL; no
    // batch reaches max_keys here: 1,000 guards renew ~70 times per
    // window), plus one for a window that straddles each end.
    let bound = (measured.as_millis() / window.as_millis()) as u64 + 2;

    let batched = client(&server.url(), batching).await;
    let mut per_count = Vec::new();
    for n in [100, 1_000] {
        let guards = hold(&batched, "many", n, &opts).await;
        // Past the first renewal of every guard, so that all are renewing.
        sleep(interval + interval / 2).await;
        let requests = requests_over(&server, measured).await;
        let per_interval = requests as f64 * interval.as_secs_f64() / measured.as_secs_f64();
        println!(
            "{n} guards, batched: {requests} requests in {measured:?} ({per_interval:.1} per interval)"
        );
        assert!(requests > 0, "no renewal at all in {measured:?}");
        assert!(
            requests <= bound,
            "{n} guards cost {requests} requests in {measured:?}; at most {bound} (one per {window:?} window)"
        );
        assert!(
            guards
                .iter()
                .all(|g| matches!(g.state(), GuardState::Held { .. })),
            "a guard is no longer held"
        );
        release_all(guards).await;
        per_count.push(requests);
    }

    // The same with batching off: one request per renewal.
    let unbatched = client(&server.url(), batching.window(Duration::ZERO)).await;
    let guards = hold(&unbatched, "many-off", 1_000, &opts).await;
    sleep(interval + interval / 2).await;
    let requests = requests_over(&server, measured).await;
    println!("1000 guards, batching off: {requests} requests in {measured:?}");
    // Each guard renews every 3/4 to 1 interval: at least one renewal per
    // interval each (half of that on a loaded machine, where renewals this
    // many come late).
    let least = (1_000.0 * measured.as_secs_f64() / interval.as_secs_f64() * 0.5) as u64;
    assert!(
        requests >= least,
        "batching off cost only {requests} requests; expected >= {least}: the batched figures prove nothing"
    );
    assert!(
        requests > 10 * per_count[1],
        "batched {} vs unbatched {requests}",
        per_count[1]
    );
    // One request per renewal is what overloads a busy machine: a guard of
    // this baseline may have been lost, which is not what is tested here.
    for g in guards {
        let _ = g.release().await;
    }
}

/// A guard whose key is deleted behind its back is reported lost (not the
/// owner) by the batch that renews it, and a guard whose key now holds
/// another type fails alone with the error its own request would have had
/// (a protocol error); the other guards of the same batch are extended and
/// stay held, under keep-alive too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_key_in_a_batch_affects_only_its_own_guard() {
    let server = start_server().await;
    let c = client(&server.url(), RenewBatching::default()).await;
    let ttl = Duration::from_secs(2);
    let opts = AcquireOptions::new()
        .ttl(ttl)
        .wait(Duration::from_secs(30))
        .keep_alive(false);
    let guards = hold(&c, "badkey", 20, &opts).await;
    let key = |g: &LockGuard| g.server_key().expect("redis tells the key").to_string();
    let deleted = key(&guards[3]);
    let retyped = key(&guards[7]);
    assert_eq!(cmd(&server, &["DEL", &deleted]).await, RespValue::Int(1));
    cmd(&server, &["DEL", &retyped]).await;
    cmd(&server, &["HSET", &retyped, "f", "v"]).await;

    // Every guard extends at once: the first alone at once (the connection
    // was quiet), the other 19 together one window later (one more if the
    // calls straddle a window), plus the compare-and-delete the lost
    // guard's keeper sends before its extend returns.
    let longer = Duration::from_secs(6);
    let before = evalsha_calls(&server).await;
    let outcomes = join_all(guards.iter().map(|g| g.extend(longer))).await;
    let requests = evalsha_calls(&server).await - before;
    println!("20 extends and 1 clean-up in {requests} request(s)");
    assert!(
        (2..=4).contains(&requests),
        "20 extends and 1 clean-up took {requests} requests"
    );
    for (i, outcome) in outcomes.iter().enumerate() {
        match i {
            3 => {
                let err = outcome.as_ref().expect_err("a deleted key was extended");
                assert_eq!(err.kind(), LockErrorKind::Lost, "{err}");
            }
            7 => {
                let err = outcome
                    .as_ref()
                    .expect_err("a key of another type was extended");
                assert_eq!(err.kind(), LockErrorKind::Protocol, "{err}");
                assert!(err.to_string().contains("WRONGTYPE"), "{err}");
            }
            _ => {
                outcome
                    .as_ref()
                    .unwrap_or_else(|e| panic!("guard {i} not extended: {e}"));
            }
        }
    }
    assert_eq!(
        timeout(SLACK, guards[3].lost()).await.expect("not lost"),
        LossCause::NotOwner
    );
    for (i, g) in guards.iter().enumerate() {
        if i == 3 || i == 7 {
            continue;
        }
        assert!(matches!(g.state(), GuardState::Held { .. }), "guard {i}");
        // The guard's validity counts from before its batch was sent: it
        // never ends after the server's expiry of the key.
        let t1 = Instant::now();
        let valid_left = g.valid_until().expect("held").saturating_duration_since(t1);
        let left = pttl(&server, &key(g)).await;
        let read_took = t1.elapsed();
        assert!(
            left > ttl.as_millis() as i64,
            "guard {i}: {left} ms left, not extended to {longer:?}"
        );
        assert!(
            valid_left.as_millis() as i64 <= left + read_took.as_millis() as i64 + 1,
            "guard {i}: valid for {valid_left:?} more, the server keeps the key {left} ms"
        );
    }
    let mut guards = guards;
    let broken = guards.remove(7);
    let _ = broken.release().await;
    let _ = guards.remove(3).release().await;
    release_all(guards).await;

    // Under keep-alive: the guard whose key goes is lost at its next
    // renewal; the others, renewed in the same batches, stay held.
    let short = Duration::from_millis(900);
    let opts = AcquireOptions::new()
        .ttl(short)
        .wait(Duration::from_secs(30));
    let guards = hold(&c, "badkey-ka", 20, &opts).await;
    let gone = key(&guards[5]);
    assert_eq!(cmd(&server, &["DEL", &gone]).await, RespValue::Int(1));
    let cause = timeout(short + SLACK, guards[5].lost())
        .await
        .expect("a guard whose key was deleted is still held after its ttl");
    assert_eq!(cause, LossCause::NotOwner);
    sleep(short * 2).await;
    for (i, g) in guards.iter().enumerate() {
        if i != 5 {
            assert!(
                matches!(g.state(), GuardState::Held { .. }),
                "guard {i}: {:?}",
                g.state()
            );
        }
    }
    let mut guards = guards;
    assert!(!guards.remove(5).release().await.unwrap());
    release_all(guards).await;
}

/// A batch larger than `max_keys` is split into several requests, and every
/// renewal in it still happens: 50 extends at once with a limit of 8 keys
/// take at least 7 requests (the first alone, the 49 others in 7) and
/// extend every key; under keep-alive, guards
/// renewed in split batches stay held for several TTLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_still_happen_when_a_batch_is_split() {
    let server = start_server().await;
    let c = client(&server.url(), RenewBatching::default().max_keys(8)).await;
    let ttl = Duration::from_secs(2);
    let opts = AcquireOptions::new()
        .ttl(ttl)
        .wait(Duration::from_secs(30))
        .keep_alive(false);
    let guards = hold(&c, "split", 50, &opts).await;
    let longer = Duration::from_secs(8);
    let before = evalsha_calls(&server).await;
    for (i, r) in join_all(guards.iter().map(|g| g.extend(longer)))
        .await
        .into_iter()
        .enumerate()
    {
        r.unwrap_or_else(|e| panic!("guard {i} not extended: {e}"));
    }
    let requests = evalsha_calls(&server).await - before;
    println!("50 extends with max_keys 8: {requests} requests");
    assert!(
        (7..=14).contains(&requests),
        "50 extends with at most 8 per request took {requests} requests"
    );
    for g in &guards {
        let left = pttl(&server, g.server_key().unwrap()).await;
        assert!(
            left > ttl.as_millis() as i64,
            "{left} ms left: not extended"
        );
    }
    release_all(guards).await;

    // Keep-alive in split batches: 60 guards whose renewals often meet.
    let short = Duration::from_millis(600);
    let opts = AcquireOptions::new()
        .ttl(short)
        .wait(Duration::from_secs(30));
    let guards = hold(&c, "split-ka", 60, &opts).await;
    let before = evalsha_calls(&server).await;
    sleep(short * 4).await;
    let requests = evalsha_calls(&server).await - before;
    println!("60 guards over 4 TTLs with max_keys 8: {requests} requests");
    assert!(requests > 0);
    for (i, g) in guards.iter().enumerate() {
        assert!(
            matches!(g.state(), GuardState::Held { .. }),
            "guard {i}: {:?}",
            g.state()
        );
    }
    release_all(guards).await;
}

/// A batch whose connection is cut surfaces to every guard in it as it did
/// for a guard on its own: suspended (the renewal failed, the validity
/// stands), extends through it fail `Unavailable` (retryable), then lost
/// (`Expired`) at the validity; a cut shorter than the validity leaves every
/// guard held again once renewals get through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_batch_suspends_then_loses_every_guard_in_it() {
    let server = start_server().await;
    let proxy = blocking({
        let addr = server.addr();
        move || Proxy::start(addr)
    })
    .await
    .expect("proxy");
    let c = client(&proxy.redis_url(), RenewBatching::default()).await;
    let ttl = Duration::from_millis(1200);
    let opts = AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(30));

    // A short cut: suspended, then held again (a longer TTL, so that the
    // reconnection has time on a loaded machine).
    let long = Duration::from_secs(3);
    let guards = hold(&c, "cut-short", 10, &opts.clone().ttl(long)).await;
    let mut states: Vec<_> = guards.iter().map(|g| g.subscribe()).collect();
    proxy.cut();
    let cut_at = Instant::now();
    for (i, s) in states.iter_mut().enumerate() {
        timeout(
            long / 3 + SLACK,
            s.wait_for(|st| matches!(st, GuardState::Suspended { .. })),
        )
        .await
        .unwrap_or_else(|_| panic!("guard {i} not suspended by the cut"))
        .expect("keeper alive");
    }
    println!("all suspended {:?} after the cut", cut_at.elapsed());
    // Extends batched through the cut connection: each fails with the
    // error its own request would have had, retryable.
    for (i, r) in join_all(guards.iter().map(|g| g.extend(long)))
        .await
        .into_iter()
        .enumerate()
    {
        let err = r.expect_err("extended through a cut connection");
        assert_eq!(err.kind(), LockErrorKind::Unavailable, "guard {i}: {err}");
        assert!(err.is_retryable(), "guard {i}: {err}");
    }
    proxy.heal();
    for (i, s) in states.iter_mut().enumerate() {
        timeout(long, s.wait_for(|st| matches!(st, GuardState::Held { .. })))
            .await
            .unwrap_or_else(|_| panic!("guard {i} not held again after the heal"))
            .expect("keeper alive");
    }
    release_all(guards).await;

    // A cut past the validity: suspended, then lost, every one of them.
    // Each guard's states are watched from before the cut, in its own task.
    let guards = hold(&c, "cut-long", 10, &opts).await;
    let watchers: Vec<_> = guards
        .iter()
        .map(|g| {
            let mut s = g.subscribe();
            tokio::spawn(async move {
                let mut suspended = false;
                loop {
                    let st = s.borrow_and_update().clone();
                    match st {
                        GuardState::Suspended { .. } => suspended = true,
                        GuardState::Lost { cause } => return (suspended, cause),
                        _ => {}
                    }
                    if s.changed().await.is_err() {
                        return (suspended, LossCause::Expired);
                    }
                }
            })
        })
        .collect();
    proxy.cut();
    let cut_at = Instant::now();
    for (i, w) in watchers.into_iter().enumerate() {
        let (suspended, cause) = timeout(ttl + SLACK, w)
            .await
            .unwrap_or_else(|_| panic!("guard {i} not lost within its ttl"))
            .expect("watcher task");
        assert!(suspended, "guard {i} lost without being suspended first");
        assert_eq!(cause, LossCause::Expired, "guard {i}");
    }
    let lost_after = cut_at.elapsed();
    println!("all lost {lost_after:?} after the cut");
    assert!(lost_after <= ttl + SLACK, "lost only after {lost_after:?}");
    proxy.heal();
    for g in guards {
        assert!(!g.release().await.unwrap_or(false));
    }
}
