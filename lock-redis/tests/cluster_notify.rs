//! The release notifier on a real Redis Cluster
//! (`lock_testbed::RedisClusterSet`, `NotifyNode::cluster`): each channel
//! is subscribed at the primary that owns its slot, and when the slot
//! moves (a migration, a failover) its waiters are woken with
//! `Wake::Subscribed` and hear the releases published at the new owner.
//! Every bound is a configured timeout or backoff plus slack for a busy
//! machine.

use std::sync::Arc;
use std::time::Duration;

use lock_core::TlsConfig;
use lock_redis::kit::cluster::{client_builder, ClusterConn, ClusterSettings, ClusterTarget};
use lock_redis::kit::layout::Keys;
use lock_redis::kit::notify::{
    Notifier, NotifyCluster, NotifyNode, Subscription, Timeouts, Wake, LINGER,
};
use lock_testbed::{Proxy, RedisClusterSet, RespValue};
use tokio::time::Instant;

/// The notifier's connect timeout.
const CONNECT: Duration = Duration::from_secs(1);
/// The notifier's request timeout (`CLUSTER SLOTS`, `SSUBSCRIBE`, `PING`).
const REQUEST: Duration = Duration::from_secs(1);
/// The notifier's longest reconnection / slot map refresh backoff.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// The notifier's timeouts.
const TIMEOUTS: Timeouts = Timeouts {
    connect: CONNECT,
    request: REQUEST,
};
/// How often an idle notifier pings its connections (and refreshes its
/// slot map).
const PING_ROUND: Duration = Duration::from_secs(5);
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
    notifier_at(&cluster.url(), Vec::new(), TIMEOUTS).await
}

/// A notifier for the cluster of `url` whose connections (its request
/// connection's too) go where `address_map` says.
async fn notifier_at(
    url: &str,
    address_map: Vec<(String, String)>,
    timeouts: Timeouts,
) -> Notifier {
    let target = ClusterTarget::parse(url).unwrap().unwrap();
    let settings = ClusterSettings {
        connect_timeout: CONNECT,
        request_timeout: REQUEST,
        address_map,
    };
    let builder = client_builder(&target, &TlsConfig::default(), &settings).unwrap();
    let conn = ClusterConn::connect(builder).await.unwrap();
    let source = NotifyCluster::new(conn, target, TlsConfig::default(), &settings.address_map);
    Notifier::start(vec![NotifyNode::cluster(source)], timeouts, None)
}

/// A cluster, a proxy in front of each node, and a notifier that reaches
/// node `i` through proxy `i` alone (the address map).
async fn proxied(timeouts: Timeouts) -> (RedisClusterSet, Vec<Proxy>, Notifier) {
    let cluster = blocking(|| RedisClusterSet::start().unwrap());
    let proxies: Vec<Proxy> = (0..6)
        .map(|i| Proxy::start(cluster.node(i).addr()).unwrap())
        .collect();
    let map: Vec<(String, String)> = proxies
        .iter()
        .map(|p| (p.upstream().to_string(), p.addr().to_string()))
        .collect();
    let seeds: Vec<String> = proxies[..3].iter().map(|p| p.addr().to_string()).collect();
    let url = format!("redis+cluster://{}", seeds.join(","));
    let notifier = notifier_at(&url, map, timeouts).await;
    (cluster, proxies, notifier)
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
    sub.before_attempt();
    sub
}

/// Each primary, and how many clients it counts on `channel`.
fn subscribers_per_primary(cluster: &RedisClusterSet, channel: &str) -> Vec<(usize, i64)> {
    let primaries = cluster.current_primaries().unwrap();
    primaries
        .iter()
        .map(|&n| (n, shard_subscribers(cluster, n, channel)))
        .collect()
}

/// Whether primary `owner` counts one subscriber and every other none.
fn alone_at(counts: &[(usize, i64)], owner: usize) -> bool {
    counts.iter().any(|&(n, _)| n == owner)
        && counts.iter().all(|&(n, c)| c == i64::from(n == owner))
}

