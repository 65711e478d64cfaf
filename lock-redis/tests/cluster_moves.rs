//! A Redis Cluster (`redis+cluster://`, 3 primaries and 3 replicas) whose
//! slots move under the locks, on real servers: a slot migrated while
//! clients contend for a name of it, and the primary owning a name killed
//! while a holder and waiters use it. Mutual exclusion holds, fencing
//! tokens keep increasing, and the waiters finish within their bounds.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockName};
use lock_redis::{RedisLock, RedisLockConfig};
use lock_testbed::{RedisClusterSet, RespValue};
use support::{blocking, name, SLACK};
use tokio::time::{sleep, Instant};

/// The clients' request timeout.
const REQUEST: Duration = Duration::from_millis(300);
/// A failover's bound: the cluster's node timeout (1 s), the replicas'
/// election and the promotion (a few seconds on a busy machine), with slack.
const FAILOVER: Duration = Duration::from_secs(15);

async fn start() -> RedisClusterSet {
    blocking(RedisClusterSet::start)
        .await
        .unwrap_or_else(|e| panic!("starting a Redis Cluster: {e}"))
}

fn config(set: &RedisClusterSet) -> RedisLockConfig {
    RedisLockConfig::new(set.url())
        .connect_timeout(Duration::from_secs(2))
        .request_timeout(REQUEST)
}

async fn client(set: &RedisClusterSet) -> Arc<RedisLock> {
    Arc::new(
        RedisLock::connect(config(set))
            .await
            .unwrap_or_else(|e| panic!("connect to the cluster: {e}")),
    )
}

/// The index of the primary that owns `name`'s slot now.
async fn owner(set: &Arc<RedisClusterSet>, name: &LockName) -> usize {
    let (set, key) = (set.clone(), name.as_str().to_string());
    blocking(move || {
        set.owner_of_slot(RedisClusterSet::slot_of(&key))
            .unwrap_or_else(|e| panic!("the owner of {key}: {e}"))
    })
    .await
}

/// What the contenders saw: who is in the critical section, the tokens in
/// the order the sections ran, and how many sections overlapped.
#[derive(Default)]
struct Sections {
    inside: AtomicUsize,
    overlaps: AtomicUsize,
    tokens: Mutex<Vec<u64>>,
    /// Releases refused for a while (a retryable error: the slot's
    /// scripts are refused while it moves); those locks lapse with their TTL.
    failed_releases: AtomicUsize,
}

