//! The whole conformance suite against a real etcd (the testbed's shared
//! single member), with a 2 s session lease and 2 s guard TTL.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{DeleteOptions, GetOptions};
use lock_conformance::testbed::{shared_etcd, Proxy};
use lock_conformance::{async_trait, Harness};
use lock_core::{Capabilities, DistributedLock, Fencing, LockError, LockName};
use lock_etcd::{EtcdConfig, EtcdLock};

const TTL: Duration = Duration::from_secs(2);
const UNREACHABLE_TIMEOUT: Duration = Duration::from_secs(1);

struct Etcd {
    endpoints: Vec<String>,
    admin: etcd_client::Client,
    /// Blackholed proxies handed out by `unreachable_client`, kept open until the end.
    proxies: Mutex<Vec<Proxy>>,
}

impl Etcd {
    async fn start() -> Self {
        let cluster =
            shared_etcd().unwrap_or_else(|e| panic!("the conformance suite needs etcd: {e}"));
        let endpoints = cluster.endpoints();
        let admin = etcd_client::Client::connect(&endpoints, None)
            .await
            .unwrap_or_else(|e| panic!("admin client for {endpoints:?}: {e}"));
        Etcd {
            endpoints,
            admin,
            proxies: Mutex::new(Vec::new()),
        }
    }

    fn config(&self) -> EtcdConfig {
        EtcdConfig::new(self.endpoints.clone())
            .with_lease_ttl(TTL)
            .with_request_timeout(Duration::from_secs(2))
    }

    fn prefix(name: &LockName) -> String {
        format!("{name}/")
    }
}

#[async_trait]
impl Harness for Etcd {
    async fn client(&self) -> Arc<dyn DistributedLock> {
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

    async fn unreachable_client(&self) -> (Result<Arc<dyn DistributedLock>, LockError>, Duration) {
        let upstream = self.endpoints[0].parse().expect("endpoint is host:port");
        let proxy = Proxy::start(upstream).expect("start a proxy");
        proxy.blackhole();
        let config = EtcdConfig::new([proxy.addr().to_string()])
            .with_lease_ttl(TTL)
            .with_connect_timeout(UNREACHABLE_TIMEOUT)
            .with_request_timeout(UNREACHABLE_TIMEOUT);
        self.proxies.lock().unwrap().push(proxy);
        let made = EtcdLock::connect(config)
            .await
            .map(|c| Arc::new(c) as Arc<dyn DistributedLock>);
        (made, UNREACHABLE_TIMEOUT)
    }
}

fn main() -> ExitCode {
    let expected = Capabilities::new("etcd")
        .with_fencing(Fencing::Durable)
        .with_fifo(true)
        .with_loss_events(true)
        .with_notified_wait(true)
        .with_remote(true)
        .with_fault_tolerance(
            "a minority of the 2N+1 etcd members (Raft); a leader change delays lease expiry but never shortens it",
        );
    lock_conformance::run(Etcd::start, expected)
}
