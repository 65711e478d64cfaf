#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]

mod backend;
mod config;
mod node;
mod tally;
mod turn;

pub use backend::{RedlockLock, FAULT_TOLERANCE};
pub use config::RedlockConfig;
