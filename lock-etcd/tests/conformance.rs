//! The whole conformance suite against a real etcd (the testbed's shared
//! single member), with a 2 s session lease and 2 s guard TTL.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{DeleteOptions, GetOptions};
use lock_conformance::testbed::shared_etcd;
use lock_conformance::{async_trait, Harness};
use lock_core::{Capabilities, Fencing, LockError, LockName, LockService};
use lock_etcd::{EtcdConfig, EtcdLock};

const TTL: Duration = Duration::from_secs(2);

struct Etcd {
    endpoints: Vec<String>,
    admin: etcd_client::Client,
}

impl Etcd {
    async fn start() -> Self {
        let cluster =
            shared_etcd().unwrap_or_else(|e| panic!("the conformance suite needs etcd: {e}"));
        let endpoints = cluster.endpoints();
        let admin = etcd_client::Client::connect(&endpoints, None)
            .await
            .unwrap_or_else(|e| panic!("admin client for {endpoints:?}: {e}"));
        Etcd { endpoints, admin }
    }

    fn config(&self) -> EtcdConfig {
        EtcdConfig::new(self.endpoints.clone())
            .lease_ttl(TTL)
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
            EtcdLock::connect(self.config())
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
        let config = EtcdConfig::new(addrs.iter().map(ToString::to_string))
            .lease_ttl(TTL)
            .connect_timeout(timeout)
            .request_timeout(timeout);
        Ok(Arc::new(EtcdLock::connect(config).await?))
    }
}

fn main() -> ExitCode {
    let expected = Capabilities::new("etcd")
        .with_fencing(Fencing::Durable)
        .with_fifo(true)
        .with_loss_events(true)
        .with_notified_wait(true)
        .with_remote(true)
        .with_read_write(true)
        .with_semaphore(true)
        .with_fault_tolerance(
            "a minority of the 2N+1 etcd members (Raft); a leader change delays lease expiry but never shortens it",
        );
    lock_conformance::run(Etcd::start, expected)
}
