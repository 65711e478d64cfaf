//! Redlock elections with nodes paused and requests delivered late or
//! twice, each test on its own five Redis servers: a proclaim that reached
//! only a bare quorum is what every quorum read shows afterwards, late
//! copies of a term's beginning or of an older proclaim change nothing,
//! and the late end of a resigned term leaves the next term (and its
//! lock-delay marker) alone.

use std::time::Duration;

use lock_core::{CampaignOptions, LeaderElection, LockName};
use lock_redis::kit::layout::LeaderKeys;
use lock_redlock::RedlockLock;
use lock_testbed::{RedisServer, RespValue};

mod support;
use support::{
    config, get, gone_within, lock_name, proxies_for, start_set, through, NODE_TIMEOUT, SLACK,
};
use tokio::time::{sleep, Instant};

/// The scripts as the client sends them.
const BEGIN: &str = include_str!("../src/election/lua/begin.lua");
const PROCLAIM: &str = include_str!("../src/election/lua/proclaim.lua");
const END: &str = include_str!("../src/election/lua/end.lua");

fn opts() -> CampaignOptions {
    CampaignOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(10))
}

fn keys(name: &LockName) -> LeaderKeys {
    LeaderKeys::new("", name.as_str())
}

/// `EVAL script` on `node` with `keys` and `args`.
fn eval(node: &RedisServer, script: &str, keys: &[&str], args: &[&str]) -> RespValue {
    let n = keys.len().to_string();
    let mut cmd = vec!["EVAL", script, &n];
    cmd.extend_from_slice(keys);
    cmd.extend_from_slice(args);
    tokio::task::block_in_place(|| node.cmd(&cmd)).expect("EVAL")
}

/// Waits (up to the slack) until `key` on each of `nodes` passes `ok`:
/// a call returns once a quorum answered, the others follow.
async fn every_node_has(nodes: &[RedisServer], key: &str, ok: impl Fn(&str) -> bool) {
    for n in nodes {
        let deadline = Instant::now() + SLACK;
        while !get(n, key).is_some_and(|v| ok(&v)) {
            assert!(
                Instant::now() < deadline,
                "{key} on {}: {:?}",
                n.addr(),
                get(n, key)
            );
            sleep(Duration::from_millis(5)).await;
        }
    }
}

/// A proclaim that only three of five nodes received (the requests to
/// the other two lost) succeeds, and a read that reaches the two nodes that
/// missed it and one that has it (the other two paused) still shows it:
/// two quorums always share a node, and the proclaim with the higher number
/// wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_proclaim_stored_by_a_bare_quorum_is_what_every_quorum_reads() {
    let set = start_set();
    let proxies = proxies_for(&set);
    let leader = through(&proxies, NODE_TIMEOUT).await;
    let follower = RedlockLock::connect(config(&set)).await.expect("connect");
    let name = lock_name("bare-proclaim");
    let k = keys(&name);
    let term = leader.campaign(&name, "v1", &opts()).await.unwrap();
    every_node_has(set.nodes(), k.info(), |i| i.ends_with(" v1")).await;

    proxies[0].drop_requests();
    proxies[1].drop_requests();
    term.proclaim("v2").await.expect("a quorum of 3 stored it");
    every_node_has(&set.nodes()[2..], k.info(), |i| i.ends_with(" v2")).await;
    for n in &set.nodes()[..2] {
        let info = get(n, k.info()).expect("the term's info");
        assert!(info.ends_with(" v1"), "the cut-off node missed it: {info}");
    }

    set.nodes()[3].pause().unwrap();
    set.nodes()[4].pause().unwrap();
    let seen = follower.leader(&name).await;
    set.nodes()[3].resume().unwrap();
    set.nodes()[4].resume().unwrap();
    let seen = seen.unwrap().expect("a leader");
    assert_eq!(seen.value, "v2", "read from two stale nodes and one fresh");
    assert_eq!(seen.epoch, None, "Redlock terms have no epoch");
    for p in &proxies {
        p.reset_all();
    }
    assert!(term.resign().await.unwrap());
}

