//! Real redis-server: start, answer, pause, kill, restart, premature expiry, sharing.

use std::time::{Duration, Instant};

use lock_testbed::{
    pid_alive, shared_redis, shared_redis_set, unique_name, RedisOptions, RedisServer, RedisSet,
    RespValue, TestbedError,
};

fn pong() -> RespValue {
    RespValue::Simple("PONG".into())
}

fn bulk(s: &str) -> RespValue {
    RespValue::Bulk(Some(s.as_bytes().to_vec()))
}

/// A started Redis answers PING and stores keys; drop kills it and removes its dir.
#[test]
fn redis_starts_answers_and_is_gone_after_drop() {
    let redis = RedisServer::start().unwrap();
    assert_eq!(redis.addr().ip().to_string(), "127.0.0.1");
    assert_eq!(
        redis.url(),
        format!("redis://127.0.0.1:{}/", redis.addr().port())
    );
    assert_eq!(redis.cmd(&["PING"]).unwrap(), pong());
    let key = unique_name("k");
    assert_eq!(
        redis.cmd(&["SET", &key, "v", "PX", "10000"]).unwrap(),
        RespValue::Simple("OK".into())
    );
    assert_eq!(redis.cmd(&["GET", &key]).unwrap(), bulk("v"));
    assert!(matches!(
        redis.cmd(&["NOSUCHCOMMAND"]).unwrap(),
        RespValue::Error(_)
    ));
    // Persistence is off by default.
    let save = redis.cmd(&["CONFIG", "GET", "appendonly"]).unwrap();
    assert_eq!(
        save,
        RespValue::Array(Some(vec![bulk("appendonly"), bulk("no")]))
    );
    let pid = redis.pid().unwrap();
    let dir = redis.dir().unwrap().to_path_buf();
    assert!(pid_alive(pid));
    assert!(dir.join("redis.log").exists());
    let addr = redis.addr();
    drop(redis);
    assert!(!pid_alive(pid), "redis pid {pid} still alive after drop");
    assert!(!dir.exists(), "temp dir {} left behind", dir.display());
    let err = lock_testbed::resp_command(addr, &["PING"], Duration::from_millis(500)).unwrap_err();
    assert!(err.is_connection_error(), "{err}");
}

/// A paused Redis accepts the connection but never answers; after resume it answers.
#[test]
fn paused_redis_times_out_and_answers_after_resume() {
    let redis = RedisServer::start().unwrap();
    redis.pause().unwrap();
    let started = Instant::now();
    let err = redis.cmd(&["PING"]).unwrap_err();
    let waited = started.elapsed();
    assert!(err.is_timeout(), "expected a timeout, got: {err}");
    assert!(
        waited >= Duration::from_millis(1900),
        "gave up after {waited:?}"
    );
    redis.resume().unwrap();
    assert_eq!(redis.cmd(&["PING"]).unwrap(), pong());
}

/// With `appendfsync always` a key survives SIGKILL + restart; without AOF it is lost.
#[test]
fn restart_with_aof_keeps_key_without_aof_loses_it() {
    let mut durable = RedisServer::start_with(RedisOptions {
        persistence: lock_testbed::Persistence::AofAlways,
        ..Default::default()
    })
    .unwrap();
    let mut plain = RedisServer::start().unwrap();
    let key = unique_name("durable");
    for server in [&durable, &plain] {
        assert_eq!(
            server.cmd(&["SET", &key, "kept"]).unwrap(),
            RespValue::Simple("OK".into())
        );
    }
    let (durable_addr, plain_addr) = (durable.addr(), plain.addr());
    let old_pids = [durable.pid().unwrap(), plain.pid().unwrap()];

    durable.kill().unwrap();
    plain.kill().unwrap();
    assert_eq!(durable.pid(), None);
    for pid in old_pids {
        assert!(!pid_alive(pid));
    }
    let err = durable.cmd(&["PING"]).unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    let err = durable.pause().unwrap_err();
    assert!(matches!(err, TestbedError::NotRunning { .. }), "{err}");

    durable.restart().unwrap();
    plain.restart().unwrap();
    assert_eq!(durable.addr(), durable_addr, "restart must reuse the port");
    assert_eq!(plain.addr(), plain_addr);
    assert_eq!(durable.cmd(&["GET", &key]).unwrap(), bulk("kept"));
    assert_eq!(plain.cmd(&["GET", &key]).unwrap(), RespValue::Bulk(None));
    // Restart of a running server works too (kill first).
    durable.restart().unwrap();
    assert_eq!(durable.cmd(&["GET", &key]).unwrap(), bulk("kept"));
}

