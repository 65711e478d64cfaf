//! The conformance harness of `lock-redis`: one server over plain TCP or
//! mutual TLS, the primary of a Sentinel-managed deployment, or a Redis
//! Cluster.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lock_conformance::{async_trait, Harness};
use lock_core::{Capabilities, Fencing, LockError, LockName, LockService, TlsConfig};
use lock_redis::kit::layout::{Keys, LeaderKeys};
use lock_redis::{RedisLock, RedisLockConfig};
use lock_testbed::{
    shared_redis, RedisClusterSet, RedisOptions, RedisServer, RespValue, SentinelSet,
};

/// What the suite runs against.
#[derive(Clone, Copy)]
pub enum Deployment {
    /// The testbed's shared redis-server.
    Single,
    /// A redis-server of its own, reached over mutual TLS.
    Tls,
    /// The primary of a Sentinel set (1 primary, 2 replicas, 3 sentinels).
    Sentinel,
    /// A Redis Cluster (3 primaries, 3 replicas).
    Cluster,
}

/// The suite's view of the deployment.
struct Redis {
    deployment: Deployment,
    server: Option<&'static RedisServer>,
    sentinels: Option<&'static SentinelSet>,
    cluster: Option<&'static RedisClusterSet>,
}

impl Redis {
    fn start(deployment: Deployment) -> Self {
        let mut redis = Self {
            deployment,
            server: None,
            sentinels: None,
            cluster: None,
        };
        match deployment {
            Deployment::Single => {
                redis.server = Some(
                    shared_redis()
                        .unwrap_or_else(|e| panic!("starting the shared redis-server: {e}")),
                );
            }
            Deployment::Tls => redis.server = Some(tls_redis()),
            Deployment::Sentinel => redis.sentinels = Some(sentinel_set()),
            Deployment::Cluster => redis.cluster = Some(cluster_set()),
        }
        redis
    }

    /// The URL and TLS files of a client that reaches the deployment at
    /// `addrs` (one per [`Harness::upstreams`] entry).
    fn target(&self, addrs: &[SocketAddr]) -> RedisLockConfig {
        match (self.deployment, self.sentinels, self.cluster) {
            (Deployment::Cluster, _, Some(set)) => {
                // The nodes started as primaries are the seeds; every node,
                // as the cluster announces it, is reached at `addrs`.
                let nodes: Vec<SocketAddr> = set.nodes().iter().map(RedisServer::addr).collect();
                let seeds: Vec<String> = set
                    .primaries()
                    .iter()
                    .map(|p| {
                        let i = nodes
                            .iter()
                            .position(|n| n == p)
                            .expect("a primary is a node");
                        addrs[i].to_string()
                    })
                    .collect();
                let mut config =
                    RedisLockConfig::new(format!("redis+cluster://{}", seeds.join(",")));
                for (real, at) in nodes.iter().zip(addrs) {
                    if real != at {
                        config = config.map_address(real.to_string(), at.to_string());
                    }
                }
                config
            }
            (Deployment::Sentinel, Some(set), _) => {
                let sentinels = set.sentinel_addrs().len();
                let hosts: Vec<String> = addrs[..sentinels].iter().map(|a| a.to_string()).collect();
                let mut config = RedisLockConfig::new(format!(
                    "redis+sentinel://{}/{}",
                    hosts.join(","),
                    set.master_name()
                ));
                // The data nodes as the sentinels report them, reached at
                // `addrs` (proxies in the fault cases).
                for (real, at) in set.data_addrs().iter().zip(&addrs[sentinels..]) {
                    if real != at {
                        config = config.map_address(real.to_string(), at.to_string());
                    }
                }
                config
            }
            (Deployment::Tls, ..) => {
                let files = self.single().tls_files().expect("a TLS server");
                RedisLockConfig::new(format!("rediss://{}/", addrs[0])).tls(
                    TlsConfig::new()
                        .ca(files.ca())
                        .identity(files.client_cert(), files.client_key()),
                )
            }
            _ => RedisLockConfig::new(format!("redis://{}/", addrs[0])),
        }
    }

    fn single(&self) -> &'static RedisServer {
        self.server.expect("a single-server deployment")
    }

    fn config(&self) -> RedisLockConfig {
        self.target(&self.upstreams())
            .request_timeout(Duration::from_millis(500))
    }

    fn keys(name: &LockName) -> Keys {
        Keys::new("", name.as_str())
    }

    /// One command about `key` (a key or a channel) to the server, the
    /// primary now, or the owner of `key`'s slot (the testbed client is
    /// synchronous: run it off the runtime).
    async fn cmd(&self, key: &str, args: &[&str]) -> RespValue {
        let (server, sentinels, cluster) = (self.server, self.sentinels, self.cluster);
        let key = key.to_string();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let server = match (server, sentinels, cluster) {
                (Some(server), ..) => server,
                (_, Some(set), _) => {
                    let primary = set
                        .primary()
                        .unwrap_or_else(|e| panic!("the Sentinel set's primary: {e}"));
                    set.node(primary)
                }
                (.., Some(set)) => {
                    let owner = set
                        .owner_of_slot(RedisClusterSet::slot_of(&key))
                        .unwrap_or_else(|e| panic!("the owner of {key}: {e}"));
                    set.node(owner)
                }
                (None, None, None) => unreachable!("a deployment has servers"),
            };
            server
                .cmd(&refs)
                .unwrap_or_else(|e| panic!("redis {args:?}: {e}"))
        })
        .await
        .expect("redis command task")
    }
}

