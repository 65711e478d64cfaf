//! Kleppmann's scenarios on every backend, against real servers, with the
//! checker of `lock_safety` and a report (Markdown on stdout, JSON and
//! Markdown under `target/lock-safety/`).
//!
//! Each scenario is its own test. The expectations asserted:
//! - with fencing (Redis, etcd, ZooKeeper): 0 stale writes accepted, in every scenario;
//! - S1 (a holder paused past its TTL): overlaps on every backend (the checker sees them);
//! - S4 (acquire replies held past the TTL): 0 violations on every backend;
//! - Redlock S2 (premature expiry on one node, clients split by proxies) and S3
//!   without delayed restart: violations, counted and reported; S3 with a
//!   delayed restart of one max TTL: 0;
//! - S5 (minority faults, leader kills) and the soak: 0 stale writes accepted;
//!   0 overlaps in S5;
//! - a crashed holder's lock is retaken within TTL + the server's expiry
//!   step + 0.5 s (p99);
//! - with the fenced register in a real PostgreSQL (rows marked `storage:
//!   postgres`; S1, Redis S3 and the soak, for redis, etcd and zookeeper):
//!   0 stale writes accepted by PostgreSQL, stale writes rejected in S1, and
//!   every rejection counted by `distlock_fencing_rejects_total{storage="postgres"}`.
//!
//! - F1 (Redis Sentinel promotes a replica that missed the holders'
//!   acquisitions): the lost acquisitions are taken again (overlaps and
//!   conflicts while held, reported), 0 stale writes accepted by
//!   PostgreSQL, the old holders' rejected.
//!
//! - the read-write lock and the semaphore (redis, etcd, zookeeper): S1
//!   with writers (as the mutex) and with a semaphore of 2 (the paused
//!   holder is seen, nobody conflicts while its guard says held), and the
//!   soak: 0 stale writes accepted, and on etcd and ZooKeeper 0 conflicts
//!   while held.
//!
//! After all scenarios, each backend must have made at least 1,500
//! acquisitions and had at least 100 faults injected.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use libtest_mimic::{Arguments, Failed, Trial};
use lock_core::{
    AcquireOptions, CampaignOptions, DistributedLock, LockGuard, LockMode, LockName, LockService,
};
use lock_safety::fixture::{take, Kind, Servers, Started};
use lock_safety::{PgRegisters, Report, Row, Stats, Workload};
use lock_testbed::{Persistence, PostgresServer, Proxy, SentinelSet};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use rand::Rng;
use tokio::time::{sleep, Instant};

// ---------------------------------------------------------------------------
// Backends under test (servers and clients: `lock_safety::fixture`)

fn opts(kind: Kind) -> AcquireOptions {
    AcquireOptions::new().ttl(kind.ttl()).wait(kind.ttl() * 4)
}

fn name(kind: Kind, scenario: &str, i: usize) -> LockName {
    LockName::new(lock_testbed::unique_name(&format!(
        "safety-{}-{scenario}-{i}",
        kind.name()
    )))
    .expect("name")
}

/// Acquires, retrying what is retryable (a connection being re-established
/// after a fault) until `within` has passed.
async fn acquire_retrying(
    lock: &dyn DistributedLock,
    n: &LockName,
    o: &AcquireOptions,
    within: Duration,
) -> LockGuard {
    let deadline = Instant::now() + within;
    loop {
        match lock.acquire(n, o).await {
            Ok(g) => return g,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("acquire of {n} failed for {within:?}: {e}"),
        }
    }
}

/// A critical section of a well-behaved client: read, a real `.await`, and
/// write only if the guard still says held. `asked`: when the acquire that
/// returned `guard` was called.
async fn careful_section(w: &Workload, guard: &LockGuard, asked: Instant) {
    let mut s = w.enter(guard, asked);
    s.read();
    sleep(Duration::from_millis(1)).await;
    if guard.is_held() {
        s.write();
    }
    s.exit_checked(guard);
}

/// Releases `guard`. A release whose outcome is unknown (a retryable
/// error: on a busy machine Redlock's nodes may not all answer within its
/// node timeout) is the scenario's business only in that the lease then
/// expires within its TTL, which the next [`take_retrying`] waits for; any
/// other error fails the scenario.
async fn release_or_expire(guard: LockGuard, who: &str) {
    if let Err(e) = guard.release().await {
        assert!(e.is_retryable(), "{who}'s release failed: {e}");
    }
}

/// Like [`acquire_retrying`], in `mode`.
async fn take_retrying(
    lock: &dyn LockService,
    n: &LockName,
    o: &AcquireOptions,
    mode: LockMode,
    within: Duration,
) -> LockGuard {
    let deadline = Instant::now() + within;
    loop {
        match take(lock, n, o, mode).await {
            Ok(g) => return g,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("{mode} acquire of {n} failed for {within:?}: {e}"),
        }
    }
}

/// The lock a scenario's clients take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Load {
    /// Every client the mutex.
    Mutex,
    /// The read-write lock: one client in three writes, the others read.
    ReadWrite,
    /// A semaphore of 2 permits.
    Permits,
}

impl Load {
    /// What client `c` takes.
    fn mode(self, c: usize) -> LockMode {
        match self {
            Load::Mutex => LockMode::Exclusive,
            Load::ReadWrite if c.is_multiple_of(3) => LockMode::Write,
            Load::ReadWrite => LockMode::Read,
            Load::Permits => LockMode::Permit { permits: 2 },
        }
    }

    /// How the report names it.
    fn label(self) -> &'static str {
        match self {
            Load::Mutex => "",
            Load::ReadWrite => " (read-write)",
            Load::Permits => " (semaphore of 2)",
        }
    }
}

/// Where the fenced register of a scenario lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Storage {
    /// lock-core's in-process `FencedRegister`.
    Memory,
    /// A real PostgreSQL started for the scenario: every write a transaction
    /// checked by lock-fence's `PgFence`.
    Postgres,
}

