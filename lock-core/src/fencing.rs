//! Fencing tokens, and the check a protected resource makes with them.
//!
//! A lease is not a mutex: a client that pauses (GC, swap, SIGSTOP) can outlive
//! its lease and write after another client took the lock. A fencing token is a
//! number that strictly increases with every grant of a lock; the resource
//! remembers the highest token it accepted and refuses writes with a lower one
//! (Kleppmann, "How to do distributed locking").

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A strictly increasing number handed out with every grant of one lock.
///
/// A lock is a name and a kind (mutex, read-write lock, semaphore). Tokens
/// of one lock compare by grant order: a later grant always has a larger
/// token, whether it is a mutex holder, a reader, a writer, the read guard
/// of a downgrade or a permit, and no two grants share one. Tokens of
/// different locks are unrelated (on etcd and ZooKeeper they happen to
/// share one global order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Wraps a raw token value (as read back from storage, say).
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The raw value, for storing next to the data it protects.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<FencingToken> for u64 {
    fn from(t: FencingToken) -> u64 {
        t.0
    }
}

/// A write was refused because a newer lock holder already wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("stale fencing token {offered}: the resource already accepted {highest}")]
pub struct StaleToken {
    /// The token that came with the refused write.
    pub offered: FencingToken,
    /// The highest token the resource had accepted.
    pub highest: FencingToken,
}

/// The resource side of fencing: admits a token only if it is not lower than
/// the highest admitted so far. The same token again is the same holder and is
/// admitted. Lock-free; counts rejections and reports them to the
/// `distlock_fencing_rejects_total` metric.
///
/// ```
/// use lock_core::{FencingToken, TokenFence};
/// let fence = TokenFence::new();
/// assert!(fence.admit(FencingToken::new(5)).is_ok());
/// assert!(fence.admit(FencingToken::new(5)).is_ok());
/// assert!(fence.admit(FencingToken::new(4)).is_err());
/// assert_eq!(fence.rejections(), 1);
/// ```
#[derive(Debug, Default)]
pub struct TokenFence {
    highest: AtomicU64,
    rejections: AtomicU64,
}

impl TokenFence {
    /// A fence that has admitted nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Admits `token` if it is at least the highest admitted so far.
    pub fn admit(&self, token: FencingToken) -> Result<(), StaleToken> {
        let prev = self.highest.fetch_max(token.get(), Ordering::AcqRel);
        if token.get() >= prev {
            Ok(())
        } else {
            self.rejections.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(crate::metrics::FENCING_REJECTS, "storage" => "memory").increment(1);
            Err(StaleToken {
                offered: token,
                highest: FencingToken(prev),
            })
        }
    }

    /// The highest token admitted so far (`None` before the first).
    pub fn highest(&self) -> Option<FencingToken> {
        match self.highest.load(Ordering::Acquire) {
            0 => None,
            v => Some(FencingToken(v)),
        }
    }

    /// How many tokens were refused.
    pub fn rejections(&self) -> u64 {
        self.rejections.load(Ordering::Relaxed)
    }
}

/// A value guarded by a fence: the in-process model of "fencing-aware storage".
/// A write carries the writer's token and is applied only if the token is not
/// stale, atomically with the check.
///
/// ```
/// use lock_core::{FencedRegister, FencingToken};
/// let reg = FencedRegister::new(0u64);
/// reg.write(FencingToken::new(2), |v| *v += 1).unwrap();
/// assert!(reg.write(FencingToken::new(1), |v| *v += 1).is_err());
/// assert_eq!(reg.read(), 1);
/// assert_eq!(reg.rejections(), 1);
/// ```
#[derive(Debug)]
pub struct FencedRegister<T> {
    inner: Mutex<(u64, T)>,
    rejections: AtomicU64,
}

impl<T> FencedRegister<T> {
    /// A register holding `value`, having accepted no token yet.
    pub fn new(value: T) -> Self {
        Self {
            inner: Mutex::new((0, value)),
            rejections: AtomicU64::new(0),
        }
    }

    /// Applies `update` if `token` is not lower than the highest accepted.
    pub fn write<R>(
        &self,
        token: FencingToken,
        update: impl FnOnce(&mut T) -> R,
    ) -> Result<R, StaleToken> {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (highest, value) = &mut *guard;
        if token.get() < *highest {
            self.rejections.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(crate::metrics::FENCING_REJECTS, "storage" => "memory").increment(1);
            return Err(StaleToken {
                offered: token,
                highest: FencingToken(*highest),
            });
        }
        *highest = token.get();
        Ok(update(value))
    }

    /// How many writes were refused as stale.
    pub fn rejections(&self) -> u64 {
        self.rejections.load(Ordering::Relaxed)
    }

    /// The highest token accepted so far.
    pub fn highest(&self) -> Option<FencingToken> {
        match self.inner.lock().unwrap_or_else(|p| p.into_inner()).0 {
            0 => None,
            v => Some(FencingToken(v)),
        }
    }
}

impl<T: Clone> FencedRegister<T> {
    /// A copy of the current value.
    pub fn read(&self) -> T {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fence_is_monotonic_under_threads() {
        let fence = std::sync::Arc::new(TokenFence::new());
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let f = fence.clone();
                std::thread::spawn(move || {
                    for i in 0..1000u64 {
                        let _ = f.admit(FencingToken::new(i * 4 + t));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(fence.highest(), Some(FencingToken::new(3999)));
    }
}
