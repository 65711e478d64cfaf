//! [`Cluster`]: the servers of one backend as the tests that break them see
//! them, whatever the backend: the addresses clients connect to, the URL a
//! client connects with, and pausing, killing and restarting one member.
//! Each server type implements it in its own file (`redis.rs`, `etcd.rs`,
//! `zk/mod.rs`); [`Kind`](crate::Kind) says which type a backend's servers are.

use std::net::SocketAddr;

use crate::error::TestbedError;

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
