#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]

mod backend;
mod cleanup;
mod client;
mod config;
mod election;
mod fan_out;
mod inner;
mod lease;
mod node;
mod order;
mod round;
mod status;
mod tally;
mod turn;
mod wait;

pub use backend::FAULT_TOLERANCE;
pub use client::RedlockLock;
pub use config::RedlockConfig;