/// Every primary counts `channel` as subscribed iff it is `owner`.
fn counted_by_owner_alone(cluster: &RedisClusterSet, channel: &str, owner: usize) {
    let counts = subscribers_per_primary(cluster, channel);
    assert!(
        alone_at(&counts, owner),
        "{channel}: (primary, subscribers) {counts:?}, expected 1 at {owner} alone"
    );
}

/// After the subscription to `channel` was lost (`what`, at `since`): the
/// waiter is woken with `Subscribed` within `within`, the channel is
/// confirmed and subscribed at `owner` alone, and an SPUBLISH there wakes
/// the waiter.
async fn hears_again_at(
    cluster: &RedisClusterSet,
    sub: &mut Subscription,
    channel: &str,
    owner: usize,
    (what, since, within): (&str, Instant, Duration),
) {
    let wake = sub.wait_until(since + within).await;
    println!("{what}: {wake:?} after {:?}", since.elapsed());
    assert_eq!(wake, Wake::Subscribed, "{what}");
    assert!(sub.is_confirmed());
    blocking(|| counted_by_owner_alone(cluster, channel, owner));
    sub.before_attempt();
    assert_eq!(blocking(|| spublish(cluster, owner, channel, "after")), 1);
    notified(sub, REQUEST + SLACK).await;
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
        blocking(|| counted_by_owner_alone(&cluster, channel, p));
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
    let moved = ("after the migration", Instant::now(), resubscription());
    hears_again_at(&cluster, &mut sub, &moving, 1, moved).await;

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

    blocking(|| cluster.kill_node(1).unwrap());
    // The connection drops with the node: no longer confirmed, although
    // nothing owns the slot yet.
    let killed = Instant::now();
    while sub.is_confirmed() {
        assert!(killed.elapsed() < PING_ROUND + REQUEST + SLACK);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!("unconfirmed {:?} after the kill", killed.elapsed());
    let promoted = blocking(|| {
        cluster
            .wait_for_failover(1, Duration::from_secs(20))
            .unwrap()
    });
    let failed_over = ("after the failover", Instant::now(), resubscription());
    println!("failed over to node {promoted}");
    hears_again_at(&cluster, &mut sub, &channel, promoted, failed_over).await;
}

/// A replica takes over from a primary that stays up (`CLUSTER
/// FAILOVER`, as for maintenance): releases SPUBLISHed at the new primary
/// still wake the waiter, and the channel ends up subscribed there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_failover_is_followed_to_the_new_primary() {
    let cluster = blocking(|| RedisClusterSet::start().unwrap());
    let notifier = notifier(&cluster).await;
    let channel = blocking(|| channels_on(&cluster, 2, "manual", 1).remove(0));
    let slot = RedisClusterSet::slot_of(&channel);
    let mut sub = confirmed(&notifier, &channel).await;

    let reply = blocking(|| cluster.node(5).cmd(&["CLUSTER", "FAILOVER"]).unwrap());
    assert_eq!(reply.as_str(), Some("OK"));
    let started = Instant::now();
    while blocking(|| cluster.owner_of_slot(slot).unwrap()) != 5 {
        assert!(started.elapsed() < Duration::from_secs(20), "no failover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let failed_over = (
        "after the manual failover",
        Instant::now(),
        resubscription() + PING_ROUND,
    );
    hears_again_at(&cluster, &mut sub, &channel, 5, failed_over).await;
}

/// The connection to a channel's owner goes silent (its proxy swallows
/// everything): the `PING` watchdog notices within a round and the
/// channel is unconfirmed; once the node answers again the channel is
/// subscribed anew (`Subscribed`) and hears releases. The notifier reaches
/// every node through the address map.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_noticed_and_opened_again() {
    let (cluster, proxies, notifier) = proxied(TIMEOUTS).await;
    let channel = blocking(|| channels_on(&cluster, 0, "silent", 1).remove(0));
    let mut sub = confirmed(&notifier, &channel).await;
    assert_eq!(blocking(|| shard_subscribers(&cluster, 0, &channel)), 1);

    proxies[0].blackhole();
    let silent = Instant::now();
    while sub.is_confirmed() {
        assert!(
            silent.elapsed() < PING_ROUND + REQUEST + SLACK,
            "a silent connection still counts as confirmed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "unconfirmed {:?} after the node went silent",
        silent.elapsed()
    );
    proxies[0].heal();
    let healed = ("after the heal", Instant::now(), resubscription());
    hears_again_at(&cluster, &mut sub, &channel, 0, healed).await;
}

/// The node's own `sunsubscribe` (a slot left it) reaches the
/// notifier's connection while an `SSUBSCRIBE` is in flight on it (the
/// proxy holds the node's pushes and replies back, in order): redis-rs
/// takes the push for the reply, the notifier sees that it does not answer
/// its request and opens the connection again. Every channel ends up
/// subscribed at its owner: the one whose slot moved at the new owner,
/// the others (woken with `Subscribed`, as their connection was reopened)
/// at the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sunsubscribe_taken_for_a_reply_reopens_the_connection() {
    let (cluster, proxies, notifier) = proxied(TIMEOUTS).await;
    let mut names = blocking(|| channels_on(&cluster, 0, "desync", 3));
    let (fresh, staying, moving) = (
        names.pop().unwrap(),
        names.pop().unwrap(),
        names.pop().unwrap(),
    );
    let slot = RedisClusterSet::slot_of(&moving);
    let mut sub = confirmed(&notifier, &moving).await;
    let mut other = confirmed(&notifier, &staying).await;

    // Held for less than the request timeout: the reply still comes in time.
    proxies[0].set_subscriber_delay(REQUEST / 2);
    blocking(|| {
        cluster.begin_migration(slot, 0, 1).unwrap();
        for node in [1, 0] {
            let id = cluster.node_id(1).to_string();
            let reply =
                cluster
                    .node(node)
                    .cmd(&["CLUSTER", "SETSLOT", &slot.to_string(), "NODE", &id]);
            assert_eq!(reply.unwrap().as_str(), Some("OK"));
        }
    });
    // The slot left node 0 a moment ago; its push is held at the proxy.
    let moved = Instant::now();
    let mut third = notifier.subscribe(&fresh);
    blocking(|| cluster.finish_migration(slot, 1).unwrap());
    proxies[0].heal();

    let reopened = ("the other channel", moved, resubscription());
    hears_again_at(&cluster, &mut other, &staying, 0, reopened).await;
    let moved = ("the channel whose slot moved", moved, resubscription());
    hears_again_at(&cluster, &mut sub, &moving, 1, moved).await;
    assert!(third.confirmed_by(Instant::now() + resubscription()).await);
    blocking(|| counted_by_owner_alone(&cluster, &fresh, 0));
}