impl Storage {
    /// The scenario's workload, and the database it writes to (if any),
    /// which must live as long as the workload.
    async fn workload(self) -> (Arc<Workload>, Db) {
        match self {
            Storage::Memory => (Arc::new(Workload::new()), Db(None)),
            Storage::Postgres => {
                let server = blocking(|| PostgresServer::start().expect("start PostgreSQL"));
                let registers = PgRegisters::connect(server.url())
                    .await
                    .expect("connect to PostgreSQL");
                (Arc::new(Workload::in_postgres(registers)), Db(Some(server)))
            }
        }
    }
}

/// The PostgreSQL of a scenario, stopped off the async workers when dropped.
struct Db(Option<PostgresServer>);

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(server) = self.0.take() {
            blocking(|| drop(server));
        }
    }
}

/// What a storage row's name says about where the resource lives.
const IN_POSTGRES: &str = "storage: postgres";

// ---------------------------------------------------------------------------
// Scenarios

/// S1: a holder pauses longer than its TTL (its network cut and its task
/// asleep, as a stopped process would be), another client acquires, the
/// first resumes and writes without looking.
async fn s1_pause(kind: Kind, storage: Storage) -> Stats {
    s1_pause_as(kind, storage, LockMode::Exclusive).await
}

/// S1 with the mutex or the write side of the read-write lock (`mode`).
async fn s1_pause_as(kind: Kind, storage: Storage, mode: LockMode) -> Stats {
    const PAIRS: usize = 4;
    const ROUNDS: usize = 3;
    let servers = blocking(|| Servers::start(kind, 1));
    let (w, _db) = storage.workload().await;
    let mut pairs = Vec::new();
    for p in 0..PAIRS {
        let a = servers.proxied_client(kind).await;
        let b = servers.client(kind, &servers.addrs()).await;
        let (w, n) = (w.clone(), name(kind, "s1", p));
        pairs.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let asked = Instant::now();
                let ga = take_retrying(&*a.lock, &n, &opts(kind), mode, kind.ttl() * 6).await;
                let mut sa = w.enter(&ga, asked);
                sa.read();
                // The pause: nothing of A reaches the server any more.
                a.cut();
                w.fault();
                let asked = Instant::now();
                let gb = take_retrying(&*b, &n, &opts(kind), mode, kind.ttl() * 6).await;
                careful_section(&w, &gb, asked).await;
                release_or_expire(gb, "B").await;
                // A wakes up and writes what it read, as a paused process would.
                a.heal();
                sa.write();
                sa.exit_checked(&ga);
                drop(ga);
            }
        }));
    }
    for p in pairs {
        p.await.expect("pair");
    }
    blocking(|| drop(servers));
    w.stats()
}

/// E1: a leader pauses longer than its term's TTL (its network cut and its
/// task asleep), another candidate is elected with a higher epoch and
/// writes, the first resumes and writes with its old epoch, as a paused
/// leader would; the register is PostgreSQL, checked by lock-fence (or,
/// for Redlock, whose terms have no epoch, the in-process register, where
/// only the checker sees the overlap).
async fn e1_leader_paused(kind: Kind, storage: Storage) -> Stats {
    const ROUNDS: usize = 3;
    let servers = blocking(|| Servers::start(kind, 1));
    let (w, _db) = storage.workload().await;
    let a = servers.proxied_client(kind).await;
    let b = servers.client(kind, &servers.addrs()).await;
    let terms = CampaignOptions::new().ttl(kind.ttl()).wait(kind.ttl() * 6);
    for r in 0..ROUNDS {
        let n = name(kind, "e1", r);
        let asked = Instant::now();
        let old = a.lock.campaign(&n, "a", &terms).await.expect("A leads");
        let old_epoch = old.epoch();
        let old = old.into_guard();
        let mut sa = w.enter(&old, asked);
        sa.read();
        // The pause: nothing of A reaches the server any more.
        a.cut();
        w.fault();
        let asked = Instant::now();
        let new = b.campaign(&n, "b", &terms).await.expect("B is elected");
        if kind.fencing() {
            assert!(
                new.epoch() > old_epoch,
                "the new term's epoch {:?} is not above {old_epoch:?}",
                new.epoch()
            );
        } else {
            assert_eq!((old_epoch, new.epoch()), (None, None), "no epochs");
        }
        let new = new.into_guard();
        careful_section(&w, &new, asked).await;
        release_or_expire(new, "B").await;
        // A wakes up and writes what it read, as a paused leader would.
        a.heal();
        sa.write();
        sa.exit_checked(&old);
        drop(old);
    }
    blocking(|| drop(servers));
    w.stats()
}

/// S1 on a semaphore of 2: A and B hold a permit; A is paused past its TTL
/// (its network cut) and C takes the permit A's lease gave back; A wakes up
/// and finishes its section as a paused process would. The checker sees 3
/// holders at once; none of them conflicts while its guard says held.
async fn s1_pause_permits(kind: Kind) -> Stats {
    const ROUNDS: usize = 4;
    let mode = LockMode::Permit { permits: 2 };
    let servers = blocking(|| Servers::start(kind, 1));
    let w = Workload::new();
    let a = servers.proxied_client(kind).await;
    let b = servers.client(kind, &servers.addrs()).await;
    let c = servers.client(kind, &servers.addrs()).await;
    for r in 0..ROUNDS {
        let n = name(kind, "s1-permits", r);
        let asked = Instant::now();
        let ga = take_retrying(&*a.lock, &n, &opts(kind), mode, kind.ttl() * 6).await;
        let gb = take_retrying(&*b, &n, &opts(kind), mode, kind.ttl() * 6).await;
        let sa = w.enter(&ga, asked);
        let sb = w.enter(&gb, asked);
        a.cut();
        w.fault();
        let asked = Instant::now();
        let gc = take_retrying(&*c, &n, &opts(kind), mode, kind.ttl() * 6).await;
        careful_section(&w, &gc, asked).await;
        release_or_expire(gc, "C").await;
        sb.exit_checked(&gb);
        release_or_expire(gb, "B").await;
        a.heal();
        sa.exit_checked(&ga);
        drop(ga);
    }
    blocking(|| drop(servers));
    w.stats()
}

