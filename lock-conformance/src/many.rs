//! Many guards at once, for the tests of renewal batching and keep-alive
//! traffic that every Redis-family backend runs.

use futures::future::join_all;
use lock_core::{AcquireOptions, DistributedLock, LockGuard, LockName};

use crate::unique_name;

/// `n` guards of `lock` on distinct fresh names starting with `prefix`,
/// taken concurrently; panics if any acquire fails.
pub async fn hold<L>(lock: &L, prefix: &str, n: usize, opts: &AcquireOptions) -> Vec<LockGuard>
where
    L: DistributedLock + ?Sized,
{
    let names: Vec<LockName> = (0..n).map(|_| unique_name(prefix)).collect();
    join_all(names.iter().map(|name| lock.acquire(name, opts)))
        .await
        .into_iter()
        .map(|g| g.expect("acquire"))
        .collect()
}

/// Releases `guards` one after the other (a burst of hundreds of
/// concurrent releases times out on a loaded machine, which is not what is
/// tested), asserting that each was still ours.
pub async fn release_all(guards: Vec<LockGuard>) {
    for g in guards {
        assert!(
            g.release().await.expect("release"),
            "a guard was no longer ours at release"
        );
    }
}
