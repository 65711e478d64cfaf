//! Our backends by name: the values of `--backends`, the `backend` column
//! of the report and the `backend` keys of the JSON results.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// One of our backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// `MemoryLock`, in process.
    Memory,
    /// One Redis server.
    Redis,
    /// Redlock over independent Redis servers.
    Redlock,
    /// An etcd cluster.
    Etcd,
    /// A ZooKeeper ensemble.
    Zk,
}

impl Backend {
    /// Every backend, in report order.
    pub const ALL: [Backend; 5] = [
        Backend::Memory,
        Backend::Redis,
        Backend::Redlock,
        Backend::Etcd,
        Backend::Zk,
    ];

    /// The backends that talk to servers, in report order.
    pub const REMOTE: [Backend; 4] = [Backend::Redis, Backend::Redlock, Backend::Etcd, Backend::Zk];

    /// Its name on the command line, in the report and in the JSON results.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Redis => "redis",
            Backend::Redlock => "redlock",
            Backend::Etcd => "etcd",
            Backend::Zk => "zk",
        }
    }

    /// The servers it runs on, as lock-testbed's fixture names them; `None`
    /// for the in-process backend.
    pub fn servers(self) -> Option<lock_testbed::Kind> {
        match self {
            Backend::Memory => None,
            Backend::Redis => Some(lock_testbed::Kind::Redis),
            Backend::Redlock => Some(lock_testbed::Kind::Redlock),
            Backend::Etcd => Some(lock_testbed::Kind::Etcd),
            Backend::Zk => Some(lock_testbed::Kind::Zk),
        }
    }

    /// Its `backend` label in lock-core's metrics (the client requests
    /// counted per backend), which names ZooKeeper in full.
    pub fn metrics_label(self) -> &'static str {
        match self {
            Backend::Zk => "zookeeper",
            other => other.as_str(),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is none of [`Backend::ALL`]'s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownBackend(String);

impl fmt::Display for UnknownBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Backend::ALL.iter().map(|b| b.as_str()).collect();
        write!(f, "no backend `{}` (one of: {})", self.0, names.join(", "))
    }
}

impl std::error::Error for UnknownBackend {}

impl FromStr for Backend {
    type Err = UnknownBackend;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Backend::ALL
            .into_iter()
            .find(|b| b.as_str() == name)
            .ok_or_else(|| UnknownBackend(name.to_string()))
    }
}

impl Serialize for Backend {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// The values `--backends` takes: the names of [`Backend::as_str`].
impl clap::ValueEnum for Backend {
    fn value_variants<'a>() -> &'a [Self] {
        &Backend::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back() {
        let names: Vec<String> = Backend::ALL.iter().map(Backend::to_string).collect();
        assert_eq!(names, ["memory", "redis", "redlock", "etcd", "zk"]);
        for b in Backend::ALL {
            assert_eq!(b.as_str().parse::<Backend>(), Ok(b));
            assert_eq!(serde_json::to_string(&b).unwrap(), format!("\"{b}\""));
        }
        assert!(Backend::REMOTE.iter().all(|b| *b != Backend::Memory));
        assert_eq!(Backend::Zk.metrics_label(), "zookeeper");
        assert_eq!(Backend::Etcd.metrics_label(), "etcd");
        let err = "zookeeper".parse::<Backend>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "no backend `zookeeper` (one of: memory, redis, redlock, etcd, zk)"
        );
    }
}
