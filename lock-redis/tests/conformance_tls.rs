//! The whole conformance suite once more, against a redis-server reached
//! over mutual TLS (`rediss://`, the testbed's CA, a client certificate).

mod support;

use std::process::ExitCode;

fn main() -> ExitCode {
    support::conformance::run(support::conformance::Deployment::Tls)
}
