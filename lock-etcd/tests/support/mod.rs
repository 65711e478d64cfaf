//! Shared by the conformance test binaries.

pub mod conformance;
