//! The semaphore: never more holders than permits, a freed permit handed on,
//! abandoned and dropped permits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::LockMode;
use tokio::time::{sleep, Instant};

use super::helpers::{assert_no_leftovers, client, clients, opts};
use crate::{unique_name, Harness};

/// A stream of acquirers never sees more than N holders of a semaphore of N,
/// and the permits are really shared (N holders at once happen).
pub(super) async fn permits_never_exceed_the_count(h: Arc<dyn Harness>) {
    const PERMITS: u32 = 3;
    let name = unique_name("permits");
    let inside = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    // Connected first, started together (see rw::read_write_exclusion_under_contention).
    let clients = clients(&*h, 6).await;
    let start = Arc::new(tokio::sync::Barrier::new(clients.len()));
    for c in clients {
        let (name, inside, most, tokens, start) = (
            name.clone(),
            inside.clone(),
            most.clone(),
            tokens.clone(),
            start.clone(),
        );
        let o = opts(&*h).wait(Duration::from_secs(60));
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            for _ in 0..4 {
                let g = c.acquire_permit(&name, PERMITS, &o).await.expect("permit");
                assert!(matches!(g.mode(), LockMode::Permit { permits: PERMITS }));
                tokens.lock().unwrap().push(g.fencing_token());
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                sleep(Duration::from_millis(30)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(
                    g.release().await.unwrap(),
                    "permit lost during a short section"
                );
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= u64::from(PERMITS),
        "{most} holders of {PERMITS} permits"
    );
    assert!(most >= 2, "the permits were never shared");
    let mut seen: Vec<_> = tokens.lock().unwrap().iter().flatten().copied().collect();
    let all = seen.len();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), all, "two permits shared a fencing token");
    assert_no_leftovers(&*h, &name).await;
}

/// A released permit goes to a waiter on another client at once.
pub(super) async fn freed_permit_goes_to_a_waiter_promptly(h: Arc<dyn Harness>) {
    let name = unique_name("permitwake");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let long = opts(&*h).ttl(h.ttl() * 20).wait(h.ttl() * 20);
    let p1 = a.acquire_permit(&name, 2, &long).await.unwrap();
    let p2 = a.acquire_permit(&name, 2, &long).await.unwrap();
    let waiter = {
        let (b, name, o) = (b.clone(), name.clone(), long.clone());
        tokio::spawn(async move {
            b.acquire_permit(&name, 2, &o)
                .await
                .map(|g| (Instant::now(), g))
        })
    };
    sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "a third holder of two permits");
    let released = Instant::now();
    assert!(p1.release().await.unwrap());
    let (got, p3) = waiter.await.unwrap().unwrap();
    assert!(
        got - released < h.slack().min(h.ttl() * 5),
        "hand-off took {:?}",
        got - released
    );
    assert!(p2.release().await.unwrap() && p3.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// A permit whose holder vanished (keep-alive off, guard leaked) frees
/// within its TTL.
pub(super) async fn abandoned_permit_frees_within_ttl(h: Arc<dyn Harness>) {
    let name = unique_name("permitabandon");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let g = a
        .acquire_permit(&name, 1, &opts(&*h).keep_alive(false))
        .await
        .unwrap();
    let t = Instant::now();
    std::mem::forget(g);
    let g2 = b
        .acquire_permit(&name, 1, &opts(&*h).wait(h.ttl() + h.slack()))
        .await
        .expect("abandoned permit not freed within ttl + slack");
    assert!(t.elapsed() <= h.ttl() + h.slack(), "took {:?}", t.elapsed());
    assert!(g2.release().await.unwrap());
}

/// A dropped waiter for a permit leaves nothing behind and blocks nobody.
pub(super) async fn dropped_permit_waiter_leaves_nothing(h: Arc<dyn Harness>) {
    let name = unique_name("permitcancel");
    let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(60));
    let p = a.acquire_permit(&name, 1, &o).await.unwrap();
    let waiting = {
        let (b, name, o) = (b.clone(), name.clone(), o.clone());
        tokio::spawn(async move { b.acquire_permit(&name, 1, &o).await.map(|_| ()) })
    };
    sleep(Duration::from_millis(300)).await;
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    assert!(p.release().await.unwrap());
    let p2 = c
        .acquire_permit(&name, 1, &opts(&*h).wait(h.slack()))
        .await
        .expect("a cancelled permit waiter blocked the next one");
    assert!(p2.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}
