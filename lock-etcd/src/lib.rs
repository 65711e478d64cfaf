#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]

mod backend;
mod config;
mod core;
mod session;

pub use backend::EtcdLock;
pub use config::{EtcdConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_LEASE_TTL, DEFAULT_REQUEST_TIMEOUT};
pub use lock_core;
