//! The lock guard: the proof of holding, the same for every backend.
//!
//! - [`view`]: the read-only view of a guard (state, token, loss signal);
//! - [`link`]: what a guard and its keeper share;
//! - [`keeper`]: the background task that keeps the lease alive.

use std::fmt;
use std::future::Future;
use std::sync::atomic::AtomicU8;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::mailbox::Mailbox;
use crate::backend::Lease;
use crate::error::{LockError, LockErrorKind, Result};
use crate::fencing::FencingToken;
use crate::guard_states::{GuardStates, Publisher};
use crate::lazy_task::LazyTask;
use crate::metrics as m;
use crate::mode::LockMode;
use crate::name::LockName;
use crate::options::check_ttl;
use crate::state::{GuardState, LossCause};

mod keeper;
mod link;
mod view;

pub(crate) use link::Grant;
use link::{released_outcome, Command, Link, GUARD_RELEASES, IDLE};
pub use view::GuardView;

/// Proof of holding a lock. One type for every backend.
///
/// While it lives, a background keeper keeps the lock alive (unless
/// keep-alive is off) and tracks its [`GuardState`]; it becomes a task of
/// its own when it first has something to do (a renewal, a server event, a
/// command), so a guard released before that costs no task. Dropping it
/// releases the lock in the background and never blocks;
/// [`LockGuard::release`] releases and reports whether the lock was still
/// ours.
///
/// Note: a guard leaked with `mem::forget` while keep-alive is on keeps its
/// lock until the process ends, as a holder that never finishes would.
#[must_use = "a guard dropped at once releases its lock at once"]
pub struct LockGuard {
    view: GuardView,
    commands: Commands,
}

/// The guard's side of its link to the keeper: dropping it (the guard
/// dropped) closes the command queue, which makes the keeper release and
/// exit (or only exit, once the guard took the release over).
struct Commands(Arc<Link>);

impl Commands {
    /// Hands `cmd` to the keeper; gives it back if the keeper is gone.
    fn send(&self, cmd: Command) -> std::result::Result<(), Command> {
        self.0.commands.post(cmd)
    }
}

impl Drop for Commands {
    fn drop(&mut self) {
        self.0.commands.close();
    }
}

/// A release made in the caller's task that is cancelled before the
/// server answered (its future dropped) goes on in the background, as a
/// release by the keeper would: the lock is not left to its TTL.
/// (`bool`: whether the lease's validity had passed, see [`Link::end_lease`]).
struct ReleaseUnlessDone(Option<(Arc<Link>, bool)>);

impl Drop for ReleaseUnlessDone {
    fn drop(&mut self) {
        let Some((link, expired)) = self.0.take() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(err) = link.end_lease(expired).await {
                    tracing::debug!(backend = link.backend, error = %err, "distlock: background release failed; the lock expires with its TTL");
                }
            });
        }
    }
}

impl LockGuard {
    /// Starts the keeper of a freshly granted lease (see [`LazyTask`]). Must
    /// be called within a tokio runtime (the core calls it; backends do not).
    pub(crate) fn start(lease: Lease, grant: Grant) -> Self {
        let own_until = lease.valid_until;
        let session_until = lease.session_until;
        let (state_tx, state_rx) = Publisher::new(
            GuardState::Held {
                valid_until: session_until.map_or(own_until, |s| s.min(own_until)),
            },
            grant.mark.as_nanos(),
        );
        let token = lease.token.map(|t| t.get());
        let span = tracing::info_span!(
            "distlock.guard",
            backend = grant.backend,
            name = %grant.name,
            mode = grant.mode.as_str(),
            token = token
        );
        metrics::gauge!(m::HELD, "backend" => grant.backend).increment(1.0);
        let now = Instant::now();
        let link = Arc::new(Link {
            commands: Mailbox::new(),
            keeper: LazyTask::new(),
            turn: AtomicU8::new(IDLE),
            handle: lease.handle,
            state: state_tx,
            backend: grant.backend,
            acquired_at: now,
            span: span.clone(),
        });
        keeper::start(&link, lease.events, &grant, own_until, session_until);
        Self {
            view: GuardView {
                name: grant.name,
                mode: grant.mode,
                key: lease.key,
                token: lease.token,
                state: state_rx,
                span,
            },
            commands: Commands(link),
        }
    }

