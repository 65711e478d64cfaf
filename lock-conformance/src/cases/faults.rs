//! Servers that do not answer, links cut or slow (through fault proxies):
//! every call returns within its deadline, a guard never claims more than the
//! server may keep, and a waiter cut off holds nobody up.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockErrorKind, LockName};
use tokio::time::{sleep, timeout, Instant};

use super::helpers::{
    acquire_as, assert_no_leftovers, assert_no_leftovers_within, blocking_mode, client,
    offered_modes, opts,
};
use crate::{client_through_proxies, unique_name, Harness};

/// A server that does not answer gives `Unavailable` within the configured
/// timeout (plus slack), never a hang.
pub(super) async fn unreachable_server_is_unavailable_quickly(h: Arc<dyn Harness>) {
    let limit = Duration::from_millis(500);
    let bound = limit + h.slack();
    let name = unique_name("unreachable");
    // A server that accepts connections and never answers, from the start...
    let t = Instant::now();
    let (proxies, made) = {
        let proxies: Vec<crate::testbed::Proxy> = h
            .upstreams()
            .into_iter()
            .map(|up| crate::testbed::Proxy::start(up).expect("proxy"))
            .collect();
        for p in &proxies {
            p.blackhole();
        }
        let addrs: Vec<_> = proxies.iter().map(|p| p.addr()).collect();
        let made = h.client_at(&addrs, limit).await;
        (proxies, made)
    };
    let err = match made {
        Err(err) => err,
        Ok(c) => match timeout(bound * 2, c.acquire(&name, &opts(&*h))).await {
            Err(_) => panic!(
                "acquire against an unreachable server hung for {:?}",
                bound * 2
            ),
            Ok(Ok(_)) => panic!("acquired a lock from an unreachable server"),
            Ok(Err(err)) => err,
        },
    };
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
    assert!(
        t.elapsed() <= bound,
        "took {:?}, limit {limit:?}",
        t.elapsed()
    );
    drop(proxies);
    // ...and one that stops answering after the connect.
    let (proxies, made) = client_through_proxies(&*h, limit).await;
    let c = made.expect("connect through healthy proxies");
    for p in &proxies {
        p.blackhole();
    }
    let t = Instant::now();
    let err = c
        .acquire(&name, &opts(&*h))
        .await
        .expect_err("acquired from a server that stopped answering");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    assert!(
        t.elapsed() <= bound,
        "took {:?}, limit {limit:?}",
        t.elapsed()
    );
}

/// Every call returns within its own bound (its wait plus one request
/// timeout) when the servers stop answering after the connect, and a
/// connect to servers that never answer gives up within its timeout.
pub(super) async fn every_call_honours_its_deadline_when_the_server_hangs(h: Arc<dyn Harness>) {
    let timeout_ = Duration::from_millis(800);
    // Scheduling on a busy machine (a TLS connect to five nodes there took
    // 1.25-1.28 s of its 0.8 s): the harness's slack.
    let allowance = h.slack();
    let (proxies, made) = client_through_proxies(&*h, timeout_).await;
    let c = made.expect("connect through healthy proxies");
    let name = unique_name("deadline");
    let g = c
        .acquire(&name, &opts(&*h).ttl(h.ttl() * 20))
        .await
        .expect("acquire through healthy proxies");
    for p in &proxies {
        p.blackhole();
    }
    async fn bounded<T>(
        what: &str,
        bound: Duration,
        fut: impl std::future::Future<Output = T>,
    ) -> T {
        let t = Instant::now();
        let out = timeout(bound * 4, fut).await.unwrap_or_else(|_| {
            panic!(
                "{what} against a hung server did not return within {:?}",
                bound * 4
            )
        });
        assert!(
            t.elapsed() <= bound,
            "{what} took {:?}, bound {bound:?}",
            t.elapsed()
        );
        out
    }
    let other = unique_name("deadline-other");
    let wait = Duration::from_millis(200);
    let r = bounded(
        "try_acquire",
        timeout_ + allowance,
        c.try_acquire(&other, &opts(&*h)),
    )
    .await;
    assert!(r.is_err(), "try_acquire answered {r:?} from a hung server");
    let r = bounded(
        "acquire",
        wait + timeout_ + allowance,
        c.acquire(&other, &opts(&*h).wait(wait)),
    )
    .await;
    assert!(r.is_err(), "acquire answered from a hung server");
    bounded("inspect", timeout_ + allowance, c.inspect(&name))
        .await
        .ok();
    bounded("extend", timeout_ + allowance, g.extend(h.ttl() * 20))
        .await
        .ok();
    bounded("release", timeout_ + allowance, g.release())
        .await
        .ok();
    let addrs: Vec<_> = proxies.iter().map(|p| p.addr()).collect();
    let r = bounded(
        "connect",
        timeout_ + allowance,
        h.client_at(&addrs, timeout_),
    )
    .await;
    if let Ok(late) = r {
        // A lazy connect: the first call must still be bounded.
        let r = bounded(
            "try_acquire on a lazily connected client",
            timeout_ + allowance,
            late.try_acquire(&other, &opts(&*h)),
        )
        .await;
        assert!(r.is_err());
    }
    for p in &proxies {
        p.heal();
    }
    // The lock expires or was released: it is free again within its TTL.
    let fresh = client(&*h).await;
    let g = fresh
        .acquire(&name, &opts(&*h).wait(h.ttl() * 20 + h.slack()))
        .await
        .expect("the lock of the hung client never came free");
    assert!(g.release().await.unwrap());
}

