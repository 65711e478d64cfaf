//! lock-redis (being written)
#![deny(missing_docs)]
pub mod scripts;
