#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]

mod backend;
mod config;
mod connect;
mod election;
mod error;
mod force;
mod lease;
mod list;
mod monitor;
mod node;
mod own;
mod queue;
mod semaphore;
mod session;
mod vouch;

pub use backend::ZkLock;
pub use config::{
    AclEntry, ElectionRecipe, NodeAcl, Perms, ZkConfig, DEFAULT_BASE_PATH, DEFAULT_CONNECT,
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, DEFAULT_SESSION_TIMEOUT, MAX_IDENTIFIER_LEN,
    MAX_TIMEOUT, MIN_TIMEOUT,
};
