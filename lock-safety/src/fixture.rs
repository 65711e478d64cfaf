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
use lock_testbed::{
    Cluster, EtcdCluster, Persistence, Proxy, RedisOptions, RedisServer, RedisSet, ZkEnsemble,
    ZkOptions,
};

/// A backend under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One Redis server.
    Redis,
    /// Redlock over five Redis servers.
    Redlock,
    /// An etcd cluster.
    Etcd,
    /// A ZooKeeper ensemble.
    Zk,
}

impl Kind {
    /// Every backend.
    pub const ALL: [Kind; 4] = [Kind::Redis, Kind::Redlock, Kind::Etcd, Kind::Zk];

    /// The backend's short name (`redis`, `redlock`, `etcd`, `zookeeper`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Redis => "redis",
            Kind::Redlock => "redlock",
            Kind::Etcd => "etcd",
            Kind::Zk => "zookeeper",
        }
    }

    /// Whether the backend has fencing tokens.
    pub fn fencing(self) -> bool {
        self != Kind::Redlock
    }

    /// The backend named `name` (as [`Kind::name`] says it).
    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The URL of a client of `addrs` (the servers, or proxies in front of
    /// them), with the timeouts of [`Kind::request_timeout`] and the TTL of
    /// [`Kind::ttl`] (etcd's lease, ZooKeeper's session).
    pub fn url(self, addrs: &[SocketAddr]) -> String {
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        let timeout = ms(self.request_timeout());
        let (scheme, options) = match self {
            Kind::Redis => (
                "redis",
                format!("request_timeout={timeout}&connect_timeout=500ms"),
            ),
            Kind::Redlock => (
                "redlock",
                format!("node_timeout={timeout}&connect_timeout=500ms"),
            ),
            Kind::Etcd => (
                "etcd",
                format!(
                    "lease_ttl={}&request_timeout={timeout}&connect_timeout=2s",
                    ms(self.ttl())
                ),
            ),
            Kind::Zk => (
                "zk",
                format!(
                    "session_timeout={}&request_timeout={timeout}&connect_timeout=2s",
                    ms(self.ttl())
                ),
            ),
        };
        let hosts: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
        format!("{scheme}://{}?{options}", hosts.join(","))
    }

    /// The timeout of one request of the clients made here (Redlock: of one
    /// node's answer).
    pub fn request_timeout(self) -> Duration {
        match self {
            Kind::Redis => Duration::from_millis(250),
            Kind::Redlock => Duration::from_millis(50),
            Kind::Etcd | Kind::Zk => Duration::from_millis(500),
        }
    }

    /// The lock TTL of the scenarios (etcd: the lease TTL; ZooKeeper: the session timeout).
    pub fn ttl(self) -> Duration {
        match self {
            Kind::Redis | Kind::Redlock => Duration::from_millis(1000),
            Kind::Etcd | Kind::Zk => Duration::from_millis(2000),
        }
    }

    /// How much later than its TTL the server itself finds an abandoned
    /// holder expired: etcd's leader looks for expired leases every 500 ms;
    /// ZooKeeper expires sessions on the next tick of the testbed's
    /// `tickTime` (200 ms); a Redis key past its TTL is gone for the next
    /// command that touches it.
    pub fn expiry_step(self) -> Duration {
        match self {
            Kind::Redis | Kind::Redlock => Duration::ZERO,
            Kind::Etcd => Duration::from_millis(500),
            Kind::Zk => Duration::from_millis(200),
        }
    }
}

/// Real servers of one backend, started for one scenario.
pub enum Servers {
    /// One Redis server.
    Redis(RedisServer),
    /// Five independent Redis servers.
    Redlock(RedisSet),
    /// An etcd cluster.
    Etcd(EtcdCluster),
    /// A ZooKeeper ensemble.
    Zk(ZkEnsemble),
}

impl Servers {
    /// `members`: etcd and ZooKeeper cluster size (Redis: 1 server, Redlock: 5 nodes).
    pub fn start(kind: Kind, members: usize) -> Servers {
        Self::start_with(kind, members, Persistence::None)
    }

    /// Like [`Servers::start`], with what a single Redis persists.
    pub fn start_with(kind: Kind, members: usize, persistence: Persistence) -> Servers {
        match kind {
            Kind::Redis => Servers::Redis(
                RedisServer::start_with(RedisOptions {
                    persistence,
                    ..Default::default()
                })
                .expect("start redis-server"),
            ),
            Kind::Redlock => Servers::Redlock(RedisSet::start(5).expect("start 5 redis-servers")),
            Kind::Etcd => Servers::Etcd(EtcdCluster::start(members).expect("start etcd")),
            Kind::Zk => Servers::Zk(
                ZkEnsemble::start_with(
                    members,
                    ZkOptions {
                        tick_time_ms: 200,
                        ..Default::default()
                    },
                )
                .expect("start zookeeper"),
            ),
        }
    }

    /// The servers the nemesis runs against: one Redis with `persistence`,
    /// five for Redlock, three etcd members, three ZooKeeper servers whose
    /// quorum links go through proxies ([`ZkEnsemble::quorum_link`]) so that
    /// a follower can be cut from its leader while it serves clients.
    pub fn start_for_nemesis(kind: Kind, persistence: Persistence) -> Servers {
        match kind {
            Kind::Zk => Servers::Zk(
                ZkEnsemble::start_with_quorum_links(
                    3,
                    ZkOptions {
                        tick_time_ms: 200,
                        ..Default::default()
                    },
                )
                .expect("start zookeeper"),
            ),
            _ => Servers::start_with(kind, 3, persistence),
        }
    }

    /// The servers as every backend's servers look.
    pub fn cluster(&self) -> &dyn Cluster {
        match self {
            Servers::Redis(r) => r,
            Servers::Redlock(s) => s,
            Servers::Etcd(c) => c,
            Servers::Zk(z) => z,
        }
    }

    /// [`Servers::cluster`], to kill and restart members.
    pub fn cluster_mut(&mut self) -> &mut dyn Cluster {
        match self {
            Servers::Redis(r) => r,
            Servers::Redlock(s) => s,
            Servers::Etcd(c) => c,
            Servers::Zk(z) => z,
        }
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
