//! Faults on real redis-servers, each test with its own server(s): restart with
//! and without persistence, SIGSTOP longer than the TTL, replies held back by a
//! proxy (phantom locks), connection resets, connects that fail, data lost
//! with a snapshot reload, the AOF's last second or a failover (tokens keep
//! increasing), and scripts flushed from the server.

use std::time::Duration;

use lock_core::{
    DistributedLock, GuardState, LockErrorKind, LockName, LossCause, ReadWriteLock, Semaphore,
};
use lock_redis::RedisLock;
use lock_testbed::{free_port, Proxy, RedisOptions, RedisServer, RespValue};
use tokio::time::{sleep, timeout, Instant};

mod support;
use support::{
    blocking, client, cmd, config, counter, key_exists, name, opts, proxy_to, start_server,
    take_tokens, REQUEST_TIMEOUT, SLACK,
};

async fn kill_and_restart(mut server: RedisServer) -> RedisServer {
    blocking(move || {
        server.kill().expect("kill");
        server.restart().expect("restart");
        server
    })
    .await
}

/// Polls until the lock key of `name` is gone; panics after `bound`.
async fn key_gone_within(server: &RedisServer, name: &LockName, bound: Duration) -> Duration {
    let t = Instant::now();
    while key_exists(server, name).await {
        assert!(
            t.elapsed() < bound,
            "lock key {name} still held after {:?}",
            t.elapsed()
        );
        sleep(Duration::from_millis(10)).await;
    }
    t.elapsed()
}

/// Restart without persistence while a guard is held: the key is gone after
/// the restart, the next renewal says so, and the guard is lost (NotOwner)
/// within ttl/3 + slack. The counter is gone too, but the acquire script's
/// clock floor keeps the next token above every earlier one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_without_persistence_loses_guard_but_tokens_keep_increasing() {
    let server = start_server(RedisOptions::default()).await;
    let url = server.url();
    let locks = client(&url).await;
    let lock = name("restart");
    let ttl = Duration::from_secs(3);
    let mut last = None;
    for _ in 0..3 {
        let g = locks.acquire(&lock, &opts(ttl)).await.unwrap();
        last = g.fencing_token();
        assert!(g.release().await.unwrap());
    }
    let held = locks.acquire(&lock, &opts(ttl)).await.unwrap();
    let held_token = held.fencing_token().unwrap();
    assert!(Some(held_token) > last);

    let killed_at = Instant::now();
    let server = kill_and_restart(server).await;
    let cause = timeout(ttl / 3 + SLACK, held.lost())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "guard not lost {:?} after the restart; state {:?}",
                killed_at.elapsed(),
                held.state()
            )
        });
    assert_eq!(
        cause,
        LossCause::NotOwner,
        "the renewal after the restart should find the key gone"
    );
    println!("guard lost {:?} after kill + restart", killed_at.elapsed());
    assert!(!held.release().await.unwrap());

    // Without persistence the counter is gone too; the clock floor keeps tokens increasing.
    let again = client(&url).await.acquire(&lock, &opts(ttl)).await.unwrap();
    let new_token = again.fencing_token().unwrap();
    assert!(
        new_token > held_token,
        "token {new_token} after a restart without persistence (was {held_token})"
    );
    assert!(again.release().await.unwrap());
    drop(server);
}

/// SIGSTOP longer than the TTL: renewals time out (guard suspended), the
/// validity passes (guard lost, Expired); after SIGCONT the key has expired
/// and a new holder gets a larger token; the old guard's release says false.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_longer_than_ttl_suspends_then_loses_guard() {
    let server = start_server(RedisOptions::default()).await;
    let url = server.url();
    let (a, b) = (client(&url).await, client(&url).await);
    let lock = name("pause");
    let ttl = Duration::from_secs(1);
    let g = a.acquire(&lock, &opts(ttl)).await.unwrap();
    let old_token = g.fencing_token().unwrap();
    let mut states = g.subscribe();

    let paused_at = Instant::now();
    server.pause().expect("SIGSTOP");
    let mut seen_suspended = None;
    let cause = loop {
        let st = states.borrow_and_update().clone();
        match st {
            GuardState::Suspended { .. } => {
                seen_suspended.get_or_insert(paused_at.elapsed());
            }
            GuardState::Lost { cause } => break cause,
            GuardState::Held { .. } => {}
            GuardState::Released => panic!("released while paused"),
            other => panic!("unexpected state {other:?}"),
        }
        timeout(ttl + SLACK, states.changed())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no state change for {:?}; state {:?}",
                    ttl + SLACK,
                    g.state()
                )
            })
            .expect("keeper alive");
    };
    let lost_after = paused_at.elapsed();
    let suspended_after =
        seen_suspended.expect("the guard went lost without being suspended first");
    println!("suspended after {suspended_after:?}, lost after {lost_after:?}");
    assert_eq!(cause, LossCause::Expired);
    assert!(
        suspended_after < ttl / 3 + REQUEST_TIMEOUT + SLACK,
        "suspended only after {suspended_after:?}"
    );
    assert!(lost_after <= ttl + SLACK, "lost only after {lost_after:?}");
    assert!(!g.is_held());

    // Stay paused past the server-side expiry, then resume.
    sleep((ttl + Duration::from_millis(300)).saturating_sub(paused_at.elapsed())).await;
    server.resume().expect("SIGCONT");

    let next = b
        .acquire(&lock, &opts(ttl).wait(Duration::from_secs(5)))
        .await
        .expect("lock free after resume");
    let new_token = next.fencing_token().unwrap();
    assert!(new_token > old_token, "token {new_token} after {old_token}");
    assert!(
        !g.release().await.unwrap(),
        "a lost guard's release reported success"
    );
    assert!(next.is_held());
    assert!(next.release().await.unwrap());
}