/// A slot migrates while the notifier keeps subscribing and unsubscribing
/// other channels of the same primary (so the node's own `sunsubscribe`
/// pushes may meet requests in flight): in the end every channel waiters
/// need is confirmed, counted by the owner of its slot alone, and hears
/// releases there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_are_right_after_a_migration_amid_churn() {
    let cluster = Arc::new(blocking(|| RedisClusterSet::start().unwrap()));
    let notifier = notifier(&cluster).await;
    // 20 channels in one slot of node 0 (one hash tag), 20 in others.
    let tag = blocking(|| channels_on(&cluster, 0, "churn", 1).remove(0));
    let slot = RedisClusterSet::slot_of(&tag);
    let moving: Vec<String> = (0..20).map(|i| format!("{tag}:{i}")).collect();
    let staying = blocking(|| channels_on(&cluster, 0, "stay", 20));
    let mut subs = Vec::new();
    for channel in moving.iter().chain(&staying) {
        subs.push(confirmed(&notifier, channel).await);
    }

    // Churn on node 0 during the migration: subscribe and drop other channels.
    let churn = blocking(|| channels_on(&cluster, 0, "churn-other", 100));
    let migration = {
        let cluster = cluster.clone();
        tokio::task::spawn_blocking(move || cluster.migrate_slot(slot, 0, 1).unwrap())
    };
    let mut rounds = 0;
    while !migration.is_finished() {
        let channel = &churn[rounds % churn.len()];
        let sub = notifier.subscribe(channel);
        tokio::time::sleep(Duration::from_millis(2)).await;
        drop(sub);
        rounds += 1;
    }
    migration.await.unwrap();
    println!("{rounds} churn rounds during the migration");
    assert!(rounds > 0, "the migration ended before the churn began");

    let until = Instant::now() + resubscription();
    // The channels whose slot moved were lost, and subscribed again.
    for sub in &mut subs[..moving.len()] {
        assert_eq!(sub.wait_until(until).await, Wake::Subscribed);
    }
    // Then every channel is confirmed, and counted by its owner alone. The
    // notifier learns that a slot left a node after the node dropped its
    // channels: the two agree once it has handled what the node sent.
    let channels: Vec<&String> = moving.iter().chain(&staying).collect();
    let owner_of = |channel: &str| usize::from(moving.iter().any(|m| m == channel));
    let migrated = Instant::now();
    loop {
        let confirmed = subs.iter().all(Subscription::is_confirmed);
        let wrong: Vec<(&String, Vec<(usize, i64)>)> = blocking(|| {
            channels
                .iter()
                .map(|c| (*c, subscribers_per_primary(&cluster, c)))
                .filter(|(c, counts)| !alone_at(counts, owner_of(c)))
                .collect()
        });
        if confirmed && wrong.is_empty() {
            println!(
                "all at their owners {:?} after the migration",
                migrated.elapsed()
            );
            break;
        }
        assert!(
            Instant::now() < until,
            "all confirmed: {confirmed}; not at their owner alone: {wrong:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (sub, channel) in subs.iter_mut().zip(&channels) {
        let owner = owner_of(channel);
        sub.before_attempt();
        assert_eq!(blocking(|| spublish(&cluster, owner, channel, "after")), 1);
        notified(sub, REQUEST + SLACK).await;
    }
}

