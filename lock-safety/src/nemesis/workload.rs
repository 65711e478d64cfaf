//! What the nemesis's clients do: every operation of the lock API, chosen at
//! random, on a few names, each grant recorded in the history and each
//! mutex or write hold writing through the fenced register.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{
    AcquireOptions, DistributedLockExt, LockError, LockGuard, LockMode, LockName, LockService,
    MultiGuard,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::fixture::{take, try_take};
use crate::Workload;

use super::history::History;

/// What the clients share: the names, the history, the fenced register.
pub struct Shared {
    /// The lock names.
    pub names: Vec<LockName>,
    /// The base lease TTL; leases are asked for between half of it and
    /// twice it.
    pub ttl: Duration,
    /// How much longer than its own bound a call may take before it counts
    /// as hung: the configured request timeout plus slack.
    pub overrun: Duration,
    /// How much longer than one request a release may wait by design (a
    /// Redlock release waits for late answers up to its connect timeout).
    pub release_wait: Duration,
    /// Every grant.
    pub history: Arc<History>,
    /// The fenced register of each name.
    pub registers: Arc<Workload>,
    /// Set when the run is over: clients finish what they hold and stop.
    pub stop: AtomicBool,
    /// Counts of operations and their outcomes.
    pub counts: Mutex<BTreeMap<String, u64>>,
    /// Calls that did not return within their bound, in words.
    pub hung: Mutex<Vec<String>>,
}

impl Shared {
    fn count(&self, what: impl Into<String>) {
        *self
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(what.into())
            .or_default() += 1;
    }

    fn count_error(&self, op: &str, e: &LockError) {
        self.count(format!("{op}: error {:?}", e.kind()));
    }

    /// Runs `call`, noting it as hung if it takes longer than `bound` (it is
    /// still awaited: a hung call is a finding, not a reason to drop it).
    async fn bounded<T>(
        &self,
        client: usize,
        what: &str,
        bound: Duration,
        call: impl std::future::Future<Output = T>,
    ) -> T {
        let started = Instant::now();
        let out = call.await;
        let took = started.elapsed();
        if took > bound + self.overrun {
            self.hung
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!(
                    "client {client}: {what} called at {:.0} ms took {} ms, bound {} ms + {} ms; faults then: {}",
                    self.history.ms(started),
                    took.as_millis(),
                    bound.as_millis(),
                    self.overrun.as_millis(),
                    self.history
                        .faults_around(started, started + took, Duration::ZERO)
                        .join("; ")
                ));
        }
        out
    }
}

/// The modes a client may ask for on this backend.
pub fn modes(lock: &dyn LockService) -> Vec<LockMode> {
    let caps = lock.capabilities();
    let mut modes = vec![LockMode::Exclusive];
    if caps.read_write {
        modes.extend([LockMode::Read, LockMode::Write]);
    }
    if caps.semaphore {
        modes.push(LockMode::Permit { permits: 2 });
    }
    if caps.election {
        modes.push(LockMode::Leader);
    }
    modes
}

/// One client's loop until [`Shared::stop`]; `seed` picks its operations.
pub async fn client(id: usize, lock: Arc<dyn LockService>, shared: Arc<Shared>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let modes = modes(&*lock);
    while !shared.stop.load(Ordering::SeqCst) {
        let mode = modes[rng.random_range(0..modes.len())];
        let name = shared.names[rng.random_range(0..shared.names.len())].clone();
        let ttl = between(&mut rng, shared.ttl / 2, shared.ttl);
        let wait = between(&mut rng, Duration::ZERO, shared.ttl * 3);
        let opts = AcquireOptions::new().ttl(ttl).wait(wait);
        let op = rng.random_range(0..20);
        if op < 2 && mode == LockMode::Exclusive && shared.names.len() > 1 {
            all(id, &*lock, &shared, &opts, &mut rng).await;
        } else {
            one(id, &*lock, &shared, &name, mode, &opts, op, &mut rng).await;
        }
        let pause = between(&mut rng, Duration::ZERO, Duration::from_millis(40));
        tokio::time::sleep(pause).await;
    }
}

/// The worker loop of a cron job or a queue consumer: right after a
/// release, the same name in the same mode again, with a wait.
async fn again(
    id: usize,
    lock: &dyn LockService,
    shared: &Shared,
    name: &LockName,
    mode: LockMode,
    rng: &mut StdRng,
) {
    let wait = between(rng, Duration::ZERO, shared.ttl * 3);
    let opts = AcquireOptions::new().ttl(shared.ttl).wait(wait);
    let called = Instant::now();
    let r = shared
        .bounded(id, "acquire", wait, take(lock, name, &opts, mode))
        .await;
    match r {
        Ok(guard) => {
            shared.count(format!("acquire again {mode}: granted"));
            let grant = shared.history.granted(id, "acquire again", called, &guard);
            section(shared, &guard, called).await;
            tokio::time::sleep(between(rng, Duration::ZERO, shared.ttl / 3)).await;
            shared.history.end(grant, Instant::now(), "released");
            let r = shared
                .bounded(id, "release", shared.release_wait, guard.release())
                .await;
            if let Err(e) = r {
                shared.count_error("release", &e);
            }
        }
        Err(e) => shared.count_error("acquire again", &e),
    }
}

fn between(rng: &mut StdRng, from: Duration, to: Duration) -> Duration {
    let (a, b) = (from.as_millis() as u64, to.as_millis() as u64);
    Duration::from_millis(rng.random_range(a..=b.max(a)))
}

