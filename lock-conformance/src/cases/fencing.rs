//! Fencing tokens: present or not as the backend says, and above every earlier
//! grant of the name in every kind of lock.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockName, LockService};
use tokio::time::{sleep, timeout, Instant};

use super::helpers::{assert_no_leftovers, client, opts, spawn_acquire_write};
use crate::{unique_name, Harness};

/// Fencing tokens strictly increase over successive holders, across clients,
/// including after a holder lost its lock by expiry.
pub(super) async fn fencing_tokens_strictly_increase(h: Arc<dyn Harness>) {
    let name = unique_name("fencing");
    let clients = [client(&*h).await, client(&*h).await, client(&*h).await];
    let mut last = None;
    for i in 0..9 {
        let g = clients[i % 3].acquire(&name, &opts(&*h)).await.unwrap();
        let token = g
            .fencing_token()
            .expect("a fencing backend returned no token");
        assert!(Some(token) > last, "token {token} after {last:?}");
        last = Some(token);
        assert!(g.release().await.unwrap());
    }
    let lapsed = clients[0]
        .acquire(&name, &opts(&*h).keep_alive(false))
        .await
        .unwrap();
    let lapsed_token = lapsed.fencing_token();
    timeout(h.ttl() + h.slack(), lapsed.lost())
        .await
        .expect("expiry not reported");
    let next = clients[1].acquire(&name, &opts(&*h)).await.unwrap();
    assert!(
        next.fencing_token() > lapsed_token,
        "{:?} after {lapsed_token:?}",
        next.fencing_token()
    );
    assert!(next.release().await.unwrap());
}

/// A backend without fencing says so with `None`, never a made-up number.
pub(super) async fn no_fencing_token_when_backend_has_none(h: Arc<dyn Harness>) {
    let name = unique_name("nofencing");
    let g = client(&*h).await.acquire(&name, &opts(&*h)).await.unwrap();
    assert_eq!(g.fencing_token(), None);
    assert!(g.release().await.unwrap());
}

/// A write guard's token is greater than the token of every read or write
/// guard granted before it on that name; every read guard has a token too.
pub(super) async fn write_tokens_follow_every_earlier_grant(h: Arc<dyn Harness>) {
    let name = unique_name("rwtoken");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(30));
    let mut highest = None;
    for _ in 0..3 {
        let r1 = a.acquire_read(&name, &o).await.unwrap();
        let r2 = b.acquire_read(&name, &o).await.unwrap();
        let (t1, t2) = (
            r1.fencing_token().expect("read token"),
            r2.fencing_token().expect("read token"),
        );
        assert_ne!(t1, t2, "two read guards share a token");
        highest = highest.max(Some(t1.max(t2)));
        assert!(r1.release().await.unwrap() && r2.release().await.unwrap());
        let w = a.acquire_write(&name, &o).await.unwrap();
        let tw = w.fencing_token().expect("write token");
        assert!(
            Some(tw) > highest,
            "write token {tw} not above an earlier grant {highest:?}"
        );
        highest = Some(tw);
        assert!(w.release().await.unwrap());
    }
}

