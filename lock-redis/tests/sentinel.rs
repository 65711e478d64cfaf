//! A Sentinel-managed deployment (`redis+sentinel://`) across failovers,
//! on real servers: 1 primary, 2 replicas, 3 sentinels. Waiters still get
//! the lock after the primary is killed, no call outlives its bound,
//! tokens keep increasing after a failover to a replica that was behind,
//! a demoted primary is left for the new one, and `sync_replicas` refuses
//! a lock the replicas did not confirm.

mod support;

use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockErrorKind, LockGuard, LockName, TlsConfig};
use lock_redis::kit::layout::Keys;
use lock_redis::{RedisLock, RedisLockConfig, SyncReplicas};
use lock_testbed::{RespValue, SentinelOptions, SentinelSet, TlsFiles};
use support::{blocking, name, SLACK};
use tokio::time::{sleep, timeout, Instant};

/// The clients' request timeout.
const REQUEST: Duration = Duration::from_millis(300);
/// A failover's bound: the sentinels' down-after (1 s), their vote and
/// the promotion (a few seconds on a busy machine), with slack.
const FAILOVER: Duration = Duration::from_secs(15);

async fn start() -> SentinelSet {
    start_with(false).await
}

/// A Sentinel set, with every node and sentinel on TLS ports (`tls`).
async fn start_with(tls: bool) -> SentinelSet {
    blocking(move || {
        SentinelSet::start_with(SentinelOptions {
            tls,
            ..SentinelOptions::default()
        })
    })
    .await
    .unwrap_or_else(|e| panic!("starting a Sentinel set: {e}"))
}

fn config(set: &SentinelSet) -> RedisLockConfig {
    RedisLockConfig::new(set.url())
        .connect_timeout(Duration::from_secs(2))
        .request_timeout(REQUEST)
}

async fn client(config: RedisLockConfig) -> Arc<RedisLock> {
    Arc::new(
        RedisLock::connect(config)
            .await
            .unwrap_or_else(|e| panic!("connect through the sentinels: {e}")),
    )
}

/// One command to data node `i` of `set`.
async fn node_cmd(set: &Arc<SentinelSet>, i: usize, args: &[&str]) -> RespValue {
    let (set, args): (_, Vec<String>) = (set.clone(), args.iter().map(|a| a.to_string()).collect());
    blocking(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        set.node(i)
            .cmd(&refs)
            .unwrap_or_else(|e| panic!("{refs:?} on node {i}: {e}"))
    })
    .await
}

