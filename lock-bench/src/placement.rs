//! Which ZooKeeper server each new client of a subject connects to.
//!
//! A ZooKeeper client picks a server of its connect string at random, and a
//! client on the leader writes one hop shorter than one on a follower, so
//! two subjects compared in the same run could differ by where their
//! clients happened to land (a 1-task ratio swung between 0.62 and 0.96
//! from run to run). Every subject deals the servers to its clients in the
//! same turn instead (its first client gets the first server, the next one
//! the next, and so on), so ours, the raw protocol and the peer stand on
//! the same servers.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The servers of one connect string, dealt in turn.
pub struct Deal {
    servers: Vec<String>,
    next: AtomicUsize,
}

impl Deal {
    /// Deals the servers of `connect_string` (`host:port,host:port,...`).
    pub fn new(connect_string: &str) -> Self {
        Self {
            servers: connect_string
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// The connect string of the next client: one server, in turn (empty
    /// if the connect string names none).
    pub fn next(&self) -> String {
        if self.servers.is_empty() {
            return String::new();
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.servers.len();
        self.servers[i].clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_subject_deals_the_servers_in_the_same_turn() {
        let cs = "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3";
        let (a, b) = (Deal::new(cs), Deal::new(cs));
        let dealt: Vec<String> = (0..4).map(|_| a.next()).collect();
        assert_eq!(
            dealt,
            ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:1"]
        );
        assert_eq!(b.next(), "127.0.0.1:1");
    }
}
