//! The whole conformance suite once more, against a Redis Cluster
//! (`redis+cluster://`: 3 primaries, 3 replicas), the fault cases with a
//! proxy in front of every node.

mod support;

use std::process::ExitCode;

fn main() -> ExitCode {
    support::conformance::run(support::conformance::Deployment::Cluster)
}