/// S2 (Redlock): A sees nodes 0,1,2 and B sees 2,3,4 (proxies cut the rest);
/// A holds on 0,1,2; node 2 expires the key early (a clock jump); B gets a
/// majority on 2,3,4 while A still holds.
async fn s2_premature_expiry(kind: Kind) -> Stats {
    const ROUNDS: usize = 8;
    let servers = blocking(|| Servers::start(kind, 1));
    let Started::Redlock(set) = servers.typed() else {
        unreachable!("S2 is a Redlock scenario")
    };
    let w = Workload::new();
    let a = servers.proxied_client(kind).await;
    let b = servers.proxied_client(kind).await;
    for i in [3, 4] {
        a.proxies[i].cut();
    }
    for i in [0, 1] {
        b.proxies[i].cut();
    }
    let o = AcquireOptions::new()
        .ttl(Duration::from_secs(3))
        .wait(Duration::from_secs(3));
    for r in 0..ROUNDS {
        let n = name(kind, "s2", r);
        let asked = Instant::now();
        let ga = a
            .lock
            .acquire(&n, &o)
            .await
            .expect("A gets a majority on 0,1,2");
        let mut sa = w.enter(&ga, asked);
        sa.read();
        set.nodes()[2]
            .expire_now(n.as_str())
            .expect("PEXPIRE on node 2");
        w.fault();
        let asked = Instant::now();
        match b
            .lock
            .acquire(&n, &o.clone().wait(Duration::from_millis(500)))
            .await
        {
            Ok(gb) => {
                careful_section(&w, &gb, asked).await;
                let _ = gb.release().await;
            }
            Err(e) => panic!("B should get a majority on 2,3,4 after the early expiry: {e}"),
        }
        if ga.is_held() {
            sa.write();
        }
        sa.exit_checked(&ga);
        let _ = ga.release().await;
    }
    w.stats()
}

/// How S3 brings the lock servers down and back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Crash {
    /// Killed and restarted without persistence (locks and counters gone);
    /// `delay`: the Redlock nodes stay down for one max TTL first (the
    /// spec's rule).
    NoPersistence { delay: bool },
    /// Redis with RDB snapshots: `SAVE` before the holders take their locks,
    /// then `kill -9`; the restart reloads the snapshot, with older counters.
    SnapshotReload,
    /// Redis with `appendfsync everysec`: a machine crash loses the writes
    /// of the last second (the disk goes back to a checkpoint taken before
    /// the holders took their locks).
    EverySecLoss,
}

/// S3: the server (Redis) or a majority of nodes (Redlock) crashes while
/// locks are held and comes back having forgotten them (and, but for the
/// clock floor, going back on its fencing counters).
async fn s3_restart(kind: Kind, crash: Crash, storage: Storage) -> Stats {
    const HOLDERS: usize = 4;
    const ROUNDS: usize = 3;
    let persistence = match crash {
        Crash::NoPersistence { .. } => Persistence::None,
        Crash::SnapshotReload => Persistence::Snapshots,
        Crash::EverySecLoss => Persistence::AofEverySec,
    };
    let delay = crash == Crash::NoPersistence { delay: true };
    let mut servers = blocking(|| Servers::start_with(kind, 1, persistence));
    let (w, _db) = storage.workload().await;
    let victims: Vec<usize> = if kind == Kind::Redlock {
        vec![0, 1, 2]
    } else {
        vec![0]
    };
    for r in 0..ROUNDS {
        let names: Vec<LockName> = (0..HOLDERS)
            .map(|h| name(kind, &format!("s3-{r}"), h))
            .collect();
        if !matches!(crash, Crash::NoPersistence { .. }) {
            // Tokens issued before the point the disk will go back to.
            let warm = servers.client(kind, &servers.addrs()).await;
            for n in &names {
                for _ in 0..3 {
                    let asked = Instant::now();
                    let g = acquire_retrying(&*warm, n, &opts(kind), kind.ttl() * 6).await;
                    careful_section(&w, &g, asked).await;
                    let _ = g.release().await;
                }
            }
            match (crash, servers.typed()) {
                (Crash::SnapshotReload, Started::Redis(redis)) => {
                    let reply = blocking(|| redis.cmd(&["SAVE"])).expect("SAVE");
                    assert_eq!(reply.as_str(), Some("OK"), "SAVE answered {reply:?}");
                }
                (Crash::EverySecLoss, Started::Redis(redis)) => {
                    sleep(Duration::from_millis(1100)).await;
                    blocking(|| redis.checkpoint_disk()).expect("checkpoint");
                }
                _ => unreachable!("only a single Redis persists"),
            }
        }
        let mut holders = Vec::new();
        for n in names {
            let a = servers.client(kind, &servers.addrs()).await;
            let asked = Instant::now();
            let g = acquire_retrying(&*a, &n, &opts(kind), kind.ttl() * 6).await;
            holders.push((a, n, g, asked));
        }
        let entered = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        if crash == Crash::EverySecLoss {
            if let Started::Redis(redis) = servers.typed_mut() {
                blocking(|| redis.crash_to_checkpoint()).expect("crash to the checkpoint");
                w.fault();
            }
        } else {
            for &v in &victims {
                blocking(|| servers.kill(v));
                w.fault();
            }
        }
        if delay {
            sleep(kind.ttl() + Duration::from_millis(200)).await;
        }
        if crash != Crash::EverySecLoss {
            for &v in &victims {
                blocking(|| servers.restart(v));
            }
        }
        let mut tasks = Vec::new();
        for (h, (a, n, g, asked)) in holders.into_iter().enumerate() {
            let b = servers.client(kind, &servers.addrs()).await;
            let (w, entered) = (w.clone(), entered.clone());
            tasks.push(tokio::spawn(async move {
                // A well-behaved holder: in its section until the newcomer is in or it knows it lost.
                let mut sa = w.enter(&g, asked);
                sa.read();
                let newcomer = {
                    let (w, n, entered) = (w.clone(), n.clone(), entered.clone());
                    tokio::spawn(async move {
                        let asked = Instant::now();
                        let gb = acquire_retrying(&*b, &n, &opts(kind), kind.ttl() * 8).await;
                        entered.fetch_add(1, Ordering::SeqCst);
                        careful_section(&w, &gb, asked).await;
                        let _ = gb.release().await;
                    })
                };
                let deadline = Instant::now() + kind.ttl() * 6;
                while g.is_held()
                    && entered.load(Ordering::SeqCst) <= h as u64
                    && Instant::now() < deadline
                {
                    // Polls the checker's signal only: the lock itself is watched by the guard.
                    tokio::select! {
                        _ = g.lost() => break,
                        _ = sleep(Duration::from_millis(5)) => {}
                    }
                }
                if g.is_held() {
                    sa.write();
                }
                sa.exit_checked(&g);
                newcomer.await.expect("newcomer");
                drop(g);
                drop(a);
            }));
        }
        for t in tasks {
            t.await.expect("holder");
        }
        let _ = started;
    }
    blocking(|| drop(servers));
    w.stats()
}

