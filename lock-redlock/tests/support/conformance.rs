//! The conformance harness of `lock-redlock`, over plain TCP or mutual TLS.
//! Fencing cases are deselected by capability (Redlock has no tokens);
//! `capabilities_as_declared` checks that the backend reports exactly what
//! is declared here.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lock_conformance::testbed::{shared_redis_set, RedisOptions, RedisSet, RespValue, TlsFiles};
use lock_conformance::{async_trait, Harness};
use lock_core::{Capabilities, Fencing, LockError, LockName, LockService, TlsConfig};
use lock_redis::kit::layout::LeaderKeys;
use lock_redlock::{RedlockConfig, RedlockLock};

/// The per-node timeout of the suite's clients: above the default 50 ms,
/// because the suite runs many cases at once on a loaded 2-core machine and
/// a node answer late there is noise, not a fault under test (the fault
/// tests use the default).
const NODE_TIMEOUT: Duration = Duration::from_millis(200);

/// The per-node timeout over TLS: each request costs the nodes and the
/// client more there, and beside two busy loops the TLS suite's nodes
/// answered later than 200 ms (an acquire got `Unavailable` instead of
/// timing out). Still under half the suite's TTL, so a round that uses all
/// of it leaves a valid lease.
const TLS_NODE_TIMEOUT: Duration = Duration::from_millis(450);

/// The suite's view of the five nodes, reached over TLS or not.
struct Redlock {
    set: &'static RedisSet,
    tls: bool,
}

impl Redlock {
    /// A client configuration for the nodes at `addrs`.
    fn config(&self, addrs: &[SocketAddr]) -> RedlockConfig {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let urls: Vec<String> = addrs.iter().map(|a| format!("{scheme}://{a}/")).collect();
        let config = RedlockConfig::new(urls);
        if !self.tls {
            return config;
        }
        let files = TlsFiles::shared().expect("the test certificates");
        config.tls(
            TlsConfig::new()
                .ca(files.ca())
                .identity(files.client_cert(), files.client_key()),
        )
    }

    /// Runs `cmd` on every node (blocking I/O, off the runtime's workers).
    async fn on_every_node(&self, cmd: Vec<String>) -> Vec<(String, RespValue)> {
        let set = self.set;
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
            set.nodes()
                .iter()
                .map(|n| {
                    let reply = n
                        .cmd(&args)
                        .unwrap_or_else(|e| panic!("{:?} on {}: {e}", args, n.addr()));
                    (n.addr().to_string(), reply)
                })
                .collect()
        })
        .await
        .expect("testbed call")
    }
}

#[async_trait]
impl Harness for Redlock {
    async fn client(&self) -> Arc<dyn LockService> {
        let node_timeout = if self.tls {
            TLS_NODE_TIMEOUT
        } else {
            NODE_TIMEOUT
        };
        let config = self.config(&self.upstreams()).node_timeout(node_timeout);
        let lock = lock_testbed::retry_set_up(
            "connect to the Redis nodes",
            LockError::is_retryable,
            || RedlockLock::connect(config.clone()),
        )
        .await
        .expect("connect to the Redis nodes");
        Arc::new(lock)
    }

    fn ttl(&self) -> Duration {
        Duration::from_secs(1)
    }

    /// An operator deletes the key on every node.
    async fn remove_behind_back(&self, name: &LockName) {
        self.on_every_node(vec!["DEL".into(), name.to_string()])
            .await;
    }

    /// The key on any node.
    /// The lock key, and the election's leader key, info and lock-delay
    /// marker, on any node.
    async fn leftovers(&self, name: &LockName) -> Vec<String> {
        let leader = LeaderKeys::new("", name.as_str());
        let mut left = Vec::new();
        for key in [
            name.as_str(),
            leader.leader(),
            leader.info(),
            leader.delay(),
        ] {
            let seen = self
                .on_every_node(vec!["GET".into(), key.to_string()])
                .await;
            left.extend(
                seen.into_iter()
                    .filter(|(_, v)| !v.is_nil())
                    .map(|(node, v)| format!("{node}: {key} = {:?}", v.as_str())),
            );
        }
        left
    }

    fn upstreams(&self) -> Vec<SocketAddr> {
        if self.tls {
            self.set
                .nodes()
                .iter()
                .map(|n| n.tls_addr().expect("a TLS node"))
                .collect()
        } else {
            self.set.addrs()
        }
    }

    async fn client_at(
        &self,
        addrs: &[SocketAddr],
        timeout: Duration,
    ) -> Result<Arc<dyn LockService>, LockError> {
        let config = self
            .config(addrs)
            .connect_timeout(timeout)
            .node_timeout(timeout);
        Ok(Arc::new(RedlockLock::connect(config).await?))
    }
}

/// Runs the suite on the five shared nodes, or (`tls`) on five nodes of
/// its own reached over mutual TLS.
pub fn run(tls: bool) -> ExitCode {
    let expected = Capabilities::new("redlock")
        .with_fencing(Fencing::None)
        .with_fifo(true)
        .with_loss_events(false)
        .with_notified_wait(true)
        .with_election(true)
        .with_remote(true)
        .with_fault_tolerance(
            "a minority of N nodes down or partitioned; unsafe under clock jumps and process pauses",
        );
    lock_conformance::run(
        || async {
            let set = if tls {
                tls_redis_set()
            } else {
                shared_redis_set()
                    .unwrap_or_else(|e| panic!("the five shared Redis nodes did not start: {e}"))
            };
            Redlock { set, tls }
        },
        expected,
    )
}

/// Five Redis nodes with TLS ports for the whole run (stopped with the test process).
fn tls_redis_set() -> &'static RedisSet {
    static SET: OnceLock<RedisSet> = OnceLock::new();
    SET.get_or_init(|| {
        RedisSet::start_with(
            5,
            RedisOptions {
                tls: true,
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("starting five redis-servers with TLS: {e}"))
    })
}
