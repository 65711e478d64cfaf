//! `RedisLock` on a real Redis Cluster (`redis+cluster://`,
//! `lock_testbed::RedisClusterSet`: 3 primaries, 3 replicas): locks on
//! every primary with fencing tokens that keep increasing across them, a
//! lock that stays held through its slot's migration, releases announced
//! with `SPUBLISH`, a script the owner forgot run again as `EVAL` there,
//! `sync_replicas`' `WAIT` on the lock's owner only, names with hash tags
//! (kept on the tag's slot) and names with a `}` but no tag (refused),
//! guards on different primaries renewed, through a slot's migration too,
//! `list` across primaries, a waiter woken by a release, the
//! read-write lock, the semaphore and an operator's force release, a
//! waiter through a migration and through resets of its connections, a
//! guard through its primary's failover, a
//! cluster over mutual TLS.

mod support;

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    AcquireOptions, DistributedLock, GuardState, LockErrorKind, LockGuard, LockName, ReadWriteLock,
    Semaphore, TlsConfig,
};
use lock_redis::{RedisLock, RedisLockConfig, SyncReplicas};
use lock_testbed::{unique_name, ClusterOptions, RedisClusterSet};
use support::{blocking, initial_owner, name_on_primary};

/// The clients' request timeout.
const REQUEST: Duration = Duration::from_millis(300);

async fn start() -> Arc<RedisClusterSet> {
    Arc::new(
        blocking(RedisClusterSet::start)
            .await
            .unwrap_or_else(|e| panic!("starting a Redis Cluster: {e}")),
    )
}

fn config(cluster: &RedisClusterSet) -> RedisLockConfig {
    RedisLockConfig::new(cluster.url())
        .connect_timeout(Duration::from_secs(2))
        .request_timeout(REQUEST)
}

async fn client(cluster: &RedisClusterSet) -> RedisLock {
    connect(config(cluster)).await
}

async fn connect(config: RedisLockConfig) -> RedisLock {
    RedisLock::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connect to the cluster: {e}"))
}

/// How many times node `i` ran `command` (from a script or not).
async fn calls(cluster: &Arc<RedisClusterSet>, i: usize, command: &'static str) -> u64 {
    let cluster = cluster.clone();
    blocking(move || {
        cluster
            .node(i)
            .calls(command)
            .unwrap_or_else(|e| panic!("INFO commandstats on node {i}: {e}"))
    })
    .await
}

/// `args` on node `i`.
async fn node_cmd(cluster: &Arc<RedisClusterSet>, i: usize, args: &'static [&'static str]) {
    let cluster = cluster.clone();
    blocking(move || {
        cluster
            .node(i)
            .cmd(args)
            .unwrap_or_else(|e| panic!("{args:?} on node {i}: {e}"));
    })
    .await
}

/// A fresh lock name whose slot belongs to primary `owner` of a fresh cluster.
fn name_on(owner: usize, tag: &str) -> LockName {
    let name = name_on_primary(owner, &format!("{}-", unique_name(tag)));
    LockName::new(name).expect("valid name")
}

/// Every guard of `guards` held at each of `rounds` looks, `ttl / 2` apart.
async fn held_throughout(guards: &[(LockName, LockGuard)], ttl: Duration, rounds: usize) {
    for _ in 0..rounds {
        tokio::time::sleep(ttl / 2).await;
        for (name, guard) in guards {
            assert!(
                matches!(guard.state(), GuardState::Held { .. }),
                "{name}: {:?}",
                guard.state()
            );
        }
    }
}

/// Each of `guards` refused to `other`, then released.
async fn refused_then_released(
    other: &RedisLock,
    guards: Vec<(LockName, LockGuard)>,
    ttl: Duration,
) {
    for (name, guard) in guards {
        assert!(
            other
                .try_acquire(&name, &opts(ttl))
                .await
                .unwrap()
                .is_none(),
            "{name}"
        );
        assert!(guard.release().await.unwrap(), "{name}");
    }
}