/// Why a subscription at a primary that was just demoted still hears its
/// shard: a replica accepts `SSUBSCRIBE` for its primary's slots and its
/// subscribers get what is SPUBLISHed at the primary (Redis 7.0; the
/// notifier still moves such a channel to the owner on its next slot map).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_subscriber_hears_its_primary_spublish() {
    let cluster = blocking(|| RedisClusterSet::start().unwrap());
    let channel = blocking(|| channels_on(&cluster, 0, "replica", 1).remove(0));
    let mut at_replica =
        lock_testbed::RespConnection::connect(cluster.node(3).addr(), REQUEST + SLACK).unwrap();
    let confirm = at_replica.cmd(&["SSUBSCRIBE", &channel]).unwrap();
    println!("SSUBSCRIBE at the replica: {confirm:?}");
    assert!(matches!(confirm, RespValue::Array(Some(_))), "{confirm:?}");
    // The replica's subscriber is not counted at the primary.
    assert_eq!(blocking(|| spublish(&cluster, 0, &channel, "token")), 0);
    let message = at_replica.read_reply().unwrap();
    println!("the replica's subscriber got {message:?}");
    let RespValue::Array(Some(items)) = message else {
        panic!("{message:?}")
    };
    assert_eq!(items[0].as_str(), Some("smessage"));
    assert_eq!(items[2].as_str(), Some("token"));
}

/// How many `SSUBSCRIBE`s node `node` refused (a redirection) so far.
fn refused_ssubscribes(cluster: &RedisClusterSet, node: usize) -> u64 {
    let info = cluster.node(node).cmd(&["INFO", "commandstats"]).unwrap();
    let text = String::from_utf8_lossy(info.as_bytes().unwrap()).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("cmdstat_ssubscribe:"))
        .and_then(|stats| {
            stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("rejected_calls="))
        })
        .map_or(0, |n| n.parse().unwrap())
}

