//! The line of waiters on real redis-servers, each test with its own
//! server: a release hands the lock to a waiter at once, and a release that
//! publishes nothing (a plain `DEL`) at the holder's TTL at the latest; a
//! late or forged hand-over announcement grants nothing, also after the
//! fencing counter went back; a lock handed to a vanished waiter goes on
//! after that waiter's TTL.

use std::time::Duration;

use lock_core::{DistributedLock, LockName, LossCause};
use lock_redis::RedisLock;
use lock_testbed::{RedisOptions, RedisServer, RespValue};
use tokio::time::{sleep, timeout, Instant};

mod support;
use support::{client, cmd, config, counter, name, opts, start_server, SLACK};

/// A release wakes a waiting client at once: the hand-off takes a few ms,
/// nowhere near the holder's 10 s TTL. Several rounds between two clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_hands_off_to_waiter_at_once() {
    let server = start_server(RedisOptions::default()).await;
    let url = server.url();
    let (a, b) = (client(&url).await, client(&url).await);
    let lock = name("handoff");
    let ttl = Duration::from_secs(10);
    let mut handoffs = Vec::new();
    let mut holder = a.acquire(&lock, &opts(ttl)).await.unwrap();
    for round in 0..6 {
        let next_client = if round % 2 == 0 { b.clone() } else { a.clone() };
        let waiter = {
            let lock = lock.clone();
            tokio::spawn(async move {
                let g = next_client.acquire(&lock, &opts(ttl)).await;
                (Instant::now(), g)
            })
        };
        sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "acquired a held lock");
        let released_at = Instant::now();
        assert!(holder.release().await.unwrap());
        let (got_at, g) = timeout(Duration::from_secs(2), waiter)
            .await
            .expect("waiter not woken")
            .unwrap();
        holder = g.expect("waiter acquire");
        handoffs.push(got_at - released_at);
    }
    assert!(holder.release().await.unwrap());
    handoffs.sort();
    println!("hand-off after release: {handoffs:?}");
    let worst = *handoffs.last().unwrap();
    assert!(
        worst < Duration::from_millis(250),
        "hand-off took {worst:?}: not woken by the release notification"
    );
}

/// A release that publishes nothing (a plain DEL, as an operator or a foreign
/// client would do) is still noticed by a waiter: at the latest when the
/// holder's TTL (seen by the waiter's last attempt) runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_gets_lock_at_holder_ttl_without_notification() {
    let server = start_server(RedisOptions::default()).await;
    let url = server.url();
    let (a, b) = (client(&url).await, client(&url).await);
    let lock = name("missed");
    let ttl = Duration::from_secs(2);
    let held = a.acquire(&lock, &opts(ttl)).await.unwrap();
    let waiter = {
        let (b, lock) = (b.clone(), lock.clone());
        tokio::spawn(async move {
            let g = b.acquire(&lock, &opts(ttl)).await;
            (Instant::now(), g)
        })
    };
    sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished());
    let deleted_at = Instant::now();
    assert_eq!(
        cmd(&server, &["DEL", lock.as_str()]).await,
        RespValue::Int(1)
    );
    let (got_at, g) = timeout(ttl + SLACK, waiter)
        .await
        .expect("waiter never noticed the deletion")
        .unwrap();
    let g = g.expect("waiter acquire");
    println!(
        "waiter got the lock {:?} after a DEL that published nothing",
        got_at - deleted_at
    );
    assert!(got_at - deleted_at <= ttl + SLACK);
    // The old holder learns it at its next renewal.
    assert_eq!(
        timeout(ttl, held.lost())
            .await
            .expect("old holder not told"),
        LossCause::NotOwner
    );
    assert!(g.release().await.unwrap());
}

/// The owner token of the first waiter in `name`'s queue, once one is there.
async fn first_waiter(server: &RedisServer, name: &LockName) -> String {
    let queue = lock_redis::kit::layout::Keys::new("", name.as_str())
        .queue()
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let RespValue::Array(Some(items)) = cmd(server, &["ZRANGE", &queue, "0", "0"]).await {
            if let Some(member) = items.first().and_then(|m| m.as_str()) {
                return member.split(' ').next().unwrap_or_default().to_string();
            }
        }
        assert!(Instant::now() < deadline, "no waiter queued on {name}");
        sleep(Duration::from_millis(10)).await;
    }
}

/// A hand-over announcement for a waiter that arrives after the waiter's
/// last attempt found the lock held (a late message from an earlier
/// hand-over, or a forged one) grants nothing: the waiter keeps waiting
/// while the holder holds, and gets the lock with a newer token when the
/// holder really releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_hand_over_announcement_grants_nothing() {
    let server = start_server(RedisOptions::default()).await;
    let (holder, other) = (client(&server.url()).await, client(&server.url()).await);
    let name = name("late-grant");
    let held = holder
        .acquire(&name, &opts(Duration::from_secs(10)))
        .await
        .unwrap();
    let waiting = {
        let (other, name) = (other.clone(), name.clone());
        tokio::spawn(async move { other.acquire(&name, &opts(Duration::from_secs(10))).await })
    };
    let waiter = first_waiter(&server, &name).await;
    // Let the waiter subscribe and make its attempt after the subscription.
    sleep(Duration::from_millis(300)).await;
    let last = counter(&server, &name).await.expect("a counter");
    let channel = lock_redis::kit::layout::Keys::new("", name.as_str())
        .released()
        .to_owned();
    let stale = format!("g {waiter} {last} 10000");
    assert_eq!(
        cmd(&server, &["PUBLISH", &channel, &stale]).await,
        RespValue::Int(1),
        "the waiter's client listens on the channel"
    );
    sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "a stale announcement let the waiter in while the holder holds"
    );
    assert!(held.release().await.unwrap());
    let got = timeout(SLACK, waiting)
        .await
        .expect("the release hands the lock over at once")
        .unwrap()
        .expect("the waiter gets the lock");
    assert!(got.fencing_token().unwrap().get() > last as u64);
    assert!(got.release().await.unwrap());
}

