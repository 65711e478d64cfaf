//! Leader election: one leader at a time with rising epochs, the published
//! value as followers see it, hand-over in campaign order, abandoned terms,
//! withdrawn candidates, the lock-delay, `with_leadership`, bad input.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use lock_core::backend::LeaderStream;
use lock_core::{
    CampaignOptions, LeaderElectionExt, LeaderInfo, LockErrorKind, LossCause, MAX_LEADER_VALUE_LEN,
    MAX_TTL,
};
use tokio::time::{sleep, timeout, Instant};

use super::helpers::{assert_no_leftovers, client, clients};
use crate::{unique_name, Harness};

/// The options the election cases start from: the harness's TTL and a
/// 30 s wait.
fn campaign_opts(h: &dyn Harness) -> CampaignOptions {
    CampaignOptions::new()
        .ttl(h.ttl())
        .wait(Duration::from_secs(30))
}

/// The next thing a follower is told, within the harness's slack.
async fn told(h: &dyn Harness, seen: &mut LeaderStream) -> Option<LeaderInfo> {
    timeout(h.slack(), seen.next())
        .await
        .expect("the follower was told nothing within the slack")
        .expect("the follower's stream ended")
        .expect("the follower's stream failed")
}

/// What a follower shows of a leader: its value and epoch.
fn shown(info: &Option<LeaderInfo>) -> Option<(String, Option<lock_core::FencingToken>)> {
    info.as_ref().map(|l| (l.value.clone(), l.epoch))
}

/// Candidates on four clients campaign, lead and resign in a loop: never
/// two leaders at once, and every term's epoch is above the one before.
pub(super) async fn one_leader_at_a_time_with_rising_epochs(h: Arc<dyn Harness>) {
    const ROUNDS: usize = 4;
    let name = unique_name("elect");
    let leading = Arc::new(AtomicUsize::new(0));
    let epochs = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, c) in clients(&*h, 4).await.into_iter().enumerate() {
        let (name, o) = (name.clone(), campaign_opts(&*h));
        let (leading, epochs) = (leading.clone(), epochs.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let term = c.campaign(&name, &format!("c{i}"), &o).await.unwrap();
                assert!(term.is_leader());
                assert_eq!(leading.fetch_add(1, Ordering::SeqCst), 0, "two leaders");
                epochs.lock().unwrap().push(term.epoch());
                sleep(Duration::from_millis(5)).await;
                assert!(term.is_leader());
                leading.fetch_sub(1, Ordering::SeqCst);
                assert!(term.resign().await.unwrap());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let epochs = epochs.lock().unwrap().clone();
    assert_eq!(epochs.len(), 4 * ROUNDS);
    if client(&*h).await.capabilities().fencing.has_tokens() {
        for pair in epochs.windows(2) {
            assert!(pair[0] < pair[1], "epochs out of order: {epochs:?}");
        }
    } else {
        assert!(epochs.iter().all(Option::is_none));
    }
    assert_no_leftovers(&*h, &name).await;
}

/// A follower is told who leads when it starts to follow, the leader's
/// value and epoch, each proclaimed value (same epoch), and that nobody
/// leads after the resignation; `leader` says the same.
pub(super) async fn followers_see_the_leader_and_its_values(h: Arc<dyn Harness>) {
    let name = unique_name("follow");
    let (a, f) = (client(&*h).await, client(&*h).await);
    assert_eq!(f.leader(&name).await.unwrap(), None);
    let mut seen = f.observe(&name).await.unwrap();
    assert_eq!(told(&*h, &mut seen).await, None, "nobody leads yet");

    let term = a
        .campaign(&name, "first", &campaign_opts(&*h))
        .await
        .unwrap();
    let first = Some(("first".to_string(), term.epoch()));
    assert_eq!(shown(&told(&*h, &mut seen).await), first);
    assert_eq!(shown(&f.leader(&name).await.unwrap()), first);

    term.proclaim("second").await.unwrap();
    assert_eq!(term.value(), "second");
    assert!(term.is_leader());
    let second = Some(("second".to_string(), term.epoch()));
    assert_eq!(shown(&told(&*h, &mut seen).await), second);
    assert_eq!(shown(&f.leader(&name).await.unwrap()), second);

    assert!(term.resign().await.unwrap());
    assert_eq!(told(&*h, &mut seen).await, None, "the leader resigned");
    assert_eq!(f.leader(&name).await.unwrap(), None);
    drop(seen);
    assert_no_leftovers(&*h, &name).await;
}

/// Each resignation hands leadership to the next candidate in the order
/// they began to campaign; a follower is told every term in that order
/// (with, between two terms, possibly a moment when nobody leads).
pub(super) async fn resignation_hands_over_in_campaign_order(h: Arc<dyn Harness>) {
    const CANDIDATES: usize = 4;
    let name = unique_name("handover");
    let f = client(&*h).await;
    let mut seen = f.observe(&name).await.unwrap();
    assert_eq!(told(&*h, &mut seen).await, None);
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..CANDIDATES {
        let c = client(&*h).await;
        let (name, o, order) = (name.clone(), campaign_opts(&*h), order.clone());
        tasks.push(tokio::spawn(async move {
            let term = c.campaign(&name, &format!("c{i}"), &o).await.unwrap();
            order.lock().unwrap().push(i);
            sleep(Duration::from_millis(20)).await;
            assert!(term.resign().await.unwrap());
        }));
        // Let each candidate take its place in line before the next starts.
        sleep(Duration::from_millis(300)).await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..CANDIDATES).collect::<Vec<_>>());
    let mut terms = Vec::new();
    while terms.len() < CANDIDATES {
        if let Some(leader) = told(&*h, &mut seen).await {
            if terms.last() != Some(&leader.value) {
                terms.push(leader.value);
            }
        }
    }
    let expected: Vec<String> = (0..CANDIDATES).map(|i| format!("c{i}")).collect();
    assert_eq!(terms, expected, "the follower saw the terms out of order");
    assert_eq!(told(&*h, &mut seen).await, None, "the last leader resigned");
}

