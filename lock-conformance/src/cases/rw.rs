//! The read-write lock: readers together and a writer alone, no starvation
//! either way, downgrade and upgrade, dropped waiters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockErrorKind, LockMode, LockService, ReadWriteLockExt};
use tokio::time::{sleep, timeout, Instant};

use super::helpers::{assert_no_leftovers, client, clients, opts, spawn_acquire_write};
use crate::{unique_name, Harness};

/// Readers hold together; a writer is alone: no reader beside a writer, no
/// writer beside a reader or another writer.
pub(super) async fn readers_hold_together_and_a_writer_alone(h: Arc<dyn Harness>) {
    let name = unique_name("rw");
    let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let o = opts(&*h);
    let r1 = a
        .try_acquire_read(&name, &o)
        .await
        .unwrap()
        .expect("first reader");
    let r2 = b
        .try_acquire_read(&name, &o)
        .await
        .unwrap()
        .expect("second reader");
    assert_eq!(r1.mode(), LockMode::Read);
    assert!(
        c.try_acquire_write(&name, &o).await.unwrap().is_none(),
        "writer beside readers"
    );
    assert!(r1.release().await.unwrap());
    assert!(
        c.try_acquire_write(&name, &o).await.unwrap().is_none(),
        "writer beside a reader"
    );
    assert!(r2.release().await.unwrap());
    let w = c
        .try_acquire_write(&name, &o)
        .await
        .unwrap()
        .expect("writer on a free lock");
    assert_eq!(w.mode(), LockMode::Write);
    assert!(
        a.try_acquire_read(&name, &o).await.unwrap().is_none(),
        "reader beside a writer"
    );
    assert!(
        b.try_acquire_write(&name, &o).await.unwrap().is_none(),
        "two writers"
    );
    // The mutex of the same name is a different lock.
    let m = a
        .try_acquire(&name, &o)
        .await
        .unwrap()
        .expect("the mutex of the name is separate");
    assert!(m.release().await.unwrap());
    assert!(w.release().await.unwrap());
    let r = a
        .acquire_read(&name, &o.clone().wait(h.slack()))
        .await
        .expect("reader after the writer");
    assert!(r.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// Readers that arrive after a writer started waiting queue behind it, so a
/// stream of readers cannot starve the writer; the writer gets the lock as
/// soon as the earlier readers leave.
pub(super) async fn waiting_writer_is_not_starved_by_new_readers(h: Arc<dyn Harness>) {
    let name = unique_name("starve");
    let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(30));
    let r1 = a.acquire_read(&name, &o).await.unwrap();
    let writer = spawn_acquire_write(&b, &name, &o);
    sleep(Duration::from_millis(500)).await;
    assert!(
        c.try_acquire_read(&name, &o).await.unwrap().is_none(),
        "a new reader went ahead of a waiting writer"
    );
    let late_reader = {
        let (c, name, o) = (c.clone(), name.clone(), o.clone());
        tokio::spawn(async move { c.acquire_read(&name, &o).await.map(|g| (Instant::now(), g)) })
    };
    sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    assert!(r1.release().await.unwrap());
    let (w_at, w) = writer.await.unwrap().expect("the writer");
    assert!(
        w_at - released < h.slack(),
        "writer woke {:?} after the last reader left",
        w_at - released
    );
    sleep(Duration::from_millis(200)).await;
    assert!(
        !late_reader.is_finished(),
        "a reader got in beside the writer"
    );
    let w_released = Instant::now();
    assert!(w.release().await.unwrap());
    let (r_at, r) = late_reader
        .await
        .unwrap()
        .expect("the reader behind the writer");
    assert!(r_at >= w_released);
    assert!(r.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// Tasks on several clients mixing reads and writes: never a reader beside a
/// writer, never two writers, and readers do overlap.
pub(super) async fn read_write_exclusion_under_contention(h: Arc<dyn Harness>) {
    let name = unique_name("rwmix");
    let readers = Arc::new(AtomicU64::new(0));
    let writers = Arc::new(AtomicU64::new(0));
    let violations = Arc::new(AtomicU64::new(0));
    let max_readers = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    // Every client connected before any task starts, and all start
    // together: on a busy machine a connection can take longer than a
    // task's whole run, and tasks started one by one would never meet.
    let clients = clients(&*h, 6).await;
    let start = Arc::new(tokio::sync::Barrier::new(clients.len()));
    for (i, c) in clients.into_iter().enumerate() {
        let (name, readers, writers, violations, max_readers, start) = (
            name.clone(),
            readers.clone(),
            writers.clone(),
            violations.clone(),
            max_readers.clone(),
            start.clone(),
        );
        let o = opts(&*h).wait(Duration::from_secs(60));
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            for round in 0..5 {
                if (i + round) % 3 == 0 {
                    c.with_write(&name, &o, |_| async {
                        if writers.fetch_add(1, Ordering::SeqCst) > 0
                            || readers.load(Ordering::SeqCst) > 0
                        {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        sleep(Duration::from_millis(5)).await;
                        writers.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await
                    .expect("with_write");
                } else {
                    c.with_read(&name, &o, |_| async {
                        let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                        max_readers.fetch_max(now, Ordering::SeqCst);
                        if writers.load(Ordering::SeqCst) > 0 {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        sleep(Duration::from_millis(20)).await;
                        readers.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await
                    .expect("with_read");
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(violations.load(Ordering::SeqCst), 0, "exclusion violated");
    assert!(
        max_readers.load(Ordering::SeqCst) >= 2,
        "readers never shared the lock"
    );
    assert_no_leftovers(&*h, &name).await;
}

/// A downgraded write guard becomes a read guard with a newer token: other
/// readers get in, writers stay out, and the name was never free between.
pub(super) async fn downgrade_keeps_writers_out_and_lets_readers_in(h: Arc<dyn Harness>) {
    let name = unique_name("downgrade");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let o = opts(&*h);
    let w = a.acquire_write(&name, &o).await.unwrap();
    let wt = w.fencing_token();
    let r = a.downgrade(w).await.expect("downgrade");
    assert_eq!(r.mode(), LockMode::Read);
    assert!(r.is_held());
    if let (Some(wt), Some(rt)) = (wt, r.fencing_token()) {
        assert!(rt > wt, "read token {rt} not above the write token {wt}");
    }
    assert!(
        b.try_acquire_write(&name, &o).await.unwrap().is_none(),
        "a writer got in after a downgrade"
    );
    let r2 = b
        .try_acquire_read(&name, &o)
        .await
        .unwrap()
        .expect("a reader beside the downgraded guard");
    assert!(r2.release().await.unwrap());
    let err = a.downgrade(r).await.expect_err("downgraded a read guard");
    assert_eq!(err.kind(), LockErrorKind::InvalidArgument);
    assert_no_leftovers(&*h, &name).await;
    let w = b
        .try_acquire_write(&name, &o)
        .await
        .unwrap()
        .expect("free after everything was released");
    assert!(w.release().await.unwrap());
}

/// Upgrading a read guard is refused with `WouldDeadlock`; the read guard is kept.
pub(super) async fn upgrade_is_refused(h: Arc<dyn Harness>) {
    let name = unique_name("upgrade");
    let a = client(&*h).await;
    let r = a.acquire_read(&name, &opts(&*h)).await.unwrap();
    let err = a.upgrade(&r).await.expect_err("upgrade succeeded");
    assert_eq!(err.kind(), LockErrorKind::WouldDeadlock, "{err}");
    assert!(!err.is_retryable());
    assert!(r.is_held());
    assert!(r.release().await.unwrap());
}

/// Waiting readers and writers that are dropped leave nothing on the server
/// and do not block the next ones.
pub(super) async fn dropped_read_write_waiters_leave_nothing(h: Arc<dyn Harness>) {
    let name = unique_name("rwcancel");
    let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(60));
    let w = a.acquire_write(&name, &o).await.unwrap();
    let waiting_reader = {
        let (b, name, o) = (b.clone(), name.clone(), o.clone());
        tokio::spawn(async move { b.acquire_read(&name, &o).await.map(|_| ()) })
    };
    let waiting_writer = {
        let (c, name, o) = (c.clone(), name.clone(), o.clone());
        tokio::spawn(async move { c.acquire_write(&name, &o).await.map(|_| ()) })
    };
    sleep(Duration::from_millis(400)).await;
    waiting_reader.abort();
    waiting_writer.abort();
    assert!(waiting_reader.await.unwrap_err().is_cancelled());
    assert!(waiting_writer.await.unwrap_err().is_cancelled());
    assert!(w.release().await.unwrap());
    let t = Instant::now();
    let w2 = b
        .acquire_write(&name, &opts(&*h).wait(h.slack()))
        .await
        .expect("a cancelled waiter blocked the next writer");
    assert!(t.elapsed() < h.slack());
    assert!(w2.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// A writer already waiting when a write guard is downgraded keeps waiting
/// while the downgraded reader holds: the name is never held by a reader
/// and a writer at once, and the writer gets it when the reader leaves.
pub(super) async fn downgrade_keeps_a_queued_writer_out(h: Arc<dyn Harness>) {
    let name = unique_name("downgradeq");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(30));
    let w = a.acquire_write(&name, &o).await.unwrap();
    let writer = spawn_acquire_write(&b, &name, &o);
    sleep(Duration::from_millis(300)).await;
    assert!(!writer.is_finished(), "two writers at once");
    let r = a.downgrade(w).await.expect("downgrade");
    sleep(Duration::from_millis(500)).await;
    assert!(
        !writer.is_finished(),
        "a queued writer got in beside the downgraded reader"
    );
    assert!(r.is_held());
    let released = Instant::now();
    assert!(r.release().await.unwrap());
    let (at, g) = writer
        .await
        .unwrap()
        .expect("the queued writer after the reader left");
    assert!(
        at - released < h.slack(),
        "the queued writer took {:?} after the reader left",
        at - released
    );
    assert!(g.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// Readers that waited for a writer get in when it releases, before that
/// writer's next write: a writer that comes straight back queues behind
/// them, so a busy writer cannot starve readers either.
pub(super) async fn a_returning_writer_queues_behind_waiting_readers(h: Arc<dyn Harness>) {
    let name = unique_name("rwreturn");
    let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(30));
    let w = a.acquire_write(&name, &o).await.unwrap();
    let spawn_read = |client: &Arc<dyn LockService>| {
        let (client, name, o) = (client.clone(), name.clone(), o.clone());
        tokio::spawn(async move { client.acquire_read(&name, &o).await })
    };
    let (r1, r2) = (spawn_read(&b), spawn_read(&c));
    sleep(Duration::from_millis(500)).await;
    assert!(
        !r1.is_finished() && !r2.is_finished(),
        "a reader got in beside the writer"
    );
    assert!(w.release().await.unwrap());
    // At once, before the readers could react to the release.
    if let Some(g) = a.try_acquire_write(&name, &o).await.unwrap() {
        panic!(
            "the returning writer went ahead of the readers that waited for it (token {:?})",
            g.fencing_token()
        );
    }
    let again = spawn_acquire_write(&a, &name, &o);
    let bound = h.slack() * 2;
    let g1 = timeout(bound, r1)
        .await
        .expect(
            "a reader that waited for the writer is still waiting: the returning writer went first",
        )
        .unwrap()
        .expect("first reader");
    let g2 = timeout(bound, r2)
        .await
        .expect(
            "a reader that waited for the writer is still waiting: the returning writer went first",
        )
        .unwrap()
        .expect("second reader");
    assert!(
        !again.is_finished(),
        "the returning writer got in beside the readers"
    );
    let released = Instant::now();
    assert!(g1.release().await.unwrap());
    assert!(g2.release().await.unwrap());
    let (at, w2) = again.await.unwrap().expect("the returning writer");
    assert!(
        at - released < h.slack(),
        "the returning writer took {:?} after the readers left",
        at - released
    );
    assert!(w2.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}
