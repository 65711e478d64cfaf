//! The whole conformance suite on a real ZooKeeper: the testbed's shared
//! standalone server (tickTime 200 ms, so sessions of 0.4 s ..= 4 s).
//!
//! Each client is its own `ZkLock` (its own session), with a 3 s session
//! timeout; the cases use a 2 s TTL. The suite's faults are done with a plain
//! `zookeeper_client::Client` of the harness's own: deleting the contender
//! nodes behind the holder's back, and listing the ephemeral nodes left
//! under a lock's znode (the empty container znodes of child names are not
//! leftovers). The unreachable client sits behind a blackholed
//! `lock_testbed::Proxy`.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use lock_conformance::{async_trait, Harness};
use lock_core::{Capabilities, Fencing, LockError, LockName, LockService};
use lock_testbed::shared_zk;
use lock_zk::{ZkConfig, ZkLock};
use zookeeper_client as zk;

const SESSION_TIMEOUT: Duration = Duration::from_secs(3);
const TTL: Duration = Duration::from_secs(2);

struct Zk {
    connect: String,
    endpoint: SocketAddr,
    /// The operator's own session, for faults and leftovers.
    admin: zk::Client,
}

impl Zk {
    fn config(&self) -> ZkConfig {
        ZkConfig::new(self.connect.clone()).session_timeout(SESSION_TIMEOUT)
    }

    fn lock_path(&self, name: &LockName) -> String {
        format!("{}/{name}", lock_zk::DEFAULT_BASE_PATH)
    }

    /// Every node that holds or waits for `name`, of every kind of lock: the
    /// ephemeral children of its znode (mutex and read-write contenders) and
    /// of its `leases` and `locks` children (a semaphore's leases and its
    /// acquisition queue). The znodes of child names are not: they are
    /// persistent (container) nodes, which ZooKeeper removes lazily once empty.
    async fn nodes(&self, name: &LockName) -> Vec<String> {
        let dir = self.lock_path(name);
        let mut found = Vec::new();
        for parent in [dir.clone(), format!("{dir}/leases"), format!("{dir}/locks")] {
            for child in children(&self.admin, &parent).await {
                let path = format!("{parent}/{child}");
                match self.admin.check_stat(&path).await {
                    Ok(Some(stat)) if stat.ephemeral_owner != 0 => found.push(path),
                    Ok(_) => {}
                    Err(e) => panic!("reading {path}: {e}"),
                }
            }
        }
        found
    }
}

/// The children of `path` (none when it does not exist).
async fn children(admin: &zk::Client, path: &str) -> Vec<String> {
    match admin.list_children(path).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("listing {path}: {e}"),
    }
}

#[async_trait]
impl Harness for Zk {
    async fn client(&self) -> Arc<dyn LockService> {
        Arc::new(
            ZkLock::connect(self.config())
                .await
                .expect("connecting to the testbed's ZooKeeper"),
        )
    }

    fn ttl(&self) -> Duration {
        TTL
    }

    async fn remove_behind_back(&self, name: &LockName) {
        // An operator deleting the contender nodes (the holder's among them).
        for path in self.nodes(name).await {
            match self.admin.delete(&path, None).await {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => panic!("deleting {path}: {e}"),
            }
        }
    }

    async fn leftovers(&self, name: &LockName) -> Vec<String> {
        self.nodes(name).await
    }

    fn upstreams(&self) -> Vec<SocketAddr> {
        vec![self.endpoint]
    }

    async fn client_at(
        &self,
        addrs: &[SocketAddr],
        timeout: Duration,
    ) -> Result<Arc<dyn LockService>, LockError> {
        let config = ZkConfig::new(addrs[0].to_string())
            .session_timeout(SESSION_TIMEOUT)
            .connect_timeout(timeout)
            .request_timeout(timeout);
        Ok(Arc::new(ZkLock::connect(config).await?))
    }
}

fn main() -> ExitCode {
    let expected = Capabilities::new("zookeeper")
        .with_fencing(Fencing::Durable)
        .with_fifo(true)
        .with_loss_events(true)
        .with_notified_wait(true)
        .with_remote(true)
        .with_read_write(true)
        .with_semaphore(true)
        .with_fault_tolerance(
            "a minority of the 2N+1 ensemble; a holder's lock outlives it by the session timeout",
        );
    lock_conformance::run(
        || async {
            let server = tokio::task::spawn_blocking(shared_zk)
                .await
                .expect("starting ZooKeeper")
                .unwrap_or_else(|e| panic!("the testbed could not start ZooKeeper: {e}"));
            let endpoint: SocketAddr = server.endpoint(0).parse().expect("endpoint is host:port");
            let connect = server.connect_string();
            let admin = zk::Client::connector()
                .with_session_timeout(Duration::from_secs(4))
                .connect(&connect)
                .await
                .expect("the harness's own ZooKeeper session");
            Zk {
                connect,
                endpoint,
                admin,
            }
        },
        expected,
    )
}