/// F1: Redis Sentinel promotes a replica that had not received the
/// holders' acquisitions (its replication link cut, the only replica the
/// sentinels may promote). Each holder read in its section before the
/// failover; the new primary has no lock, so a newcomer takes the same
/// name within the holder's TTL and writes; the holder then writes what
/// it read, as a paused process would. Two holders at once: the checker
/// sees it, and the fencing token (the server-clock floor: the new
/// primary's counter is behind) makes PostgreSQL refuse the old holder.
async fn f1_sentinel_failover_to_a_lagging_replica(storage: Storage) -> Stats {
    const HOLDERS: usize = 4;
    let (set, lagging) = blocking(|| {
        let mut set = SentinelSet::start().expect("start a Sentinel set");
        let lagging = (set.primary().expect("the primary") + 1) % 3;
        set.prefer(lagging)
            .expect("prefer the replica that will lag");
        set.lag_replica(lagging).expect("cut its replication link");
        (set, lagging)
    });
    let (w, _db) = storage.workload().await;
    let url = format!("{}?connect_timeout=2s&request_timeout=300ms", set.url());
    // A TTL that outlasts the failover: the newcomer's lock is not an expiry.
    let o = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(20));
    let mut holders = Vec::new();
    for h in 0..HOLDERS {
        let a = distlock::connect(&url)
            .await
            .expect("connect through the sentinels");
        let n = name(Kind::Redis, "f1", h);
        let asked = Instant::now();
        let g = acquire_retrying(&*a, &n, &o, Duration::from_secs(20)).await;
        let mut sa = w.enter(&g, asked);
        sa.read();
        holders.push((a, n, g, sa));
    }
    let set = blocking(move || {
        let mut set = set;
        let old = set.kill_primary().expect("kill the primary");
        let new = set
            .wait_for_failover(old, Duration::from_secs(15))
            .expect("the sentinels promote a replica");
        assert_eq!(new, lagging, "the sentinels promoted the lagging replica");
        set
    });
    w.fault();
    for (a, n, g, mut sa) in holders {
        let b = distlock::connect(&url)
            .await
            .expect("connect through the sentinels");
        let asked = Instant::now();
        let gb = acquire_retrying(&*b, &n, &o, Duration::from_secs(20)).await;
        careful_section(&w, &gb, asked).await;
        release_or_expire(gb, "B").await;
        // The old holder writes what it read before the failover.
        sa.write();
        sa.exit_checked(&g);
        drop(g);
        drop(a);
    }
    blocking(|| drop(set));
    w.stats()
}

