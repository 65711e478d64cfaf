//! The whole conformance suite on a real ZooKeeper (the testbed's shared
//! standalone server), with elections in the layout of Curator's
//! `LeaderSelector` (the name's mutex line).

mod support;

use std::process::ExitCode;

use lock_zk::ElectionRecipe;

fn main() -> ExitCode {
    support::conformance::run_with(false, ElectionRecipe::LeaderSelector)
}
