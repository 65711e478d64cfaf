//! One description of each backend's test servers: which servers a backend
//! needs and how many ([`Kind::members`]), how they start ([`Kind::start`],
//! [`Kind::start_with`]), the ones shared by a test process
//! ([`Kind::shared`]), and the URL of a client of them with the timeouts of
//! the tests ([`Kind::url`]).
//!
//! The testbed knows no client: a backend is its servers, its URL scheme and
//! what it promises (fencing), all as plain values and strings. Adding a
//! backend means a variant here and an arm in each `match` below (the
//! compiler lists them), plus its server type and its [`Cluster`] impl.

use std::net::SocketAddr;
use std::time::Duration;

use crate::cluster::Cluster;
use crate::redis::{Persistence, RedisOptions, RedisServer, RedisSet};
use crate::shared::{shared_etcd, shared_redis, shared_redis_set, shared_zk, SHARED_REDIS_NODES};
use crate::zk::{ZkEnsemble, ZkOptions};
use crate::{EtcdCluster, TestbedError};

/// The connect timeout of the Redis and Redlock clients of [`Kind::url`].
const REDIS_CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// A backend whose servers the testbed starts.
///
/// ```no_run
/// use lock_testbed::Kind;
/// let mut etcd = Kind::Etcd.start(3)?;
/// assert_eq!(etcd.members(), 3);
/// let url = Kind::Etcd.url(&etcd.addrs());
/// assert!(url.starts_with("etcd://127.0.0.1:"));
/// etcd.kill(0)?;
/// etcd.restart(0)?;
/// // A Redlock fixture always has five nodes, a Redis one server.
/// assert_eq!(Kind::Redlock.members(3), 5);
/// assert_eq!(Kind::Redis.members(3), 1);
/// # Ok::<(), lock_testbed::TestbedError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// One Redis server.
    Redis,
    /// Redlock over five independent Redis servers.
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

    /// The URL scheme of a client of the backend (`redis`, `redlock`,
    /// `etcd`, `zk`); also what [`Cluster::scheme`] says of its servers.
    pub fn scheme(self) -> &'static str {
        match self {
            Kind::Redis => crate::redis::SCHEME,
            Kind::Redlock => crate::redis::REDLOCK_SCHEME,
            Kind::Etcd => crate::etcd::SCHEME,
            Kind::Zk => crate::zk::SCHEME,
        }
    }

    /// The backend named `name` (as [`Kind::name`] says it).
    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether the backend has fencing tokens.
    pub fn fencing(self) -> bool {
        self != Kind::Redlock
    }

    /// How many servers the backend's fixture has when `asked` members are
    /// asked for: `asked` for the clusters that have a size (etcd,
    /// ZooKeeper), always one for Redis and always five
    /// ([`SHARED_REDIS_NODES`]) for Redlock.
    pub const fn members(self, asked: usize) -> usize {
        match self {
            Kind::Redis => 1,
            Kind::Redlock => SHARED_REDIS_NODES,
            Kind::Etcd | Kind::Zk => asked,
        }
    }

    /// The URL of a client of `addrs` (the servers, or proxies in front of
    /// them), with the timeouts of [`Kind::request_timeout`] and the TTL of
    /// [`Kind::ttl`] (etcd's lease, ZooKeeper's session).
    pub fn url(self, addrs: &[SocketAddr]) -> String {
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        let timeout = ms(self.request_timeout());
        let options = match self {
            Kind::Redis => format!(
                "request_timeout={timeout}&connect_timeout={}",
                ms(REDIS_CONNECT_TIMEOUT)
            ),
            Kind::Redlock => format!(
                "node_timeout={timeout}&connect_timeout={}",
                ms(REDIS_CONNECT_TIMEOUT)
            ),
            Kind::Etcd => format!(
                "lease_ttl={}&request_timeout={timeout}&connect_timeout=2s",
                ms(self.ttl())
            ),
            Kind::Zk => format!(
                "session_timeout={}&request_timeout={timeout}&connect_timeout=2s",
                ms(self.ttl())
            ),
        };
        let hosts: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
        format!("{}://{}?{options}", self.scheme(), hosts.join(","))
    }

    /// The timeout of one request of the clients of [`Kind::url`] (Redlock:
    /// of one node's answer).
    pub fn request_timeout(self) -> Duration {
        match self {
            Kind::Redis => Duration::from_millis(250),
            Kind::Redlock => Duration::from_millis(50),
            Kind::Etcd | Kind::Zk => Duration::from_millis(500),
        }
    }

    /// The longest a release of the clients of [`Kind::url`] waits for its
    /// answers: one request, except Redlock's, which waits for late
    /// answers up to its connect timeout (500 ms in [`Kind::url`]).
    pub fn release_timeout(self) -> Duration {
        match self {
            Kind::Redlock => REDIS_CONNECT_TIMEOUT.max(self.request_timeout()),
            Kind::Redis | Kind::Etcd | Kind::Zk => self.request_timeout(),
        }
    }

    /// The lock TTL of the tests that use the fixture (etcd: the lease TTL;
    /// ZooKeeper: the session timeout), as [`Kind::url`] asks for it.
    pub fn ttl(self) -> Duration {
        match self {
            Kind::Redis | Kind::Redlock => Duration::from_millis(1000),
            Kind::Etcd | Kind::Zk => Duration::from_millis(2000),
        }
    }

    /// How much later than its TTL the server itself finds an abandoned
    /// holder expired: etcd's leader looks for expired leases every 500 ms;
    /// ZooKeeper expires sessions on the next tick of the testbed's
    /// `tickTime` (200 ms, [`ZkOptions::tick_time_ms`]); a Redis key past its
    /// TTL is gone for the next command that touches it.
    pub fn expiry_step(self) -> Duration {
        match self {
            Kind::Redis | Kind::Redlock => Duration::ZERO,
            Kind::Etcd => Duration::from_millis(500),
            Kind::Zk => Duration::from_millis(200),
        }
    }

    /// Starts the backend's servers with the default [`StartOptions`]:
    /// [`Kind::members`]`(asked)` of them.
    pub fn start(self, asked: usize) -> Result<Box<dyn Cluster>, TestbedError> {
        self.start_with(asked, StartOptions::default())
            .map(Started::into_cluster)
    }

    /// Starts [`Kind::members`]`(asked)` servers of the backend with
    /// `options`, typed: one [`RedisServer`], a [`RedisSet`], an
    /// [`EtcdCluster`] or a [`ZkEnsemble`] (its default `tickTime` of
    /// 200 ms).
    pub fn start_with(self, asked: usize, options: StartOptions) -> Result<Started, TestbedError> {
        let members = self.members(asked);
        Ok(match self {
            Kind::Redis => Started::Redis(RedisServer::start_with(RedisOptions {
                persistence: options.persistence,
                ..RedisOptions::default()
            })?),
            Kind::Redlock => Started::Redlock(RedisSet::start(members)?),
            Kind::Etcd => Started::Etcd(EtcdCluster::start(members)?),
            Kind::Zk if options.quorum_links => Started::Zk(ZkEnsemble::start_with_quorum_links(
                members,
                ZkOptions::default(),
            )?),
            Kind::Zk => Started::Zk(ZkEnsemble::start_with(members, ZkOptions::default())?),
        })
    }

    /// The backend's servers shared by every test of this process, started
    /// on first use ([`shared_redis`], [`shared_redis_set`], [`shared_etcd`],
    /// [`shared_zk`]; the `DISTLOCK_TEST_*` variables name servers started
    /// elsewhere instead). Do not break them: other tests use them too.
    pub fn shared(self) -> Result<&'static dyn Cluster, TestbedError> {
        Ok(match self {
            Kind::Redis => shared_redis()?,
            Kind::Redlock => shared_redis_set()?,
            Kind::Etcd => shared_etcd()?,
            Kind::Zk => shared_zk()?,
        })
    }
}

