//! Servers shared by every test of one test binary, started lazily once.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::etcd::resolve_all;
use crate::{EtcdCluster, RedisServer, RedisSet, RespValue, TestbedError, ZkEnsemble};

/// Env var: a Redis started elsewhere, `host:port`, used by [`shared_redis`].
pub const ENV_TEST_REDIS: &str = "DISTLOCK_TEST_REDIS";
/// Env var: Redis nodes started elsewhere, `h:p,h:p,...`, used by [`shared_redis_set`].
pub const ENV_TEST_REDIS_NODES: &str = "DISTLOCK_TEST_REDIS_NODES";
/// Env var: etcd client endpoints started elsewhere, `h:p[,h:p...]`, used by [`shared_etcd`].
pub const ENV_TEST_ETCD: &str = "DISTLOCK_TEST_ETCD";
/// Env var: ZooKeeper servers started elsewhere, `h:p[,h:p...]`, used by [`shared_zk`].
pub const ENV_TEST_ZK: &str = "DISTLOCK_TEST_ZK";

/// Number of Redis nodes of a Redlock fixture ([`Kind::members`](crate::Kind::members)),
/// and of [`shared_redis_set`] when it starts its own.
pub const SHARED_REDIS_NODES: usize = 5;

static REDIS: OnceLock<RedisServer> = OnceLock::new();
static REDIS_LOCK: Mutex<()> = Mutex::new(());
static REDIS_SET: OnceLock<RedisSet> = OnceLock::new();
static REDIS_SET_LOCK: Mutex<()> = Mutex::new(());
static ETCD: OnceLock<EtcdCluster> = OnceLock::new();
static ETCD_LOCK: Mutex<()> = Mutex::new(());
static ZK: OnceLock<ZkEnsemble> = OnceLock::new();
static ZK_LOCK: Mutex<()> = Mutex::new(());

/// Initialise `cell` once; a failed start is retried by the next caller.
fn shared<T>(
    cell: &'static OnceLock<T>,
    lock: &'static Mutex<()>,
    init: impl FnOnce() -> Result<T, TestbedError>,
) -> Result<&'static T, TestbedError> {
    if let Some(v) = cell.get() {
        return Ok(v);
    }
    let _guard = lock.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(v) = cell.get() {
        return Ok(v);
    }
    let value = init()?;
    Ok(cell.get_or_init(|| value))
}

fn env_list(var: &'static str) -> Result<Option<Vec<String>>, TestbedError> {
    let Ok(value) = std::env::var(var) else {
        return Ok(None);
    };
    if value.trim().is_empty() {
        return Ok(None);
    }
    let items: Vec<String> = value
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if items.iter().any(|s| !s.contains(':')) {
        return Err(TestbedError::BadEnv {
            var,
            value,
            reason: "expected host:port[,host:port...]".into(),
        });
    }
    Ok(Some(items))
}

fn bad_env(var: &'static str, items: &[String], e: &TestbedError) -> TestbedError {
    TestbedError::BadEnv {
        var,
        value: items.join(","),
        reason: format!("the server there does not answer: {e}; unset {var} to start one"),
    }
}

fn external_redis(var: &'static str, items: &[String]) -> Result<Vec<RedisServer>, TestbedError> {
    let addrs = resolve_all(items, "Redis").map_err(|e| bad_env(var, items, &e))?;
    let servers: Vec<RedisServer> = addrs.into_iter().map(RedisServer::external).collect();
    for s in &servers {
        match crate::resp::resp_command(s.addr(), &["PING"], Duration::from_secs(2)) {
            Ok(RespValue::Simple(p)) if p == "PONG" => {}
            Ok(other) => {
                let e = TestbedError::protocol("PING", format!("{other:?}"));
                return Err(bad_env(var, items, &e));
            }
            Err(e) => return Err(bad_env(var, items, &e)),
        }
    }
    Ok(servers)
}

/// The Redis shared by all tests of this process, started on first use and stopped at
/// process exit. With `DISTLOCK_TEST_REDIS=host:port` set, that server instead (it must
/// answer PING; fault methods on it return [`TestbedError::External`]).
///
/// Do not break it (pause, kill, FLUSHALL): other tests use it at the same time. Use
/// [`unique_name`](crate::unique_name) for keys.
pub fn shared_redis() -> Result<&'static RedisServer, TestbedError> {
    shared(&REDIS, &REDIS_LOCK, || match env_list(ENV_TEST_REDIS)? {
        Some(items) if items.len() == 1 => {
            external_redis(ENV_TEST_REDIS, &items).map(|mut v| v.remove(0))
        }
        Some(items) => Err(TestbedError::BadEnv {
            var: ENV_TEST_REDIS,
            value: items.join(","),
            reason: "expected exactly one host:port".into(),
        }),
        None => RedisServer::start(),
    })
}

/// Five independent Redis servers shared by all tests of this process (for Redlock),
/// started on first use. With `DISTLOCK_TEST_REDIS_NODES=h:p,h:p,...` set, those.
pub fn shared_redis_set() -> Result<&'static RedisSet, TestbedError> {
    shared(&REDIS_SET, &REDIS_SET_LOCK, || {
        match env_list(ENV_TEST_REDIS_NODES)? {
            Some(items) => {
                let nodes = external_redis(ENV_TEST_REDIS_NODES, &items)?;
                let addrs: Vec<_> = nodes.iter().map(RedisServer::addr).collect();
                Ok(RedisSet::external(&addrs))
            }
            None => RedisSet::start(SHARED_REDIS_NODES),
        }
    })
}

/// A one-member etcd shared by all tests of this process, started on first use. With
/// `DISTLOCK_TEST_ETCD=h:p[,h:p...]` set, that cluster (every endpoint must be healthy).
pub fn shared_etcd() -> Result<&'static EtcdCluster, TestbedError> {
    shared(&ETCD, &ETCD_LOCK, || match env_list(ENV_TEST_ETCD)? {
        Some(items) => {
            let cluster =
                EtcdCluster::external(&items).map_err(|e| bad_env(ENV_TEST_ETCD, &items, &e))?;
            cluster
                .leader()
                .map_err(|e| bad_env(ENV_TEST_ETCD, &items, &e))?;
            Ok(cluster)
        }
        None => EtcdCluster::start(1),
    })
}

/// A standalone ZooKeeper shared by all tests of this process, started on first use.
/// With `DISTLOCK_TEST_ZK=h:p[,h:p...]` set, those servers (each must accept a session).
pub fn shared_zk() -> Result<&'static ZkEnsemble, TestbedError> {
    shared(&ZK, &ZK_LOCK, || match env_list(ENV_TEST_ZK)? {
        Some(items) => {
            let ensemble =
                ZkEnsemble::external(&items).map_err(|e| bad_env(ENV_TEST_ZK, &items, &e))?;
            for i in 0..ensemble.len() {
                ensemble
                    .check_session(i)
                    .map_err(|e| bad_env(ENV_TEST_ZK, &items, &e))?;
            }
            Ok(ensemble)
        }
        None => ZkEnsemble::start(1),
    })
}