/// A waiter (a client of its own, through fault proxies in front of every
/// upstream) of a name held by another client, with its connections cut
/// while the holder releases: the proxies (still cut) and the waiter's
/// acquire, which ends with the time it was granted. `what` names the case.
async fn a_waiter_cut_off_at_the_release(
    h: &dyn Harness,
    what: &str,
) -> (
    Vec<crate::testbed::Proxy>,
    tokio::task::JoinHandle<lock_core::Result<(Instant, lock_core::LockGuard)>>,
) {
    let name = unique_name(what);
    let holder = client(h).await;
    let long = opts(h)
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(60));
    let (proxies, made) = client_through_proxies(h, Duration::from_secs(1)).await;
    let waiter_client = made.expect("connect through healthy proxies");
    let g = holder.acquire(&name, &long).await.unwrap();
    let waiter = tokio::spawn(async move {
        waiter_client
            .acquire(&name, &long)
            .await
            .map(|g| (Instant::now(), g))
    });
    sleep(Duration::from_millis(500)).await;
    for p in &proxies {
        p.cut();
    }
    assert!(g.release().await.unwrap());
    sleep(Duration::from_millis(300)).await;
    (proxies, waiter)
}

/// The lock that `waiter` gets once its servers are all back (`healed`),
/// within its client's reconnect backoff and re-check plus slack; `what`
/// says what it must not sleep through.
async fn granted_after_the_return(
    h: &dyn Harness,
    waiter: tokio::task::JoinHandle<lock_core::Result<(Instant, lock_core::LockGuard)>>,
    healed: Instant,
    what: &str,
) -> lock_core::LockGuard {
    let bound = Duration::from_secs(4) + h.slack();
    let (got, g) = timeout(bound * 2, waiter)
        .await
        .unwrap_or_else(|_| panic!("the waiter slept through {what}"))
        .unwrap()
        .expect("the waiter's acquire failed");
    let took = got.saturating_duration_since(healed);
    assert!(
        took <= bound,
        "the waiter took {took:?} after the servers came back"
    );
    g
}

/// A release whose notification is lost (the waiter's connections are cut
/// while it happens) still wakes the waiter promptly once they are back,
/// long before the holder's TTL or any long re-check.
pub(super) async fn lost_release_notification_still_wakes_the_waiter(h: Arc<dyn Harness>) {
    let (proxies, waiter) = a_waiter_cut_off_at_the_release(&*h, "lostnote").await;
    let healed = Instant::now();
    for p in &proxies {
        p.heal();
    }
    let g2 = granted_after_the_return(&*h, waiter, healed, "a release whose notification was lost")
        .await;
    assert!(g2.release().await.unwrap());
    drop(proxies);
}

