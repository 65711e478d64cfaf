//! Faults on real redis-servers, each test with its own server(s): restart with
//! and without persistence, SIGSTOP longer than the TTL, replies held back by a
//! proxy (phantom locks), connection resets, and hand-off to waiters with and
//! without a release notification.

use std::time::Duration;

use lock_core::{
    AcquireOptions, DistributedLock, GuardState, LockErrorKind, LockName, LossCause, ReadWriteLock,
    Semaphore,
};
use lock_redis::{RedisLock, RedisLockConfig};
use lock_testbed::{free_port, unique_name, Proxy, RedisOptions, RedisServer, RespValue};
use tokio::time::{sleep, timeout, Instant};

/// The request timeout of the clients in these tests.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(200);
/// Allowance for scheduling on a busy 2-core machine.
const SLACK: Duration = Duration::from_millis(700);

fn config(url: &str) -> RedisLockConfig {
    RedisLockConfig::new(url)
        .connect_timeout(Duration::from_secs(1))
        .request_timeout(REQUEST_TIMEOUT)
}

async fn client(url: &str) -> RedisLock {
    RedisLock::connect(config(url))
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

fn name(prefix: &str) -> LockName {
    LockName::new(unique_name(prefix)).expect("valid name")
}

fn opts(ttl: Duration) -> AcquireOptions {
    AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(30))
}

/// Runs a synchronous testbed call off the async workers.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

async fn start_server(opts: RedisOptions) -> RedisServer {
    blocking(move || RedisServer::start_with(opts))
        .await
        .unwrap_or_else(|e| panic!("starting redis-server: {e}"))
}

async fn kill_and_restart(mut server: RedisServer) -> RedisServer {
    blocking(move || {
        server.kill().expect("kill");
        server.restart().expect("restart");
        server
    })
    .await
}

async fn cmd(server: &RedisServer, args: &[&str]) -> RespValue {
    server
        .cmd_async(args)
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// The fencing counter of `name` on `server`.
async fn counter(server: &RedisServer, name: &LockName) -> Option<i64> {
    match cmd(
        server,
        &[
            "GET",
            lock_redis::kit::layout::Keys::new("", name.as_str()).fencing(),
        ],
    )
    .await
    {
        RespValue::Bulk(None) => None,
        v => Some(
            v.as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("counter {v:?}")),
        ),
    }
}

async fn key_exists(server: &RedisServer, name: &LockName) -> bool {
    cmd(server, &["EXISTS", name.as_str()]).await != RespValue::Int(0)
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
    let proxy = blocking({
        let addr = server.addr();
        move || Proxy::start(addr)
    })
    .await
    .expect("proxy");
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

/// A release wakes a waiting client at once: the hand-off takes a few ms,
/// nowhere near the holder's 10 s TTL. Several rounds between two clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_hands_off_to_waiter_at_once() {
    let server = start_server(RedisOptions::default()).await;
    let url = server.url();
    let (a, b) = (client(&url).await, client(&url).await);
    let lock = name("handoff");
    let ttl = Duration::from_secs(10);
    let mut handoffs = Vec::new();
    let mut holder = a.acquire(&lock, &opts(ttl)).await.unwrap();
    for round in 0..6 {
        let next_client = if round % 2 == 0 { b.clone() } else { a.clone() };
        let waiter = {
            let lock = lock.clone();
            tokio::spawn(async move {
                let g = next_client.acquire(&lock, &opts(ttl)).await;
                (Instant::now(), g)
            })
        };
        sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "acquired a held lock");
        let released_at = Instant::now();
        assert!(holder.release().await.unwrap());
        let (got_at, g) = timeout(Duration::from_secs(2), waiter)
            .await
            .expect("waiter not woken")
            .unwrap();
        holder = g.expect("waiter acquire");
        handoffs.push(got_at - released_at);
    }
    assert!(holder.release().await.unwrap());
    handoffs.sort();
    println!("hand-off after release: {handoffs:?}");
    let worst = *handoffs.last().unwrap();
    assert!(
        worst < Duration::from_millis(250),
        "hand-off took {worst:?}: not woken by the release notification"
    );
}

