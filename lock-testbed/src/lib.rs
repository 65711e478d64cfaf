//! Real servers for distlock's tests: Redis, etcd, ZooKeeper and PostgreSQL started
//! on free loopback ports in fresh temp dirs, plus fault injection (pause, kill, restart,
//! premature expiry) and a fault-injecting TCP [`Proxy`].
//!
//! No mocks and no silent skips: a missing server binary is an error whose message
//! names the Debian package to install.
//!
//! # Quick start
//!
//! ```no_run
//! use lock_testbed::{shared_redis, unique_name, RedisServer, RespValue};
//!
//! // Cheap: one Redis per test process, shared by every test that does not break it.
//! let redis = shared_redis()?;
//! let key = unique_name("my-lock");
//! redis.cmd(&["SET", &key, "v", "PX", "5000"])?;
//!
//! // Destructive tests start their own and fault it.
//! let own = RedisServer::start()?;
//! own.pause()?;
//! assert!(own.cmd(&["PING"]).unwrap_err().is_timeout());
//! own.resume()?;
//! assert_eq!(own.cmd(&["PING"])?, RespValue::Simple("PONG".into()));
//! # Ok::<(), lock_testbed::TestbedError>(())
//! ```
//!
//! # What it starts
//!
//! | type | what | ready when | typical start-up here |
//! |---|---|---|---|
//! | [`RedisServer`] | `redis-server --save '' --appendonly no --repl-diskless-sync-delay 0` (or RDB snapshots, AOF `everysec` or `always`: [`Persistence`]) | `PING` answers `PONG` (deadline 5 s) | 15-20 ms |
//! | [`RedisSet`] | N independent Redis (Redlock) | every node answers `PING` | same, in parallel |
//! | [`SentinelSet`] | Redis Sentinel: a primary, 2 replicas (`--replicaof`), 3 sentinels (`redis-server sentinel.conf --sentinel`, quorum 2, down-after 1 s, failover-timeout 2 s: [`SentinelOptions`]) | every node answers `PING`, the replicas' links are up and they applied a write, every sentinel names the primary and sees both replicas and the 2 other sentinels up (deadline 20 s) | 0.7-1.9 s, with TLS too |
//! | [`RedisClusterSet`] | Redis Cluster: 3 primaries, 1 replica each (`--cluster-enabled yes`, node timeout 1 s: [`ClusterOptions`]), slots split as `redis-cli --cluster create` does | `CLUSTER INFO` says `cluster_state:ok` and `cluster_known_nodes:6` on every node, the views agree, each replica's link is up (deadline 20 s) | 2.1 s (a new primary waits 2 s before it says `ok`) |
//! | [`EtcdCluster`] | N members, `--heartbeat-interval=10 --election-timeout=100` | `GET /health` is `{"health":"true"}` on every member (deadline 20 s) | 0.2-2.5 s |
//! | [`ZkEnsemble`] | N ZooKeeper servers (1 = standalone), JVM `-Xms64m -Xmx256m -XX:+UseSerialGC` | `srvr` answers a `Mode:` line on every server (deadline 20 s) | 0.5-1 s single, 1.5-5 s ensemble of 3 |
//! | [`PostgresServer`] | `initdb` then `postgres` (loopback TCP only, `fsync=off`), as the system user `postgres` when run as root | `postmaster.pid` says `ready` and the port accepts (deadline 20 s) | about 1 s (`initdb` 0.6 s) |
//!
//! Faults: pause/resume (SIGSTOP/SIGCONT; both return once every thread of the server
//! is stopped / running again), kill (SIGKILL + reap), restart on the same port and data
//! dir, [`RedisServer::expire_now`] (`PEXPIRE key 1`), and [`Proxy`] latency, held
//! replies, blackhole, reset, cut/heal; a ZooKeeper ensemble started with
//! [`ZkEnsemble::start_with_quorum_links`] has a proxy on every server-to-server
//! quorum link ([`ZkEnsemble::quorum_link`]), to make one follower lag behind its leader.
//! A [`SentinelSet`] kills its primary and waits for the sentinels' failover
//! ([`SentinelSet::kill_primary`], [`SentinelSet::wait_for_failover`],
//! [`SentinelSet::failover`]), cuts one replica off its primary
//! ([`SentinelSet::lag_replica`]) and makes it the only one the sentinels may
//! promote ([`SentinelSet::prefer`]); a [`RedisClusterSet`] moves a slot step by
//! step ([`RedisClusterSet::begin_migration`], [`RedisClusterSet::move_keys`],
//! [`RedisClusterSet::finish_migration`]) and fails a primary over to its
//! replica ([`RedisClusterSet::kill_node`], [`RedisClusterSet::wait_for_failover`]).
//!
//! Probes for tests: [`RedisServer::cmd`], [`resp_command`] and [`RespConnection`]
//! (raw RESP), [`EtcdCluster::put`]/[`EtcdCluster::get`] (JSON gateway),
//! [`ZkEnsemble::create`]/[`ZkEnsemble::get_data`]/[`ZkEnsemble::srvr`], and `leader()`
//! on both clusters. The lifecycle API is synchronous (std only), so it works from any
//! tokio runtime or none; the proxy runs on a thread of its own.
//!
//! # One fixture per backend
//!
//! [`Kind`] describes each backend's test servers once: how many
//! ([`Kind::members`]), how they start ([`Kind::start`], typed with
//! [`Kind::start_with`]), the shared ones ([`Kind::shared`]) and a client
//! URL with the tests' timeouts ([`Kind::url`]). Every server type
//! implements [`Cluster`] (addresses, URL, pause, kill, restart, leader),
//! so a test that faults servers needs no match on the backend.
//!
//! # Environment variables
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `DISTLOCK_REDIS_SERVER` | `redis-server` on `PATH` (Debian package `redis-server`) | Redis server binary, a name on `PATH` or a path |
//! | `DISTLOCK_ETCD` | `etcd` on `PATH` (Debian package `etcd-server`) | etcd binary |
//! | `DISTLOCK_ETCDCTL` | `etcdctl` on `PATH` (Debian package `etcd-client`) | etcdctl, see [`etcdctl_path`] (this crate itself talks to etcd's HTTP gateway) |
//! | `DISTLOCK_PYTHON` | `/usr/bin/python3` (Debian's, with the package `python3-kazoo`) | Python with `kazoo`, see [`python_path`] (the kazoo interop test) |
//! | `DISTLOCK_JAVA` | `java` on `PATH` (Debian package `openjdk-17-jre-headless`) | Java runtime for ZooKeeper |
//! | `DISTLOCK_POSTGRES_BIN_DIR` | the highest `/usr/lib/postgresql/<major>/bin` (Debian package `postgresql`) | directory holding `initdb` and `postgres` |
//! | `DISTLOCK_POSTGRES_USER` | `postgres` (created by the Debian package `postgresql`) | system user PostgreSQL runs as when the tests run as root (it refuses root) |
//! | `DISTLOCK_ZK_CLASSPATH` | `/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar` (Debian packages `zookeeper`, `libslf4j-java`) | class path holding `org.apache.zookeeper.server.quorum.QuorumPeerMain` |
//! | `DISTLOCK_TEST_REDIS` | unset: start one | `host:port` of a Redis started elsewhere, returned by [`shared_redis`] |
//! | `DISTLOCK_TEST_REDIS_NODES` | unset: start 5 | `h:p,h:p,...` of independent Redis nodes, returned by [`shared_redis_set`] |
//! | `DISTLOCK_TEST_ETCD` | unset: start 1 member | `h:p[,h:p...]` etcd client endpoints, returned by [`shared_etcd`] |
//! | `DISTLOCK_TEST_ZK` | unset: start 1 server | `h:p[,h:p...]` ZooKeeper client endpoints, returned by [`shared_zk`] |
//!
//! The `DISTLOCK_TEST_*` servers must answer when first used (else an error, never a
//! skip); fault methods on them return [`TestbedError::External`].
//!
//! # Process clean-up
//!
//! - Dropping a handle SIGKILLs and reaps its processes and removes its temp dir.
//! - Shared servers live in statics that are never dropped: a `libc::atexit` handler
//!   SIGKILLs and reaps every process still registered and removes the temp dirs when
//!   the test binary exits, normally or after a failed test.
//! - Every server runs with `PR_SET_PDEATHSIG = SIGKILL`, so it dies even if the test
//!   process is SIGKILLed. Children are forked by one long-lived spawner thread (the
//!   death signal follows the forking *thread*, and libtest's test threads are
//!   short-lived), so a server started inside any test outlives that test's thread.
//! - [`pid_alive`] lets a test assert that the PIDs it started are gone.
//!
//! # Servers started elsewhere
//!
//! Besides the env vars above, [`RedisServer::external`], [`RedisSet::external`],
//! [`EtcdCluster::external`] and [`ZkEnsemble::external`] wrap addresses of servers
//! you run yourself (docker compose, CI services).
#![deny(missing_docs)]

