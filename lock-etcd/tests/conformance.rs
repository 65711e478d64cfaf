//! The whole conformance suite against a real etcd (the testbed's shared
//! single member).

mod support;

use std::process::ExitCode;

fn main() -> ExitCode {
    support::conformance::run(false)
}
