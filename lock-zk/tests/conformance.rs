//! The whole conformance suite on a real ZooKeeper (the testbed's shared
//! standalone server).

mod support;

use std::process::ExitCode;

fn main() -> ExitCode {
    support::conformance::run(false)
}
