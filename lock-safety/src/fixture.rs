//! Real servers of each backend and clients of them, for the scenarios and
//! the nemesis: start, pause, kill and restart members, and give each client
//! proxies of its own so that its network can be delayed, cut or reset
//! without touching other clients.

use std::net::SocketAddr;
use std::sync::Arc;

use std::time::Duration;

use lock_core::{
    AcquireOptions, CampaignOptions, LockError, LockErrorKind, LockGuard, LockMode, LockName,
    LockService,
};
use lock_testbed::{Cluster, Persistence, Proxy, StartOptions};

/// The backend under test: lock-testbed's one description of each backend's
/// servers, its URL with the scenarios' timeouts ([`Kind::url`]), its TTL
/// and its member count ([`Kind::members`]).
pub use lock_testbed::Kind;
/// The servers a [`Kind`] started, as their own type (a
/// [`RedisServer`](lock_testbed::RedisServer) for the persistence crashes,
/// a [`ZkEnsemble`](lock_testbed::ZkEnsemble) for its quorum links, an
/// [`EtcdCluster`](lock_testbed::EtcdCluster) for its endpoints):
/// [`Servers::typed`].
pub use lock_testbed::Started;

/// How many members the nemesis asks for ([`Kind::members`] says what each
/// backend gets: one Redis, five Redlock nodes, three etcd members or
/// ZooKeeper servers).
pub const NEMESIS_MEMBERS: usize = 3;

/// Real servers of one backend, started for one scenario.
pub struct Servers {
    started: Started,
}

impl Servers {
    /// `members`: etcd and ZooKeeper cluster size (Redis: 1 server, Redlock:
    /// 5 nodes; [`Kind::members`]).
    pub fn start(kind: Kind, members: usize) -> Servers {
        Self::start_with(kind, members, Persistence::None)
    }

    /// Like [`Servers::start`], with what a single Redis persists.
    pub fn start_with(kind: Kind, members: usize, persistence: Persistence) -> Servers {
        Self::start_options(
            kind,
            members,
            StartOptions {
                persistence,
                ..StartOptions::default()
            },
        )
    }

    /// The servers the nemesis runs against: one Redis with `persistence`,
    /// five for Redlock, three etcd members, three ZooKeeper servers whose
    /// quorum links go through proxies ([`ZkEnsemble::quorum_link`]) so that
    /// a follower can be cut from its leader while it serves clients.
    ///
    /// [`ZkEnsemble::quorum_link`]: lock_testbed::ZkEnsemble::quorum_link
    pub fn start_for_nemesis(kind: Kind, persistence: Persistence) -> Servers {
        Self::start_options(
            kind,
            NEMESIS_MEMBERS,
            StartOptions {
                persistence,
                quorum_links: true,
            },
        )
    }

    fn start_options(kind: Kind, members: usize, options: StartOptions) -> Servers {
        let started = kind
            .start_with(members, options)
            .unwrap_or_else(|e| panic!("start the {} servers: {e:?}", kind.name()));
        Servers { started }
    }

    /// The servers as their own type.
    pub fn typed(&self) -> &Started {
        &self.started
    }

    /// [`Servers::typed`], to crash a Redis to its checkpoint.
    pub fn typed_mut(&mut self) -> &mut Started {
        &mut self.started
    }

    /// The servers as every backend's servers look.
    pub fn cluster(&self) -> &dyn Cluster {
        self.started.cluster()
    }

    /// [`Servers::cluster`], to kill and restart members.
    pub fn cluster_mut(&mut self) -> &mut dyn Cluster {
        self.started.cluster_mut()
    }

