//! What another client sees: `inspect`, `list`, and the description of the
//! holder.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Holder, LockErrorKind, LockName, MAX_NOTE_LEN};
use tokio::time::{sleep, timeout, Instant};

use super::helpers::{assert_no_leftovers, client, opts};
use crate::{unique_name, Harness};

/// `inspect` tells held from free, with the holder's token where the backend has one.
pub(super) async fn inspect_reports_holder(h: Arc<dyn Harness>) {
    let name = unique_name("inspect");
    let a = client(&*h).await;
    assert!(!a.inspect(&name).await.unwrap().held);
    let g = a.acquire(&name, &opts(&*h)).await.unwrap();
    let st = a.inspect(&name).await.unwrap();
    assert!(st.held);
    if let Some(token) = g.fencing_token() {
        assert_eq!(st.token, Some(token));
    }
    if let Some(ttl) = st.ttl_remaining {
        assert!(ttl <= h.ttl() + h.slack());
    }
    assert!(g.release().await.unwrap());
    assert!(!a.inspect(&name).await.unwrap().held);
}

/// Another client's `inspect` and `list` show who holds a mutex (this
/// machine's host, this process's id, the note given at acquire), also for
/// a waiter the lock was handed to; a released lock has no holder; a note
/// too long or of several lines is an `InvalidArgument` error.
pub(super) async fn inspect_and_list_describe_the_holder(h: Arc<dyn Harness>) {
    let name = unique_name("holder");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let me = Holder::this_process();
    assert!(me.host.is_some(), "this machine has no host name");
    let first = a
        .acquire(&name, &opts(&*h).note("first holder: report job 17"))
        .await
        .unwrap();
    let st = b.inspect(&name).await.unwrap();
    assert!(st.held);
    let seen = st.holder.expect("inspect shows no holder");
    assert_eq!(seen.host, me.host);
    assert_eq!(seen.pid, me.pid);
    assert_eq!(seen.note.as_deref(), Some("first holder: report job 17"));
    let listed = b.list(name.as_str(), 10).await.expect("list");
    let Some((_, st)) = listed.iter().find(|(n, _)| *n == name) else {
        panic!("{name} not listed: {listed:?}");
    };
    assert_eq!(st.holder.as_ref(), Some(&seen), "list and inspect disagree");

    // A waiter gets the lock when it is released: its own description.
    let second = {
        let (b, name, o) = (b.clone(), name.clone(), opts(&*h).note("second"));
        tokio::spawn(async move { b.acquire(&name, &o).await })
    };
    sleep(Duration::from_millis(300)).await;
    assert!(first.release().await.unwrap());
    let second = timeout(Duration::from_secs(10) + h.slack(), second)
        .await
        .expect("the waiter did not get the released lock")
        .unwrap()
        .unwrap();
    let st = a.inspect(&name).await.unwrap();
    assert!(st.held);
    let seen = st.holder.expect("no holder shown for the waiter");
    assert_eq!(seen.note.as_deref(), Some("second"));
    assert_eq!((seen.host, seen.pid), (me.host.clone(), me.pid));
    assert!(second.release().await.unwrap());
    let st = a.inspect(&name).await.unwrap();
    assert!(!st.held, "{st:?}");
    assert_eq!(st.holder, None);

    // Without a note: host and pid only.
    let g = a.acquire(&name, &opts(&*h)).await.unwrap();
    let seen = b.inspect(&name).await.unwrap().holder.expect("no holder");
    assert_eq!((seen.host, seen.pid, seen.note), (me.host, me.pid, None));
    assert!(g.release().await.unwrap());

    for bad in ["n".repeat(MAX_NOTE_LEN + 1), "two\nlines".to_string()] {
        let err = a
            .try_acquire(&name, &opts(&*h).note(bad))
            .await
            .expect_err("a bad note was accepted");
        assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
    }
    let ok = a
        .try_acquire(&name, &opts(&*h).note("n".repeat(MAX_NOTE_LEN)))
        .await
        .unwrap()
        .expect("a note of the largest size");
    assert_eq!(
        b.inspect(&name).await.unwrap().holder.and_then(|d| d.note),
        Some("n".repeat(MAX_NOTE_LEN))
    );
    assert!(ok.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// `list` shows the held mutexes under a prefix, sorted, with their status,
/// and nothing that was released or that lies outside the prefix.
pub(super) async fn list_shows_held_locks_by_prefix(h: Arc<dyn Harness>) {
    let base = unique_name("list");
    let names: Vec<LockName> = ["b", "a", "c/deeper"]
        .iter()
        .map(|s| LockName::new(format!("{base}/{s}")).unwrap())
        .collect();
    let outside = LockName::new(format!("{base}-outside")).unwrap();
    let (a, b) = (client(&*h).await, client(&*h).await);
    let mut guards = Vec::new();
    for n in names.iter().chain([&outside]) {
        guards.push(a.acquire(n, &opts(&*h)).await.unwrap());
    }
    let prefix = format!("{base}/");
    let listed = b.list(&prefix, 100).await.expect("list");
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(
        listed.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        expected,
        "listed {listed:?}"
    );
    assert!(listed.iter().all(|(_, st)| st.held));
    let first_two = b.list(&prefix, 2).await.unwrap();
    assert_eq!(first_two.len(), 2);
    for g in guards {
        assert!(g.release().await.unwrap());
    }
    let deadline = Instant::now() + h.slack();
    loop {
        let left = b.list(&prefix, 100).await.unwrap();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "released locks still listed: {left:?}"
        );
        sleep(Duration::from_millis(50)).await;
    }
}
