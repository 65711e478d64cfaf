//! The history of one nemesis run: every grant with the moments that bound
//! it, and every fault with when it was applied and healed, on one
//! monotonic clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{FencingToken, GuardStates, LockGuard, LockMode};
use tokio::time::Instant;

/// One grant: a guard a call returned, from the call to the end of its hold.
#[derive(Clone, Debug)]
pub struct Grant {
    /// Its index in the history.
    pub id: usize,
    /// The client (its own connection or session) that got it.
    pub client: usize,
    /// The lock name.
    pub name: String,
    /// Mutex, read, write or a permit.
    pub mode: LockMode,
    /// Its fencing token, on backends that have them.
    pub token: Option<FencingToken>,
    /// The call that returned it (`acquire`, `try_acquire`, `acquire_all`,
    /// `downgrade`, a cancelled `acquire` that finished first).
    pub via: &'static str,
    /// When that call was made.
    pub called: Instant,
    /// When it returned the guard: the hold starts here.
    pub returned: Instant,
    /// The end of the hold: the release call, the drop of the guard, the
    /// downgrade call that gave the write side up, or the first moment the
    /// guard stopped saying held (a state that is not held, or the end of
    /// its validity). `None` while it lasts.
    pub end: Option<Instant>,
    /// What ended it.
    pub end_cause: String,
}

impl Grant {
    /// The end of the hold, or `horizon` while it lasts.
    pub fn end_or(&self, horizon: Instant) -> Instant {
        self.end.unwrap_or(horizon)
    }
}

/// One fault as it happened.
#[derive(Clone, Debug)]
pub struct FaultRecord {
    /// The fault, in words (as the schedule prints it).
    pub what: String,
    /// When it was applied.
    pub applied: Instant,
    /// When it was healed; `None` if it never was.
    pub healed: Option<Instant>,
}

/// Everything a run recorded, shared by the workload, the nemesis and the
/// guards' monitors.
#[derive(Debug)]
pub struct History {
    start: Instant,
    grants: Mutex<Vec<Grant>>,
    faults: Mutex<Vec<FaultRecord>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl History {
    /// An empty history whose clock starts now.
    pub fn new() -> Arc<History> {
        Arc::new(History {
            start: Instant::now(),
            grants: Mutex::new(Vec::new()),
            faults: Mutex::new(Vec::new()),
        })
    }

    /// When the run started.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// Milliseconds since the start, for reports.
    pub fn ms(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.start).as_secs_f64() * 1000.0
    }

    /// Records that `client`'s call `via`, made at `called`, returned
    /// `guard` just now, and follows the guard's state until it stops
    /// saying held. Returns the grant's id.
    pub fn granted(
        self: &Arc<Self>,
        client: usize,
        via: &'static str,
        called: Instant,
        guard: &LockGuard,
    ) -> usize {
        let returned = Instant::now();
        let id = {
            let mut grants = lock(&self.grants);
            let id = grants.len();
            grants.push(Grant {
                id,
                client,
                name: guard.name().as_str().to_string(),
                mode: guard.mode(),
                token: guard.fencing_token(),
                via,
                called,
                returned,
                end: None,
                end_cause: String::new(),
            });
            id
        };
        if !guard.is_held() {
            self.end(id, returned, "not held when its call returned");
        }
        tokio::spawn(follow(self.clone(), id, guard.subscribe()));
        id
    }

    /// Ends grant `id` at `at` for `cause`, unless it ended earlier.
    pub fn end(&self, id: usize, at: Instant, cause: &str) {
        let mut grants = lock(&self.grants);
        if let Some(g) = grants.get_mut(id) {
            if g.end.is_none_or(|e| at < e) {
                g.end = Some(at);
                g.end_cause = cause.to_string();
            }
        }
    }

    /// Records a fault applied now; returns its index for [`History::healed`].
    pub fn fault(&self, what: String) -> usize {
        let mut faults = lock(&self.faults);
        faults.push(FaultRecord {
            what,
            applied: Instant::now(),
            healed: None,
        });
        faults.len() - 1
    }

    /// Records something a server did by itself at `at` (not a fault we
    /// made), in words.
    pub fn server_event(&self, at: Instant, what: String) {
        lock(&self.faults).push(FaultRecord {
            what,
            applied: at,
            healed: Some(at),
        });
    }

    /// Records that fault `i` was healed now.
    pub fn healed(&self, i: usize) {
        if let Some(f) = lock(&self.faults).get_mut(i) {
            f.healed.get_or_insert(Instant::now());
        }
    }

    /// Every grant so far.
    pub fn grants(&self) -> Vec<Grant> {
        lock(&self.grants).clone()
    }

    /// Every fault so far.
    pub fn faults(&self) -> Vec<FaultRecord> {
        lock(&self.faults).clone()
    }

    /// The faults active at any moment of `[from, to]`, or healed less than
    /// `before` ahead of `from` (a fault's effect, a late request, can land
    /// after it was healed), in words with their times.
    pub fn faults_around(&self, from: Instant, to: Instant, before: Duration) -> Vec<String> {
        let since = from.checked_sub(before).unwrap_or(self.start);
        lock(&self.faults)
            .iter()
            .filter(|f| f.applied <= to && f.healed.is_none_or(|h| h >= since))
            .map(|f| {
                let healed = f.healed.map_or("never healed".to_string(), |h| {
                    format!("{:.0} ms", self.ms(h))
                });
                format!("{} [{:.0} ms .. {healed}]", f.what, self.ms(f.applied))
            })
            .collect()
    }
}

/// Follows a guard's published state and ends grant `id` at the first state
/// that is not held or suspended, or when its validity passes without a
/// renewal (the guard then reports lost, whether or not its keeper noticed).
///
/// A state seen late never moves the end past the validity the guard had
/// published before it: the guard reported lost from then on anyway.
async fn follow(history: Arc<History>, id: usize, mut states: GuardStates) {
    let mut last_valid: Option<Instant> = None;
    let end = |at: Instant, last_valid: Option<Instant>, cause: String| match last_valid {
        Some(v) if v < at => history.end(id, v, "its validity passed"),
        _ => history.end(id, at, &cause),
    };
    loop {
        let (valid_until, seen_at) = {
            let state = states.borrow_and_update();
            match state.valid_until() {
                Some(v) => (v, state.published_at()),
                None => {
                    // From when the guard said it, not when this task
                    // woke to see it.
                    let (cause, at) = (format!("guard said {:?}", &*state), state.published_at());
                    drop(state);
                    end(at, last_valid, cause);
                    return;
                }
            }
        };
        last_valid = Some(valid_until);
        tokio::select! {
            biased;
            () = tokio::time::sleep_until(valid_until) => {
                // A change published before the validity ran out, and seen
                // only now (this task woke late), decides instead.
                let published = states.borrow().published_at();
                if published != seen_at && published <= valid_until {
                    continue;
                }
                history.end(id, valid_until, "its validity passed");
                return;
            }
            changed = states.changed() => if changed.is_err() {
                end(Instant::now(), last_valid, "the guard's keeper ended".into());
                return;
            },
        }
    }
}