/// Waits until data node `i` has `key` with `value` (replication caught up).
async fn replicated(set: &Arc<SentinelSet>, i: usize, key: &str, value: &str) {
    let t = Instant::now();
    while node_cmd(set, i, &["GET", key]).await.as_str() != Some(value) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "node {i} never got {key} = {value}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// Kills the primary and waits for the sentinels to promote another node.
async fn kill_primary(set: SentinelSet) -> (Arc<SentinelSet>, usize, usize) {
    blocking(move || {
        let mut set = set;
        let old = set.kill_primary().expect("kill the primary");
        let new = set
            .wait_for_failover(old, FAILOVER)
            .expect("the sentinels promote a replica");
        (Arc::new(set), old, new)
    })
    .await
}

/// Extends `guard` by `ttl`, retrying what is retryable until the client
/// reached the new primary (within a failover's bound).
async fn extend_on_the_new_primary(guard: &LockGuard, ttl: Duration) {
    timeout(FAILOVER, async {
        loop {
            match guard.extend(ttl).await {
                Ok(_) => return,
                Err(e) if e.is_retryable() => sleep(Duration::from_millis(100)).await,
                Err(e) => panic!("extend on the new primary: {e}"),
            }
        }
    })
    .await
    .expect("extended within the failover's bound");
}

/// `client` acquires `lock` on the new primary, waiting at most a
/// failover's bound (and returning within it).
async fn acquire_after_failover(client: &RedisLock, lock: &LockName) -> LockGuard {
    let t = Instant::now();
    let g = client
        .acquire(
            lock,
            &AcquireOptions::new()
                .ttl(Duration::from_secs(5))
                .wait(FAILOVER),
        )
        .await
        .expect("acquire from the new primary");
    assert!(t.elapsed() <= FAILOVER + SLACK, "took {:?}", t.elapsed());
    g
}

/// Holders keep their locks across the primary's death when the lock had
/// reached the promoted replica; waiters queued behind them get the lock
/// afterwards in their order; no call outlives its bound; every token is
/// above the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_get_the_lock_after_the_primary_is_killed() {
    let set = start().await;
    let config = config(&set);
    // The waiters re-check every 100 ms: their attempts meet the failover
    // (refused, then silent, then a new primary) and must ride it out.
    let eager = config.clone().max_recheck(Duration::from_millis(100));
    let (a, b, c) = (
        client(config.clone()).await,
        client(eager.clone()).await,
        client(eager).await,
    );
    let lock = name("sentinel-kill");
    // Long enough that the holder's validity outlasts the failover.
    let ttl = Duration::from_secs(8);
    let held = a
        .acquire(&lock, &AcquireOptions::new().ttl(ttl))
        .await
        .expect("acquire before the failover");
    let first = held.fencing_token().unwrap().get();
    // Waiters queue up behind it, on other clients.
    let wait = FAILOVER + ttl * 3 + SLACK;
    let waiter = |who: Arc<RedisLock>, lock: LockName| {
        tokio::spawn(async move {
            let asked = Instant::now();
            let got = who
                .acquire(&lock, &AcquireOptions::new().ttl(ttl).wait(wait))
                .await;
            (got, asked.elapsed())
        })
    };
    let wb = waiter(b.clone(), lock.clone());
    sleep(Duration::from_millis(200)).await;
    let wc = waiter(c.clone(), lock.clone());
    sleep(Duration::from_millis(200)).await;
    // The lock and the line have reached both replicas.
    let keys = Keys::new("", lock.as_str());
    let set = Arc::new(set);
    let primary = blocking({
        let set = set.clone();
        move || set.primary().expect("the primary")
    })
    .await;
    let token = match node_cmd(&set, primary, &["GET", lock.as_str()]).await {
        RespValue::Bulk(Some(t)) => String::from_utf8(t).unwrap(),
        other => panic!("the lock key is {other:?}"),
    };
    for replica in (0..3).filter(|&i| i != primary) {
        replicated(&set, replica, lock.as_str(), &token).await;
        let queued = node_cmd(&set, replica, &["ZCARD", keys.queue()]).await;
        assert_eq!(
            queued,
            RespValue::Int(2),
            "both waiters in line on node {replica}"
        );
    }
    let set = Arc::try_unwrap(set).unwrap_or_else(|_| panic!("the set is shared"));
    let (set, old, new) = kill_primary(set).await;
    assert_ne!(old, new);
    // The holder's guard follows: extended on the new primary, still held.
    extend_on_the_new_primary(&held, ttl).await;
    assert!(held.is_held(), "the guard lost a lock the new primary has");
    let released = timeout(REQUEST * 4 + SLACK, held.release())
        .await
        .expect("release within its bound")
        .expect("release on the new primary");
    assert!(released, "the new primary had the lock");
    // The waiters get it in their order, each with a larger token.
    let (gb, waited_b) = wb.await.unwrap();
    let gb = gb.expect("the first waiter gets the lock after the failover");
    assert!(waited_b <= wait + SLACK, "waited {waited_b:?}");
    let second = gb.fencing_token().unwrap().get();
    assert!(second > first, "token {second} after {first}");
    assert!(gb.release().await.unwrap());
    let (gc, waited_c) = wc.await.unwrap();
    let gc = gc.expect("the second waiter gets the lock after the failover");
    assert!(waited_c <= wait + SLACK, "waited {waited_c:?}");
    let third = gc.fencing_token().unwrap().get();
    assert!(third > second, "token {third} after {second}");
    assert!(gc.release().await.unwrap());
    drop(set);
}

