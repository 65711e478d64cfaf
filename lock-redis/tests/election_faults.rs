//! Faults in leader elections on a real redis-server, each test with its
//! own server and a proxy: a proclaim whose reply is lost (applied), one
//! that reaches the server late (after a later term began) and one resent
//! after a timeout never write into a later term; a resignation whose reply
//! is lost has ended the term all the same (the next candidate leads at
//! once, long before the TTL).

use std::time::Duration;

use lock_core::{CampaignOptions, LeaderElection, LockErrorKind};
use lock_redis::RedisLock;
use lock_testbed::{Proxy, RedisServer};
use tokio::time::{sleep, Instant};

mod support;
use support::{name, server_behind_proxy, SLACK};

/// A server, a proxy in front of it, a client behind the proxy and one
/// straight to the server.
async fn setup() -> (RedisServer, Proxy, RedisLock, RedisLock) {
    let (server, proxy, behind, direct) = server_behind_proxy().await;
    // Every election script once, so that the server knows them: a first
    // EVALSHA is answered NOSCRIPT, and one whose reply is held back would
    // never run (the EVAL that follows comes after the timeout).
    let warm = name("elect-warm-up");
    let term = behind
        .campaign(&warm, "w", &campaign(Duration::from_secs(5)))
        .await
        .unwrap();
    term.proclaim("w2").await.unwrap();
    assert!(direct.leader(&warm).await.unwrap().is_some());
    assert!(term.resign().await.unwrap());
    (server, proxy, behind, direct)
}

fn campaign(ttl: Duration) -> CampaignOptions {
    CampaignOptions::new()
        .ttl(ttl)
        .wait(Duration::from_secs(10))
}

/// The value and epoch the server shows for the election `n`.
async fn shown(
    direct: &RedisLock,
    n: &lock_core::LockName,
) -> Option<(String, Option<lock_core::FencingToken>)> {
    direct.leader(n).await.unwrap().map(|l| (l.value, l.epoch))
}

/// A proclaim whose reply is lost was applied (the leader's value on the
/// server is the new one, same epoch) although the caller got a timeout;
/// once a later term runs, the same proclaim resent after a timeout
/// writes nothing (its owner token is not the later term's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proclaim_whose_reply_is_lost_never_writes_into_a_later_term() {
    let (_server, proxy, behind, direct) = setup().await;
    let n = name("elect-proclaim-lost");
    let ttl = Duration::from_secs(1);
    let old = behind
        .campaign(&n, "a", &campaign(ttl).keep_alive(false))
        .await
        .unwrap();
    proxy.set_reply_delay(Duration::from_secs(3));
    let err = old
        .proclaim("applied")
        .await
        .expect_err("a proclaim answered through a 3 s reply delay");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    assert_eq!(
        old.value(),
        "a",
        "a failed proclaim changed the term's value"
    );
    assert_eq!(
        shown(&direct, &n).await,
        Some(("applied".to_string(), old.epoch())),
        "the proclaim never reached the server: the test proves nothing"
    );
    // The old term is abandoned (no keep-alive); a later one begins.
    let new = direct
        .campaign(&n, "new", &campaign(ttl))
        .await
        .expect("no later term");
    assert!(new.epoch() > old.epoch());
    // The proclaim resent after its timeout reaches the server at once
    // (only its reply is held back), inside the later term.
    let err = old
        .proclaim("resent")
        .await
        .expect_err("a proclaim answered through a 3 s reply delay");
    assert!(err.is_retryable(), "{err}");
    assert_eq!(
        shown(&direct, &n).await,
        Some(("new".to_string(), new.epoch())),
        "a resent proclaim wrote into a later term"
    );
    assert!(new.resign().await.unwrap());
    proxy.heal();
}

/// A proclaim sent during its term but held up on the way (latency) until
/// a later term began is refused by the server when it arrives: the later
/// term's value stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_proclaim_never_writes_into_a_later_term() {
    let (_server, proxy, behind, direct) = setup().await;
    let n = name("elect-proclaim-late");
    let ttl = Duration::from_secs(1);
    let old = behind
        .campaign(&n, "a", &campaign(ttl).keep_alive(false))
        .await
        .unwrap();
    let began = Instant::now();
    // Requests reach the server 1.6 s after they are sent: after the old
    // term's end (1 s) and the later term's start.
    proxy.set_latency(Duration::from_millis(1600));
    let err = old
        .proclaim("late")
        .await
        .expect_err("a proclaim answered through 1.6 s of latency");
    assert_eq!(err.kind(), LockErrorKind::Unavailable, "{err}");
    let new = direct
        .campaign(&n, "new", &campaign(ttl))
        .await
        .expect("no later term");
    assert!(
        began.elapsed() < Duration::from_millis(1500),
        "the later term began only {:?} after the old one: the late proclaim may have come first",
        began.elapsed()
    );
    // Well after the late proclaim reached the server.
    sleep(Duration::from_millis(2000).saturating_sub(began.elapsed())).await;
    assert_eq!(
        shown(&direct, &n).await,
        Some(("new".to_string(), new.epoch())),
        "a late proclaim wrote into a later term"
    );
    assert!(new.resign().await.unwrap());
    proxy.heal();
}

/// A resignation whose reply is lost (the server applied it) leaves no
/// term behind: the candidate waiting in line leads at once, and with
/// nobody waiting nobody leads; not after the TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resignation_whose_reply_is_lost_leaves_no_term_behind() {
    let (_server, proxy, behind, direct) = setup().await;
    let ttl = Duration::from_secs(30);

    // Nobody waiting: the election is empty after the lost reply.
    let n = name("elect-resign-lost");
    let term = behind.campaign(&n, "a", &campaign(ttl)).await.unwrap();
    proxy.drop_replies();
    let resigned = Instant::now();
    let outcome = term.resign().await;
    assert!(outcome.is_err(), "a resignation answered: {outcome:?}");
    assert_eq!(
        shown(&direct, &n).await,
        None,
        "the term outlived its resignation"
    );
    proxy.heal();

    // A candidate waiting in line is handed the term by the lost resignation.
    let n = name("elect-resign-lost-handover");
    let term = behind.campaign(&n, "a", &campaign(ttl)).await.unwrap();
    let waiting = {
        let (direct, n) = (direct.clone(), n.clone());
        tokio::spawn(async move { direct.campaign(&n, "b", &campaign(ttl)).await })
    };
    sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "b led beside a");
    proxy.drop_replies();
    let resigned_again = Instant::now();
    assert!(term.resign().await.is_err());
    let next = tokio::time::timeout(SLACK, waiting)
        .await
        .expect("the next candidate did not lead after a resignation whose reply was lost")
        .unwrap()
        .unwrap();
    assert!(resigned_again.elapsed() < ttl / 10);
    assert_eq!(
        shown(&direct, &n).await,
        Some(("b".to_string(), next.epoch()))
    );
    assert!(next.resign().await.unwrap());
    assert!(resigned.elapsed() < ttl);
    proxy.heal();
}