fn opts(ttl: Duration) -> AcquireOptions {
    AcquireOptions::new().ttl(ttl)
}

/// `EXISTS key` on node `i`.
fn exists_on(cluster: &RedisClusterSet, i: usize, key: &str) -> bool {
    tokio::task::block_in_place(|| {
        cluster
            .node(i)
            .cmd(&["EXISTS", key])
            .unwrap_or_else(|e| panic!("EXISTS {key} on node {i}: {e}"))
            .as_int()
            == Some(1)
    })
}

async fn take(lock: &RedisLock, name: &LockName, ttl: Duration) -> LockGuard {
    lock.try_acquire(name, &opts(ttl))
        .await
        .unwrap_or_else(|e| panic!("try_acquire {name}: {e}"))
        .unwrap_or_else(|| panic!("{name} is held"))
}

fn token(guard: &LockGuard) -> u64 {
    guard.fencing_token().expect("a fencing token").get()
}

/// Locks on each primary in turn, twice round: each is taken on the owner
/// of its slot, refused to another client while held, released; every
/// fencing token is above the one before, whichever primary issued it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_every_primary_with_tokens_increasing_across_them() {
    let cluster = start().await;
    let (a, b) = (client(&cluster).await, client(&cluster).await);
    let names: Vec<LockName> = (0..3).map(|i| name_on(i, "every")).collect();
    let mut last = 0;
    for round in 0..2 {
        for (owner, name) in names.iter().enumerate() {
            let guard = take(&a, name, Duration::from_secs(10)).await;
            let t = token(&guard);
            assert!(
                t > last,
                "round {round}, primary {owner}: token {t} after {last}"
            );
            last = t;
            assert!(exists_on(&cluster, owner, name.as_str()));
            assert!(b
                .try_acquire(name, &opts(Duration::from_secs(10)))
                .await
                .unwrap()
                .is_none());
            let status = b.inspect(name).await.unwrap();
            assert!(status.held);
            assert_eq!(status.token.map(|t| t.get()), Some(t));
            assert!(
                guard.release().await.unwrap(),
                "released on primary {owner}"
            );
            assert!(!exists_on(&cluster, owner, name.as_str()));
        }
    }
}

/// A lock whose slot moves to another primary while held: the other
/// client still finds it held (its request follows the MOVED), the
/// holder extends and releases it there, and the next token is higher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_held_through_its_slots_migration() {
    let cluster = start().await;
    let (a, b) = (client(&cluster).await, client(&cluster).await);
    let name = name_on(0, "moved");
    let guard = take(&a, &name, Duration::from_secs(10)).await;
    let first = token(&guard);
    let slot = RedisClusterSet::slot_of(name.as_str());
    let c = cluster.clone();
    let moved = blocking(move || c.migrate_slot(slot, 0, 1))
        .await
        .unwrap_or_else(|e| panic!("migrating slot {slot}: {e}"));
    assert!(
        moved >= 2,
        "the lock key and its counter moved ({moved} keys)"
    );
    assert!(exists_on(&cluster, 1, name.as_str()));
    assert!(b
        .try_acquire(&name, &opts(Duration::from_secs(10)))
        .await
        .unwrap()
        .is_none());
    guard.extend(Duration::from_secs(10)).await.unwrap();
    assert!(guard.release().await.unwrap());
    let next = take(&b, &name, Duration::from_secs(10)).await;
    assert!(token(&next) > first, "{} after {first}", token(&next));
    assert!(next.release().await.unwrap());
}

