//! The conformance harness of `lock-zk` on a real ZooKeeper (plain TCP or
//! mutual TLS): the testbed's shared standalone server (tickTime 200 ms, so sessions of 0.4 s ..= 4 s).
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
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lock_conformance::{async_trait, Harness};
use lock_core::{Capabilities, Fencing, LockError, LockName, LockService, TlsConfig};
use lock_testbed::{shared_zk, ZkEnsemble, ZkOptions};
use lock_zk::{ElectionRecipe, ZkConfig, ZkLock};
use zookeeper_client as zk;

use super::children;

const SESSION_TIMEOUT: Duration = Duration::from_secs(3);
const TTL: Duration = Duration::from_secs(2);

struct Zk {
    connect: String,
    endpoint: SocketAddr,
    /// The client's TLS files, when the suite runs over TLS.
    tls: Option<TlsConfig>,
    /// The operator's own session (plain port), for faults and leftovers.
    admin: zk::Client,
    /// The Curator recipe the elections speak.
    election: ElectionRecipe,
}

impl Zk {
    /// A client configuration for the servers in `connect`.
    fn config_for(&self, connect: String) -> ZkConfig {
        let config = ZkConfig::new(connect)
            .session_timeout(SESSION_TIMEOUT)
            .election(self.election);
        match &self.tls {
            Some(tls) => config.tls(tls.clone()),
            None => config,
        }
    }

    fn config(&self) -> ZkConfig {
        self.config_for(self.connect.clone())
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

#[async_trait]
impl Harness for Zk {
    async fn client(&self) -> Arc<dyn LockService> {
        Arc::new(
            lock_testbed::retry_set_up(
                "connecting to the testbed's ZooKeeper",
                LockError::is_retryable,
                || ZkLock::connect(self.config()),
            )
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
        let config = self
            .config_for(addrs[0].to_string())
            .connect_timeout(timeout)
            .request_timeout(timeout);
        Ok(Arc::new(ZkLock::connect(config).await?))
    }
}

/// Runs the suite against the shared server, or (`tls`) against a server of
/// its own reached over mutual TLS.
pub fn run(tls: bool) -> ExitCode {
    run_with(tls, ElectionRecipe::LeaderLatch)
}

/// [`run`], with the elections in the layout of `election`.
pub fn run_with(tls: bool, election: ElectionRecipe) -> ExitCode {
    let expected = Capabilities::new("zookeeper")
        .with_fencing(Fencing::Durable)
        .with_fifo(true)
        .with_loss_events(true)
        .with_notified_wait(true)
        .with_remote(true)
        .with_read_write(true)
        .with_semaphore(true)
        .with_describes_holder(true)
        .with_election(true)
        .with_fault_tolerance(
            "a minority of the 2N+1 ensemble; a holder's lock outlives it by the session timeout",
        );
    lock_conformance::run(
        || async {
            let server: &'static ZkEnsemble = tokio::task::spawn_blocking(move || {
                if tls {
                    tls_zk()
                } else {
                    shared_zk()
                        .unwrap_or_else(|e| panic!("the testbed could not start ZooKeeper: {e}"))
                }
            })
            .await
            .expect("starting ZooKeeper");
            let admin = zk::Client::connector()
                .with_session_timeout(Duration::from_secs(4))
                .connect(&server.connect_string())
                .await
                .expect("the harness's own ZooKeeper session");
            let (connect, tls) = match server.tls_files() {
                Some(files) => (
                    server.tls_endpoints().join(","),
                    Some(
                        TlsConfig::new()
                            .ca(files.ca())
                            .identity(files.client_cert(), files.client_key()),
                    ),
                ),
                None => (server.connect_string(), None),
            };
            let endpoint: SocketAddr = connect
                .split(',')
                .next()
                .and_then(|e| e.parse().ok())
                .expect("endpoint is host:port");
            Zk {
                connect,
                endpoint,
                tls,
                admin,
                election,
            }
        },
        expected,
    )
}

/// A standalone ZooKeeper with a TLS port for the whole run (stopped with
/// the test process).
fn tls_zk() -> &'static ZkEnsemble {
    static SERVER: OnceLock<ZkEnsemble> = OnceLock::new();
    SERVER.get_or_init(|| {
        ZkEnsemble::start_with(
            1,
            ZkOptions {
                tls: true,
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("starting ZooKeeper with TLS: {e}"))
    })
}
