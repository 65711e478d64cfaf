//! The keeper: the background task behind a guard, which keeps its lease
//! alive and its state true.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::time::{Instant, Sleep};
use tracing::Instrument;

use super::link::{released_outcome, Command, Grant, Link, KEEPER_ACTS, KEEPER_ENDED};
use crate::backend::{validity, Lease, LeaseEvent, Renewal};
use crate::clock::{self, SuspendMark};
use crate::error::{LockError, LockErrorKind, Result};
use crate::metrics as m;
use crate::mode::LockMode;
use crate::name::LockName;
use crate::options::KeepAlive;
use crate::resume::Registered;
use crate::state::{GuardState, LossCause};

/// Starts the keeper of a freshly granted lease on `link` (spawned when it
/// first has something to do, see [`crate::lazy_task::LazyTask`]).
pub(super) fn start(
    link: &Arc<Link>,
    events: Option<BoxStream<'static, LeaseEvent>>,
    grant: &Grant,
    own_until: Instant,
    session_until: Option<Instant>,
) {
    clock::watch_resumes();
    let keeper = Keeper {
        _registered: Registered::new(link),
        link: link.clone(),
        events,
        ttl: grant.ttl,
        keep_alive: grant.keep_alive,
        name: grant.name.clone(),
        last_renewal: link.acquired_at,
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
            Some(Command::Proclaim(value, reply)) => {
                let result = self.proclaim(&value).await;
                let _ = reply.send(result);
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
        let valid_until = self.live()?.valid_until().unwrap_or_else(Instant::now);
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

    /// Replaces a leader's published value, within the guard's validity.
    async fn proclaim(&mut self, value: &str) -> Result<()> {
        let valid_until = self.live()?.valid_until().unwrap_or_else(Instant::now);
        match tokio::time::timeout_at(valid_until, self.link.handle.proclaim(value)).await {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) => {
                self.lose(LossCause::NotOwner).await;
                Err(LockError::new(
                    LockErrorKind::Lost,
                    format!("leadership of {} is no longer ours on the server", self.name),
                ))
            }
            Ok(Err(err)) => Err(err),
            // The timer ends the guard at its validity; the value may or
            // may not have been written.
            Err(_elapsed) => Err(LockError::unavailable(format!(
                "the proclaim on {} got no answer within the leadership's validity; its outcome is unknown",
                self.name
            ))),
        }
    }

    /// The guard's state now, or the error of a guard that has ended
    /// (lost or released).
    fn live(&mut self) -> Result<GuardState> {
        self.rebase();
        match self.current().at(Instant::now()) {
            GuardState::Lost { cause } => Err(LockError::new(
                LockErrorKind::Lost,
                format!("lock {} lost: {cause}", self.name),
            )),
            GuardState::Released => Err(LockError::new(
                LockErrorKind::NotHeld,
                "guard already released",
            )),
            other => Ok(other),
        }
    }

    /// Write -> read: the backend grants the read lease and removes the
    /// write side; this keeper then ends without releasing.
    async fn downgrade(&mut self) -> Result<(Lease, Grant)> {
        self.live()?;
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
        if let Err(err) = self.link.handle.release_after_loss().await {
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
        let released = self.link.end_lease(expired).await;
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
pub(super) static KEEPER_STATE_BYTES: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

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