/// Every grant seen so far of one lock, in the order the test observed
/// them: each new one must have a token above all of them.
#[derive(Default)]
struct Grants(Vec<(&'static str, lock_core::FencingToken)>);

impl Grants {
    /// Records the grant `what` of `g`, checking that its token is above
    /// the token of every grant recorded before it.
    fn after_all(&mut self, what: &'static str, g: &lock_core::LockGuard) {
        let t = g
            .fencing_token()
            .unwrap_or_else(|| panic!("{what}: no fencing token"));
        if let Some((earlier, te)) = self.0.iter().find(|(_, te)| *te >= t) {
            panic!(
                "{what} got token {t}, not above the earlier grant {earlier} (token {te}); \
                 every grant so far: {:?}",
                self.0
            );
        }
        self.0.push((what, t));
    }
}

/// Waits until a writer is queued on `name`: a new reader is refused
/// (writer preference) while `held` readers hold. A reader that still gets
/// in is recorded in `grants` and released. Fails after `h.slack()`.
async fn until_a_writer_waits(
    h: &dyn Harness,
    c: &dyn LockService,
    name: &LockName,
    grants: &mut Grants,
) {
    let deadline = Instant::now() + h.slack();
    loop {
        match c.try_acquire_read(name, &opts(h)).await.unwrap() {
            None => return,
            Some(r) => {
                grants.after_all("a reader before the writer queued", &r);
                assert!(r.release().await.unwrap());
            }
        }
        assert!(
            Instant::now() < deadline,
            "the writer did not queue within {:?}",
            h.slack()
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// Issue 31 item 5: a reader that queued behind a waiting writer is granted
/// after the writer, with a token above the writer's (and above the first
/// reader's): R0 holds, W queues, R1 queues behind W; R0 leaves, W is
/// granted; W leaves, R1 is granted.
pub(super) async fn a_reader_queued_behind_a_writer_gets_a_newer_token(h: Arc<dyn Harness>) {
    let name = unique_name("rtokenq");
    let (a, b, c, d) = (
        client(&*h).await,
        client(&*h).await,
        client(&*h).await,
        client(&*h).await,
    );
    let o = opts(&*h).wait(Duration::from_secs(30));
    let mut grants = Grants::default();
    let r0 = a.acquire_read(&name, &o).await.unwrap();
    grants.after_all("R0", &r0);
    let writer = spawn_acquire_write(&b, &name, &o);
    until_a_writer_waits(&*h, &*d, &name, &mut grants).await;
    let reader = {
        let (c, name, o) = (c.clone(), name.clone(), o.clone());
        tokio::spawn(async move { c.acquire_read(&name, &o).await })
    };
    // Time for R1 to queue behind W (were it slower, it would queue behind
    // W while W holds: the same order).
    sleep(Duration::from_millis(300)).await;
    assert!(
        !reader.is_finished(),
        "R1 got in beside R0 past a waiting W"
    );
    assert!(r0.release().await.unwrap());
    let (_, w) = writer.await.unwrap().expect("W after R0 left");
    grants.after_all("W", &w);
    sleep(Duration::from_millis(200)).await;
    assert!(!reader.is_finished(), "R1 got in beside W");
    assert!(w.release().await.unwrap());
    let r1 = reader.await.unwrap().expect("R1 after W left");
    grants.after_all("R1 (queued behind W)", &r1);
    assert!(r1.release().await.unwrap());
    let w2 = b.acquire_write(&name, &o).await.unwrap();
    grants.after_all("a writer after everything", &w2);
    assert!(w2.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// Issue 31 item 9: W1 holds, W2 queues, W1 downgrades to a read guard, the
/// reader leaves, W2 is granted: every grant (the downgrade's read guard
/// included) has a token above every earlier one.
pub(super) async fn a_writer_queued_behind_a_downgrade_gets_a_newer_token(h: Arc<dyn Harness>) {
    let name = unique_name("wtokendg");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(30));
    let mut grants = Grants::default();
    let w1 = a.acquire_write(&name, &o).await.unwrap();
    grants.after_all("W1", &w1);
    let writer = spawn_acquire_write(&b, &name, &o);
    // Time for W2 to queue behind W1 (were it slower, it would queue behind
    // the downgraded reader: the same order).
    sleep(Duration::from_millis(300)).await;
    assert!(!writer.is_finished(), "W2 got in beside W1");
    let r = a.downgrade(w1).await.expect("downgrade");
    grants.after_all("W1 downgraded to a read guard", &r);
    sleep(Duration::from_millis(200)).await;
    assert!(
        !writer.is_finished(),
        "W2 got in beside the downgraded reader"
    );
    assert!(r.release().await.unwrap());
    let (_, w2) = writer.await.unwrap().expect("W2 after the reader left");
    grants.after_all("W2 (queued behind W1)", &w2);
    // And once more, with a downgrade whose read guard leaves after a new
    // reader came in beside it.
    let r2 = b.downgrade(w2).await.expect("second downgrade");
    grants.after_all("W2 downgraded", &r2);
    let r3 = a
        .try_acquire_read(&name, &o)
        .await
        .unwrap()
        .expect("a reader beside a downgraded guard");
    grants.after_all("a reader beside W2's read guard", &r3);
    assert!(r2.release().await.unwrap());
    assert!(r3.release().await.unwrap());
    let w3 = a.acquire_write(&name, &o).await.unwrap();
    grants.after_all("W3", &w3);
    assert!(w3.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// Readers queued behind a writer are let in together when it leaves: each
/// has its own token, above the writer's; a writer after them is above
/// both, and so is a reader after that writer.
pub(super) async fn readers_let_in_together_get_distinct_newer_tokens(h: Arc<dyn Harness>) {
    let name = unique_name("rtokens");
    let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(30));
    let mut grants = Grants::default();
    let w = a.acquire_write(&name, &o).await.unwrap();
    grants.after_all("W", &w);
    let spawn_read = |client: &Arc<dyn LockService>| {
        let (client, name, o) = (client.clone(), name.clone(), o.clone());
        tokio::spawn(async move { client.acquire_read(&name, &o).await })
    };
    let (r1, r2) = (spawn_read(&b), spawn_read(&c));
    sleep(Duration::from_millis(300)).await;
    assert!(
        !r1.is_finished() && !r2.is_finished(),
        "a reader got in beside the writer"
    );
    assert!(w.release().await.unwrap());
    let g1 = r1.await.unwrap().expect("first reader");
    let g2 = r2.await.unwrap().expect("second reader");
    // Let in together: neither is earlier than the other, but both follow W
    // and their tokens differ.
    let mut together = Grants(grants.0.clone());
    grants.after_all("R1", &g1);
    together.after_all("R2", &g2);
    assert_ne!(
        g1.fencing_token(),
        g2.fencing_token(),
        "two readers let in together share a token"
    );
    grants.0.extend(together.0.last().copied());
    assert!(g1.release().await.unwrap() && g2.release().await.unwrap());
    let w2 = a.acquire_write(&name, &o).await.unwrap();
    grants.after_all("W2 after the readers", &w2);
    let r3 = spawn_read(&b);
    sleep(Duration::from_millis(300)).await;
    assert!(w2.release().await.unwrap());
    let g3 = r3.await.unwrap().expect("a reader after W2");
    grants.after_all("R3 (queued behind W2)", &g3);
    assert!(g3.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// A semaphore's permits carry tokens in grant order: with one permit
/// held and two waiters queued, each grant's token is above every earlier
/// grant's, whichever waiter is let in first.
pub(super) async fn queued_permits_get_tokens_in_grant_order(h: Arc<dyn Harness>) {
    let name = unique_name("ptokens");
    let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let o = opts(&*h).wait(Duration::from_secs(30));
    let mut grants = Grants::default();
    let p0 = a.acquire_permit(&name, 1, &o).await.unwrap();
    grants.after_all("P0", &p0);
    let spawn_permit = |client: &Arc<dyn LockService>| {
        let (client, name, o) = (client.clone(), name.clone(), o.clone());
        tokio::spawn(async move { client.acquire_permit(&name, 1, &o).await })
    };
    let p1 = spawn_permit(&b);
    sleep(Duration::from_millis(300)).await;
    let p2 = spawn_permit(&c);
    sleep(Duration::from_millis(300)).await;
    assert!(!p1.is_finished() && !p2.is_finished(), "two permits of one");
    assert!(p0.release().await.unwrap());
    // Whichever waiter is let in first (not every backend's semaphore is
    // FIFO), then the other.
    let (first, _, rest) = futures::future::select_all([p1, p2]).await;
    let g1 = first.unwrap().expect("a waiter after P0 left");
    grants.after_all("the first waiter let in", &g1);
    sleep(Duration::from_millis(200)).await;
    assert!(!rest[0].is_finished(), "two permits of one");
    assert!(g1.release().await.unwrap());
    let rest = rest.into_iter().next().expect("the other waiter");
    let g2 = rest.await.unwrap().expect("the other waiter");
    grants.after_all("the second waiter let in", &g2);
    assert!(g2.release().await.unwrap());
    let g3 = a.acquire_permit(&name, 1, &o).await.unwrap();
    grants.after_all("P3 after everything", &g3);
    assert!(g3.release().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}