/// Servers coming back one at a time after a cut (a partition healing
/// server by server): a waiter that the first one back wakes, and whose
/// attempt finds the others still unreachable, keeps its wait and gets the
/// lock once they are back, long before its wait ends.
pub(super) async fn a_waiter_rides_out_servers_coming_back_one_at_a_time(h: Arc<dyn Harness>) {
    let (proxies, mut waiter) = a_waiter_cut_off_at_the_release(&*h, "comeback").await;
    // The first server back; the client reconnects there within its
    // reconnect backoff, and may try the lock while the others still
    // reset every connection. With one server, that is all of them.
    proxies[0].heal();
    let early = timeout(Duration::from_secs(2), &mut waiter).await;
    let healed = Instant::now();
    for p in &proxies[1..] {
        p.heal();
    }
    let g2 = match early {
        Ok(done) => {
            done.unwrap()
                .expect("the waiter gave up while the servers were coming back")
                .1
        }
        Err(_) => granted_after_the_return(&*h, waiter, healed, "the servers' return").await,
    };
    assert!(g2.release().await.unwrap());
    drop(proxies);
}

/// An extend to a shorter TTL whose reply never comes may have been applied:
/// the guard never reports a validity beyond what the server may keep.
pub(super) async fn unanswered_extend_never_lengthens_validity(h: Arc<dyn Harness>) {
    let name = unique_name("ambiguous");
    let (proxies, made) = client_through_proxies(&*h, Duration::from_millis(800)).await;
    let c = made.expect("connect through healthy proxies");
    let long = h.ttl() * 10;
    let g = c
        .acquire(&name, &opts(&*h).ttl(long).keep_alive(false))
        .await
        .unwrap();
    for p in &proxies {
        p.set_reply_delay(Duration::from_secs(3));
    }
    let short = h.ttl();
    let sent = Instant::now();
    let _ = g.extend(short).await;
    if let Some(until) = g.valid_until() {
        assert!(
            until <= sent + short,
            "validity {:?} after an unanswered extend to {short:?}",
            until - sent
        );
    }
    for p in &proxies {
        p.heal();
    }
    let _ = g.release().await;
    drop(proxies);
    assert_no_leftovers(&*h, &name).await;
}

/// `list`, and the read-write and permit acquires where the backend offers
/// them, return within their own bound (their wait plus one request
/// timeout) when the servers stop answering after the connect.
pub(super) async fn list_and_other_primitives_honour_their_deadline_when_the_server_hangs(
    h: Arc<dyn Harness>,
) {
    let timeout_ = Duration::from_millis(800);
    // Scheduling on a busy machine (a TLS connect to five nodes there took
    // 1.25-1.28 s of its 0.8 s): the harness's slack.
    let allowance = h.slack();
    let (proxies, made) = client_through_proxies(&*h, timeout_).await;
    let c = made.expect("connect through healthy proxies");
    let caps = c.capabilities();
    let base = unique_name("deadline-more");
    let name = LockName::new(format!("{base}/x")).unwrap();
    let g = c
        .acquire(&name, &opts(&*h).ttl(h.ttl() * 20))
        .await
        .expect("acquire through healthy proxies");
    for p in &proxies {
        p.blackhole();
    }
    let wait = Duration::from_millis(200);
    let bound = wait + timeout_ + allowance;
    let within = |what: &'static str, t: Instant| {
        assert!(
            t.elapsed() <= bound,
            "{what} against a hung server took {:?}, bound {bound:?}",
            t.elapsed()
        );
    };
    let t = Instant::now();
    let r = timeout(bound * 4, c.list(&format!("{base}/"), 10))
        .await
        .expect("list against a hung server never returned");
    within("list", t);
    assert!(r.is_err(), "list answered {r:?} from a hung server");
    let other = LockName::new(format!("{base}/other")).unwrap();
    let o = opts(&*h).wait(wait);
    if caps.read_write {
        for write in [false, true] {
            let t = Instant::now();
            let r = if write {
                timeout(bound * 4, c.acquire_write(&other, &o)).await
            } else {
                timeout(bound * 4, c.acquire_read(&other, &o)).await
            }
            .expect("a read-write acquire against a hung server never returned");
            within(
                if write {
                    "acquire_write"
                } else {
                    "acquire_read"
                },
                t,
            );
            assert!(
                r.is_err(),
                "a read-write acquire succeeded on a hung server"
            );
        }
    }
    if caps.semaphore {
        let t = Instant::now();
        let r = timeout(bound * 4, c.acquire_permit(&other, 2, &o))
            .await
            .expect("acquire_permit against a hung server never returned");
        within("acquire_permit", t);
        assert!(r.is_err(), "acquire_permit succeeded on a hung server");
    }
    for p in &proxies {
        p.heal();
    }
    drop(g);
    drop(proxies);
}

