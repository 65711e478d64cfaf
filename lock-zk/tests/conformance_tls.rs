//! The whole conformance suite once more, on a ZooKeeper reached over
//! mutual TLS (its `secureClientPort`, the testbed's CA, a client certificate).

mod support;

use std::process::ExitCode;

fn main() -> ExitCode {
    support::conformance::run(true)
}
