//! [`Scheme`]: the backend a lock service URL names. What is known of each
//! backend (its names, feature, port, options) is in its description
//! (`backends/`), which also gives `Scheme` its methods.

use std::fmt;

/// The backend a URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scheme {
    /// `memory://`: [`lock_core::MemoryLock`], in-process only (always built in).
    Memory,
    /// `redis://host[:port][/db]`: one Redis server (feature `redis`).
    Redis,
    /// `redis+sentinel://s1:p1[,s2:p2...]/MASTER_NAME[/db]`: the primary of a
    /// Sentinel-managed Redis deployment, followed across failovers
    /// (feature `redis`).
    RedisSentinel,
    /// `redis+cluster://n1:p1[,n2:p2...]`: a Redis Cluster, its slots and
    /// failovers followed (feature `redis`).
    RedisCluster,
    /// `redlock://h1:p1,h2:p2,h3:p3[/db]`: Redlock over independent Redis servers (feature `redlock`).
    Redlock,
    /// `etcd://h1:p1[,h2:p2...][/prefix]`: an etcd cluster (feature `etcd`).
    Etcd,
    /// `zk://h1:p1[,h2:p2...][/base]` (or `zookeeper://`): a ZooKeeper ensemble (feature `zk`).
    Zk,
}

impl Scheme {
    /// Every scheme, in documentation order.
    pub const ALL: [Scheme; 7] = [
        Scheme::Memory,
        Scheme::Redis,
        Scheme::RedisSentinel,
        Scheme::RedisCluster,
        Scheme::Redlock,
        Scheme::Etcd,
        Scheme::Zk,
    ];
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
