#![doc = include_str!("../docs.md")]
//!
//! ## The PostgreSQL schema as plain SQL
//!
//! What [`PgFence::migrate`] runs (also [`postgres::SCHEMA_SQL`]), for users
//! who manage migrations themselves:
//!
//! ```sql
#![doc = include_str!("postgres.sql")]
//! ```
#![deny(missing_docs)]

mod error;
pub mod metrics;
mod write;

#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;

pub use error::FenceError;
pub use write::{Admission, FencedWrite, HeldLock, MAX_RESOURCE_LEN};

#[cfg(feature = "etcd")]
pub use etcd::EtcdFence;
#[cfg(feature = "postgres")]
pub use postgres::PgFence;
#[cfg(feature = "redis")]
pub use redis::RedisFence;

/// Where a fenced write went: the `storage` label of the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Storage {
    /// PostgreSQL ([`PgFence`]).
    Postgres,
    /// Redis ([`RedisFence`]).
    Redis,
    /// etcd ([`EtcdFence`]).
    Etcd,
}

impl Storage {
    /// The label value: `postgres`, `redis` or `etcd`.
    pub fn as_str(self) -> &'static str {
        match self {
            Storage::Postgres => "postgres",
            Storage::Redis => "redis",
            Storage::Etcd => "etcd",
        }
    }
}
