//! Proclaims whose outcome the client does not know, as
//! `faults_replies.rs` does for puts and deletes: on a 3-member cluster
//! with a proxy in front of its leader that delays the traffic of one
//! client. A proclaim whose reply is lost (the request applied) fails
//! with a retryable error and leaves the leader's value as it was known,
//! the next proclaim settles it, and a later leader's value is never
//! written over; a proclaim that reaches the server after its call gave up
//! (and after the term ended) never writes into the key of a later term,
//! not even our own key of the same name put again.

use std::time::Duration;

use lock_core::{CampaignOptions, LeaderElection, LockErrorKind};
use lock_etcd::EtcdConfig;
use tokio::time::{sleep, Instant};

mod support;
use support::{cluster_behind_a_proxy, connect, name};

/// The request timeout of `support::config`.
const REQUEST: Duration = Duration::from_secs(1);

const LEASE: Duration = Duration::from_secs(10);

/// Longer than the request timeout: a proclaim through the proxy is
/// applied (or answered) after its call gave up.
const LATENCY: Duration = Duration::from_millis(1500);

fn config(endpoints: Vec<String>) -> EtcdConfig {
    support::config(endpoints, LEASE)
}

fn opts() -> CampaignOptions {
    CampaignOptions::new()
        .ttl(LEASE)
        .wait(Duration::from_secs(20))
}

/// A proclaim applied at once whose reply comes after the request
/// timeout: a retryable error, the leadership's value still the one known
/// to be there; the next proclaim is written; once the leader resigns and
/// another leads, the late reply changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proclaim_whose_reply_is_lost_is_settled_by_the_next() {
    let (cluster, proxy, through) = cluster_behind_a_proxy().await;
    let a = connect(config(through)).await;
    let b = connect(config(cluster.endpoints())).await;
    let n = name("lost-proclaim-reply");
    let term = a.campaign(&n, "v1", &opts()).await.expect("a leads");
    proxy.set_reply_delay(LATENCY);
    let t = Instant::now();
    let lost = term.proclaim("v2").await;
    println!("proclaim answered {lost:?} after {:?}", t.elapsed());
    let err = lost.expect_err("a reply later than the request timeout was waited for");
    assert!(err.is_retryable(), "{err}");
    assert!(
        t.elapsed() <= REQUEST + Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(
        term.value(),
        "v1",
        "the leadership believes a value it was not told of"
    );
    let seen = b.leader(&n).await.unwrap().expect("a leader");
    assert_eq!(
        (seen.value.as_str(), seen.epoch),
        ("v2", term.epoch()),
        "applied"
    );

    term.proclaim("v3").await.expect("the next proclaim");
    assert_eq!(term.value(), "v3");
    let seen = b.leader(&n).await.unwrap().expect("a leader");
    assert_eq!((seen.value.as_str(), seen.epoch), ("v3", term.epoch()));

    assert!(term.resign().await.expect("resign"));
    let later = b.campaign(&n, "b", &opts()).await.expect("b leads");
    // Every delayed reply has come by now.
    sleep(LATENCY * 2 + Duration::from_millis(500)).await;
    let seen = b.leader(&n).await.unwrap().expect("a leader");
    assert_eq!((seen.value.as_str(), seen.epoch), ("b", later.epoch()));
    assert!(later.is_leader());
    proxy.heal();
    assert!(later.resign().await.expect("b resigns"));
}

/// A proclaim delayed past its call (it reaches the server after LATENCY),
/// then the term resigned and a new term of the same client and name
/// (the same key, put again): the late proclaim finds a later create
/// revision and writes nothing; the new term's value and its next
/// proclaim stand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_proclaim_never_writes_into_a_later_term() {
    let (cluster, proxy, through) = cluster_behind_a_proxy().await;
    let a = connect(config(through)).await;
    let b = connect(config(cluster.endpoints())).await;
    let n = name("late-proclaim");
    let first = a.campaign(&n, "t1", &opts()).await.expect("a leads");
    let first_epoch = first.epoch();
    proxy.set_latency(LATENCY);
    let t = Instant::now();
    let late = first.proclaim("stale").await;
    println!("proclaim answered {late:?} after {:?}", t.elapsed());
    let err = late.expect_err("the proclaim was answered through a delay longer than its bound");
    assert!(
        err.is_retryable() || err.kind() == LockErrorKind::Lost,
        "{err}"
    );
    assert!(first.resign().await.expect("resign the first term"));
    let second = a.campaign(&n, "t2", &opts()).await.expect("a leads again");
    println!("the second term began {:?} after the proclaim", t.elapsed());
    assert!(second.epoch() > first_epoch);
    // The delayed copy of the proclaim lands about LATENCY after it was sent.
    sleep(LATENCY * 2 + Duration::from_millis(500)).await;
    let seen = b.leader(&n).await.unwrap().expect("a leader");
    assert_eq!(
        (seen.value.as_str(), seen.epoch),
        ("t2", second.epoch()),
        "a late proclaim of the first term wrote into the second"
    );
    proxy.heal();
    second
        .proclaim("t2-next")
        .await
        .expect("proclaim in the second term");
    let seen = b.leader(&n).await.unwrap().expect("a leader");
    assert_eq!(seen.value, "t2-next");
    assert!(second.resign().await.expect("resign the second term"));
}
