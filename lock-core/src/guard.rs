//! The lock guard, its state machine and its keep-alive task.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::Poll;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::sync::oneshot;
use tokio::time::{Instant, Sleep};
use tracing::Instrument;

use crate::backend::{validity, Lease, LeaseEvent, LeaseHandle, LockMode, Renewal};
use crate::clock::{self, SuspendMark};
use crate::error::{LockError, LockErrorKind, Result};
use crate::fencing::FencingToken;
use crate::guard_states::{GuardStates, Publisher};
use crate::lazy_task::LazyTask;
use crate::mailbox::Mailbox;
use crate::metrics as m;
use crate::name::LockName;
use crate::options::{check_ttl, KeepAlive};

/// Why a guard lost its lock.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossCause {
    /// Its validity passed without a successful renewal (server unreachable,
    /// process paused, keep-alive off).
    Expired,
    /// The server says the lock is no longer ours: the key or node was deleted,
    /// or another owner holds it.
    NotOwner,
    /// The session (ZooKeeper) or lease (etcd) behind the lock expired.
    SessionExpired,
}

impl fmt::Display for LossCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Expired => "validity expired without renewal",
            Self::NotOwner => "the lock was deleted or taken over on the server",
            Self::SessionExpired => "the session or lease expired",
        })
    }
}

impl LossCause {
    fn label(&self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::NotOwner => "not_owner",
            Self::SessionExpired => "session_expired",
        }
    }
}

/// Where a guard stands. States only move forward: held <-> suspended -> lost,
/// or -> released.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GuardState {
    /// Held, and confirmed by the server, until `valid_until`.
    Held {
        /// End of validity (monotonic, drift-adjusted).
        valid_until: Instant,
    },
    /// The last renewal failed or the connection is down; the lock is still
    /// ours until `valid_until` unless the server says otherwise. Stop doing
    /// anything that cannot be undone until it is held again.
    Suspended {
        /// End of validity (monotonic, drift-adjusted).
        valid_until: Instant,
        /// Why, in words.
        reason: String,
    },
    /// The lock is gone; others may hold it now.
    Lost {
        /// Why.
        cause: LossCause,
    },
    /// Released by its owner.
    Released,
}

impl GuardState {
    /// `valid_until` of a held or suspended guard.
    pub fn valid_until(&self) -> Option<Instant> {
        match self {
            Self::Held { valid_until } | Self::Suspended { valid_until, .. } => Some(*valid_until),
            _ => None,
        }
    }

    /// Moves the validity earlier by the time the machine spent suspended
    /// since `mark`.
    fn corrected(self, mark: SuspendMark) -> Self {
        match self {
            Self::Held { valid_until } => Self::Held {
                valid_until: clock::corrected(valid_until, mark),
            },
            Self::Suspended {
                valid_until,
                reason,
            } => Self::Suspended {
                valid_until: clock::corrected(valid_until, mark),
                reason,
            },
            other => other,
        }
    }

    /// Applies the rule that a guard is never held past its validity.
    fn at(self, now: Instant) -> Self {
        match self.valid_until() {
            Some(v) if now >= v => Self::Lost {
                cause: LossCause::Expired,
            },
            _ => self,
        }
    }
}

