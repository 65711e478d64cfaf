//! The release notifier on a real Redis Cluster
//! (`lock_testbed::RedisClusterSet`, `NotifyNode::cluster`): each channel
//! is subscribed at the primary that owns its slot, and when the slot
//! moves (a migration, a failover) its waiters are woken with
//! `Wake::Subscribed` and hear the releases published at the new owner.
//! Every bound is a configured timeout or backoff plus slack for a busy
//! machine.

use std::time::Duration;

use lock_core::TlsConfig;
use lock_redis::kit::cluster::{client_builder, ClusterConn, ClusterSettings, ClusterTarget};
use lock_redis::kit::layout::Keys;
use lock_redis::kit::notify::{
    Notifier, NotifyCluster, NotifyNode, Subscription, Timeouts, Wake, LINGER,
};
use lock_testbed::{RedisClusterSet, RespValue};
use tokio::time::Instant;

/// The notifier's connect timeout.
const CONNECT: Duration = Duration::from_secs(1);
/// The notifier's request timeout (`CLUSTER SLOTS`, `SSUBSCRIBE`, `PING`).
const REQUEST: Duration = Duration::from_secs(1);
/// The notifier's longest reconnection / slot map refresh backoff.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Allowance for scheduling on a busy 2-core machine.
const SLACK: Duration = Duration::from_secs(5);

/// From no subscription to a confirmed one: the slot map, a connection,
/// `SSUBSCRIBE`.
fn first_confirmation() -> Duration {
    CONNECT + 2 * REQUEST + SLACK
}

/// From a lost subscription to its confirmation at the slot's new owner:
/// the backoffs of the slot map refresh and of the connection, a refresh,
/// a connection, `SSUBSCRIBE`.
fn resubscription() -> Duration {
    2 * MAX_BACKOFF + CONNECT + 3 * REQUEST + SLACK
}

async fn notifier(cluster: &RedisClusterSet) -> Notifier {
    let target = ClusterTarget::parse(&cluster.url()).unwrap().unwrap();
    let settings = ClusterSettings {
        connect_timeout: CONNECT,
        request_timeout: REQUEST,
        address_map: Vec::new(),
    };
    let builder = client_builder(&target, &TlsConfig::default(), &settings).unwrap();
    let conn = ClusterConn::connect(builder).await.unwrap();
    let source = NotifyCluster::new(conn, target, TlsConfig::default(), &[]);
    Notifier::start(
        vec![NotifyNode::cluster(source)],
        Timeouts {
            connect: CONNECT,
            request: REQUEST,
        },
        None,
    )
}

/// The release channels of `count` lock names whose slot node `owner` owns now.
fn channels_on(cluster: &RedisClusterSet, owner: usize, tag: &str, count: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("notify:{tag}:{i}"))
        .filter(|n| cluster.owner_of_slot(RedisClusterSet::slot_of(n)).unwrap() == owner)
        .take(count)
        .map(|n| Keys::new("", &n).released().to_string())
        .collect()
}

/// How many clients node `node` counts on the sharded channel `channel`.
fn shard_subscribers(cluster: &RedisClusterSet, node: usize, channel: &str) -> i64 {
    match cluster
        .node(node)
        .cmd(&["PUBSUB", "SHARDNUMSUB", channel])
        .unwrap()
    {
        RespValue::Array(Some(items)) => items[1].as_int().unwrap(),
        other => panic!("PUBSUB SHARDNUMSUB -> {other:?}"),
    }
}

/// `SPUBLISH channel message` at node `node`: how many clients got it.
fn spublish(cluster: &RedisClusterSet, node: usize, channel: &str, message: &str) -> i64 {
    let reply = cluster
        .node(node)
        .cmd(&["SPUBLISH", channel, message])
        .unwrap();
    reply
        .as_int()
        .unwrap_or_else(|| panic!("SPUBLISH -> {reply:?}"))
}

/// Blocking testbed calls, off the runtime's workers.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// Waits (at most `within`) until the subscription is woken by a release,
/// taking any (re)confirmations on the way; panics otherwise.
async fn notified(sub: &mut Subscription, within: Duration) {
    let until = Instant::now() + within;
    loop {
        match sub.wait_until(until).await {
            Wake::Notified => return,
            Wake::Subscribed => continue,
            other => panic!("no release heard within {within:?}: {other:?}"),
        }
    }
}

/// Subscribes to `channel` and waits for the confirmation.
async fn confirmed(notifier: &Notifier, channel: &str) -> Subscription {
    let mut sub = notifier.subscribe(channel);
    let started = Instant::now();
    assert!(
        sub.confirmed_by(started + first_confirmation()).await,
        "{channel} not confirmed within {:?}",
        first_confirmation()
    );
    println!("{channel} confirmed after {:?}", started.elapsed());
    sub.before_attempt();
    sub
}