/// S4: every reply to A's acquire is held by its proxy for longer than the
/// TTL. The library must not report the lock as held; B then gets it.
async fn s4_delayed_replies(kind: Kind) -> Stats {
    const CLIENTS: usize = 3;
    const ROUNDS: usize = 4;
    let servers = blocking(|| Servers::start(kind, 1));
    let w = Arc::new(Workload::new());
    let reported_held = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let a = servers.proxied_client(kind).await;
        let b = servers.client(kind, &servers.addrs()).await;
        let (w, reported_held) = (w.clone(), reported_held.clone());
        tasks.push(tokio::spawn(async move {
            for r in 0..ROUNDS {
                let n = name(kind, &format!("s4-{c}"), r);
                for p in &a.proxies {
                    p.set_reply_delay(kind.ttl() + Duration::from_millis(300));
                }
                w.fault();
                let t = Instant::now();
                let got = a.lock.acquire(&n, &opts(kind).wait(kind.ttl() * 2)).await;
                if let Ok(g) = &got {
                    // Held only if it is still valid now, after the slow replies.
                    if g.is_held() && t.elapsed() > kind.ttl() {
                        reported_held.fetch_add(1, Ordering::SeqCst);
                    }
                    if g.is_held() {
                        careful_section(&w, g, t).await;
                    }
                }
                a.heal();
                drop(got);
                let asked = Instant::now();
                let gb = acquire_retrying(&*b, &n, &opts(kind), kind.ttl() * 6).await;
                careful_section(&w, &gb, asked).await;
                let _ = gb.release().await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("client");
    }
    let mut stats = w.stats();
    // A lock reported held past its TTL counts as a violation (an overlap in waiting).
    stats.overlaps += reported_held.load(Ordering::SeqCst);
    stats
}

/// S5: a minority of nodes paused (Redlock), the leader killed and restarted
/// (etcd, ZooKeeper: 3 members), the single server paused briefly (Redis),
/// while clients keep locking.
async fn s5_minority_faults(kind: Kind) -> Stats {
    let mut servers = blocking(|| Servers::start(kind, 3));
    let w = Arc::new(Workload::new());
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    let n = name(kind, "s5", 0);
    for _ in 0..4 {
        let lock = servers.client(kind, &servers.addrs()).await;
        let (w, stop, n) = (w.clone(), stop.clone(), n.clone());
        workers.push(tokio::spawn(async move {
            careful_worker(lock, n, &w, &stop).await
        }));
    }
    for _ in 0..3 {
        sleep(Duration::from_millis(500)).await;
        match kind {
            Kind::Redis => {
                servers.pause(0);
                w.fault();
                sleep(kind.ttl() / 4).await;
                servers.resume(0);
            }
            Kind::Redlock => {
                let mut rng = rand::rng();
                let (x, y) = (rng.random_range(0..5), rng.random_range(0..5));
                servers.pause(x);
                if y != x {
                    servers.pause(y);
                }
                w.faults(if y != x { 2 } else { 1 });
                sleep(Duration::from_millis(1500)).await;
                servers.resume(x);
                if y != x {
                    servers.resume(y);
                }
            }
            Kind::Etcd | Kind::Zk => {
                let leader = blocking(|| servers.leader());
                blocking(|| servers.kill(leader));
                w.fault();
                sleep(Duration::from_millis(1500)).await;
                blocking(|| servers.restart(leader));
            }
        }
    }
    sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::SeqCst);
    for t in workers {
        t.await.expect("worker");
    }
    blocking(|| drop(servers));
    w.stats()
}

/// A client that locks, does a careful section, releases, until `stop`.
async fn careful_worker(lock: Arc<dyn LockService>, n: LockName, w: &Workload, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        let asked = Instant::now();
        match lock
            .acquire(
                &n,
                &AcquireOptions::new()
                    .ttl(Duration::from_secs(2))
                    .wait(Duration::from_secs(1)),
            )
            .await
        {
            Ok(g) => {
                if g.is_held() {
                    careful_section(w, &g, asked).await;
                }
                let _ = g.release().await;
            }
            Err(_) => sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Slack of the crash-retake bound over the TTL and the server's expiry
/// step: the waiter hearing of the expiry and its acquire answering, on a
/// busy machine.
const RETAKE_SLACK: Duration = Duration::from_millis(500);

/// A holder crashes (its network cut, its guard leaked): how long until a
/// waiter holds the lock?
async fn crash_retake(kind: Kind) -> Stats {
    const PARALLEL: usize = 5;
    const ROUNDS: usize = 2;
    let servers = blocking(|| Servers::start(kind, 1));
    let w = Arc::new(Workload::new());
    for r in 0..ROUNDS {
        let mut tasks = Vec::new();
        for p in 0..PARALLEL {
            let a = servers.proxied_client(kind).await;
            let b = servers.client(kind, &servers.addrs()).await;
            let w = w.clone();
            let n = name(kind, &format!("crash-{r}"), p);
            tasks.push(tokio::spawn(async move {
                let asked = Instant::now();
                let g = acquire_retrying(&*a.lock, &n, &opts(kind), kind.ttl() * 6).await;
                let mut s = w.enter(&g, asked);
                s.read_modify_write().await;
                s.exit_checked(&g);
                let waiter = {
                    let n = n.clone();
                    tokio::spawn(async move {
                        let asked = Instant::now();
                        let gb = acquire_retrying(&*b, &n, &opts(kind), kind.ttl() * 6).await;
                        (Instant::now(), gb, asked)
                    })
                };
                sleep(Duration::from_millis(100)).await;
                // The crash: nothing more from the holder, and it never releases.
                a.cut();
                let crashed = Instant::now();
                w.fault();
                std::mem::forget(g);
                let (got, gb, asked) = waiter.await.expect("waiter");
                w.retake(got - crashed);
                careful_section(&w, &gb, asked).await;
                let _ = gb.release().await;
                drop(a);
            }));
        }
        for t in tasks {
            t.await.expect("crash task");
        }
    }
    blocking(|| drop(servers));
    w.stats()
}

/// Soak: several clients lock continuously while random faults hit clients
/// (pauses past the TTL, connection resets, latency spikes) and servers
/// (short pauses, kill and restart of one member).
async fn soak(kind: Kind, duration: Duration, storage: Storage) -> Stats {
    soak_as(kind, duration, storage, Load::Mutex).await
}

/// The soak, with the clients taking the lock of `load`.
async fn soak_as(kind: Kind, duration: Duration, storage: Storage, load: Load) -> Stats {
    const CLIENTS: usize = 6;
    // A semaphore of 2 with 3 clients per name; the others 2 clients per name.
    let names_count = if load == Load::Permits { 2 } else { 3 };
    // Three etcd members or ZooKeeper servers (`Kind::members`: one Redis,
    // five Redlock nodes).
    let members = 3;
    let servers = blocking(|| Servers::start(kind, members));
    let (w, _db) = storage.workload().await;
    let stop = Arc::new(AtomicBool::new(false));
    let pause_next: Arc<Vec<AtomicBool>> =
        Arc::new((0..CLIENTS).map(|_| AtomicBool::new(false)).collect());
    let names: Vec<LockName> = (0..names_count).map(|i| name(kind, "soak", i)).collect();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(Arc::new(servers.proxied_client(kind).await));
    }
    let servers = Arc::new(Mutex::new(servers));
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        let n = names[c % names_count].clone();
        let mode = load.mode(c);
        let (client, w, stop, pause_next) =
            (client.clone(), w.clone(), stop.clone(), pause_next.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let o = AcquireOptions::new()
                    .ttl(kind.ttl())
                    .wait(Duration::from_secs(2));
                let asked = Instant::now();
                let Ok(g) = take(&*client.lock, &n, &o, mode).await else {
                    sleep(Duration::from_millis(20)).await;
                    continue;
                };
                if !g.is_held() {
                    continue;
                }
                let mut s = w.enter(&g, asked);
                s.read();
                if pause_next[c].swap(false, Ordering::SeqCst) {
                    // A process pause: the network goes quiet past the TTL, then it writes blindly.
                    client.cut();
                    sleep(kind.ttl() + Duration::from_millis(500)).await;
                    client.heal();
                    s.write();
                } else {
                    sleep(Duration::from_millis(1)).await;
                    if g.is_held() {
                        s.write();
                    }
                }
                s.exit_checked(&g);
                let _ = g.release().await;
            }
        }));
    }
    let end = Instant::now() + duration;
    while Instant::now() < end {
        sleep(Duration::from_millis(250)).await;
        let fault = rand::rng().random_range(0..10);
        let c = rand::rng().random_range(0..CLIENTS);
        match fault {
            0 => pause_next[c].store(true, Ordering::SeqCst),
            1..=4 => clients[c].proxies.iter().for_each(Proxy::reset_all),
            5..=6 => {
                clients[c]
                    .proxies
                    .iter()
                    .for_each(|p| p.set_latency(Duration::from_millis(50)));
                let client = clients[c].clone();
                tokio::spawn(async move {
                    sleep(Duration::from_millis(500)).await;
                    client
                        .proxies
                        .iter()
                        .for_each(|p| p.set_latency(Duration::ZERO));
                });
            }
            7..=8 => {
                let i = rand::rng().random_range(0..kind.members(members));
                servers.lock().unwrap().pause(i);
                sleep(kind.ttl() / 5).await;
                servers.lock().unwrap().resume(i);
            }
            _ => {
                // Kill and restart one member (Redis: the server, losing its keys).
                let i = rand::rng().random_range(0..kind.members(members));
                blocking(|| {
                    let mut s = servers.lock().unwrap();
                    s.kill(i);
                    s.restart(i);
                });
            }
        }
        w.fault();
    }
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.expect("soak client");
    }
    drop(clients);
    w.stats()
}