    /// The lock name.
    pub fn name(&self) -> &LockName {
        self.view.name()
    }

    /// What kind of lease this is; see [`GuardView::mode`].
    pub fn mode(&self) -> LockMode {
        self.view.mode()
    }

    /// Where the lease lives on the server; see [`GuardView::server_key`].
    pub fn server_key(&self) -> Option<&str> {
        self.view.server_key()
    }

    /// The fencing token of this grant; see [`GuardView::fencing_token`].
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.view.fencing_token()
    }

    /// The state now. Never `Held` past `valid_until`.
    pub fn state(&self) -> GuardState {
        self.view.state()
    }

    /// Whether the lock is held (or suspended but within validity).
    pub fn is_held(&self) -> bool {
        self.view.is_held()
    }

    /// End of validity on the monotonic clock, if held or suspended.
    pub fn valid_until(&self) -> Option<Instant> {
        self.view.valid_until()
    }

    /// Resolves when the lock is lost; see [`GuardView::lost`].
    pub fn lost(&self) -> impl Future<Output = LossCause> + Send + 'static {
        self.view.lost()
    }

    /// Every state of this guard, for callers that want each transition.
    pub fn subscribe(&self) -> GuardStates {
        self.view.state.clone()
    }

    /// A cheap read-only view that can be cloned into other tasks.
    pub fn view(&self) -> GuardView {
        self.view.clone()
    }

    /// Extends the lease to `ttl` from now (and keep-alive renews to `ttl` from
    /// then on). Returns the new end of validity. Fails with
    /// [`LockErrorKind::Lost`] if the lock is gone.
    ///
    /// If the server's answer does not come, the outcome is unknown: the guard
    /// is suspended and its validity becomes the earlier of the current one
    /// and what the extension could have set (so a shorter TTL that the
    /// server may have applied is honoured).
    pub async fn extend(&self, ttl: Duration) -> Result<Instant> {
        check_ttl(ttl)?;
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Extend(ttl, tx))
            .map_err(|_| self.keeper_gone())?;
        rx.await.map_err(|_| self.keeper_gone())?
    }

    /// Releases the lock. `Ok(true)` if it was still ours, `Ok(false)` if it
    /// had already been lost (so a later holder's lock was left alone).
    ///
    /// Dropping the returned future before it completes does not leave the
    /// lock behind: the release goes on in the background.
    pub async fn release(self) -> Result<bool> {
        let link = self.commands.0.clone();
        if !link.take_turn(GUARD_RELEASES) {
            // The keeper is acting on the lease (or gone): it releases once
            // its turn ends.
            let (tx, rx) = oneshot::channel();
            if self.commands.send(Command::Release(tx)).is_err() {
                return Ok(false);
            }
            return rx.await.unwrap_or(Ok(false));
        }
        // The keeper was idle and never acts again: release here, as its
        // `finish` would. The state is published first; then a keeper that
        // never left this task is dropped here (a spawned one ends when the
        // guard's side of the link is dropped).
        let LockGuard { view, commands } = self;
        let published = link.state.borrow().clone();
        if matches!(published, GuardState::Lost { .. } | GuardState::Released) {
            link.keeper.cancel();
            drop(commands);
            return Ok(false);
        }
        link.record_hold();
        let expired = view.state().valid_until().is_none();
        link.state.send_replace(GuardState::Released);
        link.keeper.cancel();
        drop(commands);
        let mut pending = ReleaseUnlessDone(Some((link.clone(), expired)));
        let released = link.end_lease(expired).instrument(view.span).await;
        pending.0 = None;
        released_outcome(released, expired, link.backend, &view.name)
    }

    /// Replaces the published value of a leader's guard (see
    /// [`crate::Leadership::proclaim`]).
    pub(crate) async fn proclaim(&self, value: String) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Proclaim(value, tx))
            .map_err(|_| self.keeper_gone())?;
        rx.await.map_err(|_| self.keeper_gone())?
    }

    /// Hands the lease to the backend's downgrade (write -> read) and ends
    /// this guard without releasing: the backend removed the write side.
    pub(crate) async fn downgrade_lease(self) -> Result<(Lease, Grant)> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Downgrade(tx))
            .map_err(|_| self.keeper_gone())?;
        rx.await.map_err(|_| self.keeper_gone())?
    }

    fn keeper_gone(&self) -> LockError {
        match self.state() {
            GuardState::Lost { cause } => LockError::new(
                LockErrorKind::Lost,
                format!("lock {} lost: {cause}", self.name()),
            ),
            _ => LockError::new(
                LockErrorKind::Internal,
                format!(
                    "the keep-alive task of lock {} is gone (runtime shut down?)",
                    self.name()
                ),
            ),
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", self.name())
            .field("mode", &self.mode())
            .field("token", &self.fencing_token())
            .field("state", &self.state())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    //! Unit tests that hold guards: a simulated suspension is process-wide,
    //! so each takes [`clock::SUSPENSIONS`] (the one that suspends, alone);
    //! guard tests of other kinds live in `tests/`, in their own processes.
    use std::sync::atomic::Ordering;

    use super::keeper::KEEPER_STATE_BYTES;
    use super::*;
    use crate::clock;
    use crate::resume::registered_keepers;
    use crate::{AcquireOptions, DistributedLock, LockName, MemoryLock};

    /// After the machine was suspended longer than the TTL, the guard is no
    /// longer held, at once, and its loss signal fires without waiting for
    /// timers on the stopped clock.
    #[tokio::test]
    async fn suspension_longer_than_the_ttl_loses_the_guard() {
        let _alone = clock::SUSPENSIONS.write().await;
        let locks = MemoryLock::new();
        let name = LockName::new("suspended").unwrap();
        let g = locks
            .acquire(&name, &AcquireOptions::new().ttl(Duration::from_secs(30)))
            .await
            .unwrap();
        let short = locks
            .acquire(
                &LockName::new("suspended-short").unwrap(),
                &AcquireOptions::new().ttl(Duration::from_secs(30)),
            )
            .await
            .unwrap();
        assert!(g.is_held());
        clock::simulate_suspend(Duration::from_secs(45));
        assert!(
            !g.is_held(),
            "still held after a suspension past its ttl: {:?}",
            g.state()
        );
        let cause = tokio::time::timeout(Duration::from_secs(2), g.lost())
            .await
            .expect("the loss signal fires promptly after the resume");
        assert_eq!(cause, LossCause::Expired);
        assert!(!short.is_held());
    }

    /// A keeper's state, which every held guard keeps for its whole life,
    /// stays small: what a step on the lease needs is boxed while the step
    /// runs, and nothing of a wake-up is kept across the next wait (it was
    /// 592 bytes in a test build when a downgrade's outcome and the
    /// wake-up were kept; 328 now, 312 in a release build).
    #[tokio::test]
    async fn a_keepers_state_stays_small() {
        let _shared = clock::SUSPENSIONS.read().await;
        let locks = MemoryLock::new();
        let g = locks
            .acquire(
                &LockName::new("keeper-size").unwrap(),
                &AcquireOptions::new(),
            )
            .await
            .unwrap();
        let bytes = KEEPER_STATE_BYTES.load(Ordering::Relaxed);
        assert!(
            bytes > 0 && bytes <= 360,
            "a keeper's state is {bytes} bytes"
        );
        assert!(g.release().await.unwrap());
    }

    /// Every keeper has a place among those told of a resume while its
    /// guard lives, and gives it up when it ends (released or dropped).
    #[tokio::test]
    async fn keepers_give_up_their_resume_place_when_they_end() {
        let _shared = clock::SUSPENSIONS.read().await;
        let locks = MemoryLock::new();
        let opts = AcquireOptions::new().ttl(Duration::from_secs(30));
        // Another test of this module may hold a couple of guards meanwhile.
        let before = registered_keepers();
        let mut guards = Vec::new();
        for i in 0..50 {
            let name = LockName::new(format!("registered/{i}")).unwrap();
            guards.push(locks.acquire(&name, &opts).await.unwrap());
        }
        assert!(registered_keepers() >= before + 50 - 2);
        for g in guards.drain(..25) {
            assert!(g.release().await.unwrap());
        }
        drop(guards);
        let deadline = Instant::now() + Duration::from_secs(2);
        while registered_keepers() > before + 2 {
            assert!(
                Instant::now() < deadline,
                "{} keepers still registered",
                registered_keepers()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
