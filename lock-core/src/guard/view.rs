//! The read-only view of a guard.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio::time::Instant;

use crate::clock::SuspendMark;
use crate::fencing::FencingToken;
use crate::guard_states::GuardStates;
use crate::mode::LockMode;
use crate::name::LockName;
use crate::state::{GuardState, LossCause};

/// A cheap, cloneable read-only view of a guard: what a critical section
/// passed to [`crate::DistributedLockExt::with_lock`] sees.
#[derive(Clone)]
pub struct GuardView {
    pub(super) name: LockName,
    pub(super) mode: LockMode,
    pub(super) key: Option<Arc<str>>,
    pub(super) token: Option<FencingToken>,
    pub(super) state: GuardStates,
    /// The `distlock.guard` span of this grant.
    pub(super) span: tracing::Span,
}

impl GuardView {
    /// The lock name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// What kind of lease this is: a mutex, a read or write side of a
    /// read-write lock, or a semaphore permit.
    pub fn mode(&self) -> LockMode {
        self.mode
    }

    /// Where the lease lives on the server (the etcd key, the ZooKeeper node
    /// path, the Redis key), where the backend tells it.
    pub fn server_key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The `distlock.guard` tracing span of this grant (fields `backend`,
    /// `name`, `mode`, `token`), to run the critical section in:
    /// `section.instrument(guard.span())`.
    pub fn span(&self) -> tracing::Span {
        self.span.clone()
    }

    /// The fencing token of this grant, if the backend has them
    /// ([`crate::Capabilities::fencing`]). Strictly larger than the token of
    /// every earlier grant of the same lock, and unique to this grant. A
    /// lock is a name and a kind: a name's mutex, its read-write lock and
    /// its semaphore are three locks; in the read-write lock, read guards,
    /// write guards and the read guard of a downgrade are all grants (a
    /// reader let in after a writer has a larger token than the writer's),
    /// and so is every permit of the semaphore. Send it with every write to
    /// the protected resource.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.token
    }

    /// The state now. Never `Held` past `valid_until`, and time the machine
    /// spent suspended counts against the validity.
    pub fn state(&self) -> GuardState {
        let st = self.state.borrow().clone();
        let mark = SuspendMark::from_nanos(self.state.mark());
        st.corrected(mark).at(Instant::now())
    }

    /// Whether the lock is held (or suspended but still within validity).
    pub fn is_held(&self) -> bool {
        self.state().valid_until().is_some()
    }

    /// End of validity, if held or suspended.
    pub fn valid_until(&self) -> Option<Instant> {
        self.state().valid_until()
    }

    /// Resolves when the lock is lost, with the cause. Never resolves after a
    /// release. Can be awaited many times, from clones, after the guard moved.
    pub fn lost(&self) -> impl Future<Output = LossCause> + Send + 'static {
        let mut rx = self.state.clone();
        async move {
            loop {
                let st = rx.borrow_and_update().clone();
                match st {
                    GuardState::Lost { cause } => return cause,
                    GuardState::Released => std::future::pending::<()>().await,
                    GuardState::Held { valid_until }
                    | GuardState::Suspended { valid_until, .. } => {
                        tokio::select! {
                            changed = rx.changed() => {
                                if changed.is_err() {
                                    // The keeper is gone (runtime shut down): only time can tell now.
                                    tokio::time::sleep_until(valid_until).await;
                                    return LossCause::Expired;
                                }
                            }
                            _ = tokio::time::sleep_until(valid_until) => return LossCause::Expired,
                        }
                    }
                }
            }
        }
    }
}

impl fmt::Debug for GuardView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardView")
            .field("name", &self.name)
            .field("mode", &self.mode)
            .field("token", &self.token)
            .field("state", &self.state())
            .finish()
    }
}