/// With AOF and `appendfsync always`, a held lock and the fencing counter
/// survive kill + restart: the holder keeps its lock (its renewals succeed
/// again after reconnecting), and the next holder's token is larger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aof_keeps_lock_and_tokens_across_restart() {
    let server = start_server(RedisOptions {
        persistence: lock_testbed::Persistence::AofAlways,
        ..Default::default()
    })
    .await;
    let url = server.url();
    let (a, b) = (client(&url).await, client(&url).await);
    let lock = name("aof");
    let ttl = Duration::from_secs(2);
    let mut last = None;
    for _ in 0..3 {
        let g = a.acquire(&lock, &opts(ttl)).await.unwrap();
        assert!(g.fencing_token() > last);
        last = g.fencing_token();
        assert!(g.release().await.unwrap());
    }
    let held = a.acquire(&lock, &opts(ttl)).await.unwrap();
    let held_token = held.fencing_token().unwrap();
    assert!(Some(held_token) > last);

    let server = kill_and_restart(server).await;
    assert!(
        key_exists(&server, &lock).await,
        "the AOF lost the lock key"
    );
    assert_eq!(
        counter(&server, &lock).await,
        Some(held_token.get() as i64),
        "the AOF lost the fencing counter"
    );

    let waiter = {
        let (b, lock) = (b.clone(), lock.clone());
        tokio::spawn(async move {
            b.acquire(&lock, &opts(ttl).wait(Duration::from_secs(10)))
                .await
        })
    };
    // Longer than the TTL: only renewals after the restart can have kept it.
    sleep(ttl + ttl / 2).await;
    assert!(
        matches!(held.state(), GuardState::Held { .. }),
        "state {:?}",
        held.state()
    );
    assert!(
        !waiter.is_finished(),
        "another client acquired a lock that survived the restart"
    );
    assert!(held.release().await.unwrap());
    let next = timeout(Duration::from_secs(2), waiter)
        .await
        .expect("waiter not served")
        .unwrap()
        .unwrap();
    let next_token = next.fencing_token().unwrap();
    assert!(
        next_token > held_token,
        "token {next_token} after {held_token} across an AOF restart"
    );
    assert!(next.release().await.unwrap());
}

/// An acquire whose reply is held back longer than the request timeout fails
/// with Unavailable, and the SET it did make on the server (the counter moved)
/// is removed at once by the compare-and-delete, not left until its TTL. The
/// same when the acquire future is dropped while its request is in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_acquire_leaves_no_phantom_lock() {
    let server = start_server(RedisOptions::default()).await;
    let proxy = proxy_to(&server).await;
    let slow = client(&proxy.redis_url()).await;
    let direct = client(&server.url()).await;
    let long = opts(Duration::from_secs(30));
    proxy.set_reply_delay(Duration::from_secs(2));

    // The reply is lost (late): error, then no phantom lock.
    let lock = name("phantom");
    let t = Instant::now();
    let err = slow
        .try_acquire(&lock, &long)
        .await
        .expect_err("acquired without a reply");
    let failed_after = t.elapsed();
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    assert!(
        failed_after < REQUEST_TIMEOUT + SLACK,
        "failed only after {failed_after:?}"
    );
    let phantom_token = counter(&server, &lock)
        .await
        .expect("the SET NX never reached the server: the test proves nothing");
    let gone = key_gone_within(&server, &lock, Duration::from_secs(1)).await;
    println!("phantom lock removed {:?} after the error", gone);
    let g = direct
        .try_acquire(&lock, &long)
        .await
        .unwrap()
        .expect("phantom lock still held");
    assert!(g.fencing_token().unwrap().get() > phantom_token as u64);
    assert!(g.release().await.unwrap());

    // The acquire future is dropped while its request is in flight.
    let lock = name("phantom-cancel");
    let pending = {
        let (slow, lock, long) = (slow.clone(), lock.clone(), long.clone());
        tokio::spawn(async move { slow.try_acquire(&lock, &long).await.map(|g| g.is_some()) })
    };
    sleep(Duration::from_millis(50)).await;
    pending.abort();
    assert!(pending.await.unwrap_err().is_cancelled());
    assert!(
        counter(&server, &lock).await.is_some(),
        "the SET NX never reached the server"
    );
    key_gone_within(&server, &lock, Duration::from_secs(1)).await;
    let g = direct
        .try_acquire(&lock, &long)
        .await
        .unwrap()
        .expect("cancelled acquire left its lock");
    assert!(g.release().await.unwrap());
}