/// Runs a synchronous server operation (start, kill, restart: they wait for
/// the process) without stalling the runtime's other tasks.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

// ---------------------------------------------------------------------------
// Expectations and the runner

fn report() -> &'static Report {
    static REPORT: OnceLock<Report> = OnceLock::new();
    REPORT.get_or_init(Report::new)
}

fn record(
    kind: Kind,
    scenario: &str,
    stats: Stats,
    expectation: &str,
    passed: bool,
) -> Result<(), Failed> {
    report().push(Row {
        backend: kind.name().into(),
        scenario: scenario.into(),
        fencing: kind.fencing(),
        stats,
        expectation: expectation.into(),
        passed,
    });
    println!("{} {scenario}: {stats:?}", kind.name());
    if passed {
        Ok(())
    } else {
        Err(Failed::from(format!(
            "{} {scenario}: expected {expectation}; got {stats:?}",
            kind.name()
        )))
    }
}

fn fenced_ok(kind: Kind, s: &Stats) -> bool {
    !kind.fencing() || s.stale_accepted == 0
}

fn trials(rt: &Arc<tokio::runtime::Runtime>, soak_for: Duration) -> Vec<Trial> {
    let mut trials = Vec::new();
    let mut add = |name: String, f: Box<dyn FnOnce() -> Result<(), Failed> + Send>| {
        trials.push(Trial::test(name, f));
    };
    for kind in Kind::ALL {
        let k = kind;
        let r = rt.clone();
        add(
            format!("{}_s1_holder_paused_past_ttl", k.name()),
            Box::new(move || {
                let s = r.block_on(s1_pause(k, Storage::Memory));
                let ok =
                    s.overlaps > 0 && fenced_ok(k, &s) && (!k.fencing() || s.stale_rejected > 0);
                let what = if k.fencing() {
                    "overlaps > 0 (the checker sees them); 0 stale accepted, stale writes rejected"
                } else {
                    "overlaps > 0 (the checker sees them); no token to fence with"
                };
                record(k, "S1 pause > TTL", s, what, ok)
            }),
        );
        if !k.fencing() {
            let r = rt.clone();
            add(
                format!("{}_e1_leader_paused_past_ttl", k.name()),
                Box::new(move || {
                    let s = r.block_on(e1_leader_paused(k, Storage::Memory));
                    let ok = s.overlaps > 0 && s.conflicts_while_held == 0;
                    record(
                        k,
                        "E1 leader paused > TTL",
                        s,
                        "a new leader; overlaps > 0 (the checker sees them), 0 of two leaders both saying held; no epoch to fence with",
                        ok,
                    )
                }),
            );
        }
        let r = rt.clone();
        add(
            format!("{}_s4_acquire_replies_held_past_ttl", k.name()),
            Box::new(move || {
                let s = r.block_on(s4_delayed_replies(k));
                let ok = s.overlaps == 0 && fenced_ok(k, &s);
                record(k, "S4 replies held > TTL", s, "0 violations", ok)
            }),
        );
        let r = rt.clone();
        add(
            format!("{}_s5_minority_faults", k.name()),
            Box::new(move || {
                let s = r.block_on(s5_minority_faults(k));
                let ok = s.overlaps == 0 && fenced_ok(k, &s) && s.acquisitions > 0;
                let what = match k {
                    Kind::Redis => "S5 short server pause",
                    Kind::Redlock => "S5 minority paused",
                    _ => "S5 leader killed",
                };
                record(
                    k,
                    what,
                    s,
                    if k.fencing() {
                        "0 overlaps, 0 stale accepted"
                    } else {
                        "0 overlaps"
                    },
                    ok,
                )
            }),
        );
        let r = rt.clone();
        add(
            format!("{}_holder_crash_retake", k.name()),
            Box::new(move || {
                let s = r.block_on(crash_retake(k));
                let bound = k.ttl() + k.expiry_step() + RETAKE_SLACK;
                let ok =
                    s.retake_p99.is_some_and(|p| p <= bound) && s.overlaps == 0 && fenced_ok(k, &s);
                record(
                    k,
                    "holder crash",
                    s,
                    &format!(
                        "retake p99 <= TTL + server expiry step + 0.5 s = {} ms",
                        bound.as_millis()
                    ),
                    ok,
                )
            }),
        );
        let r = rt.clone();
        add(
            format!("{}_soak_random_faults", k.name()),
            Box::new(move || {
                let s = r.block_on(soak(k, soak_for, Storage::Memory));
                let ok = fenced_ok(k, &s) && s.acquisitions > 0;
                let what = if k.fencing() {
                    "0 stale accepted; overlaps reported"
                } else {
                    "overlaps reported"
                };
                record(k, "soak", s, what, ok)
            }),
        );
    }
    let r = rt.clone();
    add(
        "redis_s3_restart_without_persistence".into(),
        Box::new(move || {
            let s = r.block_on(s3_restart(
                Kind::Redis,
                Crash::NoPersistence { delay: false },
                Storage::Memory,
            ));
            let ok = fenced_ok(Kind::Redis, &s);
            record(
                Kind::Redis,
                "S3 restart, no persistence",
                s,
                "0 stale accepted (overlaps reported)",
                ok,
            )
        }),
    );
    for (test, scenario, crash) in [
        (
            "redis_s3_snapshot_reload",
            "S3 crash, RDB snapshot reload",
            Crash::SnapshotReload,
        ),
        (
            "redis_s3_everysec_crash",
            "S3 crash, AOF everysec lost 1 s",
            Crash::EverySecLoss,
        ),
    ] {
        let r = rt.clone();
        add(
            test.into(),
            Box::new(move || {
                let s = r.block_on(s3_restart(Kind::Redis, crash, Storage::Memory));
                let ok = fenced_ok(Kind::Redis, &s) && s.fenced_writes > 0;
                record(
                    Kind::Redis,
                    scenario,
                    s,
                    "0 stale accepted (the counter went back; the clock floor did not)",
                    ok,
                )
            }),
        );
    }
    let r = rt.clone();
    add(
        "redlock_s3_restart_without_delay".into(),
        Box::new(move || {
            let s = r.block_on(s3_restart(
                Kind::Redlock,
                Crash::NoPersistence { delay: false },
                Storage::Memory,
            ));
            let ok = s.overlaps > 0;
            record(
                Kind::Redlock,
                "S3 restart, no delay",
                s,
                "violations expected and counted",
                ok,
            )
        }),
    );
    let r = rt.clone();
    add(
        "redlock_s3_restart_with_delayed_restart".into(),
        Box::new(move || {
            let s = r.block_on(s3_restart(
                Kind::Redlock,
                Crash::NoPersistence { delay: true },
                Storage::Memory,
            ));
            let ok = s.overlaps == 0;
            record(
                Kind::Redlock,
                "S3 restart, delayed one TTL",
                s,
                "0 violations",
                ok,
            )
        }),
    );
    let r = rt.clone();
    add(
        "redlock_s2_premature_expiry_split_clients".into(),
        Box::new(move || {
            let s = r.block_on(s2_premature_expiry(Kind::Redlock));
            let ok = s.overlaps > 0;
            record(
                Kind::Redlock,
                "S2 early expiry, split",
                s,
                "violations expected and counted",
                ok,
            )
        }),
    );
    trials.extend(storage_trials(rt, soak_for));
    trials.extend(primitive_trials(rt, soak_for));
    trials
}

