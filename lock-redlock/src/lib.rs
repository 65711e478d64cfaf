#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]

mod backend;
mod config;
mod core;

pub use backend::{RedlockLock, FAULT_TOLERANCE};
pub use config::RedlockConfig;