/// How [`Kind::start_with`] starts the servers, besides how many.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StartOptions {
    /// What a single Redis server ([`Kind::Redis`]) keeps across a restart;
    /// the other backends ignore it (Redlock's nodes persist nothing).
    pub persistence: Persistence,
    /// ZooKeeper ([`Kind::Zk`]): a [`Proxy`](crate::Proxy) on every quorum
    /// link ([`ZkEnsemble::start_with_quorum_links`]); the other backends
    /// ignore it.
    pub quorum_links: bool,
}

/// The servers [`Kind::start_with`] started, as their own type, for what
/// only that type does (a Redis's persistence, etcd's endpoints, a
/// ZooKeeper quorum link); [`Started::cluster`] for what every backend's
/// servers do.
#[derive(Debug)]
pub enum Started {
    /// One Redis server.
    Redis(RedisServer),
    /// Independent Redis servers, for Redlock.
    Redlock(RedisSet),
    /// An etcd cluster.
    Etcd(EtcdCluster),
    /// A ZooKeeper ensemble.
    Zk(ZkEnsemble),
}

impl Started {
    /// The backend whose servers these are.
    pub fn kind(&self) -> Kind {
        match self {
            Started::Redis(_) => Kind::Redis,
            Started::Redlock(_) => Kind::Redlock,
            Started::Etcd(_) => Kind::Etcd,
            Started::Zk(_) => Kind::Zk,
        }
    }

