//! Followers of a Redis election, beyond the conformance cases: an expiry
//! nobody announces, renewals that must not look like changes, copies of
//! announcements that arrive late, a follower whose connection is cut
//! while the leader changes, and the layout other clients read.

use std::time::{Duration, SystemTime};

use futures::StreamExt;
use lock_core::backend::LeaderStream;
use lock_core::{
    AcquireOptions, CampaignOptions, DistributedLock, LeaderElection, LeaderInfo, LockName,
};
use lock_testbed::RedisOptions;
use tokio::time::{sleep, timeout};

mod support;
use support::{client, cmd, name, server_behind_proxy, start_server, SLACK};

fn campaign(ttl: Duration) -> CampaignOptions {
    CampaignOptions::new()
        .ttl(ttl)
        .wait(Duration::from_secs(10))
}

/// The next thing the follower is told, within `within`.
async fn told(seen: &mut LeaderStream, within: Duration) -> Option<LeaderInfo> {
    timeout(within, seen.next())
        .await
        .expect("the follower was told nothing")
        .expect("the follower's stream ended")
        .expect("the follower's stream failed")
}

/// Whether the follower is told anything within `within`.
async fn quiet(seen: &mut LeaderStream, within: Duration) -> bool {
    timeout(within, seen.next()).await.is_err()
}

fn value(info: &Option<LeaderInfo>) -> Option<&str> {
    info.as_ref().map(|l| l.value.as_str())
}

/// A renewed term is never reported again: its renewals (announced, and
/// re-arming the followers' timers) are not changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_are_not_reported_as_changes() {
    let server = start_server(RedisOptions::default()).await;
    let (a, f) = (client(&server.url()).await, client(&server.url()).await);
    let ttl = Duration::from_secs(1);

    let n = name("elect-renewed");
    let mut seen = f.observe(&n).await.unwrap();
    assert_eq!(told(&mut seen, SLACK).await, None);
    let term = a.campaign(&n, "kept", &campaign(ttl)).await.unwrap();
    assert_eq!(value(&told(&mut seen, SLACK).await), Some("kept"));
    assert!(
        quiet(&mut seen, ttl * 3).await,
        "a renewed term was reported again"
    );
    assert!(term.resign().await.unwrap());
    assert_eq!(told(&mut seen, SLACK).await, None);
}

/// An expiry with nobody to announce it (the leader's client is gone):
/// only the follower's timer can tell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_nobody_announces_is_seen_at_the_ttl() {
    let (_server, proxy, behind, direct) = server_behind_proxy().await;
    let n = name("elect-silent-expiry");
    let ttl = Duration::from_secs(1);
    let mut seen = direct.observe(&n).await.unwrap();
    assert_eq!(told(&mut seen, SLACK).await, None);
    let term = behind
        .campaign(&n, "silent", &campaign(ttl).keep_alive(false))
        .await
        .unwrap();
    assert_eq!(value(&told(&mut seen, SLACK).await), Some("silent"));
    // The leader's client can no longer reach the server: nobody releases.
    proxy.cut();
    let started = tokio::time::Instant::now();
    assert_eq!(told(&mut seen, ttl + SLACK).await, None);
    assert!(started.elapsed() <= ttl + SLACK);
    drop(term);
    proxy.heal();
}

/// Every announcement reaches the follower twice, the copy late: the
/// copies are dropped (their versions are not above what it saw), so it
/// is told each change once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_copies_of_announcements_are_dropped() {
    let (_server, proxy, behind, direct) = server_behind_proxy().await;
    let n = name("elect-replayed");
    let mut seen = behind.observe(&n).await.unwrap();
    assert_eq!(told(&mut seen, SLACK).await, None);
    proxy.replay_messages(Duration::from_millis(300));
    let term = direct
        .campaign(&n, "one", &campaign(Duration::from_secs(10)))
        .await
        .unwrap();
    term.proclaim("two").await.unwrap();
    term.proclaim("three").await.unwrap();
    for expected in ["one", "two", "three"] {
        assert_eq!(value(&told(&mut seen, SLACK).await), Some(expected));
    }
    assert!(
        quiet(&mut seen, Duration::from_millis(800)).await,
        "a late copy was reported"
    );
    assert!(term.resign().await.unwrap());
    assert_eq!(told(&mut seen, SLACK).await, None);
    proxy.heal();
}

/// A follower whose connections are cut while the leader proclaims is
/// told the current value once its subscription is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_cut_off_is_told_the_current_state_when_back() {
    let (_server, proxy, behind, direct) = server_behind_proxy().await;
    let n = name("elect-cut-follower");
    let term = direct
        .campaign(&n, "before", &campaign(Duration::from_secs(10)))
        .await
        .unwrap();
    let mut seen = behind.observe(&n).await.unwrap();
    assert_eq!(value(&told(&mut seen, SLACK).await), Some("before"));
    proxy.cut();
    sleep(Duration::from_millis(100)).await;
    term.proclaim("during").await.unwrap();
    sleep(Duration::from_millis(200)).await;
    proxy.heal();
    // The notifier's reconnection backs off up to 2 s.
    let now = told(&mut seen, Duration::from_secs(3) + SLACK).await;
    assert_eq!(value(&now), Some("during"));
    assert_eq!(now.unwrap().epoch, term.epoch());
    assert!(term.resign().await.unwrap());
    assert_eq!(told(&mut seen, SLACK).await, None);
}

/// What another client reads: `{N} leader` holds the owner token, `{N}
/// leader info` the token, the epoch (a token of the name's counter,
/// above the mutex's tokens before it), the start and the value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layout_other_clients_read() {
    let server = start_server(RedisOptions::default()).await;
    let c = client(&server.url()).await;
    let n: LockName = name("elect-layout");
    let g = c
        .acquire(&n, &AcquireOptions::new().ttl(Duration::from_secs(5)))
        .await
        .unwrap();
    let mutex_token = g.fencing_token().unwrap();
    assert!(g.release().await.unwrap());
    let term = c
        .campaign(&n, "host:1 with spaces", &campaign(Duration::from_secs(5)))
        .await
        .unwrap();
    let epoch = term.epoch().unwrap();
    assert!(epoch > mutex_token);
    let keys = c.leader_keys(&n).unwrap();
    let owner = match cmd(&server, &["GET", keys.leader()]).await {
        lock_testbed::RespValue::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
        other => panic!("GET {}: {other:?}", keys.leader()),
    };
    let info = match cmd(&server, &["GET", keys.info()]).await {
        lock_testbed::RespValue::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
        other => panic!("GET {}: {other:?}", keys.info()),
    };
    let rest = info
        .strip_prefix(&format!("{owner} "))
        .expect("the info begins with the owner token");
    let mut parts = rest.splitn(3, ' ');
    assert_eq!(parts.next(), Some(epoch.get().to_string().as_str()));
    let since: u64 = parts.next().unwrap().parse().unwrap();
    assert_eq!(parts.next(), Some("host:1 with spaces"));
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(now.abs_diff(since) < 5_000, "since {since}, now {now}");
    let leader = c.leader(&n).await.unwrap().unwrap();
    assert_eq!(
        leader.since,
        Some(SystemTime::UNIX_EPOCH + Duration::from_millis(since))
    );
    assert!(term.resign().await.unwrap());
    for key in [keys.leader(), keys.info(), keys.delay()] {
        assert_eq!(
            cmd(&server, &["EXISTS", key]).await,
            lock_testbed::RespValue::Int(0)
        );
    }
}