/// A waiter that vanished after taking its place (no clean-up: a crashed
/// process) is handed the lock at the next release; the lock expires with
/// that waiter's TTL and the next live waiter gets it then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_handed_to_a_vanished_waiter_goes_on_after_its_ttl() {
    let server = start_server(RedisOptions::default()).await;
    let (holder, other) = (client(&server.url()).await, client(&server.url()).await);
    let name = name("vanished");
    let keys = lock_redis::kit::layout::Keys::new("", name.as_str());
    let held = holder
        .acquire(&name, &opts(Duration::from_secs(10)))
        .await
        .unwrap();
    // A crashed waiter's place: first in line, asking for 500 ms.
    let ghost = format!("{:032x} 500", 7u128);
    assert_eq!(
        cmd(&server, &["ZADD", keys.queue(), "1", &ghost]).await,
        RespValue::Int(1)
    );
    assert_eq!(
        cmd(&server, &["ZADD", keys.lapse(), "99999999999999", &ghost]).await,
        RespValue::Int(1)
    );
    let waiting = {
        let (other, name) = (other.clone(), name.clone());
        tokio::spawn(async move {
            let got = other.acquire(&name, &opts(Duration::from_secs(10))).await;
            (Instant::now(), got)
        })
    };
    sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    assert!(held.release().await.unwrap());
    let (at, got) = timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the live waiter got the lock")
        .unwrap();
    let got = got.expect("acquire");
    let after = at - released;
    assert!(
        after >= Duration::from_millis(400) && after < Duration::from_millis(500) + SLACK,
        "the live waiter got the lock {after:?} after the release (the ghost's TTL is 500 ms)"
    );
    assert!(got.release().await.unwrap());
}

/// The late-grant check holds when the counter goes back: here the fencing
/// counter is deleted (a `DEL`, an eviction, a restart that lost it) while
/// a waiter waits, so the waiter's next attempt finds no counter at all.
/// A hand-over announcement for that waiter with a token issued before
/// that attempt (the holder's own, a late or replayed message) must still
/// grant nothing: the attempt's "last token" is `max(counter, the server's
/// clock in µs)`, as the tokens are, not the bare counter, which would
/// read 0 and let any announcement through. The waiter gets the lock, with
/// a newer token, at the holder's real release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_hand_over_grants_nothing_after_the_counter_went_back() {
    let server = start_server(RedisOptions::default()).await;
    let holder = client(&server.url()).await;
    // The waiter re-checks every 100 ms: its attempts after the `DEL` come
    // by themselves.
    let recheck = Duration::from_millis(100);
    let other = RedisLock::connect(config(&server.url()).max_recheck(recheck))
        .await
        .unwrap();
    let name = name("counter-back");
    let keys = lock_redis::kit::layout::Keys::new("", name.as_str());
    let held = holder
        .acquire(&name, &opts(Duration::from_secs(10)))
        .await
        .unwrap();
    let issued = held.fencing_token().unwrap().get();
    let waiting = {
        let (other, name) = (other.clone(), name.clone());
        tokio::spawn(async move { other.acquire(&name, &opts(Duration::from_secs(10))).await })
    };
    let waiter = first_waiter(&server, &name).await;
    // `<owner token> <ttl ms> <the waiter's description>`.
    let member = format!(
        "{waiter} 10000 {}",
        lock_core::Holder::this_process().to_json()
    );
    let lapse_of = || async {
        cmd(&server, &["ZSCORE", keys.lapse(), &member])
            .await
            .as_str()
            .map(str::to_string)
    };
    assert_eq!(
        cmd(&server, &["DEL", keys.fencing()]).await,
        RespValue::Int(1),
        "the counter existed"
    );
    // Each attempt of the waiter moves its place's lapse time on: wait for
    // one that ran after the `DEL` (two, to be sure one began after it).
    for _ in 0..2 {
        let before = lapse_of().await;
        let deadline = Instant::now() + recheck + SLACK;
        while lapse_of().await == before {
            assert!(
                Instant::now() < deadline,
                "the waiter made no attempt within {:?}",
                recheck + SLACK
            );
            sleep(Duration::from_millis(5)).await;
        }
    }
    assert_eq!(
        counter(&server, &name).await,
        None,
        "the counter stayed gone"
    );
    let stale = format!("g {waiter} {issued} 10000");
    assert_eq!(
        cmd(&server, &["PUBLISH", keys.released(), &stale]).await,
        RespValue::Int(1),
        "the waiter's client listens on the channel"
    );
    sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "an announcement with a token issued before the waiter's attempt let it in while the holder holds"
    );
    assert!(held.is_held());
    assert!(held.release().await.unwrap());
    let got = timeout(SLACK, waiting)
        .await
        .expect("the release hands the lock over at once")
        .unwrap()
        .expect("the waiter gets the lock");
    assert!(got.fencing_token().unwrap().get() > issued);
    assert!(got.release().await.unwrap());
}
