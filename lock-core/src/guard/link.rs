//! What a guard and its keeper share: the link between them, the commands
//! a guard sends its keeper, and what the core knows of a grant.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::backend::mailbox::Mailbox;
use crate::backend::{Lease, LeaseHandle};
use crate::clock::SuspendMark;
use crate::error::Result;
use crate::guard_states::Publisher;
use crate::lazy_task::LazyTask;
use crate::metrics as m;
use crate::mode::LockMode;
use crate::name::LockName;
use crate::options::KeepAlive;
use crate::resume::Resumable;

/// What a guard asks of its keeper.
pub(super) enum Command {
    Extend(Duration, oneshot::Sender<Result<Instant>>),
    Release(oneshot::Sender<Result<bool>>),
    Downgrade(oneshot::Sender<Result<(Lease, Grant)>>),
    /// A leader publishes a new value.
    Proclaim(String, oneshot::Sender<Result<()>>),
    /// The machine resumed from a suspension
    /// ([`crate::resume::machine_resumed`]).
    Resumed,
}

/// What a guard and its keeper share: the keeper's command queue, the
/// lease, the published state, and whose turn it is to act on the lease.
///
/// The keeper acts (renews, reacts to session news, extends, releases) in
/// turns; between them it is idle. A release that finds it idle is done in
/// the caller's task, and the keeper then ends without touching the lease:
/// a release costs the caller no hop to the keeper's task and back, which
/// on a busy runtime is two thread wake-ups. A release that finds the
/// keeper busy queues behind its turn, as before.
pub(super) struct Link {
    pub(super) commands: Mailbox<Command>,
    /// The keeper, spawned only when something wakes it (most guards are
    /// released before their first renewal, server event or command).
    pub(super) keeper: LazyTask,
    /// [`IDLE`], [`KEEPER_ACTS`], [`GUARD_RELEASES`] or [`KEEPER_ENDED`].
    pub(super) turn: AtomicU8,
    pub(super) handle: Box<dyn LeaseHandle>,
    /// The published state, with the suspend mark of its validity (stored
    /// after the state is published, so a racing reader errs early).
    pub(super) state: Publisher,
    pub(super) backend: &'static str,
    pub(super) acquired_at: Instant,
    /// The guard's span, for what the keeper does with the lease (kept
    /// here rather than around the keeper's whole task, whose waiting
    /// state every guard pays for).
    pub(super) span: tracing::Span,
}

/// The keeper waits; either side may take the next turn.
pub(super) const IDLE: u8 = 0;
/// The keeper is acting on the lease.
pub(super) const KEEPER_ACTS: u8 = 1;
/// The guard is releasing in its own task; the keeper never acts again.
pub(super) const GUARD_RELEASES: u8 = 2;
/// The keeper task is gone.
pub(super) const KEEPER_ENDED: u8 = 3;

impl Link {
    /// Takes the next turn for `who` if nobody has it.
    pub(super) fn take_turn(&self, who: u8) -> bool {
        self.turn
            .compare_exchange(IDLE, who, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The keeper's turn ends; the guard may take the next.
    pub(super) fn keeper_idles(&self) {
        let _ = self
            .turn
            .compare_exchange(KEEPER_ACTS, IDLE, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Removes the lease on release: a release, or the clean-up of a lease
    /// whose validity had `expired` (see [`LeaseHandle::release_after_loss`]).
    pub(super) async fn end_lease(&self, expired: bool) -> Result<bool> {
        if expired {
            self.handle.release_after_loss().await
        } else {
            self.handle.release().await
        }
    }

    /// Records how long the lock was held.
    pub(super) fn record_hold(&self) {
        metrics::histogram!(m::HOLD_DURATION, "backend" => self.backend)
            .record(self.acquired_at.elapsed().as_secs_f64());
    }
}

/// What the core knows of a grant besides the lease itself.
pub(crate) struct Grant {
    pub(crate) name: LockName,
    pub(crate) mode: LockMode,
    pub(crate) ttl: Duration,
    pub(crate) keep_alive: KeepAlive,
    pub(crate) backend: &'static str,
    /// The suspended time when the request was sent (the lease's validity
    /// was computed from then).
    pub(crate) mark: SuspendMark,
}

/// What a release reports: `Ok(true)` only if the lock was still ours and
/// within its validity (past it, the lock may have been granted again, so
/// it was not held safely even if the server still had our key).
pub(super) fn released_outcome(
    released: Result<bool>,
    expired: bool,
    backend: &'static str,
    name: &LockName,
) -> Result<bool> {
    match released {
        Ok(was_ours) => Ok(was_ours && !expired),
        Err(err) => {
            tracing::warn!(backend, name = %name, error = %err, "distlock: release failed; the lock expires with its TTL");
            Err(err)
        }
    }
}

impl Resumable for Link {
    fn machine_resumed(&self) {
        let _ = self.commands.post(Command::Resumed);
    }
}