/// A failover to a replica that had stopped following: the tokens issued
/// on the old primary meanwhile are lost with it, and the next token from
/// the new primary is still above every one of them (the server-clock
/// floor); the client found the new primary by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_after_a_failover_to_a_lagging_replica() {
    let set = start().await;
    let a = client(config(&set)).await;
    let lock = name("sentinel-lag");
    let fencing = Keys::new("", lock.as_str()).fencing().to_owned();
    let (set, lagging) = blocking(move || {
        let mut set = set;
        let lagging = (set.primary().expect("the primary") + 1) % 3;
        set.prefer(lagging)
            .expect("make the lagging replica the one promoted");
        (Arc::new(set), lagging)
    })
    .await;
    let mut last = 0;
    for _ in 0..3 {
        let g = a
            .acquire(&lock, &support::opts(Duration::from_secs(5)))
            .await
            .unwrap();
        last = g.fencing_token().unwrap().get();
        assert!(g.release().await.unwrap());
    }
    replicated(&set, lagging, &fencing, &last.to_string()).await;
    let caught_up = last;
    blocking({
        let set = set.clone();
        move || set.lag_replica(lagging).expect("cut its replication link")
    })
    .await;
    for _ in 0..5 {
        let g = a
            .acquire(&lock, &support::opts(Duration::from_secs(5)))
            .await
            .unwrap();
        let t = g.fencing_token().unwrap().get();
        assert!(t > last);
        last = t;
        assert!(g.release().await.unwrap());
    }
    let set = Arc::try_unwrap(set).unwrap_or_else(|_| panic!("the set is shared"));
    let (set, _, new) = kill_primary(set).await;
    assert_eq!(new, lagging, "the sentinels promoted the preferred replica");
    assert_eq!(
        node_cmd(&set, new, &["GET", &fencing]).await.as_str(),
        Some(caught_up.to_string().as_str()),
        "the promoted replica should be behind"
    );
    // The same client, following the failover, within the failover's bound.
    let g = acquire_after_failover(&a, &lock).await;
    let next = g.fencing_token().unwrap().get();
    assert!(
        next > last,
        "token {next} from the promoted replica, {last} before"
    );
    assert!(g.release().await.unwrap());
}

/// A graceful failover (`SENTINEL FAILOVER`) demotes the primary, which
/// then answers writes with `READONLY`: the client moves to the new one,
/// and a waiter subscribed before the failover is woken by a release
/// after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_primary_is_left_for_the_new_one() {
    let set = Arc::new(start().await);
    let config = config(&set);
    let (a, b) = (client(config.clone()).await, client(config).await);
    let lock = name("sentinel-demoted");
    let ttl = Duration::from_secs(30);
    let g = a
        .acquire(&lock, &AcquireOptions::new().ttl(ttl))
        .await
        .unwrap();
    let first = g.fencing_token().unwrap().get();
    let waiter = {
        let (b, lock) = (b.clone(), lock.clone());
        tokio::spawn(async move {
            b.acquire(&lock, &AcquireOptions::new().ttl(ttl).wait(FAILOVER * 2))
                .await
        })
    };
    sleep(Duration::from_millis(300)).await;
    let old = blocking({
        let set = set.clone();
        move || {
            let old = set.primary().expect("the primary");
            let new = set.failover().expect("a graceful failover");
            assert_ne!(old, new);
            old
        }
    })
    .await;
    let new = blocking({
        let set = set.clone();
        move || set.primary().expect("the new primary")
    })
    .await;
    assert_ne!(old, new, "the failover moved the primary");
    // Released on the new primary; the waiter (whose TTL is 30 s) is woken
    // by the release, not by an expiry.
    let t = Instant::now();
    // The holder's next write (an extension) reaches the new primary...
    extend_on_the_new_primary(&g, ttl).await;
    // ...and so does its release.
    assert!(g.release().await.expect("release on the new primary"));
    let next = timeout(FAILOVER, waiter)
        .await
        .expect("the waiter is woken by the release")
        .unwrap()
        .expect("the waiter gets the lock");
    assert!(t.elapsed() < ttl / 2, "woken after {:?}", t.elapsed());
    assert!(next.fencing_token().unwrap().get() > first);
    assert!(next.release().await.unwrap());
    // The demoted node refuses writes: the client does not write there.
    let reply = node_cmd(&set, old, &["SET", "probe", "x"]).await;
    assert!(
        matches!(&reply, RespValue::Error(e) if e.starts_with("READONLY")),
        "the old primary answered {reply:?}"
    );
}

