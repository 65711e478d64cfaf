//! Several locks taken together, in one global order: deadlock avoidance for
//! a task that needs more than one lock.

use std::future::Future;

use futures::future::select_all;
use futures::FutureExt;
use tokio::time::Instant;

use crate::error::{LockError, LockErrorKind, Result};
use crate::guard::{GuardView, LockGuard};
use crate::lock::DistributedLock;
use crate::name::LockName;
use crate::options::AcquireOptions;
use crate::state::LossCause;

/// The guards of several names taken together by
/// [`crate::DistributedLockExt::acquire_all`]: one [`LockGuard`] per name (each
/// with its own fencing token), in acquisition order (sorted by name). The
/// set counts as lost as soon as any member is lost. Dropping it releases
/// every member in the background, in reverse order.
#[must_use = "a multi-guard dropped at once releases its locks at once"]
pub struct MultiGuard {
    /// In acquisition order; released from the back.
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// The names, in acquisition order.
    pub fn names(&self) -> impl Iterator<Item = &LockName> {
        self.guards.iter().map(LockGuard::name)
    }

    /// The member guards, in acquisition order.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The guard of `name`, if it is a member.
    pub fn get(&self, name: &LockName) -> Option<&LockGuard> {
        self.guards.iter().find(|g| g.name() == name)
    }

    /// Whether every member is held (or suspended within its validity).
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(LockGuard::is_held)
    }

    /// The first member found lost (or released), with the cause when lost.
    pub fn first_lost(&self) -> Option<(LockName, Option<LossCause>)> {
        self.guards.iter().find(|g| !g.is_held()).map(|g| {
            let cause = match g.state() {
                crate::GuardState::Lost { cause } => Some(cause),
                _ => None,
            };
            (g.name().clone(), cause)
        })
    }

    /// Resolves when any member is lost, with its name and the cause.
    pub fn lost(&self) -> impl Future<Output = (LockName, LossCause)> + Send + 'static {
        let losses: Vec<_> = self
            .guards
            .iter()
            .map(|g| {
                let name = g.name().clone();
                g.lost().map(move |cause| (name, cause)).boxed()
            })
            .collect();
        async move { select_all(losses).await.0 }
    }

    /// Read-only views of every member, in acquisition order.
    pub fn views(&self) -> Vec<GuardView> {
        self.guards.iter().map(LockGuard::view).collect()
    }

    /// Releases every member, in reverse order. `Ok(true)` if every one was
    /// still ours; the first error is returned after every release was tried.
    pub async fn release(mut self) -> Result<bool> {
        let mut all_ours = true;
        let mut first_err = None;
        while let Some(guard) = self.guards.pop() {
            match guard.release().await {
                Ok(ours) => all_ours &= ours,
                Err(err) => {
                    first_err.get_or_insert(err);
                }
            }
        }
        match first_err {
            Some(err) => Err(err),
            None => Ok(all_ours),
        }
    }

    /// Runs `section` with views of every member, stops it as soon as any
    /// member is lost, and releases every member afterwards.
    pub(crate) async fn run<F, Fut, T>(self, section: F) -> Result<T>
    where
        F: FnOnce(Vec<GuardView>) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        let lost = self.lost();
        let section = section(self.views());
        tokio::select! {
            biased;
            (name, cause) = lost => {
                drop(self);
                Err(LockError::new(LockErrorKind::Lost, format!("lock {name} lost during the critical section: {cause}")))
            }
            out = section => {
                if let Err(err) = self.release().await {
                    tracing::warn!(error = %err, "distlock: release after the critical section failed; the locks expire with their TTL");
                }
                Ok(out)
            }
        }
    }
}

impl Drop for MultiGuard {
    fn drop(&mut self) {
        // Each guard releases in the background when dropped; drop them
        // from the last taken to the first.
        while let Some(guard) = self.guards.pop() {
            drop(guard);
        }
    }
}

impl std::fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.guards.iter()).finish()
    }
}

