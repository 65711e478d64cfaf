//! The `DISTLOCK_TEST_*` variables point the shared accessors at servers started
//! elsewhere. One test in its own binary: it changes the process environment.

use lock_testbed::{
    shared_etcd, shared_redis, shared_redis_set, shared_zk, unique_name, EtcdCluster, RedisServer,
    RedisSet, RespValue, TestbedError, ZkEnsemble, ENV_TEST_ETCD, ENV_TEST_REDIS,
    ENV_TEST_REDIS_NODES, ENV_TEST_ZK,
};

fn assert_external(err: TestbedError) {
    assert!(matches!(err, TestbedError::External { .. }), "{err}");
}

/// A server that does not answer is an error naming the variable (never a skip); one
/// that answers is used as is, and refuses faults.
#[test]
fn shared_accessors_use_servers_started_elsewhere() {
    // Nothing listens there: an error that names the variable.
    let dead = format!("127.0.0.1:{}", lock_testbed::free_port());
    std::env::set_var(ENV_TEST_REDIS, &dead);
    std::env::set_var(ENV_TEST_ZK, "no-port-here");
    let err = shared_redis().unwrap_err();
    assert!(matches!(err, TestbedError::BadEnv { .. }), "{err}");
    assert!(err.to_string().contains(ENV_TEST_REDIS), "{err}");
    let err = shared_zk().unwrap_err();
    assert!(err.to_string().contains("host:port"), "{err}");

    // "Elsewhere" here is servers this test starts itself.
    let redis = RedisServer::start().unwrap();
    let set = RedisSet::start(2).unwrap();
    let etcd = EtcdCluster::start(1).unwrap();
    let zk = ZkEnsemble::start(1).unwrap();
    let nodes: Vec<String> = set.addrs().iter().map(|a| a.to_string()).collect();
    std::env::set_var(ENV_TEST_REDIS, redis.addr().to_string());
    std::env::set_var(ENV_TEST_REDIS_NODES, nodes.join(","));
    std::env::set_var(ENV_TEST_ETCD, etcd.endpoint(0));
    std::env::set_var(ENV_TEST_ZK, zk.connect_string());

    let shared = shared_redis().unwrap();
    assert_eq!(shared.addr(), redis.addr());
    assert_eq!(shared.pid(), None);
    assert_eq!(
        shared.cmd(&["PING"]).unwrap(),
        RespValue::Simple("PONG".into())
    );
    assert_external(shared.pause().unwrap_err());

    let shared_set = shared_redis_set().unwrap();
    assert_eq!(shared_set.addrs(), set.addrs());
    assert_external(shared_set.nodes()[1].resume().unwrap_err());

    let shared_etcd = shared_etcd().unwrap();
    assert_eq!(shared_etcd.endpoints(), etcd.endpoints());
    assert_eq!(shared_etcd.pid(0), None);
    let key = unique_name("ext");
    shared_etcd.put(0, &key, b"v").unwrap();
    assert_eq!(etcd.get(0, &key).unwrap().as_deref(), Some(&b"v"[..]));
    assert_external(shared_etcd.pause(0).unwrap_err());

    let shared_zk = shared_zk().unwrap();
    assert_eq!(shared_zk.connect_string(), zk.connect_string());
    assert_eq!(shared_zk.leader().unwrap(), 0);
    assert_external(shared_zk.pause(0).unwrap_err());
}