/// A leader that stops renewing loses its term within its TTL (its
/// `Leadership` says lost) and a waiting candidate leads, with a higher
/// epoch; the old leader's late resignation leaves the new term alone.
pub(super) async fn an_abandoned_term_ends_within_its_ttl(h: Arc<dyn Harness>) {
    let name = unique_name("abandoned-term");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let old = a
        .campaign(&name, "old", &campaign_opts(&*h).keep_alive(false))
        .await
        .unwrap();
    let started = Instant::now();
    let new = b
        .campaign(&name, "new", &campaign_opts(&*h).wait(h.ttl() + h.slack()))
        .await
        .expect("the abandoned term did not end within ttl + slack");
    assert!(started.elapsed() <= h.ttl() + h.slack());
    assert!(!old.is_leader());
    let cause = timeout(h.slack(), old.lost())
        .await
        .expect("the old term never said it was lost");
    assert!(
        matches!(cause, LossCause::Expired | LossCause::NotOwner),
        "{cause:?}"
    );
    if let (Some(before), Some(after)) = (old.epoch(), new.epoch()) {
        assert!(after > before, "{after:?} is not above {before:?}");
    }
    assert!(!old.resign().await.unwrap_or(false));
    assert_eq!(
        shown(&b.leader(&name).await.unwrap()),
        Some(("new".to_string(), new.epoch()))
    );
    assert!(new.is_leader());
    assert!(new.resign().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// A candidate whose wait runs out, and one whose campaign is dropped,
/// leave nothing behind: when the leader resigns nobody leads, and the
/// next candidate leads at once.
pub(super) async fn withdrawn_candidates_leave_nothing(h: Arc<dyn Harness>) {
    let name = unique_name("withdrawn");
    let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let term = a.campaign(&name, "a", &campaign_opts(&*h)).await.unwrap();
    let err = b
        .campaign(
            &name,
            "b",
            &campaign_opts(&*h).wait(Duration::from_millis(200)),
        )
        .await
        .expect_err("b led beside a");
    assert_eq!(err.kind(), LockErrorKind::Timeout, "{err}");
    let dropped = timeout(
        Duration::from_millis(200),
        c.campaign(&name, "c", &campaign_opts(&*h)),
    )
    .await;
    assert!(dropped.is_err(), "c led beside a");
    assert!(term.resign().await.unwrap());
    let deadline = Instant::now() + h.slack();
    while b.leader(&name).await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "a withdrawn candidate leads");
        sleep(Duration::from_millis(20)).await;
    }
    assert_no_leftovers(&*h, &name).await;
    let started = Instant::now();
    let next = b
        .campaign(&name, "b", &campaign_opts(&*h).wait(h.slack()))
        .await
        .expect("a candidate waited for a withdrawn one");
    assert!(started.elapsed() <= h.slack());
    assert!(next.resign().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// After a term that ends without a resignation (its lease expired), no
/// new term starts until the lock-delay has passed; after a resignation,
/// the next term starts at once.
pub(super) async fn lock_delay_follows_only_an_unresigned_end(h: Arc<dyn Harness>) {
    let name = unique_name("lock-delay");
    let (a, b, c) = (client(&*h).await, client(&*h).await, client(&*h).await);
    let delay = h.ttl();
    let o = campaign_opts(&*h).lock_delay(delay);
    let asked = Instant::now();
    let abandoned = a.campaign(&name, "a", &o.clone().keep_alive(false)).await;
    let abandoned = abandoned.unwrap();
    let next = b.campaign(&name, "b", &o).await.unwrap();
    let took = asked.elapsed();
    // The server's lease began after `asked`, so it ended after
    // `asked + ttl`, and the delay runs from there.
    assert!(
        took >= h.ttl() + delay,
        "a new term began {took:?} after the abandoned one, before its ttl + lock-delay"
    );
    assert!(
        took <= h.ttl() + delay + h.slack(),
        "the next term took {took:?}"
    );
    drop(abandoned);
    let waiting = {
        let (c, name, o) = (c.clone(), name.clone(), o.clone());
        tokio::spawn(async move {
            let term = c.campaign(&name, "c", &o).await.unwrap();
            (Instant::now(), term)
        })
    };
    sleep(Duration::from_millis(300)).await;
    let resigned = Instant::now();
    assert!(next.resign().await.unwrap());
    let (led, term) = waiting.await.unwrap();
    assert!(
        led - resigned <= h.slack(),
        "a resignation held the next term back for {:?}",
        led - resigned
    );
    assert!(term.resign().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}

/// `with_leadership` runs the section as leader and resigns after; a
/// section whose term is lost is stopped with a `Lost` error.
pub(super) async fn with_leadership_runs_while_leading(h: Arc<dyn Harness>) {
    let name = unique_name("with-leadership");
    let (a, b) = (client(&*h).await, client(&*h).await);
    let (held, epoch) = a
        .with_leadership(&name, "a", &campaign_opts(&*h), |view| async move {
            (view.is_held(), view.fencing_token())
        })
        .await
        .unwrap();
    assert!(held);
    let next = b
        .campaign(&name, "b", &campaign_opts(&*h).wait(h.slack()))
        .await
        .expect("with_leadership did not resign");
    if let (Some(before), Some(after)) = (epoch, next.epoch()) {
        assert!(after > before);
    }
    assert!(next.resign().await.unwrap());
    let started = Instant::now();
    let err = a
        .with_leadership(&name, "a", &campaign_opts(&*h).keep_alive(false), |_| {
            std::future::pending::<()>()
        })
        .await
        .expect_err("a section outlived its term");
    assert_eq!(err.kind(), LockErrorKind::Lost, "{err}");
    assert!(started.elapsed() <= h.ttl() + h.slack());
    assert_no_leftovers(&*h, &name).await;
}

/// A value above the limit, a lock-delay above the longest TTL and a TTL
/// of zero are `InvalidArgument` errors, and leave nothing.
pub(super) async fn bad_campaigns_are_invalid_argument(h: Arc<dyn Harness>) {
    let name = unique_name("bad-campaign");
    let a = client(&*h).await;
    let long = "x".repeat(MAX_LEADER_VALUE_LEN + 1);
    let o = campaign_opts(&*h);
    for err in [
        a.campaign(&name, &long, &o).await.err(),
        a.campaign(&name, "v", &o.clone().lock_delay(MAX_TTL * 2))
            .await
            .err(),
        a.campaign(&name, "v", &o.clone().ttl(Duration::ZERO))
            .await
            .err(),
    ] {
        let err = err.expect("a bad campaign led");
        assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
    }
    let term = a.campaign(&name, "v", &o).await.unwrap();
    let err = term.proclaim(long).await.expect_err("a long proclaim");
    assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
    assert_eq!(term.value(), "v");
    assert!(term.resign().await.unwrap());
    assert_no_leftovers(&*h, &name).await;
}