/// Fencing into real storage: S1, S3 (Redis) and the soak with the fenced
/// register in PostgreSQL, for every backend with tokens.
fn storage_trials(rt: &Arc<tokio::runtime::Runtime>, soak_for: Duration) -> Vec<Trial> {
    let mut trials = Vec::new();
    let mut add = |name: String, f: Box<dyn FnOnce() -> Result<(), Failed> + Send>| {
        trials.push(Trial::test(name, f));
    };
    for k in [Kind::Redis, Kind::Etcd, Kind::Zk] {
        let r = rt.clone();
        add(
            format!("{}_e1_leader_paused_past_ttl_storage_postgres", k.name()),
            Box::new(move || {
                let s = r.block_on(e1_leader_paused(k, Storage::Postgres));
                let ok = s.overlaps > 0
                    && s.conflicts_while_held == 0
                    && s.stale_accepted == 0
                    && s.stale_rejected > 0;
                record(
                    k,
                    &format!("E1 leader paused > TTL ({IN_POSTGRES})"),
                    s,
                    "a new leader with a higher epoch; 0 overlaps of two leaders both saying held; 0 stale writes accepted by PostgreSQL, the old leader's rejected",
                    ok,
                )
            }),
        );
        let r = rt.clone();
        add(
            format!("{}_s1_holder_paused_past_ttl_storage_postgres", k.name()),
            Box::new(move || {
                let s = r.block_on(s1_pause(k, Storage::Postgres));
                let ok = s.overlaps > 0 && s.stale_accepted == 0 && s.stale_rejected > 0;
                record(
                    k,
                    &format!("S1 pause > TTL ({IN_POSTGRES})"),
                    s,
                    "0 stale accepted by PostgreSQL; stale writes rejected (and counted)",
                    ok,
                )
            }),
        );
        let r = rt.clone();
        add(
            format!("{}_soak_random_faults_storage_postgres", k.name()),
            Box::new(move || {
                let s = r.block_on(soak(k, soak_for, Storage::Postgres));
                let ok = s.stale_accepted == 0 && s.acquisitions > 0;
                record(
                    k,
                    &format!("soak ({IN_POSTGRES})"),
                    s,
                    "0 stale accepted by PostgreSQL; rejects counted",
                    ok,
                )
            }),
        );
    }
    let r = rt.clone();
    add(
        "redis_sentinel_f1_failover_to_a_lagging_replica_storage_postgres".into(),
        Box::new(move || {
            let s = r.block_on(f1_sentinel_failover_to_a_lagging_replica(Storage::Postgres));
            let ok = s.overlaps > 0 && s.stale_accepted == 0 && s.stale_rejected > 0;
            record(
                Kind::Redis,
                &format!("F1 Sentinel failover to a lagging replica ({IN_POSTGRES})"),
                s,
                "the acquisitions lost with the old primary are taken again (overlaps seen); 0 stale writes accepted by PostgreSQL, the old holders' rejected",
                ok,
            )
        }),
    );
    let r = rt.clone();
    add(
        "redis_s3_restart_without_persistence_storage_postgres".into(),
        Box::new(move || {
            let s = r.block_on(s3_restart(
                Kind::Redis,
                Crash::NoPersistence { delay: false },
                Storage::Postgres,
            ));
            record(
                Kind::Redis,
                &format!("S3 restart, no persistence ({IN_POSTGRES})"),
                s,
                "0 stale accepted by PostgreSQL (overlaps reported)",
                s.stale_accepted == 0,
            )
        }),
    );
    trials
}