mod bins;
mod cluster;
mod curator;
mod error;
mod etcd;
mod fixture;
mod http;
mod log_capture;
mod member;
mod postgres;
mod process;
mod proxy;
mod pubsub;
mod redis;
mod redis_cluster;
mod resp;
mod sentinel;
mod set_up;
mod shared;
mod tls;
mod util;
mod zk;

pub use cluster::Cluster;
pub use curator::CuratorLatch;
pub use error::TestbedError;
pub use etcd::{etcd_metrics, EtcdCluster};
pub use fixture::{Kind, StartOptions, Started};
pub use log_capture::LogCapture;
pub use postgres::{PostgresServer, ENV_POSTGRES_USER, POSTGRES_DATABASE, POSTGRES_USER};
pub use process::{pid_alive, set_data_root};
pub use proxy::Proxy;
pub use redis::{Persistence, RedisOptions, RedisServer, RedisSet};
pub use redis_cluster::{ClusterOptions, RedisClusterSet, CLUSTER_SLOTS};
pub use resp::{resp_command, RespConnection, RespValue};
pub use sentinel::{SentinelOptions, SentinelServer, SentinelSet};
pub use set_up::{retry_set_up, SET_UP_CONNECT};
pub use shared::{
    shared_etcd, shared_redis, shared_redis_set, shared_zk, ENV_TEST_ETCD, ENV_TEST_REDIS,
    ENV_TEST_REDIS_NODES, ENV_TEST_ZK, SHARED_REDIS_NODES,
};
pub use tls::TlsFiles;
pub use util::{free_port, unique_name};
pub use zk::{zk_session_expiry, ZkEnsemble, ZkOptions};