    /// The client addresses of the servers, in member order.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.cluster().addrs()
    }

    /// Pauses member `i` (SIGSTOP).
    pub fn pause(&self, i: usize) {
        self.cluster().pause(i).expect("pause");
    }

    /// Resumes member `i` (SIGCONT).
    pub fn resume(&self, i: usize) {
        self.cluster().resume(i).expect("resume");
    }

    /// Kills member `i` (SIGKILL).
    pub fn kill(&mut self, i: usize) {
        self.cluster_mut().kill(i).expect("kill");
    }

    /// Starts member `i` again (killing it first if it runs), with its data.
    pub fn restart(&mut self, i: usize) {
        self.cluster_mut().restart(i).expect("restart");
    }

    /// The etcd or ZooKeeper leader's member index (0 for Redis and Redlock).
    pub fn leader(&self) -> usize {
        self.cluster().leader().expect("leader").unwrap_or(0)
    }

    /// A client of this backend that talks to `addrs` (the servers or proxies in front of them).
    pub async fn client(&self, kind: Kind, addrs: &[SocketAddr]) -> Arc<dyn LockService> {
        Servers::connect(kind, addrs).await
    }

    /// A client of `kind` that talks to `addrs`, with the timeouts of
    /// [`Kind::request_timeout`] and the TTL of [`Kind::ttl`] (etcd's lease,
    /// ZooKeeper's session). Set-up, not what a scenario tests: a retryable
    /// failure (a busy machine's connect past its timeout) is tried again
    /// within [`lock_testbed::SET_UP_CONNECT`]; servers that never answer
    /// still fail.
    pub async fn connect(kind: Kind, addrs: &[SocketAddr]) -> Arc<dyn LockService> {
        let what = format!("connect {}", kind.name());
        lock_testbed::retry_set_up(&what, LockError::is_retryable, || {
            Servers::try_connect(kind, addrs)
        })
        .await
        .unwrap_or_else(|e| panic!("{what}: {e:?}"))
    }

    /// One try of [`Servers::connect`]: through the backend's URL, as
    /// applications connect ([`Kind::url`]).
    async fn try_connect(
        kind: Kind,
        addrs: &[SocketAddr],
    ) -> Result<Arc<dyn LockService>, LockError> {
        distlock::connect(&kind.url(addrs)).await
    }

    /// A client behind its own proxies (one per server), so that its network
    /// can be cut, delayed or reset without touching other clients.
    pub async fn proxied_client(&self, kind: Kind) -> Proxied {
        let proxies: Vec<Proxy> = self
            .addrs()
            .into_iter()
            .map(|a| Proxy::start(a).expect("proxy"))
            .collect();
        let addrs: Vec<SocketAddr> = proxies.iter().map(Proxy::addr).collect();
        let lock = self.client(kind, &addrs).await;
        Proxied { lock, proxies }
    }
}

/// A client behind proxies of its own, one per server.
pub struct Proxied {
    /// The client.
    pub lock: Arc<dyn LockService>,
    /// Its proxies, in member order.
    pub proxies: Vec<Proxy>,
}

impl Proxied {
    /// Cuts every link of the client.
    pub fn cut(&self) {
        self.proxies.iter().for_each(Proxy::cut);
    }
    /// Heals every link of the client.
    pub fn heal(&self) {
        self.proxies.iter().for_each(Proxy::heal);
    }
}

/// Acquires `n` in `mode` (a mutex, a side of the read-write lock, a permit),
/// waiting as `o` says.
pub async fn take(
    lock: &dyn LockService,
    n: &LockName,
    o: &AcquireOptions,
    mode: LockMode,
) -> lock_core::Result<LockGuard> {
    match mode {
        LockMode::Read => lock.acquire_read(n, o).await,
        LockMode::Write => lock.acquire_write(n, o).await,
        LockMode::Permit { permits } => lock.acquire_permit(n, permits, o).await,
        LockMode::Leader => Ok(lock
            .campaign(n, "candidate", &CampaignOptions::from(o.clone()))
            .await?
            .into_guard()),
        _ => lock.acquire(n, o).await,
    }
}

/// Like [`take`], without waiting (`try_acquire` and its kin).
pub async fn try_take(
    lock: &dyn LockService,
    n: &LockName,
    o: &AcquireOptions,
    mode: LockMode,
) -> lock_core::Result<Option<LockGuard>> {
    match mode {
        LockMode::Read => lock.try_acquire_read(n, o).await,
        LockMode::Write => lock.try_acquire_write(n, o).await,
        LockMode::Permit { permits } => lock.try_acquire_permit(n, permits, o).await,
        LockMode::Leader => {
            let once = CampaignOptions::from(o.clone().wait(Duration::ZERO));
            match lock.campaign(n, "candidate", &once).await {
                Ok(term) => Ok(Some(term.into_guard())),
                Err(e) if e.kind() == LockErrorKind::Timeout => Ok(None),
                Err(e) => Err(e),
            }
        }
        _ => lock.try_acquire(n, o).await,
    }
}