/// A release that publishes nothing (a plain DEL, as an operator or a foreign
/// client would do) is still noticed by a waiter: at the latest when the
/// holder's TTL (seen by the waiter's last attempt) runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_gets_lock_at_holder_ttl_without_notification() {
    let server = start_server(RedisOptions::default()).await;
    let url = server.url();
    let (a, b) = (client(&url).await, client(&url).await);
    let lock = name("missed");
    let ttl = Duration::from_secs(2);
    let held = a.acquire(&lock, &opts(ttl)).await.unwrap();
    let waiter = {
        let (b, lock) = (b.clone(), lock.clone());
        tokio::spawn(async move {
            let g = b.acquire(&lock, &opts(ttl)).await;
            (Instant::now(), g)
        })
    };
    sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished());
    let deleted_at = Instant::now();
    assert_eq!(
        cmd(&server, &["DEL", lock.as_str()]).await,
        RespValue::Int(1)
    );
    let (got_at, g) = timeout(ttl + SLACK, waiter)
        .await
        .expect("waiter never noticed the deletion")
        .unwrap();
    let g = g.expect("waiter acquire");
    println!(
        "waiter got the lock {:?} after a DEL that published nothing",
        got_at - deleted_at
    );
    assert!(got_at - deleted_at <= ttl + SLACK);
    // The old holder learns it at its next renewal.
    assert_eq!(
        timeout(ttl, held.lost())
            .await
            .expect("old holder not told"),
        LossCause::NotOwner
    );
    assert!(g.release().await.unwrap());
}

/// A waiter whose connections (lock and pub/sub) are reset keeps waiting: the
/// pub/sub connection is re-established and resubscribed, and the release is
/// handed off long before the holder's TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_survives_connection_reset() {
    let server = start_server(RedisOptions::default()).await;
    let proxy = blocking({
        let addr = server.addr();
        move || Proxy::start(addr)
    })
    .await
    .expect("proxy");
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
    let proxy = blocking({
        let addr = server.addr();
        move || Proxy::start(addr)
    })
    .await
    .expect("proxy");
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

/// A password in the URL is used, and a wrong one is Unauthorized.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_in_url_and_wrong_password() {
    let server = start_server(RedisOptions::default()).await;
    assert_eq!(
        cmd(&server, &["CONFIG", "SET", "requirepass", "s3cret"]).await,
        RespValue::Simple("OK".into())
    );
    let port = server.addr().port();
    let ok = RedisLock::connect(config(&format!("redis://:s3cret@127.0.0.1:{port}/3")))
        .await
        .expect("connect with the password");
    let lock = name("auth");
    let g = ok
        .try_acquire(&lock, &opts(Duration::from_secs(5)))
        .await
        .unwrap()
        .unwrap();
    assert!(g.release().await.unwrap());
    let err = RedisLock::connect(config(&format!("redis://:wrong@127.0.0.1:{port}/")))
        .await
        .expect_err("wrong password accepted");
    assert_eq!(err.kind(), LockErrorKind::Unauthorized, "{err}");
    assert!(
        !err.to_string().contains("wrong"),
        "the password leaked into the error: {err}"
    );
}