/// The `etcdctl` binary (`DISTLOCK_ETCDCTL`, default `etcdctl` on `PATH`), for tests
/// that want to drive etcd from the command line; an error naming the Debian package
/// `etcd-client` when missing.
pub fn etcdctl_path() -> Result<std::path::PathBuf, TestbedError> {
    bins::resolve(bins::ETCDCTL)
}

/// The Python interpreter with `kazoo` for interop tests (`DISTLOCK_PYTHON`,
/// default Debian's `/usr/bin/python3`, which the package `python3-kazoo`
/// serves); an error naming that package when missing.
pub fn python_path() -> Result<std::path::PathBuf, TestbedError> {
    bins::resolve(bins::PYTHON)
}

#[cfg(test)]
mod tests {
    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn public_handles_are_send_and_sync() {
        assert_send_sync::<crate::RedisServer>();
        assert_send_sync::<crate::RedisSet>();
        assert_send_sync::<crate::EtcdCluster>();
        assert_send_sync::<crate::ZkEnsemble>();
        assert_send_sync::<crate::Started>();
        assert_send_sync::<crate::PostgresServer>();
        assert_send_sync::<crate::Proxy>();
        assert_send_sync::<crate::TestbedError>();
        assert_send_sync::<crate::RespConnection>();
        assert_send_sync::<crate::SentinelSet>();
        assert_send_sync::<crate::SentinelServer>();
        assert_send_sync::<crate::RedisClusterSet>();
    }
}