/// After two proclaims, a late copy of the term's beginning and of the
/// first proclaim reach every node: the value stays the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn late_copies_of_a_beginning_or_an_older_proclaim_change_nothing() {
    let set = start_set();
    let leader = RedlockLock::connect(config(&set)).await.expect("connect");
    let name = lock_name("late-proclaim");
    let k = keys(&name);
    let term = leader.campaign(&name, "v1", &opts()).await.unwrap();
    every_node_has(set.nodes(), k.info(), |i| i.ends_with(" v1")).await;
    let info = get(&set.nodes()[0], k.info()).expect("the term's info");
    let mut fields = info.splitn(4, ' ');
    let (token, _, since) = (
        fields.next().unwrap().to_string(),
        fields.next().unwrap().to_string(),
        fields.next().unwrap().to_string(),
    );
    term.proclaim("v2").await.unwrap();
    term.proclaim("v3").await.unwrap();
    every_node_has(set.nodes(), k.info(), |i| i.ends_with(" v3")).await;

    for n in set.nodes() {
        let begin = eval(
            n,
            BEGIN,
            &[k.leader(), k.info(), k.delay(), k.changed()],
            &[&token, "0", &since, "v1"],
        );
        assert_eq!(
            begin,
            RespValue::Array(Some(vec![RespValue::Int(1)])),
            "begun already"
        );
        let proclaim = eval(
            n,
            PROCLAIM,
            &[k.leader(), k.info(), k.changed()],
            &[&token, "1", "v2"],
        );
        assert_eq!(proclaim, RespValue::Int(1), "a later one is stored");
        assert_eq!(
            get(n, k.info()),
            Some(format!("{token} 2 {since} v3")),
            "on {}",
            n.addr()
        );
    }
    let seen = leader.leader(&name).await.unwrap().expect("a leader");
    assert_eq!(seen.value, "v3");
    assert!(term.resign().await.unwrap());
}

/// A resigns; B leads with a lock-delay; then a late copy of A's
/// resignation reaches every node: B's term, info and marker stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_end_of_a_resigned_term_leaves_the_next_term_alone() {
    let set = start_set();
    let (a, b) = (
        RedlockLock::connect(config(&set)).await.expect("connect"),
        RedlockLock::connect(config(&set)).await.expect("connect"),
    );
    let name = lock_name("late-end");
    let k = keys(&name);
    let delayed = opts().lock_delay(Duration::from_secs(5));
    let first = a.campaign(&name, "a", &delayed).await.unwrap();
    every_node_has(set.nodes(), k.info(), |i| i.ends_with(" a")).await;
    let a_token = get(&set.nodes()[0], k.leader()).expect("A's key");
    assert!(first.resign().await.unwrap());
    // B campaigns once A's resignation reached every node (it takes A's
    // marker): a resignation returns when a quorum answered, and a node it
    // had not reached yet would refuse B's beginning while a quorum
    // accepted it, and keep no term of B's.
    for n in set.nodes() {
        assert!(
            gone_within(n, k.delay(), SLACK).await,
            "A's resignation reaches {}",
            n.addr()
        );
    }
    let second = b.campaign(&name, "b", &delayed).await.unwrap();
    every_node_has(set.nodes(), k.info(), |i| i.ends_with(" b")).await;
    let b_token = get(&set.nodes()[0], k.leader()).expect("B's key");
    assert_ne!(a_token, b_token);

    for n in set.nodes() {
        let end = eval(
            n,
            END,
            &[k.leader(), k.info(), k.delay(), k.changed()],
            &[&a_token, "1"],
        );
        assert_eq!(end, RespValue::Int(0), "A's info is gone");
        assert!(
            get(n, k.info()).is_some_and(|i| i.starts_with(&format!("{b_token} "))),
            "B's info stays on {}",
            n.addr()
        );
        assert_eq!(
            get(n, k.delay()),
            Some(format!("{b_token} 5000")),
            "B's marker stays on {}",
            n.addr()
        );
    }
    let seen = a.leader(&name).await.unwrap().expect("B leads");
    assert_eq!(seen.value, "b");
    assert!(second.resign().await.unwrap());
    for n in set.nodes() {
        assert!(
            gone_within(n, k.delay(), SLACK).await,
            "a resignation takes the marker"
        );
    }
}