/// A release on a cluster announces itself with `SPUBLISH` (a sharded
/// message, kept to the slot's owner), never with `PUBLISH`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_publish_sharded() {
    let cluster = start().await;
    let a = client(&cluster).await;
    for owner in 0..3 {
        let name = name_on(owner, "spublish");
        let before = calls(&cluster, owner, "spublish").await;
        let guard = take(&a, &name, Duration::from_secs(10)).await;
        assert!(guard.release().await.unwrap());
        assert!(
            calls(&cluster, owner, "spublish").await > before,
            "primary {owner} announced the release"
        );
    }
    for i in 0..6 {
        assert_eq!(calls(&cluster, i, "publish").await, 0, "node {i}");
    }
}

/// A primary that lost its scripts (`SCRIPT FLUSH`) runs the next call as
/// `EVAL` of the source, and nothing is sent to the other primaries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_script_runs_as_eval_on_the_owner_only() {
    let cluster = start().await;
    let a = client(&cluster).await;
    let name = name_on(2, "noscript");
    node_cmd(&cluster, 2, &["SCRIPT", "FLUSH"]).await;
    let loads: Vec<u64> =
        futures::future::join_all((0..6).map(|i| calls(&cluster, i, "script|load"))).await;
    let guard = take(&a, &name, Duration::from_secs(10)).await;
    assert!(guard.release().await.unwrap());
    assert!(calls(&cluster, 2, "eval").await >= 1, "EVAL on the owner");
    for (i, loaded) in loads.into_iter().enumerate() {
        assert_eq!(calls(&cluster, i, "script|load").await, loaded, "node {i}");
        if i != 2 {
            assert_eq!(calls(&cluster, i, "eval").await, 0, "node {i}");
        }
    }
}

/// With `sync_replicas`, each acquisition's `WAIT` goes to the owner of
/// its lock's slot (whose replica confirms it), not to every primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_replicas_waits_on_the_locks_owner() {
    let cluster = start().await;
    let a =
        connect(config(&cluster).sync_replicas(Some(SyncReplicas::new(1, Duration::from_secs(2)))))
            .await;
    for owner in 0..3 {
        let name = name_on(owner, "wait");
        let before: Vec<u64> =
            futures::future::join_all((0..3).map(|i| calls(&cluster, i, "wait"))).await;
        let guard = take(&a, &name, Duration::from_secs(10)).await;
        for (i, waited) in before.into_iter().enumerate() {
            let expected = waited + u64::from(i == owner);
            assert_eq!(
                calls(&cluster, i, "wait").await,
                expected,
                "primary {i}, lock on {owner}"
            );
        }
        assert!(guard.release().await.unwrap());
    }
}

/// A name with a hash tag and a `}`: every key of it on the owner of the
/// tag's slot; the lock works there like any other, fencing included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_with_a_hash_tag_keeps_its_keys_on_the_tags_owner() {
    let cluster = start().await;
    let (a, b) = (client(&cluster).await, client(&cluster).await);
    let tag = unique_name("tag");
    let name = LockName::new(format!("job{{{tag}}}:nightly")).unwrap();
    let owner = initial_owner(RedisClusterSet::slot_of(&tag));
    let keys = a.keys(&name).unwrap();
    assert_eq!(keys.fencing(), format!("{{{tag}}} {name} fencing"));
    let first = take(&a, &name, Duration::from_secs(10)).await;
    assert!(b
        .try_acquire(&name, &opts(Duration::from_secs(10)))
        .await
        .unwrap()
        .is_none());
    first.extend(Duration::from_secs(10)).await.unwrap();
    for key in [keys.lock(), keys.fencing(), keys.holder()] {
        assert!(exists_on(&cluster, owner, key), "{key} on primary {owner}");
    }
    let first_token = token(&first);
    assert!(first.release().await.unwrap());
    let second = take(&b, &name, Duration::from_secs(10)).await;
    assert!(token(&second) > first_token);
    assert!(second.release().await.unwrap());
}

