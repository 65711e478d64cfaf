//! Metrics of fenced writes, through the [`metrics`] facade.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | [`FENCED_WRITES`] `distlock_fenced_writes_total` | counter | `storage` (`postgres`, `redis`, `etcd`), `outcome` (`admitted`, `duplicate`) |
//! | [`FENCING_REJECTS`] `distlock_fencing_rejects_total` | counter | `storage` |
//!
//! No label holds the resource or the key: the number of series stays fixed
//! however many resources are fenced. A fencing reject means two holders
//! believed they held one lock at once and the storage stopped the older one:
//! alert on any increase (`increase(distlock_fencing_rejects_total[5m]) > 0`)
//! and investigate at once. PostgreSQL counts what the fence decided inside the
//! transaction, whether the caller then commits or rolls back.

use crate::{Admission, FenceError, Storage};

/// Counter: writes the fence admitted, labels `storage` and `outcome`
/// (`admitted`: performed; `duplicate`: an idempotency key seen before).
pub const FENCED_WRITES: &str = "distlock_fenced_writes_total";

/// Counter: writes refused as stale, label `storage` (the name lock-core's
/// in-process fences use too, without a label).
pub const FENCING_REJECTS: &str = lock_core::metrics::FENCING_REJECTS;

/// Counts the outcome of one fenced write (store errors are not counted).
#[cfg_attr(
    not(any(feature = "postgres", feature = "redis", feature = "etcd")),
    allow(dead_code)
)]
pub(crate) fn record(storage: Storage, outcome: &Result<Admission, FenceError>) {
    let label = storage.as_str();
    match outcome {
        Ok(Admission::Admitted) => {
            metrics::counter!(FENCED_WRITES, "storage" => label, "outcome" => "admitted")
                .increment(1)
        }
        Ok(Admission::Duplicate { .. }) => {
            metrics::counter!(FENCED_WRITES, "storage" => label, "outcome" => "duplicate")
                .increment(1)
        }
        Err(FenceError::StaleToken { .. }) => {
            metrics::counter!(FENCING_REJECTS, "storage" => label).increment(1)
        }
        Err(_) => {}
    }
}
