#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]

mod backend;
pub mod call;
mod client;
mod config;
pub mod eviction;
pub mod notify;
pub mod place;
mod primitive;
pub mod renew;
pub mod scripts;
mod tls;

pub use backend::RedisLock;
pub use config::{
    redact_url, RedisLockConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_RECHECK,
    DEFAULT_REQUEST_TIMEOUT, DEFAULT_URL, MAX_TIMEOUT,
};
pub use renew::RenewBatching;
pub use scripts::Keys;
pub use tls::open_client;
