//! The whole conformance suite on `MemoryLock`, with no gate at all: this keeps
//! the suite itself honest.

use std::process::ExitCode;

use lock_conformance::MemoryHarness;
use lock_core::{Capabilities, Fencing};

fn main() -> ExitCode {
    let expected = Capabilities::new("memory")
        .with_fencing(Fencing::InProcess)
        .with_fifo(true)
        .with_loss_events(true)
        .with_notified_wait(true)
        .with_read_write(true)
        .with_semaphore(true)
        .with_describes_holder(true)
        .with_election(true)
        .with_fault_tolerance("not applicable: one process");
    lock_conformance::run(|| async { MemoryHarness::new() }, expected)
}
