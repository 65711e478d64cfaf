//! Helpers of the cases in every topic: options, clients, the kinds of lease,
//! and the check that nothing is left on the server.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOptions, Capabilities, LockMode, LockName, LockService};
use tokio::time::{sleep, Instant};

use crate::Harness;

/// The options most cases start from: the harness's TTL and a 30 s wait.
pub(super) fn opts(h: &dyn Harness) -> AcquireOptions {
    AcquireOptions::new()
        .ttl(h.ttl())
        .wait(Duration::from_secs(30))
}

/// A new, independent client of the backend.
pub(super) async fn client(h: &dyn Harness) -> Arc<dyn LockService> {
    h.client().await
}

/// `n` clients, each connected before the next (the connections are made
/// before the tasks that use them start, so they do not stagger them).
pub(super) async fn clients(h: &dyn Harness, n: usize) -> Vec<Arc<dyn LockService>> {
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        all.push(h.client().await);
    }
    all
}

/// Waits until nothing of `name` is left on the server, or fails after `h.slack()`.
pub(super) async fn assert_no_leftovers(h: &dyn Harness, name: &LockName) {
    assert_no_leftovers_within(h, name, h.slack()).await;
}

/// Waits until nothing of `name` is left on the server, or fails after `within`.
pub(super) async fn assert_no_leftovers_within(h: &dyn Harness, name: &LockName, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let left = h.leftovers(name).await;
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "left behind on the server: {left:?}"
        );
        sleep(Duration::from_millis(50)).await;
    }
}

/// `c.acquire_write(name, o)` in a task of its own; the guard comes with
/// the instant it was granted.
pub(super) fn spawn_acquire_write(
    c: &Arc<dyn LockService>,
    name: &LockName,
    o: &AcquireOptions,
) -> tokio::task::JoinHandle<lock_core::Result<(Instant, lock_core::LockGuard)>> {
    let (c, name, o) = (c.clone(), name.clone(), o.clone());
    tokio::spawn(async move {
        c.acquire_write(&name, &o)
            .await
            .map(|g| (Instant::now(), g))
    })
}

/// The kinds of lease a backend with `caps` offers, for cases that check
/// each of them the same way.
pub(super) fn offered_modes(caps: &Capabilities) -> Vec<LockMode> {
    let mut modes = vec![LockMode::Exclusive];
    if caps.read_write {
        modes.extend([LockMode::Read, LockMode::Write]);
    }
    if caps.semaphore {
        modes.push(LockMode::Permit { permits: 1 });
    }
    modes
}

/// A waiting acquire of `mode` (a reader waits behind a writer, anything
/// else behind its own kind).
pub(super) async fn acquire_as(
    c: &dyn LockService,
    mode: LockMode,
    name: &LockName,
    o: &AcquireOptions,
) -> lock_core::Result<lock_core::LockGuard> {
    match mode {
        LockMode::Read => c.acquire_read(name, o).await,
        LockMode::Write => c.acquire_write(name, o).await,
        LockMode::Permit { permits } => c.acquire_permit(name, permits, o).await,
        _ => c.acquire(name, o).await,
    }
}

/// The lease that makes a waiter of `mode` wait: the write side for a
/// reader, the same kind for the others.
pub(super) fn blocking_mode(mode: LockMode) -> LockMode {
    match mode {
        LockMode::Read => LockMode::Write,
        other => other,
    }
}
