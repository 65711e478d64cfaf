//! [`Cluster`]: the servers of one backend as the tests that break them see
//! them, whatever the backend: the addresses clients connect to, the URL a
//! client connects with, and pausing, killing and restarting one member.

use std::net::SocketAddr;

use crate::error::TestbedError;
use crate::etcd::EtcdCluster;
use crate::member::member_index;
use crate::redis::{RedisServer, RedisSet};
use crate::zk::ZkEnsemble;

/// The servers of one backend, started by the testbed.
///
/// ```no_run
/// use lock_testbed::{Cluster, EtcdCluster};
/// let mut etcd = EtcdCluster::start(3).unwrap();
/// let url = Cluster::url(&etcd, "request_timeout=1s");
/// assert!(url.starts_with("etcd://127.0.0.1:"));
/// etcd.kill(0).unwrap();
/// etcd.restart(0).unwrap();
/// ```
pub trait Cluster: Send + Sync {
    /// The URL scheme of a client of these servers (`redis`, `redlock`,
    /// `etcd`, `zk`).
    fn scheme(&self) -> &'static str;

    /// The client address of every member, in member order.
    fn addrs(&self) -> Vec<SocketAddr>;

    /// How many members there are.
    fn members(&self) -> usize {
        self.addrs().len()
    }

    /// The URL of a client that talks to `addrs` (these members, or proxies
    /// in front of them), with `options` (`name=value&...`, may be empty) as
    /// its query.
    fn url_to(&self, addrs: &[SocketAddr], options: &str) -> String {
        let hosts: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
        let query = if options.is_empty() { "" } else { "?" };
        format!("{}://{}{query}{options}", self.scheme(), hosts.join(","))
    }

    /// The URL of a client of these members, with `options` as its query.
    fn url(&self, options: &str) -> String {
        self.url_to(&self.addrs(), options)
    }

    /// Stops member `i` (SIGSTOP): it keeps its connections but answers nothing.
    fn pause(&self, i: usize) -> Result<(), TestbedError>;

    /// Lets a paused member `i` run again (SIGCONT).
    fn resume(&self, i: usize) -> Result<(), TestbedError>;

    /// Kills member `i` (SIGKILL).
    fn kill(&mut self, i: usize) -> Result<(), TestbedError>;

    /// Starts a killed member `i` again on the same port and data.
    fn restart(&mut self, i: usize) -> Result<(), TestbedError>;

    /// The member that leads now, where the servers elect one (etcd,
    /// ZooKeeper); `None` for servers that do not (Redis).
    fn leader(&self) -> Result<Option<usize>, TestbedError>;
}

/// Checks that a single server is asked about its only member.
fn only(i: usize) -> Result<(), TestbedError> {
    if i == 0 {
        Ok(())
    } else {
        Err(TestbedError::NoSuchMember {
            index: i,
            members: 1,
        })
    }
}

impl Cluster for RedisServer {
    fn scheme(&self) -> &'static str {
        "redis"
    }
    fn addrs(&self) -> Vec<SocketAddr> {
        vec![self.addr()]
    }
    fn pause(&self, i: usize) -> Result<(), TestbedError> {
        only(i).and_then(|()| RedisServer::pause(self))
    }
    fn resume(&self, i: usize) -> Result<(), TestbedError> {
        only(i).and_then(|()| RedisServer::resume(self))
    }
    fn kill(&mut self, i: usize) -> Result<(), TestbedError> {
        only(i).and_then(|()| RedisServer::kill(self))
    }
    fn restart(&mut self, i: usize) -> Result<(), TestbedError> {
        only(i).and_then(|()| RedisServer::restart(self))
    }
    fn leader(&self) -> Result<Option<usize>, TestbedError> {
        Ok(None)
    }
}

impl Cluster for RedisSet {
    fn scheme(&self) -> &'static str {
        "redlock"
    }
    fn addrs(&self) -> Vec<SocketAddr> {
        RedisSet::addrs(self)
    }
    fn pause(&self, i: usize) -> Result<(), TestbedError> {
        member_index(self.nodes(), i)?.pause()
    }
    fn resume(&self, i: usize) -> Result<(), TestbedError> {
        member_index(self.nodes(), i)?.resume()
    }
    fn kill(&mut self, i: usize) -> Result<(), TestbedError> {
        member_index(self.nodes(), i)?;
        self.node_mut(i).kill()
    }
    fn restart(&mut self, i: usize) -> Result<(), TestbedError> {
        member_index(self.nodes(), i)?;
        self.node_mut(i).restart()
    }
    fn leader(&self) -> Result<Option<usize>, TestbedError> {
        Ok(None)
    }
}

impl Cluster for EtcdCluster {
    fn scheme(&self) -> &'static str {
        "etcd"
    }
    fn addrs(&self) -> Vec<SocketAddr> {
        EtcdCluster::addrs(self)
    }
    fn pause(&self, i: usize) -> Result<(), TestbedError> {
        EtcdCluster::pause(self, i)
    }
    fn resume(&self, i: usize) -> Result<(), TestbedError> {
        EtcdCluster::resume(self, i)
    }
    fn kill(&mut self, i: usize) -> Result<(), TestbedError> {
        EtcdCluster::kill(self, i)
    }
    fn restart(&mut self, i: usize) -> Result<(), TestbedError> {
        EtcdCluster::restart(self, i)
    }
    fn leader(&self) -> Result<Option<usize>, TestbedError> {
        EtcdCluster::leader(self).map(Some)
    }
}

impl Cluster for ZkEnsemble {
    fn scheme(&self) -> &'static str {
        "zk"
    }
    fn addrs(&self) -> Vec<SocketAddr> {
        ZkEnsemble::addrs(self)
    }
    fn pause(&self, i: usize) -> Result<(), TestbedError> {
        ZkEnsemble::pause(self, i)
    }
    fn resume(&self, i: usize) -> Result<(), TestbedError> {
        ZkEnsemble::resume(self, i)
    }
    fn kill(&mut self, i: usize) -> Result<(), TestbedError> {
        ZkEnsemble::kill(self, i)
    }
    fn restart(&mut self, i: usize) -> Result<(), TestbedError> {
        ZkEnsemble::restart(self, i)
    }
    fn leader(&self) -> Result<Option<usize>, TestbedError> {
        ZkEnsemble::leader(self).map(Some)
    }
}