/// Takes `n` locks of `lock` in turn on `client`; returns the last token.
async fn take_tokens(client: &RedisLock, lock: &LockName, n: usize) -> u64 {
    let mut last = 0;
    for _ in 0..n {
        let g = client
            .acquire(lock, &opts(Duration::from_secs(5)))
            .await
            .expect("acquire");
        let t = g.fencing_token().expect("redis has tokens").get();
        assert!(t > last, "token {t} after {last}");
        last = t;
        assert!(g.release().await.unwrap());
    }
    last
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

/// A user whose ACL allows the keys but no pub/sub channel: releases still
/// succeed (the notification is best effort), and the notifier backs off
/// instead of reconnecting in a storm while a waiter waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_channel_rights_releases_and_causes_no_connection_storm() {
    let server = start_server(RedisOptions::default()).await;
    assert_eq!(
        cmd(
            &server,
            &[
                "ACL",
                "SETUSER",
                "nochan",
                "on",
                ">pw",
                "~*",
                "resetchannels",
                "+@all"
            ]
        )
        .await,
        RespValue::Simple("OK".into())
    );
    let url = format!("redis://nochan:pw@{}/", server.addr());
    let (a, b) = (client(&url).await, client(&url).await);
    let lock = name("nochan");
    let ttl = Duration::from_secs(4);
    let g = a.acquire(&lock, &opts(ttl)).await.unwrap();
    let connections = |info: RespValue| -> u64 {
        let text = info.as_str().unwrap_or_default().to_string();
        text.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("INFO stats has total_connections_received")
    };
    let before = connections(cmd(&server, &["INFO", "stats"]).await);
    let waiter = {
        let (b, lock) = (b.clone(), lock.clone());
        tokio::spawn(async move {
            b.acquire(&lock, &opts(ttl).wait(Duration::from_secs(20)))
                .await
        })
    };
    sleep(Duration::from_secs(3)).await;
    let after = connections(cmd(&server, &["INFO", "stats"]).await);
    assert!(
        after - before <= 12,
        "{} connections in 3 s while SUBSCRIBE is refused: a reconnection storm",
        after - before
    );
    assert!(
        g.release().await.expect("release without channel rights"),
        "the release was refused after the key was deleted"
    );
    let g2 = timeout(ttl + SLACK, waiter)
        .await
        .expect("the waiter re-checks at the holder's TTL")
        .unwrap()
        .expect("the waiter acquires");
    assert!(g2.release().await.unwrap());
}

/// No lock name addresses another lock's fencing counter: the lock named
/// `{x} fencing`-like or `{x}:fencing` is a lock of its own, and taking it
/// changes nothing for `x`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_never_addresses_another_locks_counter() {
    let server = start_server(RedisOptions::default()).await;
    let a = client(&server.url()).await;
    let x = name("counter-owner");
    let before = take_tokens(&a, &x, 2).await;
    for tricky in [format!("{{{x}}}:fencing"), format!("{{{x}}}:released")] {
        let tricky = LockName::new(tricky).unwrap();
        let g = a
            .try_acquire(&tricky, &opts(Duration::from_secs(5)))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{tricky} is free but looked held"));
        assert!(g.release().await.unwrap());
        assert!(!key_exists(&server, &tricky).await);
    }
    let after = take_tokens(&a, &x, 1).await;
    assert!(after > before, "x's tokens went from {before} to {after}");
    assert!(
        counter(&server, &x).await.is_some(),
        "taking the tricky names removed x's counter"
    );
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

/// The owner token of the first waiter in `name`'s queue, once one is there.
async fn first_waiter(server: &RedisServer, name: &LockName) -> String {
    let queue = lock_redis::kit::layout::Keys::new("", name.as_str())
        .queue()
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let RespValue::Array(Some(items)) = cmd(server, &["ZRANGE", &queue, "0", "0"]).await {
            if let Some(member) = items.first().and_then(|m| m.as_str()) {
                return member.split(' ').next().unwrap_or_default().to_string();
            }
        }
        assert!(Instant::now() < deadline, "no waiter queued on {name}");
        sleep(Duration::from_millis(10)).await;
    }
}

