//! The harness of the in-memory backend (also a template for new backends).

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::LockBackend;
use lock_core::{LockName, LockService, MemoryLock};

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
    async fn client(&self) -> Arc<dyn LockService> {
        Arc::new(self.lock.clone())
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(300)
    }

    fn slack(&self) -> Duration {
        Duration::from_millis(500)
    }

    async fn remove_behind_back(&self, name: &LockName) {
        LockBackend::force_release(&self.lock, name)
            .await
            .expect("an in-process force release cannot fail");
    }

    async fn leftovers(&self, name: &LockName) -> Vec<String> {
        let (holders, waiters) = self.lock.occupancy(name);
        let mut left = Vec::new();
        if holders > 0 {
            left.push(format!("{name}: {holders} holders"));
        }
        if waiters > 0 {
            left.push(format!("{name}: {waiters} waiters"));
        }
        left
    }

    fn model_cases(&self) -> u32 {
        self.model_cases
    }
}