/// Takes `name` in `mode` by one of the three ways (wait, try, a wait
/// cancelled part-way) and holds what it got.
#[allow(clippy::too_many_arguments)]
async fn one(
    id: usize,
    lock: &dyn LockService,
    shared: &Shared,
    name: &LockName,
    mode: LockMode,
    opts: &AcquireOptions,
    op: u32,
    rng: &mut StdRng,
) {
    let wait = opts.wait_value();
    let called = Instant::now();
    let (via, got) = match op {
        0..=9 => {
            let r = shared
                .bounded(id, "acquire", wait, take(lock, name, opts, mode))
                .await;
            ("acquire", r.map(Some))
        }
        10..=14 => {
            let r = shared
                .bounded(
                    id,
                    "try_acquire",
                    Duration::ZERO,
                    try_take(lock, name, opts, mode),
                )
                .await;
            ("try_acquire", r)
        }
        _ => {
            let cancel_after = between(rng, Duration::ZERO, wait);
            match tokio::time::timeout(cancel_after, take(lock, name, opts, mode)).await {
                Ok(r) => ("cancelled acquire", r.map(Some)),
                Err(_) => {
                    shared.count("acquire cancelled mid-wait");
                    return;
                }
            }
        }
    };
    match got {
        Ok(Some(guard)) => {
            shared.count(format!("{via} {mode}: granted"));
            let grant = shared.history.granted(id, via, called, &guard);
            hold(id, lock, shared, guard, grant, called, rng).await;
        }
        Ok(None) => shared.count(format!("{via} {mode}: busy")),
        Err(e) => shared.count_error(via, &e),
    }
}

/// Takes every name at once and releases them together.
async fn all(
    id: usize,
    lock: &dyn LockService,
    shared: &Shared,
    opts: &AcquireOptions,
    rng: &mut StdRng,
) {
    let called = Instant::now();
    let r: lock_core::Result<MultiGuard> = shared
        .bounded(
            id,
            "acquire_all",
            opts.wait_value(),
            lock.acquire_all(&shared.names, opts),
        )
        .await;
    match r {
        Ok(multi) => {
            shared.count("acquire_all: granted");
            let grants: Vec<usize> = multi
                .guards()
                .iter()
                .map(|g| shared.history.granted(id, "acquire_all", called, g))
                .collect();
            for g in multi.guards() {
                section(shared, g, called).await;
            }
            tokio::time::sleep(between(rng, Duration::ZERO, shared.ttl / 3)).await;
            let now = Instant::now();
            for g in grants {
                shared.history.end(g, now, "released (acquire_all)");
            }
            let r = shared
                .bounded(
                    id,
                    "release of acquire_all",
                    shared.release_wait,
                    multi.release(),
                )
                .await;
            if let Err(e) = r {
                shared.count_error("release of acquire_all", &e);
            }
        }
        Err(e) => shared.count_error("acquire_all", &e),
    }
}

/// A careful critical section: read the fenced register, a real `.await`,
/// write only while the guard says held. Mutex and write holds only.
async fn section(shared: &Shared, guard: &LockGuard, asked: Instant) {
    let kind = match guard.mode() {
        LockMode::Read | LockMode::Write => "read-write",
        LockMode::Permit { .. } => "semaphore",
        LockMode::Leader => "election",
        _ => "mutex",
    };
    let resource = format!("{}/{kind}", guard.name());
    let mut s = shared.registers.enter_resource(&resource, guard, asked);
    s.read();
    tokio::time::sleep(Duration::from_millis(1)).await;
    if guard.is_held() {
        s.write();
    }
    s.exit_checked(guard);
}

/// Holds `guard` for a few sections, maybe extends it (longer or shorter)
/// or downgrades it, then releases it or drops it.
async fn hold(
    id: usize,
    lock: &dyn LockService,
    shared: &Shared,
    mut guard: LockGuard,
    mut grant: usize,
    mut asked: Instant,
    rng: &mut StdRng,
) {
    for _ in 0..rng.random_range(1..=3) {
        section(shared, &guard, asked).await;
        tokio::time::sleep(between(rng, Duration::ZERO, shared.ttl / 3)).await;
        if rng.random_bool(0.25) {
            let ttl = between(rng, shared.ttl / 2, shared.ttl * 2);
            let r = shared
                .bounded(id, "extend", Duration::ZERO, guard.extend(ttl))
                .await;
            match r {
                Ok(_) => shared.count("extend: ok"),
                Err(e) => shared.count_error("extend", &e),
            }
        }
        if guard.mode() == LockMode::Write && rng.random_bool(0.3) {
            let called = Instant::now();
            let r = shared
                .bounded(id, "downgrade", Duration::ZERO, lock.downgrade(guard))
                .await;
            match r {
                Ok(read) => {
                    // The write side was given up when the call was made.
                    shared.history.end(grant, called, "downgraded");
                    shared.count("downgrade: ok");
                    grant = shared.history.granted(id, "downgrade", called, &read);
                    asked = called;
                    guard = read;
                }
                Err(e) => {
                    // The write guard is gone from our hands; what its state
                    // says from here on (followed by the history) is what
                    // the library still claims.
                    shared.count_error("downgrade", &e);
                    return;
                }
            }
        }
    }
    let now = Instant::now();
    if rng.random_bool(0.85) {
        shared.history.end(grant, now, "released");
        let (name, mode) = (guard.name().clone(), guard.mode());
        let r = shared
            .bounded(id, "release", shared.release_wait, guard.release())
            .await;
        match r {
            Ok(true) => shared.count("release: ok"),
            Ok(false) => shared.count("release: already lost"),
            Err(e) => shared.count_error("release", &e),
        }
        if rng.random_bool(0.3) {
            again(id, lock, shared, &name, mode, rng).await;
        }
    } else {
        shared.history.end(grant, now, "dropped");
        shared.count("guard dropped (released in the background)");
        drop(guard);
    }
}