/// A waiter that loses its link to the servers while it waits, and so
/// cannot leave the line when it gives up, holds nobody up for long after
/// its deadline: once the holder releases, the next caller gets the lock
/// within the waiter's deadline plus one TTL (what a session or lease of
/// the waiter's may last) and one request timeout, never after a long
/// re-check period. The waiter stays cut off, as a process that died.
pub(super) async fn a_waiter_cut_off_holds_nobody_up_long_after_its_deadline(h: Arc<dyn Harness>) {
    let caps = client(&*h).await.capabilities();
    let request_timeout = Duration::from_secs(1);
    let wait = Duration::from_millis(1500);
    for mode in offered_modes(&caps) {
        let name = unique_name("cutoff");
        let (holder, next) = (client(&*h).await, client(&*h).await);
        let held = acquire_as(&*holder, blocking_mode(mode), &name, &opts(&*h))
            .await
            .unwrap();
        let (proxies, made) = client_through_proxies(&*h, request_timeout).await;
        let waiter = made.expect("connect through healthy proxies");
        let deadline = Instant::now() + wait;
        let waiting = {
            let (w, name, o) = (waiter.clone(), name.clone(), opts(&*h).wait(wait));
            tokio::spawn(async move { acquire_as(&*w, mode, &name, &o).await.map(|_| ()) })
        };
        sleep(wait / 3).await;
        for p in &proxies {
            p.blackhole();
        }
        let outcome = timeout(wait + request_timeout * 4 + h.slack(), waiting)
            .await
            .unwrap_or_else(|_| panic!("{mode:?}: the cut-off waiter's call never returned"))
            .unwrap();
        outcome.expect_err("a waiter got a held lock");
        assert!(held.release().await.unwrap());
        let bound = h.ttl() + request_timeout + h.slack();
        let got = acquire_as(
            &*next,
            blocking_mode(mode),
            &name,
            &opts(&*h).wait(Duration::from_secs(60)),
        )
        .await
        .unwrap_or_else(|e| panic!("{mode:?}: the next caller never got the lock: {e}"));
        let late = Instant::now().saturating_duration_since(deadline);
        assert!(
            late <= bound,
            "{mode:?}: the next caller got the free lock only {late:?} after the cut-off \
             waiter's deadline (bound: TTL + request timeout + slack = {bound:?}): \
             the waiter's place outlived its call"
        );
        assert!(got.release().await.unwrap());
        drop(waiter);
        drop(proxies);
        // The cut-off waiter's place may outlive the next caller's turn on
        // a node that the lapse reached last (a release there reserves the
        // key for the place until it lapses): within the same bound.
        assert_no_leftovers_within(&*h, &name, bound).await;
    }
}

