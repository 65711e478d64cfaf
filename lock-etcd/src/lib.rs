#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]

mod backend;
mod client;
mod config;
mod deletion;
mod election;
mod event;
mod force;
mod held;
mod key;
mod layout;
mod permit;
mod queue;
mod session;
mod watcher;

pub use backend::EtcdLock;
pub use client::error_kind;
pub use config::{
    EtcdConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_LEASE_TTL, DEFAULT_REQUEST_TIMEOUT, MAX_TIMEOUT,
};
pub use lock_core;
