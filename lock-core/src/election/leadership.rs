//! [`Leadership`]: one term of an election, held like a lock.

use std::future::Future;
use std::sync::Mutex;

use tokio::time::Instant;

use crate::election::info::check_value;
use crate::error::Result;
use crate::fencing::FencingToken;
use crate::guard::{GuardView, LockGuard};
use crate::guard_states::GuardStates;
use crate::name::LockName;
use crate::state::{GuardState, LossCause};

/// One term of an election, won by [`crate::LeaderElection::campaign`]: a
/// guard like [`LockGuard`] (held, suspended or lost; kept alive in the
/// background; resigned in the background when dropped) that carries the
/// term's epoch and the value it publishes.
///
/// Act as leader only while [`Leadership::is_leader`] says so, and pass
/// [`Leadership::epoch`] to the stores you write to: a leader paused past
/// its lease is deposed without knowing it, and only a store that refuses
/// a lower epoch stops its late writes.
pub struct Leadership {
    guard: LockGuard,
    value: Mutex<String>,
}

impl Leadership {
    pub(crate) fn new(guard: LockGuard, value: String) -> Self {
        Self {
            guard,
            value: Mutex::new(value),
        }
    }

    /// The election's name.
    pub fn name(&self) -> &LockName {
        self.guard.name()
    }

    /// The epoch of this term: its fencing token, strictly above every
    /// earlier term's of this election (`None` on backends without
    /// fencing tokens).
    pub fn epoch(&self) -> Option<FencingToken> {
        self.guard.fencing_token()
    }

    /// The value this leader publishes now.
    pub fn value(&self) -> String {
        self.value.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The term's state now (held, suspended, lost, released).
    pub fn state(&self) -> GuardState {
        self.guard.state()
    }

    /// Whether this candidate leads now: the term is held and within its
    /// validity.
    pub fn is_leader(&self) -> bool {
        self.guard.is_held()
    }

    /// Until when the term is valid, while it is held.
    pub fn valid_until(&self) -> Option<Instant> {
        self.guard.valid_until()
    }

    /// Resolves when the term is lost (never after a resignation).
    pub fn lost(&self) -> impl Future<Output = LossCause> + Send + 'static {
        self.guard.lost()
    }

    /// Every change of the term's state, as a stream.
    pub fn subscribe(&self) -> GuardStates {
        self.guard.subscribe()
    }

    /// A read-only view of the term, to hand to the code that acts as
    /// leader.
    pub fn view(&self) -> GuardView {
        self.guard.view()
    }

    /// Publishes `value` (at most [`crate::MAX_LEADER_VALUE_LEN`] bytes) in
    /// place of the current one, without ending the term: followers see it
    /// in [`crate::LeaderElection::leader`] and
    /// [`crate::LeaderElection::observe`]. Written only if this term still
    /// leads on the server; a [`crate::LockErrorKind::Lost`] error if it
    /// does not. On any other error the outcome is unknown.
    pub async fn proclaim(&self, value: impl Into<String>) -> Result<()> {
        let value = check_value(value.into())?;
        self.guard.proclaim(value.clone()).await?;
        *self.value.lock().unwrap_or_else(|p| p.into_inner()) = value;
        Ok(())
    }

    /// Ends the term: the next candidate in line leads. `Ok(true)` if this
    /// term still led, `Ok(false)` if it had already ended.
    pub async fn resign(self) -> Result<bool> {
        self.guard.release().await
    }

    /// The term as a [`LockGuard`] (its fencing token is the epoch).
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("name", self.name())
            .field("epoch", &self.epoch())
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}