/// `sync_replicas`: a lock that the replicas confirm is returned; one
/// they cannot confirm (a replica's link cut, 2 asked) fails with
/// `Unavailable` within the request timeout plus the wait, and is not
/// left held (another client takes it at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_replicas_returns_only_confirmed_locks() {
    let set = Arc::new(start().await);
    // Replicas answer WAIT's GETACK at once; a busy machine may delay them.
    let sync = SyncReplicas::new(2, Duration::from_secs(2));
    let synced = client(config(&set).sync_replicas(Some(sync))).await;
    let plain = client(config(&set)).await;
    let lock = name("sentinel-sync");
    let opts = AcquireOptions::new().ttl(Duration::from_secs(10));
    let g = synced
        .acquire(&lock, &opts)
        .await
        .expect("both replicas confirm");
    assert!(g.release().await.unwrap());
    let primary = blocking({
        let set = set.clone();
        move || set.primary().expect("the primary")
    })
    .await;
    let cut = (primary + 1) % 3;
    blocking({
        let set = set.clone();
        move || set.lag_replica(cut).expect("cut a replica's link")
    })
    .await;
    let t = Instant::now();
    let err = synced
        .acquire(&lock, &opts)
        .await
        .expect_err("only one replica can confirm");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("replicas"), "{err}");
    assert!(
        t.elapsed() <= REQUEST * 2 + sync.timeout + SLACK,
        "took {:?}",
        t.elapsed()
    );
    // Not left held: released in the background right after.
    let other = plain
        .acquire(&lock, &opts.clone().wait(REQUEST * 4 + SLACK))
        .await
        .expect("the refused lock was released");
    assert!(other.release().await.unwrap());
    blocking({
        let set = set.clone();
        move || set.heal_replica(cut).expect("heal the link")
    })
    .await;
}

/// `rediss+sentinel://`: TLS to the sentinels and to the data nodes, a
/// client certificate required by both; the client follows a failover
/// there too, and the next token is larger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_sentinel_follows_a_failover() {
    let set = start_with(true).await;
    let files = TlsFiles::shared().expect("the test certificates");
    let url = set.tls_url().expect("a TLS Sentinel URL");
    assert!(url.starts_with("rediss+sentinel://"), "{url}");
    let a = client(
        RedisLockConfig::new(url)
            .tls(
                TlsConfig::new()
                    .ca(files.ca())
                    .identity(files.client_cert(), files.client_key()),
            )
            .connect_timeout(Duration::from_secs(2))
            .request_timeout(REQUEST),
    )
    .await;
    let lock = name("sentinel-tls");
    let g = a
        .acquire(&lock, &support::opts(Duration::from_secs(5)))
        .await
        .expect("acquire over TLS");
    let first = g.fencing_token().unwrap().get();
    assert!(g.release().await.unwrap());
    let (_set, old, new) = kill_primary(set).await;
    assert_ne!(old, new);
    let g = acquire_after_failover(&a, &lock).await;
    assert!(g.fencing_token().unwrap().get() > first);
    assert!(g.release().await.unwrap());
}

/// A Sentinel URL whose master name no sentinel monitors is refused at
/// connect, as a configuration error, within the connect timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_master_name_is_a_configuration_error() {
    let set = start().await;
    let sentinels: Vec<String> = set.sentinel_addrs().iter().map(|a| a.to_string()).collect();
    let url = format!("redis+sentinel://{}/no-such-master", sentinels.join(","));
    let t = Instant::now();
    let err = RedisLock::connect(RedisLockConfig::new(url).connect_timeout(Duration::from_secs(1)))
        .await
        .expect_err("no sentinel monitors that name");
    assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("no-such-master"), "{err}");
    assert!(t.elapsed() <= Duration::from_secs(1) + SLACK);
}