/// A hand-over announcement for a waiter that arrives after the waiter's
/// last attempt found the lock held (a late message from an earlier
/// hand-over, or a forged one) grants nothing: the waiter keeps waiting
/// while the holder holds, and gets the lock with a newer token when the
/// holder really releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_hand_over_announcement_grants_nothing() {
    let server = start_server(RedisOptions::default()).await;
    let (holder, other) = (client(&server.url()).await, client(&server.url()).await);
    let name = name("late-grant");
    let held = holder
        .acquire(&name, &opts(Duration::from_secs(10)))
        .await
        .unwrap();
    let waiting = {
        let (other, name) = (other.clone(), name.clone());
        tokio::spawn(async move { other.acquire(&name, &opts(Duration::from_secs(10))).await })
    };
    let waiter = first_waiter(&server, &name).await;
    // Let the waiter subscribe and make its attempt after the subscription.
    sleep(Duration::from_millis(300)).await;
    let last = counter(&server, &name).await.expect("a counter");
    let channel = lock_redis::kit::layout::Keys::new("", name.as_str())
        .released()
        .to_owned();
    let stale = format!("g {waiter} {last} 10000");
    assert_eq!(
        cmd(&server, &["PUBLISH", &channel, &stale]).await,
        RespValue::Int(1),
        "the waiter's client listens on the channel"
    );
    sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "a stale announcement let the waiter in while the holder holds"
    );
    assert!(held.release().await.unwrap());
    let got = timeout(SLACK, waiting)
        .await
        .expect("the release hands the lock over at once")
        .unwrap()
        .expect("the waiter gets the lock");
    assert!(got.fencing_token().unwrap().get() > last as u64);
    assert!(got.release().await.unwrap());
}

/// A waiter that vanished after taking its place (no clean-up: a crashed
/// process) is handed the lock at the next release; the lock expires with
/// that waiter's TTL and the next live waiter gets it then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_handed_to_a_vanished_waiter_goes_on_after_its_ttl() {
    let server = start_server(RedisOptions::default()).await;
    let (holder, other) = (client(&server.url()).await, client(&server.url()).await);
    let name = name("vanished");
    let keys = lock_redis::kit::layout::Keys::new("", name.as_str());
    let held = holder
        .acquire(&name, &opts(Duration::from_secs(10)))
        .await
        .unwrap();
    // A crashed waiter's place: first in line, asking for 500 ms.
    let ghost = format!("{:032x} 500", 7u128);
    assert_eq!(
        cmd(&server, &["ZADD", keys.queue(), "1", &ghost]).await,
        RespValue::Int(1)
    );
    assert_eq!(
        cmd(&server, &["ZADD", keys.lapse(), "99999999999999", &ghost]).await,
        RespValue::Int(1)
    );
    let waiting = {
        let (other, name) = (other.clone(), name.clone());
        tokio::spawn(async move {
            let got = other.acquire(&name, &opts(Duration::from_secs(10))).await;
            (Instant::now(), got)
        })
    };
    sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    assert!(held.release().await.unwrap());
    let (at, got) = timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the live waiter got the lock")
        .unwrap();
    let got = got.expect("acquire");
    let after = at - released;
    assert!(
        after >= Duration::from_millis(400) && after < Duration::from_millis(500) + SLACK,
        "the live waiter got the lock {after:?} after the release (the ghost's TTL is 500 ms)"
    );
    assert!(got.release().await.unwrap());
}