/// A name whose lock key has a `}` and no hash tag cannot keep its keys in
/// one slot: refused on a cluster with `InvalidArgument`, before any request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_without_a_hash_tag_but_with_a_brace_is_refused() {
    let cluster = start().await;
    let a = client(&cluster).await;
    for name in ["a}b", "x{}y", "}{"] {
        let name = LockName::new(name).unwrap();
        let e = a
            .try_acquire(&name, &opts(Duration::from_secs(10)))
            .await
            .expect_err("refused");
        assert_eq!(e.kind(), LockErrorKind::InvalidArgument, "{name}: {e}");
        assert!(!e.is_retryable(), "{name}");
        let e = a.inspect(&name).await.expect_err("refused");
        assert_eq!(e.kind(), LockErrorKind::InvalidArgument, "{name}: {e}");
        assert_eq!(
            a.keys(&name).unwrap_err().kind(),
            LockErrorKind::InvalidArgument
        );
    }
}
/// Guards on the three primaries, short TTLs, held for several TTLs: the
/// client's renewals keep every one held (none suspended, none taken by
/// another client).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_on_different_primaries_are_renewed() {
    let cluster = start().await;
    let (a, b) = (client(&cluster).await, client(&cluster).await);
    let ttl = Duration::from_millis(900);
    let mut guards = Vec::new();
    for owner in 0..3 {
        for i in 0..3 {
            let name = name_on(owner, &format!("renew{i}"));
            let guard = take(&a, &name, ttl).await;
            guards.push((name, guard));
        }
    }
    held_throughout(&guards, ttl, 8).await;
    refused_then_released(&b, guards, ttl).await;
}

/// Guards renewed while their slot migrates to another primary: the
/// renewals the old owner answers "non local" go to the new owner, and
/// every guard stays held, its keys alive there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_follow_a_slots_migration() {
    let cluster = start().await;
    let (a, b) = (client(&cluster).await, client(&cluster).await);
    let ttl = Duration::from_millis(900);
    let moving = name_on(0, "migrating");
    let slot = RedisClusterSet::slot_of(moving.as_str());
    // Another name on primary 0, batched with `moving` there.
    let staying = name_on(0, "staying");
    let mut guards = vec![
        (moving.clone(), take(&a, &moving, ttl).await),
        (staying.clone(), take(&a, &staying, ttl).await),
    ];
    for owner in 1..3 {
        let name = name_on(owner, "elsewhere");
        guards.push((name.clone(), take(&a, &name, ttl).await));
    }
    tokio::time::sleep(ttl / 2).await;
    let c = cluster.clone();
    blocking(move || c.migrate_slot(slot, 0, 2))
        .await
        .unwrap_or_else(|e| panic!("migrating slot {slot}: {e}"));
    held_throughout(&guards, ttl, 6).await;
    assert!(exists_on(&cluster, 2, moving.as_str()));
    refused_then_released(&b, guards, ttl).await;
}

/// `list` finds the held locks of every primary, with their fencing
/// tokens and holders, and not the released ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_finds_the_locks_of_every_primary() {
    let cluster = start().await;
    let (a, b) = (client(&cluster).await, client(&cluster).await);
    let prefix = format!("{}-", unique_name("listed"));
    let names: Vec<LockName> = (0..3)
        .map(|owner| LockName::new(name_on_primary(owner, &prefix)).unwrap())
        .collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push((name.clone(), take(&a, name, Duration::from_secs(10)).await));
    }
    let (_, released) = guards.remove(1);
    assert!(released.release().await.unwrap());
    guards.sort_by(|x, y| x.0.cmp(&y.0));
    let listed = b.list(&prefix, 10).await.unwrap();
    let listed_names: Vec<&LockName> = listed.iter().map(|(n, _)| n).collect();
    let held_names: Vec<&LockName> = guards.iter().map(|(n, _)| n).collect();
    assert_eq!(listed_names, held_names);
    for ((name, status), (_, guard)) in listed.iter().zip(&guards) {
        assert!(status.held, "{name}");
        assert_eq!(status.token, guard.fencing_token(), "{name}");
        assert!(status.holder.is_some(), "{name}");
    }
    for (_, guard) in guards {
        assert!(guard.release().await.unwrap());
    }
    assert!(b.list(&prefix, 10).await.unwrap().is_empty());
}