    /// The servers as every backend's servers look.
    pub fn cluster(&self) -> &dyn Cluster {
        match self {
            Started::Redis(r) => r,
            Started::Redlock(s) => s,
            Started::Etcd(c) => c,
            Started::Zk(z) => z,
        }
    }

    /// [`Started::cluster`], to kill and restart members.
    pub fn cluster_mut(&mut self) -> &mut dyn Cluster {
        match self {
            Started::Redis(r) => r,
            Started::Redlock(s) => s,
            Started::Etcd(c) => c,
            Started::Zk(z) => z,
        }
    }

    /// [`Started::cluster`], owned.
    pub fn into_cluster(self) -> Box<dyn Cluster> {
        match self {
            Started::Redis(r) => Box::new(r),
            Started::Redlock(s) => Box::new(s),
            Started::Etcd(c) => Box::new(c),
            Started::Zk(z) => Box::new(z),
        }
    }

    /// The Redis server of a [`Kind::Redis`] fixture; `None` for another.
    pub fn as_redis(&self) -> Option<&RedisServer> {
        match self {
            Started::Redis(r) => Some(r),
            _ => None,
        }
    }

    /// The Redis servers of a [`Kind::Redlock`] fixture; `None` for another.
    pub fn as_redis_set(&self) -> Option<&RedisSet> {
        match self {
            Started::Redlock(s) => Some(s),
            _ => None,
        }
    }

    /// The cluster of a [`Kind::Etcd`] fixture; `None` for another.
    pub fn as_etcd(&self) -> Option<&EtcdCluster> {
        match self {
            Started::Etcd(c) => Some(c),
            _ => None,
        }
    }

    /// The ensemble of a [`Kind::Zk`] fixture; `None` for another.
    pub fn as_zk(&self) -> Option<&ZkEnsemble> {
        match self {
            Started::Zk(z) => Some(z),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for kind in Kind::ALL {
            assert_eq!(Kind::parse(kind.name()), Some(kind));
        }
        assert_eq!(Kind::parse("zk"), None);
    }

    #[test]
    fn member_counts() {
        assert_eq!(Kind::Redis.members(3), 1);
        assert_eq!(Kind::Redlock.members(1), 5);
        assert_eq!(Kind::Etcd.members(3), 3);
        assert_eq!(Kind::Zk.members(1), 1);
    }

    #[test]
    fn urls_carry_the_test_timeouts() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        assert_eq!(
            Kind::Redis.url(&[a]),
            "redis://127.0.0.1:1?request_timeout=250ms&connect_timeout=500ms"
        );
        assert_eq!(
            Kind::Redlock.url(&[a, b]),
            "redlock://127.0.0.1:1,127.0.0.1:2?node_timeout=50ms&connect_timeout=500ms"
        );
        assert_eq!(
            Kind::Etcd.url(&[a]),
            "etcd://127.0.0.1:1?lease_ttl=2000ms&request_timeout=500ms&connect_timeout=2s"
        );
        assert_eq!(
            Kind::Zk.url(&[a, b]),
            "zk://127.0.0.1:1,127.0.0.1:2?session_timeout=2000ms&request_timeout=500ms&connect_timeout=2s"
        );
    }
}