/// Runs `rounds` acquisitions of `lock` on `client`, each a short critical
/// section, recording what it saw in `seen`; returns the longest wait.
async fn contend(
    client: Arc<RedisLock>,
    lock: LockName,
    rounds: usize,
    wait: Duration,
    seen: Arc<Sections>,
) -> Duration {
    let mut longest = Duration::ZERO;
    for _ in 0..rounds {
        let asked = Instant::now();
        let guard = client
            .acquire(
                &lock,
                &AcquireOptions::new().ttl(Duration::from_secs(2)).wait(wait),
            )
            .await
            .unwrap_or_else(|e| panic!("acquire after {:?}: {e}", asked.elapsed()));
        longest = longest.max(asked.elapsed());
        if seen.inside.fetch_add(1, Ordering::SeqCst) != 0 {
            seen.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        let token = guard.fencing_token().expect("a fencing token").get();
        seen.tokens.lock().unwrap().push(token);
        sleep(Duration::from_millis(5)).await;
        seen.inside.fetch_sub(1, Ordering::SeqCst);
        match guard.release().await {
            Ok(_) => {}
            Err(e) if e.is_retryable() => {
                println!("release failed during the move: {e}");
                seen.failed_releases.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => panic!("release: {e}"),
        }
    }
    longest
}

/// Tokens in the order their sections ran: each above the one before.
fn assert_increasing(tokens: &[u64]) {
    for pair in tokens.windows(2) {
        assert!(pair[1] > pair[0], "token {} after {}", pair[1], pair[0]);
    }
}

/// Four clients take turns on one name while its slot moves to another
/// primary (`MIGRATING`/`IMPORTING`, its keys moved, the slot handed
/// over). During the move the slot's scripts are refused (`TRYAGAIN`) or
/// redirected (`ASK`, `MOVED`): the waiters ride it out, no two sections
/// overlap, every token is above the one before, and every acquisition
/// completes within its wait. A release refused while the slot moves
/// fails retryably (bounded by the request timeout), and that lock lapses
/// with its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slot_migration_during_acquisitions_keeps_one_holder_and_increasing_tokens() {
    let set = Arc::new(start().await);
    let lock = name("cluster-migrate");
    let slot = RedisClusterSet::slot_of(lock.as_str());
    let from = owner(&set, &lock).await;
    let primaries = set.primaries().len();
    let to = (from + 1) % primaries;
    let seen = Arc::new(Sections::default());
    let wait = Duration::from_secs(20);
    let mut contenders = Vec::new();
    for _ in 0..4 {
        let c = client(&set).await;
        contenders.push(tokio::spawn(contend(
            c,
            lock.clone(),
            40,
            wait,
            seen.clone(),
        )));
    }
    // The slot moves while they contend: begin, move its keys, hand over,
    // each step 300 ms apart.
    sleep(Duration::from_millis(300)).await;
    let before = seen.tokens.lock().unwrap().len();
    let moved = {
        let set = set.clone();
        blocking(move || {
            set.begin_migration(slot, from, to)
                .expect("begin migration");
            std::thread::sleep(Duration::from_millis(300));
            let moved = set.move_keys(slot, from, to).expect("move keys");
            std::thread::sleep(Duration::from_millis(300));
            set.finish_migration(slot, to).expect("finish migration");
            moved
        })
        .await
    };
    let mut longest = Duration::ZERO;
    for c in contenders {
        longest = longest.max(c.await.expect("a contender"));
    }
    let tokens = seen.tokens.lock().unwrap().clone();
    println!(
        "{} acquisitions ({before} before the move), {moved} key(s) moved, longest wait {longest:?}, \
         {} release(s) refused during the move",
        tokens.len(),
        seen.failed_releases.load(Ordering::SeqCst)
    );
    assert_eq!(
        seen.overlaps.load(Ordering::SeqCst),
        0,
        "sections overlapped"
    );
    assert_eq!(tokens.len(), 160);
    assert!(
        before < tokens.len(),
        "the move happened while they contended"
    );
    assert_increasing(&tokens);
    assert!(longest <= wait + SLACK, "waited {longest:?}");
    assert_eq!(owner(&set, &lock).await, to, "the slot moved");
    // Nothing of the name is left behind on either primary.
    for i in [from, to] {
        let (set, key) = (set.clone(), lock.as_str().to_string());
        let exists = blocking(move || set.node(i).cmd(&["EXISTS", &key]).unwrap()).await;
        assert!(
            matches!(exists, RespValue::Int(0) | RespValue::Error(_)),
            "the lock key is left on node {i}: {exists:?}"
        );
    }
}

/// The primary that owns a name dies while a client holds it and another
/// waits: its replica takes over, the waiter gets the lock from the new
/// primary within its wait (once the holder released it there, or its
/// lease expired if the lock had not been replicated), and its token is
/// above the holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_gets_the_lock_after_the_names_primary_is_killed() {
    let set = start().await;
    let (a, b) = (client(&set).await, client(&set).await);
    let lock = name("cluster-kill");
    let ttl = Duration::from_secs(3);
    let held = a
        .acquire(&lock, &AcquireOptions::new().ttl(ttl))
        .await
        .expect("acquire before the failover");
    let first = held.fencing_token().unwrap().get();
    let wait = FAILOVER + ttl * 2 + SLACK;
    let waiter = {
        let (b, lock) = (b.clone(), lock.clone());
        tokio::spawn(async move {
            let asked = Instant::now();
            let got = b
                .acquire(&lock, &AcquireOptions::new().ttl(ttl).wait(wait))
                .await;
            (got, asked.elapsed())
        })
    };
    sleep(Duration::from_millis(300)).await;
    let set = Arc::new(set);
    let old = owner(&set, &lock).await;
    let mut set = Arc::try_unwrap(set).unwrap_or_else(|_| panic!("the set is shared"));
    let (set, new) = blocking(move || {
        set.kill_node(old).expect("kill the name's primary");
        let new = set
            .wait_for_failover(old, FAILOVER)
            .expect("a replica takes over");
        (set, new)
    })
    .await;
    assert_ne!(new, old);
    // The holder lets go (on the new primary if the lock reached it).
    let _ = held.release().await;
    let (got, waited) = waiter.await.unwrap();
    let got = got.expect("the waiter gets the lock after the failover");
    assert!(waited <= wait + SLACK, "waited {waited:?}");
    let second = got.fencing_token().unwrap().get();
    assert!(second > first, "token {second} after {first}");
    assert!(got.release().await.unwrap());
    drop(set);
}