/// A hot standby (a wait without end that rides out errors) keeps trying
/// through an outage longer than the TTL (every connection of its client
/// reset or refused), during which the holder releases, and takes the lock
/// once its servers are reachable again: within the longest backoff, one
/// TTL (a session or lease to renew) and two request timeouts.
pub(super) async fn a_forever_waiter_rides_out_an_outage(h: Arc<dyn Harness>) {
    let name = unique_name("outage");
    let holder = client(&*h).await;
    let held = holder.acquire(&name, &opts(&*h)).await.unwrap();
    let request_timeout = Duration::from_secs(1);
    let (proxies, made) = client_through_proxies(&*h, request_timeout).await;
    let standby = made.expect("connect through healthy proxies");
    let waiting = {
        let (c, name) = (standby.clone(), name.clone());
        let o = opts(&*h).wait_forever().retry_errors(true);
        tokio::spawn(async move { c.acquire(&name, &o).await })
    };
    sleep(Duration::from_millis(300)).await;
    for p in &proxies {
        p.cut();
    }
    let outage = (h.ttl() * 3).max(Duration::from_secs(6));
    sleep(outage / 2).await;
    assert!(held.release().await.unwrap());
    sleep(outage / 2).await;
    assert!(
        !waiting.is_finished(),
        "the standby stopped waiting during the outage: {:?}",
        waiting.await
    );
    let healed = Instant::now();
    for p in &proxies {
        p.heal();
    }
    let bound = lock_core::ERROR_BACKOFF.max_delay + h.ttl() + request_timeout * 2 + h.slack();
    let got = timeout(bound * 2, waiting)
        .await
        .expect("the standby never took the free lock after the outage")
        .unwrap()
        .expect("the standby's acquire failed");
    let took = healed.elapsed();
    assert!(
        took <= bound,
        "the standby took the free lock {took:?} after the outage (bound {bound:?})"
    );
    assert!(got.is_held());
    assert!(got.release().await.unwrap());
    drop(proxies);
    assert_no_leftovers(&*h, &name).await;
}

/// A downgrade whose answer comes too late (its link slower each way than
/// three quarters of the request timeout: the server applies it, and the
/// call has given up before the answer arrives) never leaves the write
/// guard saying held while a reader holds the name. The write guard ends
/// when the downgrade is called, whatever its outcome; a reader that waited
/// gets in once the server has applied it (or the write lock is released).
pub(super) async fn an_unanswered_downgrade_never_leaves_the_write_guard_held_beside_a_reader(
    h: Arc<dyn Harness>,
) {
    let name = unique_name("lostdowngrade");
    let request_timeout = Duration::from_secs(1);
    let (proxies, made) = client_through_proxies(&*h, request_timeout).await;
    let writer = made.expect("connect through healthy proxies");
    let reader = client(&*h).await;
    // A TTL that outlasts the episode: the write guard must not end by
    // expiring, only by the downgrade.
    let long = opts(&*h).ttl(h.ttl().max(Duration::from_secs(10)));
    let held = writer.acquire_write(&name, &long).await.unwrap();
    let view = held.view();
    let waiting = {
        let (c, name, o, view) = (reader.clone(), name.clone(), opts(&*h), view.clone());
        tokio::spawn(async move {
            let got = c.acquire_read(&name, &o).await;
            // Sampled as soon as the read guard is ours: the write guard
            // must have stopped saying held before the server let us in.
            (got, view.state())
        })
    };
    // Time for the reader to queue behind the writer.
    sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "a reader got in beside the writer");
    for p in &proxies {
        p.set_latency(request_timeout * 3 / 4);
    }
    let downgraded = writer.downgrade(held).await;
    let returned = Instant::now();
    let (got, write_state) = timeout(Duration::from_secs(30) + h.slack(), waiting)
        .await
        .expect("the reader never got in after the downgrade")
        .unwrap();
    let read = got.expect("the reader never got in after the downgrade");
    assert!(
        write_state.valid_until().is_none(),
        "a reader holds while the write guard of the downgrade ({}) still says {write_state:?}",
        match &downgraded {
            Ok(_) => "answered".to_string(),
            Err(e) => format!("failed: {e}"),
        }
    );
    assert!(!view.is_held(), "the write guard still says held");
    for p in &proxies {
        p.heal();
    }
    assert!(read.release().await.unwrap());
    if let Ok(read) = downgraded {
        let _ = read.release().await;
    }
    // A failed downgrade's lease is released in the background, through the
    // slow link: within one request timeout of the call's return, landing
    // at most three quarters of one later.
    tokio::time::sleep_until(returned + request_timeout * 2).await;
    drop(writer);
    drop(proxies);
    assert_no_leftovers(&*h, &name).await;
}