#[async_trait]
impl Harness for Redis {
    async fn client(&self) -> Arc<dyn LockService> {
        let config = self.config();
        let client = lock_testbed::retry_set_up(
            "connect to the deployment",
            LockError::is_retryable,
            || RedisLock::connect(config.clone()),
        )
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", config.redacted_url()));
        Arc::new(client)
    }

    fn ttl(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn remove_behind_back(&self, name: &LockName) {
        let keys = Self::keys(name);
        self.cmd(
            keys.lock(),
            &["DEL", keys.lock(), keys.rw(), keys.permits()],
        )
        .await;
    }

    async fn leftovers(&self, name: &LockName) -> Vec<String> {
        let keys = Self::keys(name);
        let mut left = Vec::new();
        // Holders of every primitive (and the mutex holder's description),
        // and the waiters of the mutex and the read-write lock.
        for key in [
            keys.lock(),
            keys.holder(),
            keys.queue(),
            keys.lapse(),
            keys.rw(),
            keys.rw_queue(),
            keys.rw_lapse(),
            keys.permits(),
        ] {
            if self.cmd(key, &["EXISTS", key]).await != RespValue::Int(0) {
                left.push(format!("key {key}"));
            }
        }
        // The election's leader, its info, its line and its lock-delay marker.
        let leader = LeaderKeys::new("", name.as_str());
        for key in [
            leader.leader(),
            leader.info(),
            leader.queue(),
            leader.lapse(),
            leader.delay(),
        ] {
            if self.cmd(key, &["EXISTS", key]).await != RespValue::Int(0) {
                left.push(format!("key {key}"));
            }
        }
        // No client may stay subscribed to a release channel after its
        // waiters left, nor to a change channel after its followers did
        // (on Cluster the channels are shard channels).
        let numsub = match self.deployment {
            Deployment::Cluster => "SHARDNUMSUB",
            _ => "NUMSUB",
        };
        for channel in [
            keys.released(),
            keys.rw_released(),
            keys.permits_released(),
            leader.released(),
            leader.changed(),
        ] {
            match self.cmd(channel, &["PUBSUB", numsub, channel]).await {
                RespValue::Array(Some(items)) if items.len() == 2 => {
                    if items[1] != RespValue::Int(0) {
                        left.push(format!("subscribers of {channel}: {:?}", items[1]));
                    }
                }
                other => panic!("PUBSUB NUMSUB answered {other:?}"),
            }
        }
        left
    }

    fn upstreams(&self) -> Vec<SocketAddr> {
        match (self.deployment, self.sentinels, self.cluster) {
            // Every node (reached at the addresses the cluster announces,
            // mapped).
            (Deployment::Cluster, _, Some(set)) => {
                set.nodes().iter().map(RedisServer::addr).collect()
            }
            // The sentinels, then the data nodes (reached at the addresses
            // the sentinels report, mapped).
            (Deployment::Sentinel, Some(set), _) => {
                let mut all = set.sentinel_addrs();
                all.extend(set.data_addrs());
                all
            }
            (Deployment::Tls, ..) => vec![self.single().tls_addr().expect("a TLS server")],
            _ => vec![self.single().addr()],
        }
    }

    async fn client_at(
        &self,
        addrs: &[SocketAddr],
        timeout: Duration,
    ) -> Result<Arc<dyn LockService>, LockError> {
        let config = self
            .target(addrs)
            .connect_timeout(timeout)
            .request_timeout(timeout);
        let client = RedisLock::connect(config).await?;
        Ok(Arc::new(client))
    }
}

/// Runs the suite against `deployment`.
pub fn run(deployment: Deployment) -> ExitCode {
    let fault_tolerance = match deployment {
        Deployment::Sentinel => lock_redis::SENTINEL_FAULT_TOLERANCE,
        Deployment::Cluster => lock_redis::CLUSTER_FAULT_TOLERANCE,
        _ => "none: a single server",
    };
    let expected = Capabilities::new("redis")
        .with_fencing(Fencing::ServerClock)
        .with_fifo(true)
        .with_loss_events(false)
        .with_notified_wait(true)
        .with_remote(true)
        .with_fault_tolerance(fault_tolerance)
        .with_read_write(true)
        .with_semaphore(true)
        .with_describes_holder(true)
        .with_election(true);
    lock_conformance::run(|| async move { Redis::start(deployment) }, expected)
}

/// One Sentinel set for the whole run (stopped with the test process).
fn sentinel_set() -> &'static SentinelSet {
    static SET: OnceLock<SentinelSet> = OnceLock::new();
    SET.get_or_init(|| {
        SentinelSet::start().unwrap_or_else(|e| panic!("starting a Sentinel set: {e}"))
    })
}

/// One Redis Cluster for the whole run (stopped with the test process).
fn cluster_set() -> &'static RedisClusterSet {
    static SET: OnceLock<RedisClusterSet> = OnceLock::new();
    SET.get_or_init(|| {
        RedisClusterSet::start().unwrap_or_else(|e| panic!("starting a Redis Cluster: {e}"))
    })
}

/// One redis-server with a TLS port for the whole run (stopped with the
/// test process).
fn tls_redis() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        RedisServer::start_with(RedisOptions {
            tls: true,
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("starting a redis-server with TLS: {e}"))
    })
}
