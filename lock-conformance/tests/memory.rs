//! The whole conformance suite on `MemoryLock`, with no gate at all: this keeps
//! the suite itself honest. Plus the model test with proptest shrinking.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use lock_conformance::{async_trait, Harness};
use lock_core::{Capabilities, DistributedLock, Fencing, LockError, LockName, MemoryLock};

struct Memory(MemoryLock);

#[async_trait]
impl Harness for Memory {
    async fn client(&self) -> Arc<dyn DistributedLock> {
        // Clients of one in-process service share its locks.
        Arc::new(self.0.clone())
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(300)
    }

    fn slack(&self) -> Duration {
        Duration::from_millis(500)
    }

    async fn remove_behind_back(&self, name: &LockName) {
        self.0.force_release(name);
    }

    async fn leftovers(&self, name: &LockName) -> Vec<String> {
        let st = lock_core::DistributedLock::inspect(&self.0, name)
            .await
            .expect("inspect");
        let mut left = Vec::new();
        if st.held {
            left.push(format!("{name}: held"));
        }
        if st.waiters.unwrap_or(0) > 0 {
            left.push(format!("{name}: {} waiters", st.waiters.unwrap_or(0)));
        }
        left
    }

    async fn unreachable_client(&self) -> (Result<Arc<dyn DistributedLock>, LockError>, Duration) {
        unreachable!("the in-memory backend is not remote; the case is deselected by capability")
    }

    fn model_cases(&self) -> u32 {
        64
    }
}

fn main() -> ExitCode {
    let expected = Capabilities::new("memory")
        .with_fencing(Fencing::InProcess)
        .with_fifo(true)
        .with_loss_events(true)
        .with_notified_wait(true)
        .with_fault_tolerance("not applicable: one process");
    lock_conformance::run(|| async { Memory(MemoryLock::new()) }, expected)
}