/// `expire_now` makes a key vanish on that node only; a missing key is an error.
#[test]
fn expire_now_removes_the_key_on_one_node_only() {
    let set = RedisSet::start(2).unwrap();
    let key = unique_name("lock");
    for node in set.nodes() {
        node.cmd(&["SET", &key, "token", "PX", "30000"]).unwrap();
    }
    set.nodes()[0].expire_now(&key).unwrap();
    assert_eq!(
        set.nodes()[0].cmd(&["GET", &key]).unwrap(),
        RespValue::Bulk(None)
    );
    assert_eq!(set.nodes()[1].cmd(&["GET", &key]).unwrap(), bulk("token"));
    let err = set.nodes()[0].expire_now(&key).unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
}

/// Five independent nodes: distinct ports, each answers, data is not shared.
#[test]
fn redis_set_starts_five_independent_nodes() {
    let mut set = RedisSet::start(5).unwrap();
    assert_eq!(set.len(), 5);
    let urls = set.urls();
    let mut ports: Vec<u16> = set.nodes().iter().map(|n| n.addr().port()).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 5);
    assert!(urls.iter().all(|u| u.starts_with("redis://127.0.0.1:")));
    let key = unique_name("only-on-0");
    set.nodes()[0].cmd(&["SET", &key, "x"]).unwrap();
    for node in &set.nodes()[1..] {
        assert_eq!(node.cmd(&["PING"]).unwrap(), pong());
        assert_eq!(node.cmd(&["GET", &key]).unwrap(), RespValue::Bulk(None));
    }
    set.node_mut(3).kill().unwrap();
    assert!(set.nodes()[3].cmd(&["PING"]).is_err());
    assert_eq!(set.nodes()[4].cmd(&["PING"]).unwrap(), pong());
    set.node_mut(3).restart().unwrap();
    assert_eq!(set.nodes()[3].cmd(&["PING"]).unwrap(), pong());
    let pids: Vec<u32> = set.nodes().iter().filter_map(RedisServer::pid).collect();
    assert_eq!(pids.len(), 5);
    drop(set);
    for pid in pids {
        assert!(!pid_alive(pid), "pid {pid} alive after drop");
    }
}

/// PDEATHSIG follows the forking thread: a server started on a thread that then ends
/// must keep running (children are forked by the long-lived spawner thread).
#[test]
fn server_started_on_an_exited_thread_keeps_running() {
    let redis = std::thread::spawn(RedisServer::start)
        .join()
        .expect("thread panicked")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(pid_alive(redis.pid().unwrap()));
    assert_eq!(redis.cmd(&["PING"]).unwrap(), pong());
}

/// The shared Redis is started once per process and outlives the thread that started it.
#[test]
fn shared_redis_is_started_once_and_outlives_its_first_thread() {
    let addr = std::thread::spawn(|| shared_redis().map(RedisServer::addr))
        .join()
        .expect("thread panicked")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let again = shared_redis().unwrap();
    assert_eq!(again.addr(), addr);
    assert_eq!(again.cmd(&["PING"]).unwrap(), pong());
    assert!(std::ptr::eq(again, shared_redis().unwrap()));
}

/// The shared set has five live nodes.
#[test]
fn shared_redis_set_has_five_nodes() {
    let set = shared_redis_set().unwrap();
    assert_eq!(set.nodes().len(), 5);
    for node in set.nodes() {
        assert_eq!(node.cmd(&["PING"]).unwrap(), pong());
    }
}

/// A handle on an external server runs commands but refuses faults; dropping it leaves
/// the server alone.
#[test]
fn external_redis_refuses_faults() {
    let own = RedisServer::start().unwrap();
    let mut external = RedisServer::external(own.addr());
    assert_eq!(external.pid(), None);
    assert_eq!(external.cmd(&["PING"]).unwrap(), pong());
    for err in [
        external.pause().unwrap_err(),
        external.resume().unwrap_err(),
        external.kill().unwrap_err(),
        external.restart().unwrap_err(),
    ] {
        assert!(matches!(err, TestbedError::External { .. }), "{err}");
        assert!(err.to_string().contains("started elsewhere"), "{err}");
    }
    drop(external);
    assert_eq!(own.cmd(&["PING"]).unwrap(), pong());
}