/// A client that looks again every 200 ms (`max_recheck`) waiting up to
/// `wait` for `name`, in a task of its own.
async fn waiter_on(
    cluster: &RedisClusterSet,
    name: &LockName,
    wait: Duration,
) -> tokio::task::JoinHandle<lock_core::Result<LockGuard>> {
    let b = connect(config(cluster).max_recheck(Duration::from_millis(200))).await;
    let name = name.clone();
    tokio::spawn(async move {
        let wait = AcquireOptions::new()
            .ttl(Duration::from_secs(10))
            .wait(wait);
        b.acquire(&name, &wait).await
    })
}

/// A waiter on a cluster gets the lock its holder released: its place in
/// the line is kept on the lock's primary, the release hands it over and
/// announces it (`SPUBLISH`), and the waiter, subscribed at the owner of
/// the channel's slot, is woken at once: its next look of its own would
/// come only after `max_recheck` (10 s by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_the_lock_after_its_release() {
    let cluster = start().await;
    let a = client(&cluster).await;
    let b = client(&cluster).await;
    let name = name_on(1, "waiter");
    waiter_woken_by_the_release(&a, &b, &name).await;
}

/// `waiter` waits for `name` while `holder` holds it; the release wakes the
/// waiter well before any look of its own (`max_recheck`, 10 s by default,
/// and the holder's TTL, 30 s), within the request timeout and slack.
async fn waiter_woken_by_the_release(holder: &RedisLock, waiter: &RedisLock, name: &LockName) {
    let held = take(holder, name, Duration::from_secs(30)).await;
    let first = token(&held);
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move {
            let wait = AcquireOptions::new()
                .ttl(Duration::from_secs(10))
                .wait(Duration::from_secs(20));
            waiter.acquire(&name, &wait).await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished());
    let released = tokio::time::Instant::now();
    assert!(held.release().await.unwrap());
    let got = waiting.await.unwrap().expect("the waiter's acquisition");
    let took = released.elapsed();
    assert!(took < Duration::from_secs(2), "woken after {took:?}");
    assert!(token(&got) > first);
    assert!(got.release().await.unwrap());
}

/// A cluster over mutual TLS (`rediss+cluster://`: client ports,
/// replication and the cluster bus on TLS): locks on every primary with
/// increasing tokens, and a waiter woken through the notifier's own TLS
/// connections to the primaries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster() {
    let cluster = Arc::new(
        blocking(|| {
            RedisClusterSet::start_with(ClusterOptions {
                tls: true,
                ..ClusterOptions::default()
            })
        })
        .await
        .unwrap_or_else(|e| panic!("starting a Redis Cluster with TLS: {e}")),
    );
    let files = cluster.node(0).tls_files().expect("TLS files");
    let url = cluster.tls_url().expect("a TLS cluster URL");
    let config = RedisLockConfig::new(url)
        .connect_timeout(Duration::from_secs(2))
        .request_timeout(REQUEST)
        .tls(
            TlsConfig::new()
                .ca(files.ca())
                .identity(files.client_cert(), files.client_key()),
        );
    let (a, b) = (connect(config.clone()).await, connect(config).await);
    let mut last = 0;
    for owner in 0..3 {
        let name = name_on(owner, "tls");
        let guard = take(&a, &name, Duration::from_secs(10)).await;
        let t = token(&guard);
        assert!(t > last, "primary {owner}: token {t} after {last}");
        last = t;
        assert!(exists_on(&cluster, owner, name.as_str()));
        assert!(guard.release().await.unwrap());
    }
    waiter_woken_by_the_release(&a, &b, &name_on(2, "tls-waiter")).await;
}

