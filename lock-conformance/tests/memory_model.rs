//! The model-based state-machine test on `MemoryLock` with proptest's full
//! machinery (many cases, shrinking to a minimal failing sequence). Real
//! backends run the same model from the conformance suite with fewer cases.

use std::time::Duration;

use lock_conformance::model::{check, ops};
use lock_conformance::MemoryHarness;
use lock_core::{DistributedLock, MemoryLock};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn memory_lock_agrees_with_the_model(seq in ops(40, &MemoryLock::new().capabilities())) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let lock = MemoryLock::new();
        let harness = MemoryHarness { lock: lock.clone(), model_cases: 0 };
        let result = rt.block_on(check(&harness, &seq));
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
        // Nothing stays held or queued once every guard is released.
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(5)).await });
        prop_assert_eq!(lock.active_names(), 0);
    }
}
