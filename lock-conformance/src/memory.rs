//! The harness of the in-memory backend (also a template for new backends).

use std::sync::Arc;
use std::time::Duration;

use lock_core::{DistributedLock, LockError, LockName, MemoryLock};

use crate::{async_trait, Harness};

/// Runs the suite on one [`MemoryLock`]: its "clients" share its locks, as
/// clients of one server do.
#[derive(Clone, Default)]
pub struct MemoryHarness {
    /// The lock service under test.
    pub lock: MemoryLock,
    /// How many random sequences the model-based case runs.
    pub model_cases: u32,
}

impl MemoryHarness {
    /// A harness on a fresh `MemoryLock`, 64 model sequences.
    pub fn new() -> Self {
        Self {
            lock: MemoryLock::new(),
            model_cases: 64,
        }
    }
}

#[async_trait]
impl Harness for MemoryHarness {
    async fn client(&self) -> Arc<dyn DistributedLock> {
        Arc::new(self.lock.clone())
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(300)
    }

    fn slack(&self) -> Duration {
        Duration::from_millis(500)
    }

    async fn remove_behind_back(&self, name: &LockName) {
        self.lock.force_release(name);
    }

    async fn leftovers(&self, name: &LockName) -> Vec<String> {
        let st = lock_core::DistributedLock::inspect(&self.lock, name)
            .await
            .expect("inspect of the in-memory backend cannot fail");
        let mut left = Vec::new();
        if st.held {
            left.push(format!("{name}: held"));
        }
        if let Some(waiters) = st.waiters.filter(|w| *w > 0) {
            left.push(format!("{name}: {waiters} waiters"));
        }
        left
    }

    async fn unreachable_client(&self) -> (Result<Arc<dyn DistributedLock>, LockError>, Duration) {
        unreachable!("the in-memory backend is not remote; the case is deselected by capability")
    }

    fn model_cases(&self) -> u32 {
        self.model_cases
    }
}
