//! The whole conformance suite on `RedlockLock` over the testbed's five shared
//! Redis nodes. Fencing cases are deselected by capability (Redlock has no
//! tokens); `capabilities_as_declared` checks that the backend reports
//! exactly what is declared here.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use lock_conformance::testbed::{shared_redis_set, RedisSet, RespValue};
use lock_conformance::{async_trait, Harness};
use lock_core::{Capabilities, Fencing, LockError, LockName, LockService};
use lock_redlock::{RedlockConfig, RedlockLock};

/// The per-node timeout of the suite's clients: above the default 50 ms,
/// because the suite runs many cases at once on a loaded 2-core machine and
/// a node answer late there is noise, not a fault under test (the fault
/// tests use the default).
const NODE_TIMEOUT: Duration = Duration::from_millis(200);

struct Redlock {
    set: &'static RedisSet,
}

impl Redlock {
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
        let lock =
            RedlockLock::connect(RedlockConfig::new(self.set.urls()).node_timeout(NODE_TIMEOUT))
                .await
                .expect("connect to the shared Redis nodes");
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
    async fn leftovers(&self, name: &LockName) -> Vec<String> {
        self.on_every_node(vec!["GET".into(), name.to_string()])
            .await
            .into_iter()
            .filter(|(_, v)| !v.is_nil())
            .map(|(node, v)| format!("{node}: {name} = {:?}", v.as_str()))
            .collect()
    }

    fn upstreams(&self) -> Vec<SocketAddr> {
        self.set.addrs()
    }

    async fn client_at(
        &self,
        addrs: &[SocketAddr],
        timeout: Duration,
    ) -> Result<Arc<dyn LockService>, LockError> {
        let urls: Vec<String> = addrs.iter().map(|a| format!("redis://{a}/")).collect();
        let config = RedlockConfig::new(urls)
            .connect_timeout(timeout)
            .node_timeout(timeout);
        Ok(Arc::new(RedlockLock::connect(config).await?))
    }
}

fn main() -> ExitCode {
    let expected = Capabilities::new("redlock")
        .with_fencing(Fencing::None)
        .with_fifo(false)
        .with_loss_events(false)
        .with_notified_wait(true)
        .with_remote(true)
        .with_fault_tolerance(
            "a minority of N nodes down or partitioned; unsafe under clock jumps and process pauses",
        );
    lock_conformance::run(
        || async {
            Redlock {
                set: shared_redis_set()
                    .unwrap_or_else(|e| panic!("the five shared Redis nodes did not start: {e}")),
            }
        },
        expected,
    )
}