/// A waiter whose connections (lock and pub/sub) are reset keeps waiting: the
/// pub/sub connection is re-established and resubscribed, and the release is
/// handed off long before the holder's TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_survives_connection_reset() {
    let server = start_server(RedisOptions::default()).await;
    let proxy = proxy_to(&server).await;
    let (direct, behind) = (
        client(&server.url()).await,
        client(&proxy.redis_url()).await,
    );
    let lock = name("reset");
    let ttl = Duration::from_secs(10);
    let held = direct.acquire(&lock, &opts(ttl)).await.unwrap();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { behind.acquire(&lock, &opts(ttl)).await })
    };
    sleep(Duration::from_millis(200)).await;
    proxy.reset_all();
    sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter gave up or acquired: {:?}",
        waiter.is_finished()
    );
    let released_at = Instant::now();
    assert!(held.release().await.unwrap());
    let g = timeout(Duration::from_secs(2), waiter)
        .await
        .expect("waiter not served after a connection reset")
        .unwrap()
        .expect("waiter acquire");
    println!("hand-off after a reset: {:?}", released_at.elapsed());
    assert!(g.release().await.unwrap());
}

/// Connecting to a server that accepts TCP but never answers fails with
/// Unavailable within the connect timeout; a closed port fails at once; a bad
/// URL is InvalidArgument.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_failures_are_classified_and_bounded() {
    let server = start_server(RedisOptions::default()).await;
    let proxy = proxy_to(&server).await;
    proxy.blackhole();
    let limit = Duration::from_millis(300);
    let t = Instant::now();
    let err = RedisLock::connect(config(&proxy.redis_url()).connect_timeout(limit))
        .await
        .expect_err("connected to a blackhole");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    assert!(
        t.elapsed() < limit + Duration::from_millis(200),
        "took {:?}",
        t.elapsed()
    );

    let t = Instant::now();
    let closed = format!("redis://127.0.0.1:{}/", free_port());
    let err = RedisLock::connect(config(&closed))
        .await
        .expect_err("connected to a closed port");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "a refused connection took {:?}",
        t.elapsed()
    );

    let err = RedisLock::connect(config("http://nowhere"))
        .await
        .expect_err("bad url accepted");
    assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
    let err = RedisLock::connect(config(&server.url()).request_timeout(Duration::ZERO))
        .await
        .expect_err("zero timeout accepted");
    assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
}

/// Redis's default persistence: a `kill -9` and a restart reload the last
/// RDB snapshot, with an OLD fencing counter. The first token after the
/// restart must still be above every token issued before the crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_after_a_snapshot_reload() {
    let server = start_server(RedisOptions {
        persistence: lock_testbed::Persistence::Snapshots,
        ..Default::default()
    })
    .await;
    let a = client(&server.url()).await;
    let lock = name("rdb-reload");
    take_tokens(&a, &lock, 3).await;
    assert_eq!(
        cmd(&server, &["SAVE"]).await,
        RespValue::Simple("OK".into())
    );
    let last = take_tokens(&a, &lock, 5).await;
    let server = kill_and_restart(server).await;
    assert!(
        counter(&server, &lock).await.is_some(),
        "the snapshot should bring the old counter back"
    );
    assert_next_token_above(&server.url(), &lock, last, "after a snapshot reload").await;
}

/// `appendfsync everysec`: a machine crash loses up to the last second of
/// writes, and with them the last increments of the counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_after_losing_the_last_second_of_aof() {
    let server = start_server(RedisOptions {
        persistence: lock_testbed::Persistence::AofEverySec,
        ..Default::default()
    })
    .await;
    let a = client(&server.url()).await;
    let lock = name("aof-everysec");
    take_tokens(&a, &lock, 3).await;
    sleep(Duration::from_millis(1200)).await;
    let server = blocking(move || {
        server.checkpoint_disk().expect("checkpoint");
        server
    })
    .await;
    let last = take_tokens(&a, &lock, 5).await;
    let server = blocking(move || {
        let mut server = server;
        server.crash_to_checkpoint().expect("crash");
        server
    })
    .await;
    assert_next_token_above(&server.url(), &lock, last, "after the AOF lost a second").await;
}

