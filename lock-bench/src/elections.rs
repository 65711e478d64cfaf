//! The elections of the failover runs: ours on Redis, etcd and ZooKeeper
//! (connected by URL, as a user does), etcd's server-side Election RPC
//! through `etcd-client` on the same cluster, and Curator's `LeaderLatch`
//! (a JVM per candidate, lock-testbed's `CuratorLatch`) on the same
//! ZooKeeper ensemble.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use distlock::{CampaignOptions, Leadership, LockName, LockService, LockUrl};
use etcd_client::ResignOptions;
use lock_testbed::CuratorLatch;

use crate::backend::Backend;
use crate::subject::BenchResult;
use crate::workload::{Candidate, Electorate, Term};

/// Our election on one backend's servers, each candidate a client of its
/// own connected by URL with the failover TTL as its term's lease (Redis),
/// its session lease (etcd, `lease_ttl`) or its session (ZooKeeper,
/// `session_timeout`).
pub struct OursElection {
    /// Redis, Redlock, etcd or ZooKeeper.
    pub backend: Backend,
    /// The servers' client addresses.
    pub servers: Vec<SocketAddr>,
    /// The term's lease or the session's length.
    pub ttl: Duration,
}

impl OursElection {
    /// The URL of a client of `servers`; `None` for a backend without
    /// elections to kill (memory).
    pub fn url(&self, servers: &[SocketAddr]) -> Option<String> {
        let list = servers
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let ms = self.ttl.as_millis();
        match self.backend {
            Backend::Redis => Some(format!("redis://{list}")),
            Backend::Redlock => Some(format!("redlock://{list}")),
            Backend::Etcd => Some(format!("etcd://{list}?lease_ttl={ms}ms")),
            Backend::Zk => Some(format!("zk://{list}?session_timeout={ms}ms")),
            Backend::Memory => None,
        }
    }
}

#[async_trait]
impl Electorate for OursElection {
    fn servers(&self) -> Vec<SocketAddr> {
        self.servers.clone()
    }

    async fn connect(&self, servers: &[SocketAddr]) -> BenchResult<Box<dyn Candidate>> {
        let url = self
            .url(servers)
            .ok_or_else(|| format!("{} has no failover to measure", self.backend))?;
        let service = LockUrl::parse(&url)
            .map_err(|e| e.to_string())?
            .connect()
            .await
            .map_err(|e| format!("connect {url}: {e}"))?;
        Ok(Box::new(OursCandidate {
            service,
            opts: CampaignOptions::new().ttl(self.ttl),
        }))
    }
}

struct OursCandidate {
    service: Arc<dyn LockService>,
    opts: CampaignOptions,
}

#[async_trait]
impl Candidate for OursCandidate {
    async fn campaign(&self, name: &str, value: &str) -> BenchResult<Box<dyn Term>> {
        let name = LockName::new(name).map_err(|e| e.to_string())?;
        let term = self
            .service
            .campaign(&name, value, &self.opts)
            .await
            .map_err(|e| format!("campaign {name}: {e}"))?;
        Ok(Box::new(OursTerm(term)))
    }
}

struct OursTerm(Leadership);

#[async_trait]
impl Term for OursTerm {
    async fn resign(self: Box<Self>) -> BenchResult<()> {
        match self.0.resign().await {
            Ok(true) => Ok(()),
            Ok(false) => Err("resign: the term had already ended".into()),
            Err(e) => Err(format!("resign: {e}")),
        }
    }
}

/// etcd's Election RPC (`v3election`, what `etcdctl elect` uses): each
/// candidate a client with a lease of `ttl` kept alive every third of it by
/// a task of its own, campaigning with that lease.
pub struct EtcdElectionRpc {
    /// The members' client addresses.
    pub servers: Vec<SocketAddr>,
    /// The lease's TTL (whole seconds).
    pub ttl: Duration,
}

#[async_trait]
impl Electorate for EtcdElectionRpc {
    fn servers(&self) -> Vec<SocketAddr> {
        self.servers.clone()
    }

    async fn connect(&self, servers: &[SocketAddr]) -> BenchResult<Box<dyn Candidate>> {
        let endpoints: Vec<String> = servers.iter().map(ToString::to_string).collect();
        let mut client = etcd_client::Client::connect(&endpoints, None)
            .await
            .map_err(|e| format!("etcd connect {endpoints:?}: {e}"))?;
        let secs = self.ttl.as_secs().max(1) as i64;
        let lease = client
            .lease_grant(secs, None)
            .await
            .map_err(|e| format!("etcd lease grant: {e}"))?
            .id();
        let (mut keeper, mut acks) = client
            .lease_keep_alive(lease)
            .await
            .map_err(|e| format!("etcd lease keep-alive: {e}"))?;
        let every = self.ttl / 3;
        let keep_alive = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if keeper.keep_alive().await.is_err() {
                    return;
                }
                if !matches!(acks.message().await, Ok(Some(_))) {
                    return;
                }
            }
        });
        Ok(Box::new(EtcdRpcCandidate {
            client,
            lease,
            keep_alive,
        }))
    }
}

struct EtcdRpcCandidate {
    client: etcd_client::Client,
    lease: i64,
    keep_alive: tokio::task::JoinHandle<()>,
}

impl Drop for EtcdRpcCandidate {
    fn drop(&mut self) {
        // The lease then expires on the server within its TTL.
        self.keep_alive.abort();
    }
}