/// The names of a multi-lock in the global order: sorted; duplicates and an
/// empty set refused.
pub(crate) fn ordered(names: &[LockName]) -> Result<Vec<LockName>> {
    if names.is_empty() {
        return Err(LockError::invalid("acquire_all needs at least one name"));
    }
    let mut sorted = names.to_vec();
    sorted.sort();
    if let Some(pair) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(LockError::invalid(format!(
            "lock {} is named twice; a task cannot hold one lock twice (locks are not reentrant)",
            pair[0]
        )));
    }
    Ok(sorted)
}

pub(crate) async fn acquire_all<L: DistributedLock + ?Sized>(
    locks: &L,
    names: &[LockName],
    opts: &AcquireOptions,
) -> Result<MultiGuard> {
    opts.validate()?;
    let order = ordered(names)?;
    let deadline = crate::backend::add_saturating(Instant::now(), opts.wait_value());
    let mut taken = MultiGuard {
        guards: Vec::with_capacity(order.len()),
    };
    for name in &order {
        let member = if opts.waits_forever() {
            opts.clone()
        } else {
            opts.clone()
                .wait(deadline.saturating_duration_since(Instant::now()))
        };
        match locks.acquire(name, &member).await {
            Ok(guard) => taken.guards.push(guard),
            Err(err) => {
                let message = give_back(taken, &format!("lock {name} not acquired")).await;
                return Err(LockError::new(err.kind(), message).with_source(err));
            }
        }
    }
    // A member taken early can be lost while the call waits for a later one
    // (its validity passed, it was deleted): all or nothing means the set
    // is not returned then.
    if let Some((name, cause)) = taken.first_lost() {
        let cause = cause.map_or_else(|| "its validity passed".to_string(), |c| c.to_string());
        let why = format!("lock {name} was lost ({cause}) while the others were awaited");
        let message = give_back(taken, &why).await;
        return Err(LockError::new(LockErrorKind::Lost, message));
    }
    Ok(taken)
}

/// Releases what `taken` holds after the call failed for `why`, and says
/// so for the error message.
async fn give_back(taken: MultiGuard, why: &str) -> String {
    let held: Vec<String> = taken.names().map(ToString::to_string).collect();
    if let Err(release_err) = taken.release().await {
        tracing::warn!(error = %release_err, "distlock: releasing the locks already taken failed; they expire with their TTL");
    }
    format!(
        "acquire_all: {why}; released the {} already taken{}",
        held.len(),
        if held.is_empty() {
            String::new()
        } else {
            format!(": {}", held.join(", "))
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> LockName {
        LockName::new(s).unwrap()
    }

    #[tokio::test]
    async fn a_set_waits_forever_for_a_member_held_elsewhere() {
        use crate::{DistributedLock, DistributedLockExt, MemoryLock};
        let _shared = crate::clock::SUSPENSIONS.read().await;
        let locks = MemoryLock::new();
        let held = locks
            .acquire(&n("b"), &AcquireOptions::new())
            .await
            .unwrap();
        let waiting = {
            let locks = locks.clone();
            tokio::spawn(async move {
                let opts = AcquireOptions::new().wait_forever();
                locks.acquire_all(&[n("a"), n("b")], &opts).await
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(!waiting.is_finished());
        assert!(held.release().await.unwrap());
        let all = waiting.await.unwrap().expect("the set, once b was free");
        assert!(all.is_held());
        assert!(all.release().await.unwrap());
    }

    #[test]
    fn order_is_sorted_and_refuses_duplicates_and_nothing() {
        assert_eq!(
            ordered(&[n("b"), n("a"), n("c")]).unwrap(),
            vec![n("a"), n("b"), n("c")]
        );
        assert_eq!(
            ordered(&[n("a"), n("b"), n("a")]).unwrap_err().kind(),
            LockErrorKind::InvalidArgument
        );
        assert_eq!(
            ordered(&[]).unwrap_err().kind(),
            LockErrorKind::InvalidArgument
        );
    }
}
