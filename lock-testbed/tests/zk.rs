//! Real ZooKeeper: standalone and a 3-server ensemble under leader failure.

use std::time::{Duration, Instant};

use lock_testbed::{pid_alive, shared_zk, unique_name, ZkEnsemble, ZkOptions};

/// A standalone server answers `srvr` with `Mode: standalone` and serves znodes.
#[test]
fn standalone_starts_and_serves() {
    let zk = ZkEnsemble::start(1).unwrap();
    assert_eq!(zk.connect_string(), zk.endpoint(0));
    let srvr = zk.srvr(0).unwrap();
    assert!(srvr.contains("Mode: standalone"), "{srvr}");
    assert_eq!(zk.leader().unwrap(), 0);
    let path = format!("/{}", unique_name("node"));
    zk.create(0, &path, b"data").unwrap();
    assert_eq!(
        zk.get_data(0, &path).unwrap().as_deref(),
        Some(&b"data"[..])
    );
    let err = zk.create(0, &path, b"again").unwrap_err();
    assert!(err.to_string().contains("NodeExists"), "{err}");
    assert_eq!(zk.get_data(0, "/no-such-node").unwrap(), None);
    let pid = zk.pid(0).unwrap();
    drop(zk);
    assert!(!pid_alive(pid), "zookeeper pid {pid} alive after drop");
}

/// A paused server does not answer; after resume it does. tickTime is configurable.
#[test]
fn paused_server_does_not_answer_until_resumed() {
    let zk = ZkEnsemble::start_with(
        1,
        ZkOptions {
            tick_time_ms: 100,
            ..Default::default()
        },
    )
    .unwrap();
    zk.pause(0).unwrap();
    let err = zk.srvr(0).unwrap_err();
    assert!(err.is_timeout(), "{err}");
    zk.resume(0).unwrap();
    assert!(zk.srvr(0).unwrap().contains("Mode: standalone"));
    zk.check_session(0).unwrap();
}

/// The shared ZooKeeper serves sessions.
#[test]
fn shared_zk_serves() {
    let zk = shared_zk().unwrap();
    zk.check_session(0).unwrap();
    let path = format!("/{}", unique_name("shared"));
    zk.create(0, &path, b"").unwrap();
    assert_eq!(zk.get_data(0, &path).unwrap(), Some(Vec::new()));
}

/// Kill the leader of a 3-server ensemble: a new leader is elected among the others,
/// writes succeed and are visible on the other survivor; the restarted server catches up.
#[test]
fn ensemble_survives_leader_kill() {
    let started = Instant::now();
    let mut zk = ZkEnsemble::start(3).unwrap();
    eprintln!("3-server ZooKeeper ready in {:?}", started.elapsed());
    assert_eq!(zk.connect_string().split(',').count(), 3);
    let old = zk.leader().unwrap();
    let modes: Vec<String> = (0..3).map(|i| zk.srvr(i).unwrap()).collect();
    assert_eq!(
        modes.iter().filter(|m| m.contains("Mode: leader")).count(),
        1
    );
    assert_eq!(
        modes
            .iter()
            .filter(|m| m.contains("Mode: follower"))
            .count(),
        2
    );
    let before = format!("/{}", unique_name("before"));
    zk.create(old, &before, b"1").unwrap();

    let old_pid = zk.pid(old).unwrap();
    zk.kill(old).unwrap();
    assert!(!pid_alive(old_pid));
    let killed = Instant::now();
    let new = zk.leader().unwrap();
    eprintln!("new ZooKeeper leader after {:?}", killed.elapsed());
    assert_ne!(new, old);
    let other = 3 - old - new;
    let after = format!("/{}", unique_name("after"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match zk.create(other, &after, b"2") {
            Ok(()) => break,
            Err(e) if Instant::now() < deadline => {
                eprintln!("create via survivor failed, retrying: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("create via survivor failed for 10 s: {e}"),
        }
    }
    assert_eq!(
        zk.get_data(new, &before).unwrap().as_deref(),
        Some(&b"1"[..])
    );
    assert_eq!(
        zk.get_data(new, &after).unwrap().as_deref(),
        Some(&b"2"[..])
    );

    zk.restart(old).unwrap();
    let srvr = zk.srvr(old).unwrap();
    assert!(srvr.contains("Mode: follower"), "{srvr}");
    assert_eq!(
        zk.get_data(old, &after).unwrap().as_deref(),
        Some(&b"2"[..])
    );
}

/// With quorum links, every server reaches every other's quorum port through
/// a proxy of its own, and the ensemble elects a leader and serves writes.
#[test]
fn ensemble_with_quorum_links_serves() {
    let zk = ZkEnsemble::start_with_quorum_links(3, ZkOptions::default()).unwrap();
    for from in 0..3 {
        for to in 0..3 {
            assert_eq!(
                zk.quorum_link(from, to).is_some(),
                from != to,
                "{from} -> {to}"
            );
        }
    }
    let leader = zk.leader().unwrap();
    let path = format!("/{}", unique_name("linked"));
    zk.create(leader, &path, b"via links").unwrap();
    for i in 0..3 {
        assert_eq!(
            zk.get_data(i, &path).unwrap().as_deref(),
            Some(&b"via links"[..])
        );
    }
    assert!(ZkEnsemble::start(1).unwrap().quorum_link(0, 0).is_none());
}

/// A follower cut from its leader (both quorum links blackholed) for less
/// than `syncLimit`, while the leader commits writes with the other
/// follower, agrees with the leader once the links heal: TCP never delivers
/// a stream with a gap, so a link that swallowed bytes is reset at heal and
/// the follower syncs again, instead of reading on past the proposals it
/// never saw (which left it without the nodes created meanwhile, answering
/// nothing to writes that touched them).
#[test]
fn a_follower_cut_briefly_from_its_leader_agrees_with_it_after_heal() {
    let zk = ZkEnsemble::start_with_quorum_links(3, ZkOptions::default()).unwrap();
    let leader = zk.leader().unwrap();
    let follower = (leader + 1) % 3;
    let dir = format!("/{}", unique_name("cut-follower"));
    zk.create(leader, &dir, b"").unwrap();
    // The follower has seen the directory before the cut.
    assert!(zk.get_data(follower, &dir).unwrap().is_some());

    for (from, to) in [(follower, leader), (leader, follower)] {
        zk.quorum_link(from, to).unwrap().blackhole();
    }
    let cut = Instant::now();
    let during: Vec<String> = (0..3).map(|i| format!("{dir}/during-{i}")).collect();
    for path in &during {
        zk.create(leader, path, b"while cut").unwrap();
    }
    // Heal well within syncLimit (5 ticks = 1 s), so neither side has
    // given up on the link when it carries bytes again.
    let since = cut.elapsed();
    assert!(
        since < Duration::from_millis(700),
        "the writes took {since:?}; the cut must end within syncLimit"
    );
    for (from, to) in [(follower, leader), (leader, follower)] {
        zk.quorum_link(from, to).unwrap().heal();
    }
    let after = format!("{dir}/after");
    zk.create(leader, &after, b"after heal").unwrap();

    // get_data syncs with the leader first: the follower answers with
    // everything committed before the call, or not at all.
    let deadline = Instant::now() + Duration::from_secs(15);
    for path in during.iter().chain([&after]) {
        loop {
            match zk.get_data(follower, path) {
                Ok(Some(_)) => break,
                Ok(None) => panic!("the follower has no {path} after the heal"),
                Err(e) => {
                    assert!(
                        Instant::now() < deadline,
                        "the follower never answered: {e}"
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }
}