/// The read-write lock and the semaphore, on every backend that has them.
fn primitive_trials(rt: &Arc<tokio::runtime::Runtime>, soak_for: Duration) -> Vec<Trial> {
    // Half the mutex soak each: six more soaks, and the suite stays within
    // CI's time.
    let soak_for = soak_for / 2;
    let mut trials = Vec::new();
    let mut add = |name: String, f: Box<dyn FnOnce() -> Result<(), Failed> + Send>| {
        trials.push(Trial::test(name, f));
    };
    for k in [Kind::Redis, Kind::Etcd, Kind::Zk] {
        let r = rt.clone();
        add(
            format!("{}_s1_writer_paused_past_ttl", k.name()),
            Box::new(move || {
                let s = r.block_on(s1_pause_as(k, Storage::Memory, LockMode::Write));
                let ok = s.overlaps > 0
                    && s.conflicts_while_held == 0
                    && s.stale_accepted == 0
                    && s.stale_rejected > 0;
                record(
                    k,
                    "S1 pause > TTL (read-write, writers)",
                    s,
                    "overlaps > 0, 0 conflicts while held; 0 stale accepted, stale writes rejected",
                    ok,
                )
            }),
        );
        let r = rt.clone();
        add(
            format!("{}_s1_permit_holder_paused_past_ttl", k.name()),
            Box::new(move || {
                let s = r.block_on(s1_pause_permits(k));
                let ok = s.overlaps > 0 && s.conflicts_while_held == 0;
                record(
                    k,
                    "S1 pause > TTL (semaphore of 2)",
                    s,
                    "3 holders seen (the paused one), 0 conflicts while held",
                    ok,
                )
            }),
        );
        for load in [Load::ReadWrite, Load::Permits] {
            let r = rt.clone();
            add(
                format!(
                    "{}_soak_random_faults_{}",
                    k.name(),
                    if load == Load::Permits {
                        "semaphore"
                    } else {
                        "read_write"
                    }
                ),
                Box::new(move || {
                    let s = r.block_on(soak_as(k, soak_for, Storage::Memory, load));
                    // A Redis restarted without persistence forgets its
                    // holders: a second set of holders, each with a valid
                    // guard, is what that backend promises not to prevent.
                    let (ok, what) = if k == Kind::Redis {
                        (
                            s.stale_accepted == 0 && s.acquisitions > 0,
                            "0 stale accepted; conflicts while held reported (restarts forget holders)",
                        )
                    } else {
                        (
                            s.stale_accepted == 0
                                && s.conflicts_while_held == 0
                                && s.acquisitions > 0,
                            "0 stale accepted, 0 conflicts while held",
                        )
                    };
                    record(k, &format!("soak{}", load.label()), s, what, ok)
                }),
            );
        }
    }
    trials
}

/// Every stale write PostgreSQL refused in the storage rows, against what
/// `distlock_fencing_rejects_total{storage="postgres"}` counted.
fn postgres_rejects_counted(snapshotter: &Snapshotter) -> Result<(), String> {
    let refused: u64 = report()
        .rows()
        .iter()
        .filter(|r| r.scenario.contains(IN_POSTGRES))
        .map(|r| r.stats.stale_rejected)
        .sum();
    let counted: u64 = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| {
            key.key().name() == lock_fence::metrics::FENCING_REJECTS
                && key
                    .key()
                    .labels()
                    .any(|l| l.key() == "storage" && l.value() == "postgres")
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => n,
            _ => 0,
        })
        .sum();
    println!(
        "PostgreSQL refused {refused} stale writes; distlock_fencing_rejects_total{{storage=\"postgres\"}} counted {counted}"
    );
    if refused == counted {
        Ok(())
    } else {
        Err(format!(
            "{refused} stale writes refused by PostgreSQL, {counted} counted"
        ))
    }
}

fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
        .join("lock-safety")
}

fn main() -> ExitCode {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the safety suite installs the only metrics recorder");
    let args = Arguments::from_args();
    let soak_for = std::env::var("DISTLOCK_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(60));
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .expect("runtime"),
    );
    let ran_all = args.filter.is_none() && args.skip.is_empty() && !args.list;
    let all = trials(&rt, soak_for);
    if args.list {
        return libtest_mimic::run(&args, all).exit_code();
    }
    // The scenarios two at a time (a crash's retake is held to a bound in
    // time), then the soaks four at a time: they check what was accepted
    // and granted, never how fast; sharing the machine, each makes fewer
    // acquisitions, far above the budget below, with as many faults.
    let (soaks, scenarios): (Vec<Trial>, Vec<Trial>) =
        all.into_iter().partition(|t| t.name().contains("_soak_"));
    let run = |trials: Vec<Trial>, threads: usize| {
        let mut args = args.clone();
        args.test_threads = args.test_threads.or(Some(threads));
        libtest_mimic::run(&args, trials).has_failed()
    };
    let scenarios_failed = run(scenarios, 2);
    let soaks_failed = run(soaks, 4);
    let md = report().markdown();
    println!("\n## Safety report\n\n{md}");
    let dir = target_dir();
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(dir.join("report.json"), report().json()))
        .and_then(|()| std::fs::write(dir.join("report.md"), &md));
    match written {
        Ok(()) => println!("report written to {}", dir.display()),
        Err(e) => eprintln!("could not write the report under {}: {e}", dir.display()),
    }
    let mut budget_ok = true;
    if let Err(e) = postgres_rejects_counted(&snapshotter) {
        eprintln!("{e}");
        budget_ok = false;
    }
    if ran_all {
        for kind in Kind::ALL {
            let rows: Vec<Row> = report()
                .rows()
                .into_iter()
                .filter(|r| r.backend == kind.name())
                .collect();
            let acq: u64 = rows.iter().map(|r| r.stats.acquisitions).sum();
            let faults: u64 = rows.iter().map(|r| r.stats.faults).sum();
            if acq < 1500 || faults < 100 {
                eprintln!(
                    "budget not met for {}: {acq} acquisitions (>= 1500), {faults} faults (>= 100)",
                    kind.name()
                );
                budget_ok = false;
            }
        }
    }
    if scenarios_failed || soaks_failed || !budget_ok {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