/// The read-write lock and the semaphore on a cluster's primaries, and an
/// operator's force release of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_locks_semaphores_and_force_release() {
    let cluster = start().await;
    let (a, b) = (client(&cluster).await, client(&cluster).await);
    let ttl = Duration::from_secs(10);
    for owner in 0..3 {
        let name = name_on(owner, "shared");
        let r1 = a
            .try_acquire_read(&name, &opts(ttl))
            .await
            .unwrap()
            .expect("read");
        let r2 = b
            .try_acquire_read(&name, &opts(ttl))
            .await
            .unwrap()
            .expect("read");
        assert!(b
            .try_acquire_write(&name, &opts(ttl))
            .await
            .unwrap()
            .is_none());
        let p1 = a
            .try_acquire_permit(&name, 2, &opts(ttl))
            .await
            .unwrap()
            .expect("permit");
        let p2 = b
            .try_acquire_permit(&name, 2, &opts(ttl))
            .await
            .unwrap()
            .expect("permit");
        assert!(a
            .try_acquire_permit(&name, 2, &opts(ttl))
            .await
            .unwrap()
            .is_none());
        assert!(r1.release().await.unwrap());
        assert!(p1.release().await.unwrap());
        let forced = b.force_release(&name).await.unwrap();
        assert_eq!(
            (forced.read_write, forced.permits),
            (1, 1),
            "primary {owner}"
        );
        let w = a
            .try_acquire_write(&name, &opts(ttl))
            .await
            .unwrap()
            .expect("write");
        assert!(w.release().await.unwrap());
        drop((r2, p2));
    }
}

/// A waiter whose attempts are refused while its lock's slot migrates
/// (`TRYAGAIN` until the migration ends, longer than a request timeout)
/// keeps waiting with its place in line, and gets the lock once the
/// holder releases it on the new owner; a `try_acquire` in the window
/// fails `Unavailable`, retryable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_rides_out_a_slots_migration() {
    let cluster = start().await;
    let a = client(&cluster).await;
    let name = name_on(0, "riding");
    let slot = RedisClusterSet::slot_of(name.as_str());
    let held = take(&a, &name, Duration::from_secs(30)).await;
    let first = token(&held);
    let waiter = waiter_on(&cluster, &name, Duration::from_secs(15)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let c = cluster.clone();
    blocking(move || c.begin_migration(slot, 0, 1))
        .await
        .unwrap_or_else(|e| panic!("begin_migration({slot}): {e}"));
    let refused = a
        .try_acquire(&name, &opts(Duration::from_secs(10)))
        .await
        .expect_err("refused during the migration");
    assert_eq!(refused.kind(), LockErrorKind::Unavailable, "{refused}");
    assert!(refused.is_retryable());
    // Several request timeouts of refused attempts.
    tokio::time::sleep(REQUEST * 4).await;
    assert!(!waiter.is_finished(), "{:?}", waiter.await);
    let c = cluster.clone();
    blocking(move || {
        c.move_keys(slot, 0, 1)?;
        c.finish_migration(slot, 1)
    })
    .await
    .unwrap_or_else(|e| panic!("finishing the migration of {slot}: {e}"));
    assert!(held.release().await.unwrap());
    let got = waiter.await.unwrap().expect("the waiter's acquisition");
    assert!(token(&got) > first);
    assert!(exists_on(&cluster, 1, name.as_str()));
    assert!(got.release().await.unwrap());
}

