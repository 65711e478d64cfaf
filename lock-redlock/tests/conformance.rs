//! The whole conformance suite on `RedlockLock` over the testbed's five
//! shared Redis nodes.

mod support;

use std::process::ExitCode;

fn main() -> ExitCode {
    support::conformance::run(false)
}
