//! The fixture of each backend: the servers it starts are the ones its
//! [`Kind`] describes (type, member count, URL scheme), shared or not.

use lock_testbed::{pid_alive, Kind, Persistence, StartOptions, Started};

/// Every backend's fixture starts as many servers as `Kind::members` says,
/// of the type `Started` names, whose URLs carry the backend's scheme; they
/// stop when dropped.
#[test]
fn every_kind_starts_its_servers() {
    for kind in Kind::ALL {
        let started = kind.start_with(1, StartOptions::default()).unwrap();
        assert_eq!(started.kind(), kind);
        let cluster = started.cluster();
        assert_eq!(cluster.members(), kind.members(1), "{kind:?}");
        assert_eq!(cluster.scheme(), kind.scheme(), "{kind:?}");
        let url = kind.url(&cluster.addrs());
        assert!(
            url.starts_with(&format!("{}://127.0.0.1:", kind.scheme())),
            "{url}"
        );
        assert!(cluster.url("").starts_with(kind.scheme()), "{kind:?}");
        let typed = match &started {
            Started::Redis(_) => started.as_redis().is_some(),
            Started::Redlock(_) => started.as_redis_set().is_some(),
            Started::Etcd(_) => started.as_etcd().is_some(),
            Started::Zk(_) => started.as_zk().is_some(),
        };
        assert!(typed, "{kind:?}");
        let pid = match &started {
            Started::Redis(r) => r.pid(),
            Started::Redlock(s) => s.nodes()[0].pid(),
            Started::Etcd(c) => c.pid(0),
            Started::Zk(z) => z.pid(0),
        }
        .unwrap();
        assert!(pid_alive(pid), "{kind:?}");
        drop(started);
        assert!(!pid_alive(pid), "{kind:?}: pid {pid} alive after drop");
    }
}

/// `Kind::start` gives the servers as a `Cluster`, which restarts a member.
#[test]
fn started_as_a_cluster_restarts_a_member() {
    let mut redis = Kind::Redis.start(3).unwrap();
    assert_eq!(redis.members(), 1);
    redis.kill(0).unwrap();
    redis.restart(0).unwrap();
    assert!(redis.leader().unwrap().is_none());
}

/// The options reach the servers: a single Redis's persistence, a
/// ZooKeeper ensemble's quorum-link proxies.
#[test]
fn start_options_reach_the_servers() {
    let options = StartOptions {
        persistence: Persistence::AofAlways,
        quorum_links: true,
    };
    let redis = Kind::Redis.start_with(1, options).unwrap();
    let opts = redis.as_redis().unwrap().options().unwrap();
    assert_eq!(opts.persistence, Persistence::AofAlways);
    let zk = Kind::Zk.start_with(3, options).unwrap();
    let zk = zk.as_zk().unwrap();
    assert_eq!(zk.len(), 3);
    assert!(zk.quorum_link(0, 1).is_some());
}

/// `Kind::shared` is the shared server of each backend, the same on every call.
#[test]
fn shared_servers_are_the_shared_ones() {
    for kind in Kind::ALL {
        let a = kind.shared().unwrap();
        let b = kind.shared().unwrap();
        assert_eq!(a.addrs(), b.addrs(), "{kind:?}");
        assert_eq!(a.scheme(), kind.scheme());
    }
    assert_eq!(
        Kind::Redis.shared().unwrap().addrs(),
        vec![lock_testbed::shared_redis().unwrap().addr()]
    );
    assert_eq!(
        Kind::Redlock.shared().unwrap().members(),
        lock_testbed::SHARED_REDIS_NODES
    );
}