/// The primary of a held lock fails over to its replica: the guard (its
/// acquisition replicated with `sync_replicas`) is renewed again on the
/// new primary, another client still finds the lock held there, and a new
/// lock of that slot gets a higher fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_is_renewed_on_the_new_primary_after_a_failover() {
    let mut cluster = blocking(RedisClusterSet::start)
        .await
        .unwrap_or_else(|e| panic!("starting a Redis Cluster: {e}"));
    let sync = Some(SyncReplicas::new(1, Duration::from_secs(2)));
    let a = connect(config(&cluster).sync_replicas(sync)).await;
    let b = client(&cluster).await;
    // Longer than the failover (about 5 s here) and the client's way to
    // the new primary after it.
    let ttl = Duration::from_secs(15);
    let name = name_on(0, "failover");
    let guard = take(&a, &name, ttl).await;
    let first = token(&guard);
    let promoted = tokio::task::block_in_place(|| {
        cluster.kill_node(0)?;
        cluster.wait_for_failover(0, Duration::from_secs(30))
    })
    .unwrap_or_else(|e| panic!("failing primary 0 over: {e}"));
    // Renewed on the new primary within a TTL (suspended meanwhile, maybe).
    let since = tokio::time::Instant::now();
    while !matches!(guard.state(), GuardState::Held { .. }) || since.elapsed() < ttl / 2 {
        assert!(
            !matches!(guard.state(), GuardState::Lost { .. }),
            "{:?}",
            guard.state()
        );
        assert!(since.elapsed() < ttl * 2, "{:?}", guard.state());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let renewed = guard
        .extend(ttl)
        .await
        .expect("extended on the new primary");
    assert!(renewed > since);
    assert!(b.try_acquire(&name, &opts(ttl)).await.unwrap().is_none());
    let other = LockName::new(name_on_primary(0, &format!("{name}-next-"))).unwrap();
    let next = take(&b, &other, ttl).await;
    assert!(token(&next) > first, "{} after {first}", token(&next));
    assert!(exists_on(&cluster, promoted, other.as_str()));
    assert!(guard.release().await.unwrap());
    assert!(next.release().await.unwrap());
}

/// A waiter whose connections to every node are reset while it waits, the
/// lock released at that moment, takes the lock, round after round on the
/// same client: a connection a reset left dead fails its first request, and
/// the cluster is judged by the slot map read from every primary at once,
/// again while a read fails, not by that one failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_rides_out_resets_of_its_connections_round_after_round() {
    let cluster = start().await;
    let nodes: Vec<std::net::SocketAddr> = cluster.nodes().iter().map(|n| n.addr()).collect();
    let proxies: Vec<lock_testbed::Proxy> = nodes
        .iter()
        .map(|n| lock_testbed::Proxy::start(*n).unwrap_or_else(|e| panic!("proxy to {n}: {e}")))
        .collect();
    let seeds: Vec<String> = cluster
        .primaries()
        .iter()
        .filter_map(|p| nodes.iter().position(|n| n == p))
        .map(|i| proxies[i].addr().to_string())
        .collect();
    let mut through = RedisLockConfig::new(format!("redis+cluster://{}", seeds.join(",")))
        .connect_timeout(Duration::from_secs(2))
        .request_timeout(Duration::from_secs(1));
    for (real, p) in nodes.iter().zip(&proxies) {
        through = through.map_address(real.to_string(), p.addr().to_string());
    }
    let waiter = Arc::new(connect(through).await);
    let holder = client(&cluster).await;
    let long = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(60));
    let bound = Duration::from_secs(4) + support::SLACK;
    for round in 0..10 {
        let name = LockName::new(unique_name(&format!("reset-{round}"))).expect("a name");
        let held = holder.acquire(&name, &long).await.unwrap();
        let waiting = {
            let (waiter, name, long) = (waiter.clone(), name.clone(), long.clone());
            tokio::spawn(async move { waiter.acquire(&name, &long).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        for p in &proxies {
            p.reset_all();
        }
        assert!(held.release().await.unwrap());
        let got = tokio::time::timeout(bound, waiting)
            .await
            .unwrap_or_else(|_| panic!("round {round}: the waiter slept through the release"))
            .unwrap()
            .unwrap_or_else(|e| panic!("round {round}: the waiter's acquire failed: {e:?}"));
        assert!(got.release().await.unwrap());
    }
}
