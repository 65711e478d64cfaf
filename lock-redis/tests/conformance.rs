//! The whole conformance suite against a real redis-server (the testbed's
//! shared one), each client with its own connections.

mod support;

use std::process::ExitCode;

fn main() -> ExitCode {
    support::conformance::run(support::conformance::Deployment::Single)
}