#[async_trait]
impl Candidate for EtcdRpcCandidate {
    async fn campaign(&self, name: &str, value: &str) -> BenchResult<Box<dyn Term>> {
        let mut election = self.client.election_client();
        let mut resp = election
            .campaign(name, value, self.lease)
            .await
            .map_err(|e| format!("etcd Campaign {name}: {e}"))?;
        let leader = resp
            .take_leader()
            .ok_or_else(|| format!("etcd Campaign {name}: no leader key in the response"))?;
        Ok(Box::new(EtcdRpcTerm {
            client: self.client.clone(),
            leader,
        }))
    }
}

struct EtcdRpcTerm {
    client: etcd_client::Client,
    leader: etcd_client::LeaderKey,
}

#[async_trait]
impl Term for EtcdRpcTerm {
    async fn resign(self: Box<Self>) -> BenchResult<()> {
        let mut election = self.client.election_client();
        election
            .resign(Some(ResignOptions::new().with_leader(self.leader)))
            .await
            .map(|_| ())
            .map_err(|e| format!("etcd Resign: {e}"))
    }
}

/// Curator 5.4's `LeaderLatch`: each candidate a JVM of its own whose
/// Curator client (session timeout `ttl`) is connected before it
/// campaigns; a campaign starts a latch on the election's path and returns
/// once the participant says it leads.
pub struct CuratorElection {
    /// The ensemble's client addresses.
    pub servers: Vec<SocketAddr>,
    /// The session timeout.
    pub ttl: Duration,
    /// The longest a campaign may wait to lead.
    pub wait: Duration,
}

#[async_trait]
impl Electorate for CuratorElection {
    fn servers(&self) -> Vec<SocketAddr> {
        self.servers.clone()
    }

    async fn connect(&self, servers: &[SocketAddr]) -> BenchResult<Box<dyn Candidate>> {
        let connect: Vec<String> = servers.iter().map(ToString::to_string).collect();
        let connect = connect.join(",");
        let ttl = self.ttl;
        let latch = tokio::task::spawn_blocking(move || CuratorLatch::connect(&connect, ttl))
            .await
            .map_err(|e| format!("the Curator participant's start-up task: {e}"))?
            .map_err(|e| e.to_string())?;
        Ok(Box::new(CuratorCandidate {
            latch: Arc::new(Mutex::new(latch)),
            wait: self.wait,
        }))
    }
}

/// A Curator participant (its JVM is killed by PID when dropped).
struct CuratorCandidate {
    latch: Arc<Mutex<CuratorLatch>>,
    wait: Duration,
}

/// Runs `f` on the participant off the async threads (it reads the JVM's
/// lines synchronously).
async fn on_latch<T: Send + 'static>(
    latch: &Arc<Mutex<CuratorLatch>>,
    f: impl FnOnce(&mut CuratorLatch) -> Result<T, lock_testbed::TestbedError> + Send + 'static,
) -> BenchResult<T> {
    let latch = latch.clone();
    tokio::task::spawn_blocking(move || {
        let mut latch = latch.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut latch).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| format!("the Curator participant's task: {e}"))?
}

#[async_trait]
impl Candidate for CuratorCandidate {
    async fn campaign(&self, name: &str, value: &str) -> BenchResult<Box<dyn Term>> {
        let (path, id, wait) = (
            format!("/distlock-bench-curator/{name}"),
            value.to_string(),
            self.wait,
        );
        on_latch(&self.latch, move |l| {
            l.start_latch(&path, &id, wait)?;
            l.wait_until_leader(wait)
        })
        .await?;
        Ok(Box::new(CuratorTerm(self.latch.clone())))
    }
}

struct CuratorTerm(Arc<Mutex<CuratorLatch>>);

#[async_trait]
impl Term for CuratorTerm {
    async fn resign(self: Box<Self>) -> BenchResult<()> {
        on_latch(&self.0, |l| l.close(Duration::from_secs(30))).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_urls_name_the_servers_and_the_session_length() {
        let servers: Vec<SocketAddr> = vec![
            "127.0.0.1:7001".parse().unwrap(),
            "127.0.0.1:7002".parse().unwrap(),
        ];
        let e = |backend| OursElection {
            backend,
            servers: servers.clone(),
            ttl: Duration::from_secs(2),
        };
        assert_eq!(
            e(Backend::Redis).url(&servers[..1]).as_deref(),
            Some("redis://127.0.0.1:7001")
        );
        assert_eq!(
            e(Backend::Etcd).url(&servers).as_deref(),
            Some("etcd://127.0.0.1:7001,127.0.0.1:7002?lease_ttl=2000ms")
        );
        assert_eq!(
            e(Backend::Zk).url(&servers).as_deref(),
            Some("zk://127.0.0.1:7001,127.0.0.1:7002?session_timeout=2000ms")
        );
        assert_eq!(
            e(Backend::Redlock).url(&servers).as_deref(),
            Some("redlock://127.0.0.1:7001,127.0.0.1:7002")
        );
        assert_eq!(e(Backend::Memory).url(&servers), None);
        for b in [Backend::Redis, Backend::Redlock, Backend::Etcd, Backend::Zk] {
            let url = e(b).url(&servers[..1]).unwrap();
            assert!(LockUrl::parse(&url).is_ok(), "{url}");
        }
    }
}
