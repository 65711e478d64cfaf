#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]

mod backend;
mod batching;
mod client;
mod cluster;
mod config;
mod conn;
mod election;
mod failure;
pub mod kit;
mod lease;
mod primitive;
mod queue;
mod renewals;
mod route;
mod sentinel;

pub use backend::{RedisLock, CLUSTER_FAULT_TOLERANCE, SENTINEL_FAULT_TOLERANCE};
pub use batching::{
    RenewBatching, DEFAULT_RENEW_MAX_KEYS, DEFAULT_RENEW_WINDOW, MAX_RENEW_KEYS, MAX_RENEW_WINDOW,
};
pub use config::SyncReplicas;
pub use config::{
    RedisLockConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_RECHECK, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_URL, MAX_TIMEOUT,
};