/// A cheap, cloneable read-only view of a guard: what a critical section
/// passed to [`crate::DistributedLockExt::with_lock`] sees.
#[derive(Clone)]
pub struct GuardView {
    name: LockName,
    mode: LockMode,
    key: Option<Arc<str>>,
    token: Option<FencingToken>,
    state: GuardStates,
    /// The `distlock.guard` span of this grant.
    span: tracing::Span,
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

enum Command {
    Extend(Duration, oneshot::Sender<Result<Instant>>),
    Release(oneshot::Sender<Result<bool>>),
    Downgrade(oneshot::Sender<Result<(Lease, Grant)>>),
    /// The machine resumed from a suspension ([`machine_resumed`]).
    Resumed,
}

/// Every live keeper, to be told when the machine resumes from a
/// suspension. A slot per keeper in one of a few shards (so that keepers
/// starting and ending on different threads seldom wait for each other),
/// rather than a change notification awaited by each keeper, which would
/// cost every guard a hundred bytes more for an event that rarely comes.
static KEEPERS: [Mutex<Keepers>; SHARDS] = [const { Mutex::new(Keepers::new()) }; SHARDS];
const SHARDS: usize = 8;
static NEXT_SHARD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One shard of [`KEEPERS`].
struct Keepers {
    slots: Vec<Option<Weak<Link>>>,
    free: Vec<usize>,
}

impl Keepers {
    const fn new() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

/// A keeper's place in [`KEEPERS`]; dropping it gives the place up.
struct Registered {
    shard: usize,
    slot: usize,
}

impl Registered {
    fn new(link: &Arc<Link>) -> Self {
        clock::watch_resumes();
        let shard = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
        let mut keepers = KEEPERS[shard].lock().unwrap_or_else(|p| p.into_inner());
        let entry = Some(Arc::downgrade(link));
        let slot = match keepers.free.pop() {
            Some(slot) => {
                keepers.slots[slot] = entry;
                slot
            }
            None => {
                keepers.slots.push(entry);
                keepers.slots.len() - 1
            }
        };
        Self { shard, slot }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut keepers = KEEPERS[self.shard]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = keepers.slots.get_mut(self.slot) {
            *entry = None;
            keepers.free.push(self.slot);
        }
    }
}

/// How many keepers are registered (unit tests).
#[cfg(test)]
fn registered_keepers() -> usize {
    KEEPERS
        .iter()
        .map(|shard| {
            let keepers = shard.lock().unwrap_or_else(|p| p.into_inner());
            keepers.slots.iter().filter(|s| s.is_some()).count()
        })
        .sum()
}

/// Tells every live keeper that the machine resumed from a suspension: each
/// corrects its validity by the time lost and re-checks with its server.
pub(crate) fn machine_resumed() {
    for shard in &KEEPERS {
        let links: Vec<Arc<Link>> = shard
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .slots
            .iter()
            .flatten()
            .filter_map(Weak::upgrade)
            .collect();
        for link in links {
            let _ = link.commands.post(Command::Resumed);
        }
    }
}

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

/// What a guard and its keeper share: the keeper's command queue, the
/// lease, the published state, and whose turn it is to act on the lease.
///
/// The keeper acts (renews, reacts to session news, extends, releases) in
/// turns; between them it is idle. A release that finds it idle is done in
/// the caller's task, and the keeper then ends without touching the lease:
/// a release costs the caller no hop to the keeper's task and back, which
/// on a busy runtime is two thread wake-ups. A release that finds the
/// keeper busy queues behind its turn, as before.
struct Link {
    commands: Mailbox<Command>,
    /// The keeper, spawned only when something wakes it (most guards are
    /// released before their first renewal, server event or command).
    keeper: LazyTask,
    /// [`IDLE`], [`KEEPER_ACTS`], [`GUARD_RELEASES`] or [`KEEPER_ENDED`].
    turn: AtomicU8,
    handle: Box<dyn LeaseHandle>,
    /// The published state, with the suspend mark of its validity (stored
    /// after the state is published, so a racing reader errs early).
    state: Publisher,
    backend: &'static str,
    acquired_at: Instant,
    /// The guard's span, for what the keeper does with the lease (kept
    /// here rather than around the keeper's whole task, whose waiting
    /// state every guard pays for).
    span: tracing::Span,
}

/// The keeper waits; either side may take the next turn.
const IDLE: u8 = 0;
/// The keeper is acting on the lease.
const KEEPER_ACTS: u8 = 1;
/// The guard is releasing in its own task; the keeper never acts again.
const GUARD_RELEASES: u8 = 2;
/// The keeper task is gone.
const KEEPER_ENDED: u8 = 3;

impl Link {
    fn take_turn(&self, who: u8) -> bool {
        self.turn
            .compare_exchange(IDLE, who, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The keeper's turn ends; the guard may take the next.
    fn keeper_idles(&self) {
        let _ = self
            .turn
            .compare_exchange(KEEPER_ACTS, IDLE, Ordering::AcqRel, Ordering::Acquire);
    }

    fn record_hold(&self) {
        metrics::histogram!(m::HOLD_DURATION, "backend" => self.backend)
            .record(self.acquired_at.elapsed().as_secs_f64());
    }
}

/// A release made in the caller's task that is cancelled before the
/// server answered (its future dropped) goes on in the background, as a
/// release by the keeper would: the lock is not left to its TTL.
struct ReleaseUnlessDone(Option<Arc<Link>>);

impl Drop for ReleaseUnlessDone {
    fn drop(&mut self) {
        let Some(link) = self.0.take() else { return };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(err) = link.handle.release().await {
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
        let keeper = Keeper {
            _registered: Registered::new(&link),
            link: link.clone(),
            events: lease.events,
            ttl: grant.ttl,
            keep_alive: grant.keep_alive,
            name: grant.name.clone(),
            last_renewal: now,
            warned_late: false,
            gauged: Gauged::Held,
            given_up: false,
            own_until,
            session_until,
        };
        let keeper = keeper.run();
        #[cfg(test)]
        KEEPER_STATE_BYTES.store(std::mem::size_of_val(&keeper), Ordering::Relaxed);
        link.keeper.start(keeper);
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
        let mut pending = ReleaseUnlessDone(Some(link.clone()));
        let released = link.handle.release().instrument(view.span).await;
        pending.0 = None;
        released_outcome(released, expired, link.backend, &view.name)
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

/// How the gauges [`m::HELD`] and [`m::SUSPENDED`] count a guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gauged {
    Held,
    Suspended,
    Ended,
}

/// The background task behind a guard. It owns the lease handle; dropping the
/// guard closes its command channel, which makes it release and exit.
struct Keeper {
    /// Shared with the guard. Its command queue is closed by the guard when
    /// it is dropped, by this task when it ends.
    link: Arc<Link>,
    /// Its place among the keepers told of a resume.
    _registered: Registered,
    events: Option<BoxStream<'static, LeaseEvent>>,
    /// The last successful renewal (or the acquisition).
    last_renewal: Instant,
    /// The late-renewal warning was given since `last_renewal`.
    warned_late: bool,
    /// What the held/suspended gauges count this guard as.
    gauged: Gauged,
    ttl: Duration,
    keep_alive: KeepAlive,
    name: LockName,
    /// The lock was lost and its server state already removed.
    given_up: bool,
    /// Validity from the acquisition or the last renewal.
    own_until: Instant,
    /// Validity vouched for by the backend's session, if it has one.
    session_until: Option<Instant>,
}

/// One of the keeper's rare steps on the lease (`self.method(args)`),
/// boxed while it runs (so that its state is not part of what every idle
/// keeper keeps) and in the guard's span.
macro_rules! step {
    ($keeper:ident . $method:ident ( $($arg:expr),* )) => {
        Box::pin({
            let span = $keeper.link.span.clone();
            $keeper.$method($($arg),*).instrument(span)
        })
    };
}

impl Keeper {
    fn interval(&self) -> Option<Duration> {
        match self.keep_alive {
            KeepAlive::Disabled => None,
            KeepAlive::Enabled { interval } => {
                let default = self.ttl / 3;
                Some(
                    interval
                        .filter(|i| *i < self.ttl)
                        .unwrap_or(default)
                        .max(Duration::from_millis(1)),
                )
            }
        }
    }

    fn current(&self) -> GuardState {
        self.link.state.borrow().clone()
    }

    /// Moves this guard between the held and suspended gauges (or off both).
    fn sync_gauges(&mut self) {
        let now = match *self.link.state.borrow() {
            GuardState::Held { .. } => Gauged::Held,
            GuardState::Suspended { .. } => Gauged::Suspended,
            _ => Gauged::Ended,
        };
        self.set_gauged(now);
    }

    fn set_gauged(&mut self, now: Gauged) {
        if now == self.gauged {
            return;
        }
        let backend = self.link.backend;
        if self.gauged == Gauged::Suspended {
            metrics::gauge!(m::SUSPENDED, "backend" => backend).decrement(1.0);
        }
        if now == Gauged::Suspended {
            metrics::gauge!(m::SUSPENDED, "backend" => backend).increment(1.0);
        }
        if now == Gauged::Ended {
            metrics::gauge!(m::HELD, "backend" => backend).decrement(1.0);
        }
        self.gauged = now;
    }

    /// The guard's validity: its own, capped by the session's.
    fn effective_until(&self) -> Instant {
        self.session_until
            .map_or(self.own_until, |s| s.min(self.own_until))
    }

    /// A renewal or an extension sent at `sent` (with the suspend mark of
    /// then) succeeded: held until the new bound.
    fn renewed(&mut self, own_until: Instant, mark: SuspendMark) -> Instant {
        self.rebase();
        self.last_renewal = Instant::now();
        self.warned_late = false;
        self.own_until = clock::corrected(own_until, mark);
        let valid_until = self.effective_until();
        self.link
            .state
            .send_replace(GuardState::Held { valid_until });
        valid_until
    }

    /// The outcome of a renewal sent at `sent` for `ttl` is unknown: the
    /// server may have applied it, so the guard's own validity is at most
    /// what it could have set.
    fn unknown_renewal(&mut self, sent: Instant, ttl: Duration, mark: SuspendMark, reason: String) {
        self.rebase();
        let could_have_set = clock::corrected(validity(sent, ttl), mark);
        self.own_until = self.own_until.min(could_have_set);
        let valid_until = self.effective_until();
        self.link.state.send_if_modified(|st| match st {
            GuardState::Held { .. } | GuardState::Suspended { .. } => {
                *st = GuardState::Suspended {
                    valid_until,
                    reason,
                };
                true
            }
            _ => false,
        });
    }

    /// Applies the suspended time since the last published mark to the
    /// stored bounds and the published state, and moves the mark to now.
    fn rebase(&mut self) {
        let mark = SuspendMark::from_nanos(self.link.state.mark());
        let lost = mark.since();
        if lost.is_zero() {
            return;
        }
        self.own_until = clock::corrected(self.own_until, mark);
        self.session_until = self.session_until.map(|s| clock::corrected(s, mark));
        self.link
            .state
            .send_modify(|st| *st = st.clone().corrected(mark));
        self.link.state.set_mark(SuspendMark::now().as_nanos());
    }

    /// The machine was suspended: the validity shrinks by the time it was
    /// away, and the guard is suspended until the server confirms it.
    async fn resumed(&mut self) -> Option<Instant> {
        self.rebase();
        let valid_until = self.effective_until();
        if valid_until <= Instant::now() {
            self.lose(LossCause::Expired).await;
            return None;
        }
        self.suspend(
            "the machine was suspended; waiting for the server to confirm the lock".into(),
        );
        self.interval().map(|_| Instant::now())
    }

    /// The session vouched for the lease until `until`.
    fn confirmed(&mut self, until: Instant) {
        self.rebase();
        self.last_renewal = Instant::now();
        self.warned_late = false;
        self.session_until = Some(until);
        let valid_until = self.effective_until();
        self.link.state.send_if_modified(|st| match st {
            GuardState::Held { .. } | GuardState::Suspended { .. } => {
                *st = GuardState::Held { valid_until };
                true
            }
            _ => false,
        });
    }

    /// The keeper's life: one task per guard, so its size is the memory
    /// every guard costs. It is written to stay small: the keeper is
    /// captured once (an `async fn` taking `self` would keep a second copy),
    /// one timer serves the validity, the renewal and the late warning, and
    /// the rare, larger steps (extend, downgrade) are boxed while they run.
    #[allow(
        clippy::manual_async_fn,
        reason = "an `async fn` taking `self` keeps a second copy of the keeper in its state"
    )]
    fn run(mut self) -> impl Future<Output = ()> + Send + 'static {
        async move {
            let mut next_renew = self.interval().map(|i| Instant::now() + jittered(i));
            let timer = tokio::time::sleep_until(Instant::now());
            tokio::pin!(timer);
            loop {
                self.sync_gauges();
                // The state kept across the wait is what every guard costs,
                // so nothing else is: `live` and `timed` are worked out
                // again after it, what woke the keeper ends with this block
                // (the session's news handled at once, the rest as one
                // step on the lease, boxed while it runs), and only the
                // step's box is kept across its own await.
                {
                    let step = {
                        let live = self.current().valid_until().is_some();
                        let timed = match self.wake_at(next_renew) {
                            Some(at) => {
                                timer.as_mut().reset(at);
                                true
                            }
                            None => false,
                        };
                        // In this order: commands, the backend's events (while
                        // live), the timer. Polled by hand: a `select!` would keep
                        // each source's future in the wait's state.
                        let wake = std::future::poll_fn(|cx| {
                            if let Poll::Ready(cmd) = self.link.commands.poll_recv(cx) {
                                return Poll::Ready(Wake::Command(cmd));
                            }
                            if live {
                                if let Some(events) = self.events.as_mut() {
                                    if let Poll::Ready(event) = events.poll_next_unpin(cx) {
                                        return Poll::Ready(Wake::Event(event));
                                    }
                                }
                            }
                            if timed && timer.as_mut().poll(cx).is_ready() {
                                return Poll::Ready(Wake::Timer);
                            }
                            Poll::Pending
                        })
                        .await;
                        if !self.link.take_turn(KEEPER_ACTS) {
                            // The guard released the lock itself.
                            return;
                        }
                        let act = self.on_wake(wake, &mut next_renew);
                        act.map(|act| step!(self.act(act, next_renew, timer.as_mut())))
                    };
                    if let Some(step) = step {
                        match step.await {
                            Some(next) => next_renew = next,
                            None => return,
                        }
                    }
                }
                self.link.keeper_idles();
            }
        }
    }

    /// Handles the session's news at once; what acts on the lease (a
    /// command, a loss, the timer) is returned, to run as a step.
    fn on_wake(&mut self, wake: Wake, next_renew: &mut Option<Instant>) -> Option<Act> {
        match wake {
            Wake::Command(cmd) => return Some(Act::Command(cmd)),
            Wake::Event(Some(LeaseEvent::Lost(cause))) => return Some(Act::Lose(cause)),
            Wake::Timer => return Some(Act::Timer),
            Wake::Event(None) => self.events = None,
            Wake::Event(Some(LeaseEvent::Suspended { reason })) => self.suspend(reason),
            Wake::Event(Some(LeaseEvent::Resumed)) => {
                if self.interval().is_some() {
                    *next_renew = Some(Instant::now());
                }
            }
            Wake::Event(Some(LeaseEvent::Confirmed { valid_until })) => self.confirmed(valid_until),
        }
        None
    }

    /// One step on the lease. Returns when to renew next, or `None` when
    /// the keeper ends.
    async fn act(
        &mut self,
        act: Act,
        next_renew: Option<Instant>,
        timer: Pin<&mut Sleep>,
    ) -> Option<Option<Instant>> {
        match act {
            Act::Command(cmd) => self.command(cmd, next_renew).await,
            Act::Lose(cause) => {
                self.lose(cause).await;
                Some(next_renew)
            }
            Act::Timer => Some(self.timer_due(next_renew, timer).await),
        }
    }

    /// A command from the guard (`None`: the guard was dropped). Returns
    /// when to renew next, or `None` when the keeper ends.
    async fn command(
        &mut self,
        cmd: Option<Command>,
        mut next_renew: Option<Instant>,
    ) -> Option<Option<Instant>> {
        match cmd {
            None => {
                self.finish().await.ok();
                return None;
            }
            Some(Command::Release(reply)) => {
                let result = self.finish().await;
                let _ = reply.send(result);
                return None;
            }
            Some(Command::Extend(ttl, reply)) => {
                let result = self.extend(ttl).await;
                if result.is_ok() {
                    next_renew = self.interval().map(|i| Instant::now() + jittered(i));
                }
                let _ = reply.send(result);
            }
            Some(Command::Downgrade(reply)) => {
                let result = self.downgrade().await;
                let failed = result.is_err();
                let _ = reply.send(result);
                // Refused before anything was sent (given_up not set): the
                // guard is as it was until it is dropped.
                if self.given_up {
                    if failed {
                        self.release_after_failed_downgrade().await;
                    }
                    return None;
                }
            }
            Some(Command::Resumed) => {
                if self.current().valid_until().is_some() {
                    if let Some(at) = self.resumed().await {
                        next_renew = Some(at);
                    }
                }
            }
        }
        Some(next_renew)
    }

    /// The keeper's timer went off. In this order when several are due: the
    /// end of the validity, the renewal, the late-renewal warning. Returns
    /// when to renew next.
    async fn timer_due(
        &mut self,
        next_renew: Option<Instant>,
        timer: Pin<&mut Sleep>,
    ) -> Option<Instant> {
        let now = Instant::now();
        let live_until = self.current().valid_until();
        let late_at = self.late_at();
        if live_until.is_some_and(|until| now >= until) {
            self.lose(LossCause::Expired).await;
        } else if next_renew.is_some_and(|at| now >= at) {
            return self.renew_once(timer).await;
        } else if late_at.is_some_and(|at| now >= at) {
            self.warned_late = true;
            metrics::counter!(m::LATE_RENEWALS, "backend" => self.link.backend).increment(1);
            tracing::warn!(
                backend = self.link.backend,
                name = %self.name,
                held_for = ?self.link.acquired_at.elapsed(),
                ttl = ?self.ttl,
                "distlock: guard held past 80% of its ttl without a renewal; it expires unless renewed or extended"
            );
        }
        next_renew
    }

    /// When the late-renewal warning is due, unless given since the last
    /// renewal.
    fn late_at(&self) -> Option<Instant> {
        (!self.warned_late).then(|| self.last_renewal + self.ttl.mul_f64(0.8))
    }

    /// While the lock is live, when the keeper must wake next: the earliest
    /// of its end, the next renewal (`next_renew`) and the late-renewal
    /// warning.
    fn wake_at(&self, next_renew: Option<Instant>) -> Option<Instant> {
        self.current().valid_until().map(|until| {
            [next_renew, self.late_at()]
                .into_iter()
                .flatten()
                .fold(until, Instant::min)
        })
    }

    /// One keep-alive renewal; returns when to renew next.
    /// `timer` is the keeper's one timer, which bounds it by the validity.
    async fn renew_once(&mut self, mut timer: Pin<&mut Sleep>) -> Option<Instant> {
        let interval = self.interval()?;
        self.rebase();
        let valid_until = self.current().valid_until()?;
        let started = Instant::now();
        let mark = SuspendMark::now();
        timer.as_mut().reset(valid_until);
        let renewal = tokio::select! {
            biased;
            r = self.link.handle.renew(self.ttl) => Ok(r),
            _ = timer => Err(()),
        };
        match renewal {
            Err(()) => {
                self.lose(LossCause::Expired).await;
                None
            }
            Ok(Ok(Renewal::Renewed { valid_until })) => {
                self.renewed(valid_until, mark);
                Some(started + jittered(interval))
            }
            Ok(Ok(Renewal::Gone)) => {
                self.lose(LossCause::NotOwner).await;
                None
            }
            Ok(Err(err)) => {
                tracing::warn!(backend = self.link.backend, name = %self.name, error = %err, "distlock: renewal failed; guard suspended");
                self.unknown_renewal(started, self.ttl, mark, err.to_string());
                // Retry sooner than the regular interval, but do not spin.
                Some(Instant::now() + jittered(interval / 3).max(Duration::from_millis(10)))
            }
        }
    }

    async fn extend(&mut self, ttl: Duration) -> Result<Instant> {
        self.rebase();
        let state = self.current().at(Instant::now());
        let valid_until = match state {
            GuardState::Lost { cause } => {
                return Err(LockError::new(
                    LockErrorKind::Lost,
                    format!("lock {} lost: {cause}", self.name),
                ))
            }
            GuardState::Released => {
                return Err(LockError::new(
                    LockErrorKind::NotHeld,
                    "guard already released",
                ))
            }
            other => other.valid_until().unwrap_or_else(Instant::now),
        };
        let started = Instant::now();
        let mark = SuspendMark::now();
        match tokio::time::timeout_at(valid_until, self.link.handle.renew(ttl)).await {
            Err(_elapsed) => {
                self.lose(LossCause::Expired).await;
                Err(LockError::new(
                    LockErrorKind::Lost,
                    format!("lock {} expired while extending", self.name),
                ))
            }
            Ok(Ok(Renewal::Renewed { valid_until })) => {
                self.ttl = ttl;
                Ok(self.renewed(valid_until, mark))
            }
            Ok(Ok(Renewal::Gone)) => {
                self.lose(LossCause::NotOwner).await;
                Err(LockError::new(
                    LockErrorKind::Lost,
                    format!("lock {} is no longer ours on the server", self.name),
                ))
            }
            Ok(Err(err)) => {
                self.unknown_renewal(started, ttl, mark, err.to_string());
                Err(err)
            }
        }
    }

    /// Write -> read: the backend grants the read lease and removes the
    /// write side; this keeper then ends without releasing.
    async fn downgrade(&mut self) -> Result<(Lease, Grant)> {
        self.rebase();
        match self.current().at(Instant::now()) {
            GuardState::Lost { cause } => {
                return Err(LockError::new(
                    LockErrorKind::Lost,
                    format!("lock {} lost: {cause}", self.name),
                ))
            }
            GuardState::Released => {
                return Err(LockError::new(
                    LockErrorKind::NotHeld,
                    "guard already released",
                ))
            }
            _ => {}
        }
        // The write guard ends with the call, whatever its outcome: a
        // downgrade whose answer is lost may have been applied, and then a
        // reader may hold beside us before the call returns.
        self.link.record_hold();
        self.link.state.send_replace(GuardState::Released);
        self.given_up = true;
        let mark = SuspendMark::now();
        let lease = self.link.handle.downgrade(self.ttl).await?;
        let grant = Grant {
            name: self.name.clone(),
            mode: LockMode::Read,
            ttl: self.ttl,
            keep_alive: self.keep_alive,
            backend: self.link.backend,
            mark,
        };
        Ok((lease, grant))
    }

    /// After a downgrade that failed (its guard already ended): removes
    /// whatever the downgrade left of the lease, the write side or, had the
    /// server applied it after all, the read side (compare-and-delete: never
    /// someone else's).
    async fn release_after_failed_downgrade(&mut self) {
        if let Err(err) = self.link.handle.release().await {
            tracing::warn!(backend = self.link.backend, name = %self.name, error = %err, "distlock: release after a failed downgrade failed; the lock expires with its TTL");
        }
    }

    fn suspend(&mut self, reason: String) {
        self.link.state.send_if_modified(|st| match st {
            GuardState::Held { valid_until } | GuardState::Suspended { valid_until, .. } => {
                *st = GuardState::Suspended {
                    valid_until: *valid_until,
                    reason,
                };
                true
            }
            _ => false,
        });
    }

    /// Marks the guard lost, fires the signal, and removes whatever is left of
    /// our lease on the server (compare-and-delete: never someone else's).
    async fn lose(&mut self, cause: LossCause) {
        if matches!(
            self.current(),
            GuardState::Lost { .. } | GuardState::Released
        ) {
            return;
        }
        tracing::warn!(backend = self.link.backend, name = %self.name, %cause, "distlock: lock lost");
        metrics::counter!(m::LOSSES, "backend" => self.link.backend, "cause" => cause.label())
            .increment(1);
        self.link.record_hold();
        self.link.state.send_replace(GuardState::Lost { cause });
        self.events = None;
        if let Err(err) = self.link.handle.release().await {
            tracing::debug!(backend = self.link.backend, name = %self.name, error = %err, "distlock: clean-up after loss failed; the server expires it");
        }
        self.given_up = true;
    }

    /// Release on request or drop.
    async fn finish(&mut self) -> Result<bool> {
        let state = self.current();
        if self.given_up || matches!(state, GuardState::Lost { .. } | GuardState::Released) {
            return Ok(false);
        }
        self.link.record_hold();
        let expired = state.at(Instant::now()).valid_until().is_none();
        self.link.state.send_replace(GuardState::Released);
        let released = self.link.handle.release().await;
        released_outcome(released, expired, self.link.backend, &self.name)
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.link.turn.store(KEEPER_ENDED, Ordering::Release);
        // Commands sent too late get their reply channel closed.
        self.link.commands.close_and_clear();
        // Views learn that no change comes any more.
        self.link.state.close();
        // Every exit (release, loss, downgrade, a runtime shutting down) ends
        // the guard's place in the gauges.
        self.set_gauged(Gauged::Ended);
    }
}

/// What a release reports: `Ok(true)` only if the lock was still ours and
/// within its validity (past it, the lock may have been granted again, so
/// it was not held safely even if the server still had our key).
fn released_outcome(
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

/// A renewal period with jitter (uniform in 3/4 to 1 of it), so that guards
/// taken together do not all renew at the same instant and load the server
/// in bursts.
fn jittered(period: Duration) -> Duration {
    use rand::Rng;
    period.mul_f64(rand::rng().random_range(0.75..=1.0))
}

/// The size of the last keeper's state (its future), for the test that
/// keeps it small.
#[cfg(test)]
static KEEPER_STATE_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// What woke the keeper.
enum Wake {
    Command(Option<Command>),
    Event(Option<LeaseEvent>),
    Timer,
}

/// What the keeper does on the lease after a wake-up, as one step.
enum Act {
    Command(Option<Command>),
    Lose(LossCause),
    Timer,
}

#[cfg(test)]
mod tests {
    //! The only unit tests of this crate that hold guards: a simulated
    //! suspension is process-wide, so guard tests of other modules live in
    //! `tests/`, in their own processes.
    use super::*;
    use crate::{AcquireOptions, DistributedLock, LockName, MemoryLock};

    /// After the machine was suspended longer than the TTL, the guard is no
    /// longer held, at once, and its loss signal fires without waiting for
    /// timers on the stopped clock.
    #[tokio::test]
    async fn suspension_longer_than_the_ttl_loses_the_guard() {
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
