//! The conformance harness of `lock-etcd`, over plain http or mutual TLS,
//! with a 2 s session lease and 2 s guard TTL.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use etcd_client::{DeleteOptions, GetOptions};
use lock_conformance::testbed::{shared_etcd, EtcdCluster};
use lock_conformance::{async_trait, Harness};
use lock_core::{Capabilities, Fencing, LockError, LockName, LockService, TlsConfig};
use lock_etcd::{EtcdConfig, EtcdLock};

const TTL: Duration = Duration::from_secs(2);

/// The suite's view of one etcd, reached over mutual TLS (`tls`) or not;
/// the admin client always uses the plain port.
struct Etcd {
    endpoints: Vec<String>,
    tls: Option<TlsConfig>,
    admin: etcd_client::Client,
}

impl Etcd {
    async fn start(tls: bool) -> Self {
        let cluster = if tls {
            tls_etcd()
        } else {
            shared_etcd().unwrap_or_else(|e| panic!("the conformance suite needs etcd: {e}"))
        };
        let plain = cluster.endpoints();
        let admin = etcd_client::Client::connect(&plain, None)
            .await
            .unwrap_or_else(|e| panic!("admin client for {plain:?}: {e}"));
        let (endpoints, tls) = match cluster.tls_files() {
            Some(files) => (
                cluster.tls_endpoints(),
                Some(
                    TlsConfig::new()
                        .ca(files.ca())
                        .identity(files.client_cert(), files.client_key()),
                ),
            ),
            None => (plain, None),
        };
        Etcd {
            endpoints,
            tls,
            admin,
        }
    }

    /// A client configuration for `endpoints`.
    fn config_for(&self, endpoints: Vec<String>) -> EtcdConfig {
        let config = EtcdConfig::new(endpoints).lease_ttl(TTL);
        match &self.tls {
            Some(tls) => config.tls(tls.clone()),
            None => config,
        }
    }

    fn config(&self) -> EtcdConfig {
        self.config_for(self.endpoints.clone())
            .request_timeout(Duration::from_secs(2))
    }

    fn prefix(name: &LockName) -> String {
        format!("{name}/")
    }
}

#[async_trait]
impl Harness for Etcd {
    async fn client(&self) -> Arc<dyn LockService> {
        Arc::new(
            lock_testbed::retry_set_up("connect to the test etcd", LockError::is_retryable, || {
                EtcdLock::connect(self.config())
            })
            .await
            .expect("connect to the test etcd"),
        )
    }

    fn ttl(&self) -> Duration {
        TTL
    }

    async fn remove_behind_back(&self, name: &LockName) {
        self.admin
            .clone()
            .delete(Self::prefix(name), Some(DeleteOptions::new().with_prefix()))
            .await
            .expect("delete the contender keys");
    }

    async fn leftovers(&self, name: &LockName) -> Vec<String> {
        let resp = self
            .admin
            .clone()
            .get(
                Self::prefix(name),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )
            .await
            .expect("list the contender keys");
        resp.kvs()
            .iter()
            .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
            .collect()
    }

    fn upstreams(&self) -> Vec<SocketAddr> {
        self.endpoints
            .iter()
            .map(|e| e.parse().expect("endpoint is host:port"))
            .collect()
    }

    async fn client_at(
        &self,
        addrs: &[SocketAddr],
        timeout: Duration,
    ) -> Result<Arc<dyn LockService>, LockError> {
        let config = self
            .config_for(addrs.iter().map(ToString::to_string).collect())
            .connect_timeout(timeout)
            .request_timeout(timeout);
        Ok(Arc::new(EtcdLock::connect(config).await?))
    }
}

/// Runs the suite against the shared etcd, or (`tls`) against an etcd of
/// its own reached over mutual TLS.
pub fn run(tls: bool) -> ExitCode {
    let expected = Capabilities::new("etcd")
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
            "a minority of the 2N+1 etcd members (Raft); a leader change delays lease expiry but never shortens it (etcd 3.4.31, 3.5.13 and later; an older leader frozen past a lease TTL revokes leases when it resumes)",
        );
    lock_conformance::run(move || Etcd::start(tls), expected)
}

/// A one-member etcd with a TLS port for the whole run (stopped with the
/// test process).
fn tls_etcd() -> &'static EtcdCluster {
    static CLUSTER: OnceLock<EtcdCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        EtcdCluster::start_tls(1).unwrap_or_else(|e| panic!("starting etcd with TLS: {e}"))
    })
}
