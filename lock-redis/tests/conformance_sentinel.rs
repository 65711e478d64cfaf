//! The whole conformance suite once more, against the primary of a
//! Sentinel-managed deployment (`redis+sentinel://`: 1 primary, 2
//! replicas, 3 sentinels), the fault cases with proxies in front of the
//! sentinels and the data nodes.

mod support;

use std::process::ExitCode;

fn main() -> ExitCode {
    support::conformance::run(support::conformance::Deployment::Sentinel)
}