/// A failover to a replica that was behind: tokens issued on the old
/// primary after the replica stopped following must not be issued again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_after_failover_to_a_lagging_replica() {
    let mut primary = start_server(RedisOptions::default()).await;
    let replica = start_server(RedisOptions::default()).await;
    // The replication stream goes through a proxy, so the replica can be
    // made to fall behind.
    let link = Proxy::start(primary.addr()).expect("proxy");
    let port = link.addr().port().to_string();
    assert_eq!(
        cmd(&replica, &["REPLICAOF", "127.0.0.1", &port]).await,
        RespValue::Simple("OK".into())
    );
    let a = client(&primary.url()).await;
    let lock = name("failover");
    let caught_up = take_tokens(&a, &lock, 3).await;
    let fencing = lock_redis::kit::layout::Keys::new("", lock.as_str())
        .fencing()
        .to_owned();
    let t = Instant::now();
    while cmd(&replica, &["GET", &fencing]).await.as_str() != Some(&caught_up.to_string()) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the replica never caught up"
        );
        sleep(Duration::from_millis(20)).await;
    }
    link.blackhole();
    let last = take_tokens(&a, &lock, 5).await;
    blocking(move || primary.kill().expect("kill the primary")).await;
    assert_eq!(
        cmd(&replica, &["REPLICAOF", "NO", "ONE"]).await,
        RespValue::Simple("OK".into())
    );
    assert_eq!(
        cmd(&replica, &["GET", &fencing]).await.as_str(),
        Some(caught_up.to_string().as_str()),
        "the promoted replica should be behind"
    );
    assert_next_token_above(&replica.url(), &lock, last, "from the promoted replica").await;
}

/// A new client of `url` takes `lock` and gets a token above `last`, the
/// last one issued before the server lost data (`after` says how).
async fn assert_next_token_above(url: &str, lock: &LockName, last: u64, after: &str) {
    let b = client(url).await;
    let g = b
        .acquire(lock, &opts(Duration::from_secs(5)))
        .await
        .unwrap();
    let next = g.fencing_token().unwrap().get();
    assert!(
        next > last,
        "token {next} {after}, but {last} was issued before"
    );
    assert!(g.release().await.unwrap());
}

/// A server that forgot the scripts (`SCRIPT FLUSH`, as after a restart or
/// a failover to a replica that never ran them) answers `NOSCRIPT`: every
/// kind of call runs again as `EVAL` of its script's source (which caches
/// it) and goes through, once; nothing is sent `SCRIPT LOAD`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_run_as_eval_after_a_script_flush() {
    let server = start_server(RedisOptions::default()).await;
    let locks = client(&server.url()).await;
    let (mutex, rw, sem) = (name("flush-m"), name("flush-rw"), name("flush-s"));
    let o = opts(Duration::from_secs(10));
    let (mut tokens, mut evals, mut loads) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..2 {
        // Round 0 finds the scripts loaded at connect, and runs the others
        // as EVAL; round 1 finds none of them.
        let g = locks.acquire(&mutex, &o).await.expect("acquire");
        tokens.push(g.fencing_token().expect("a token"));
        g.extend(Duration::from_secs(20)).await.expect("extend");
        assert!(g.release().await.expect("release"), "round {round}");
        let r = locks.acquire_read(&rw, &o).await.expect("read");
        assert!(r.release().await.expect("release read"), "round {round}");
        let p = locks.acquire_permit(&sem, 2, &o).await.expect("permit");
        assert!(p.release().await.expect("release permit"), "round {round}");
        assert!(locks.list("flush-", 10).await.expect("list").is_empty());
        evals.push(server.calls_async("eval").await.expect("commandstats"));
        loads.push(
            server
                .calls_async("script|load")
                .await
                .expect("commandstats"),
        );
        assert_eq!(
            cmd(&server, &["SCRIPT", "FLUSH"]).await,
            RespValue::Simple("OK".into())
        );
    }
    assert!(tokens[1] > tokens[0], "{tokens:?}");
    // Round 1 ran every script it used as EVAL, those loaded at connect
    // too; only the connection loaded scripts.
    assert!(evals[0] > 0 && evals[1] > 2 * evals[0], "{evals:?}");
    assert!(loads[0] > 0 && loads[1] == loads[0], "{loads:?}");
}
