//! The whole conformance suite once more, against an etcd reached over
//! mutual TLS (https, the testbed's CA, a client certificate).

mod support;

use std::process::ExitCode;

fn main() -> ExitCode {
    support::conformance::run(true)
}