/// The late-grant check holds when the counter goes back: here the fencing
/// counter is deleted (a `DEL`, an eviction, a restart that lost it) while
/// a waiter waits, so the waiter's next attempt finds no counter at all.
/// A hand-over announcement for that waiter with a token issued before
/// that attempt (the holder's own, a late or replayed message) must still
/// grant nothing: the attempt's "last token" is `max(counter, the server's
/// clock in µs)`, as the tokens are, not the bare counter, which would
/// read 0 and let any announcement through. The waiter gets the lock, with
/// a newer token, at the holder's real release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_hand_over_grants_nothing_after_the_counter_went_back() {
    let server = start_server(RedisOptions::default()).await;
    let holder = client(&server.url()).await;
    // The waiter re-checks every 100 ms: its attempts after the `DEL` come
    // by themselves.
    let recheck = Duration::from_millis(100);
    let other = RedisLock::connect(config(&server.url()).max_recheck(recheck))
        .await
        .unwrap();
    let name = name("counter-back");
    let keys = lock_redis::kit::layout::Keys::new("", name.as_str());
    let held = holder
        .acquire(&name, &opts(Duration::from_secs(10)))
        .await
        .unwrap();
    let issued = held.fencing_token().unwrap().get();
    let waiting = {
        let (other, name) = (other.clone(), name.clone());
        tokio::spawn(async move { other.acquire(&name, &opts(Duration::from_secs(10))).await })
    };
    let waiter = first_waiter(&server, &name).await;
    // `<owner token> <ttl ms> <the waiter's description>`.
    let member = format!(
        "{waiter} 10000 {}",
        lock_core::Holder::this_process().to_json()
    );
    let lapse_of = || async {
        cmd(&server, &["ZSCORE", keys.lapse(), &member])
            .await
            .as_str()
            .map(str::to_string)
    };
    assert_eq!(
        cmd(&server, &["DEL", keys.fencing()]).await,
        RespValue::Int(1),
        "the counter existed"
    );
    // Each attempt of the waiter moves its place's lapse time on: wait for
    // one that ran after the `DEL` (two, to be sure one began after it).
    for _ in 0..2 {
        let before = lapse_of().await;
        let deadline = Instant::now() + recheck + SLACK;
        while lapse_of().await == before {
            assert!(
                Instant::now() < deadline,
                "the waiter made no attempt within {:?}",
                recheck + SLACK
            );
            sleep(Duration::from_millis(5)).await;
        }
    }
    assert_eq!(
        counter(&server, &name).await,
        None,
        "the counter stayed gone"
    );
    let stale = format!("g {waiter} {issued} 10000");
    assert_eq!(
        cmd(&server, &["PUBLISH", keys.released(), &stale]).await,
        RespValue::Int(1),
        "the waiter's client listens on the channel"
    );
    sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "an announcement with a token issued before the waiter's attempt let it in while the holder holds"
    );
    assert!(held.is_held());
    assert!(held.release().await.unwrap());
    let got = timeout(SLACK, waiting)
        .await
        .expect("the release hands the lock over at once")
        .unwrap()
        .expect("the waiter gets the lock");
    assert!(got.fencing_token().unwrap().get() > issued);
    assert!(got.release().await.unwrap());
}

/// A server that forgot the scripts (`SCRIPT FLUSH`, as after a restart or
/// a failover to a replica that never ran them) answers `NOSCRIPT`: every
/// kind of call loads its script again and goes through, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_load_their_scripts_again_after_a_script_flush() {
    let server = start_server(RedisOptions::default()).await;
    let locks = client(&server.url()).await;
    let (mutex, rw, sem) = (name("flush-m"), name("flush-rw"), name("flush-s"));
    let o = opts(Duration::from_secs(10));
    let (mut tokens, mut loads) = (Vec::new(), Vec::new());
    for round in 0..2 {
        // Round 0 loads every script; round 1 finds none of them.
        let g = locks.acquire(&mutex, &o).await.expect("acquire");
        tokens.push(g.fencing_token().expect("a token"));
        g.extend(Duration::from_secs(20)).await.expect("extend");
        assert!(g.release().await.expect("release"), "round {round}");
        let r = locks.acquire_read(&rw, &o).await.expect("read");
        assert!(r.release().await.expect("release read"), "round {round}");
        let p = locks.acquire_permit(&sem, 2, &o).await.expect("permit");
        assert!(p.release().await.expect("release permit"), "round {round}");
        assert!(locks.list("flush-", 10).await.expect("list").is_empty());
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
    // Both rounds loaded the scripts they used, the same number each time.
    assert!(loads[0] > 0 && loads[1] == 2 * loads[0], "{loads:?}");
}