/// A channel on each primary is subscribed at that primary alone (its
/// confirmation means the owner counts it), an SPUBLISH there wakes its
/// waiter, and the channels are unsubscribed once no waiter needs them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spublish_on_every_primary_reaches_the_subscribers() {
    let cluster = blocking(|| RedisClusterSet::start().unwrap());
    let notifier = notifier(&cluster).await;
    let channels: Vec<String> = (0..3)
        .map(|p| blocking(|| channels_on(&cluster, p, "every", 1).remove(0)))
        .collect();
    let mut subs = Vec::new();
    for channel in &channels {
        subs.push(confirmed(&notifier, channel).await);
    }
    for (p, channel) in channels.iter().enumerate() {
        let counts: Vec<i64> = blocking(|| {
            (0..3)
                .map(|n| shard_subscribers(&cluster, n, channel))
                .collect()
        });
        let expected: Vec<i64> = (0..3).map(|n| i64::from(n == p)).collect();
        assert_eq!(
            counts, expected,
            "{channel}: subscribed at its owner {p} alone"
        );
        assert_eq!(blocking(|| spublish(&cluster, p, channel, "token")), 1);
    }
    for sub in &mut subs {
        notified(sub, REQUEST + SLACK).await;
    }
    drop(subs);
    let until = Instant::now() + LINGER + 2 * REQUEST + SLACK;
    loop {
        let left: i64 = blocking(|| {
            channels
                .iter()
                .enumerate()
                .map(|(p, c)| shard_subscribers(&cluster, p, c))
                .sum()
        });
        if left == 0 {
            break;
        }
        assert!(
            Instant::now() < until,
            "{left} subscription(s) left after the waiters"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The slot of a channel migrates to another primary: its waiter is woken
/// with `Subscribed` (a release may have gone unheard), the channel is
/// subscribed at the new owner alone, and an SPUBLISH there wakes the
/// waiter; a channel of another slot on the same primary hears on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migrated_slot_is_subscribed_at_its_new_owner() {
    let cluster = blocking(|| RedisClusterSet::start().unwrap());
    let notifier = notifier(&cluster).await;
    let mut names = blocking(|| channels_on(&cluster, 0, "migrate", 2));
    let staying = names.pop().unwrap();
    let moving = names.pop().unwrap();
    let slot = RedisClusterSet::slot_of(&moving);
    assert_ne!(slot, RedisClusterSet::slot_of(&staying));
    let mut sub = confirmed(&notifier, &moving).await;
    let mut other = confirmed(&notifier, &staying).await;

    blocking(|| cluster.migrate_slot(slot, 0, 1).unwrap());
    let moved = Instant::now();
    let wake = sub.wait_until(moved + resubscription()).await;
    println!("after the migration: {wake:?} after {:?}", moved.elapsed());
    assert_eq!(wake, Wake::Subscribed);
    assert!(sub.is_confirmed());
    assert_eq!(blocking(|| shard_subscribers(&cluster, 1, &moving)), 1);
    assert_eq!(blocking(|| shard_subscribers(&cluster, 0, &moving)), 0);
    sub.before_attempt();
    assert_eq!(blocking(|| spublish(&cluster, 1, &moving, "after")), 1);
    notified(&mut sub, REQUEST + SLACK).await;

    assert_eq!(blocking(|| spublish(&cluster, 0, &staying, "still")), 1);
    notified(&mut other, REQUEST + SLACK).await;
}

/// The primary that owns a channel's slot dies and its replica takes
/// over: the waiter is woken with `Subscribed` once the channel is
/// subscribed at the promoted replica, and an SPUBLISH there wakes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_is_followed_to_the_promoted_replica() {
    let mut cluster = blocking(|| RedisClusterSet::start().unwrap());
    let notifier = notifier(&cluster).await;
    let channel = blocking(|| channels_on(&cluster, 1, "failover", 1).remove(0));
    let mut sub = confirmed(&notifier, &channel).await;

    let promoted = blocking(|| {
        cluster.kill_node(1).unwrap();
        cluster
            .wait_for_failover(1, Duration::from_secs(20))
            .unwrap()
    });
    let failed_over = Instant::now();
    let wake = sub.wait_until(failed_over + resubscription()).await;
    println!(
        "failover to node {promoted}: {wake:?} {:?} after the cluster agreed",
        failed_over.elapsed()
    );
    assert_eq!(wake, Wake::Subscribed);
    assert!(sub.is_confirmed());
    assert_eq!(
        blocking(|| shard_subscribers(&cluster, promoted, &channel)),
        1
    );
    sub.before_attempt();
    assert_eq!(
        blocking(|| spublish(&cluster, promoted, &channel, "after")),
        1
    );
    notified(&mut sub, REQUEST + SLACK).await;
}
