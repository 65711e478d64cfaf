//! The model-based state-machine test on `MemoryLock` with proptest's full
//! machinery (many cases, shrinking to a minimal failing sequence). Real
//! backends run the same model from the conformance suite with fewer cases.

use std::sync::Arc;
use std::time::Duration;

use lock_conformance::model::{check, ops};
use lock_conformance::{async_trait, Harness};
use lock_core::{DistributedLock, LockError, LockName, MemoryLock};
use proptest::prelude::*;

struct Memory(MemoryLock);

#[async_trait]
impl Harness for Memory {
    async fn client(&self) -> Arc<dyn DistributedLock> {
        Arc::new(self.0.clone())
    }
    fn ttl(&self) -> Duration {
        Duration::from_millis(300)
    }
    async fn remove_behind_back(&self, name: &LockName) {
        self.0.force_release(name);
    }
    async fn leftovers(&self, _name: &LockName) -> Vec<String> {
        Vec::new()
    }
    async fn unreachable_client(&self) -> (Result<Arc<dyn DistributedLock>, LockError>, Duration) {
        unreachable!("not remote")
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn memory_lock_agrees_with_the_model(seq in ops(40)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let lock = MemoryLock::new();
        let result = rt.block_on(check(&Memory(lock.clone()), &seq));
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
        // Nothing stays held or queued once every guard is released.
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(5)).await });
        prop_assert_eq!(lock.active_names(), 0);
    }
}