/// A slot moves while the notifier has no channel in it (nothing tells it
/// to read the slot map again): a channel of that slot is sent to the old
/// owner first, which answers `MOVED`; the notifier reads the map from
/// the node named there and subscribes at the new owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_answer_to_ssubscribe_is_followed() {
    let cluster = blocking(|| RedisClusterSet::start().unwrap());
    let notifier = notifier(&cluster).await;
    let mut names = blocking(|| channels_on(&cluster, 0, "moved", 2));
    let (later, first) = (names.pop().unwrap(), names.pop().unwrap());
    let _first = confirmed(&notifier, &first).await;
    let slot = RedisClusterSet::slot_of(&later);
    blocking(|| cluster.migrate_slot(slot, 0, 1).unwrap());
    let refused = blocking(|| refused_ssubscribes(&cluster, 0));

    let mut sub = confirmed(&notifier, &later).await;
    assert_eq!(
        blocking(|| refused_ssubscribes(&cluster, 0)),
        refused + 1,
        "the old owner answered MOVED once"
    );
    blocking(|| counted_by_owner_alone(&cluster, &later, 1));
    assert_eq!(blocking(|| spublish(&cluster, 1, &later, "token")), 1);
    notified(&mut sub, REQUEST + SLACK).await;
}

/// A node goes silent while another primary keeps the notifier busy
/// (a waiter comes and goes on one of its channels every 100 ms): the
/// silent one's connection is still pinged, and its channel unconfirmed,
/// within a `PING` round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_is_noticed_while_another_is_busy() {
    let (cluster, proxies, notifier) = proxied(TIMEOUTS).await;
    let quiet = blocking(|| channels_on(&cluster, 0, "unnoticed", 1).remove(0));
    let busy = blocking(|| channels_on(&cluster, 1, "busy", 2));
    let quiet_sub = confirmed(&notifier, &quiet).await;

    proxies[0].blackhole();
    let silent = Instant::now();
    let mut round = 0;
    while quiet_sub.is_confirmed() {
        assert!(
            silent.elapsed() < PING_ROUND + REQUEST + SLACK,
            "a silent connection still counts as confirmed"
        );
        let sub = notifier.subscribe(&busy[round % 2]);
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(sub);
        round += 1;
    }
    println!(
        "unconfirmed {:?} after the node went silent ({round} busy rounds)",
        silent.elapsed()
    );
}

/// While the notifier waits on a silent node (a connection attempt that
/// gets no answer, for a long connect timeout), the releases published
/// at the other primaries still reach their waiters at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_does_not_hold_up_the_others() {
    let slow = Timeouts {
        connect: Duration::from_secs(20),
        request: REQUEST,
    };
    let (cluster, proxies, notifier) = proxied(slow).await;
    let quiet = blocking(|| channels_on(&cluster, 0, "quiet", 1).remove(0));
    let lively = blocking(|| channels_on(&cluster, 1, "lively", 1).remove(0));
    let quiet_sub = confirmed(&notifier, &quiet).await;
    let mut sub = confirmed(&notifier, &lively).await;

    proxies[0].blackhole();
    let silent = Instant::now();
    while quiet_sub.is_confirmed() {
        assert!(silent.elapsed() < PING_ROUND + REQUEST + SLACK);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The notifier now tries node 0 again, for up to 20 s.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let published = Instant::now();
    assert_eq!(blocking(|| spublish(&cluster, 1, &lively, "token")), 1);
    // Node 1's connection lived through the PING rounds: the release is
    // the first thing its waiter hears (no re-confirmation before it).
    let wake = sub.wait_until(published + SLACK).await;
    println!(
        "{wake:?} after {:?} while node 0 was silent",
        published.elapsed()
    );
    assert_eq!(wake, Wake::Notified);
    assert!(!quiet_sub.is_confirmed());
}
