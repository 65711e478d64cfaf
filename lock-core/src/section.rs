//! A critical section run while a guard holds: stopped as soon as the lock
//! is lost (`with_lock` and its kin, `with_leadership`).

use std::future::Future;

use crate::error::{LockError, LockErrorKind, Result};
use crate::guard::{GuardView, LockGuard};

/// Runs `section` while `guard` holds, then releases it; stops the section
/// (drops its future) as soon as the lock is lost.
pub(crate) async fn run_section<F, Fut, T>(guard: LockGuard, section: F) -> Result<T>
where
    F: FnOnce(GuardView) -> Fut + Send,
    Fut: Future<Output = T> + Send,
    T: Send,
{
    let name = guard.name().clone();
    let lost = guard.lost();
    let section = section(guard.view());
    tokio::select! {
        biased;
        cause = lost => {
            drop(guard);
            Err(LockError::new(LockErrorKind::Lost, format!("lock {name} lost during the critical section: {cause}")))
        }
        out = section => {
            if let Err(err) = guard.release().await {
                tracing::warn!(name = %name, error = %err, "distlock: release after the critical section failed; the lock expires with its TTL");
            }
            Ok(out)
        }
    }
}
