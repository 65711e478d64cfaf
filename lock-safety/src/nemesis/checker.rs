//! The one checker of every backend's history: no two holders where the
//! lock's kind forbids it, and fencing tokens in the order of the grants.
//!
//! A grant holds from the return of the call that gave it until its end
//! (see [`Grant::end`]). All times come from one monotonic clock in one
//! process, so two holds that overlap in the history overlapped for real.

use std::collections::BTreeMap;
use std::fmt;

use lock_core::LockMode;
use tokio::time::Instant;

use super::history::Grant;

/// Which lock of a name a grant belongs to: a mutex, a read-write lock, a
/// semaphore and an election of one name are different locks (on etcd an
/// election shares the mutex's line, which only excludes more).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum LockKind {
    Mutex,
    ReadWrite,
    Semaphore,
    Election,
}

fn kind_of(mode: LockMode) -> LockKind {
    match mode {
        LockMode::Read | LockMode::Write => LockKind::ReadWrite,
        LockMode::Permit { .. } => LockKind::Semaphore,
        LockMode::Leader => LockKind::Election,
        _ => LockKind::Mutex,
    }
}

/// Whether two holders in these modes exclude each other.
fn conflict(a: LockMode, b: LockMode) -> bool {
    !matches!(
        (a, b),
        (LockMode::Read, LockMode::Read) | (LockMode::Permit { .. }, LockMode::Permit { .. })
    )
}

/// What the checker found wrong.
#[derive(Clone, Debug)]
pub enum Violation {
    /// Two grants that exclude each other were both held at one moment.
    Overlap {
        /// The grant that began first.
        first: Grant,
        /// The grant that began while the first was held.
        second: Grant,
    },
    /// More holders of a semaphore at one moment than it has permits.
    PermitsExceeded {
        /// The permits of the semaphore.
        permits: u32,
        /// The grants held at that moment.
        held: Vec<Grant>,
    },
    /// A grant's fencing token is not above the token of a grant that was
    /// certainly made before it.
    TokenOrder {
        /// The earlier grant.
        earlier: Grant,
        /// The later grant, whose token is not larger.
        later: Grant,
        /// How the checker knows which came first.
        because: &'static str,
    },
}

impl Violation {
    /// The lock name.
    pub fn name(&self) -> &str {
        match self {
            Violation::Overlap { first, .. } => &first.name,
            Violation::PermitsExceeded { held, .. } => held.first().map_or("", |g| &g.name),
            Violation::TokenOrder { earlier, .. } => &earlier.name,
        }
    }

    /// The grants involved.
    pub fn grants(&self) -> Vec<&Grant> {
        match self {
            Violation::Overlap { first, second } => vec![first, second],
            Violation::PermitsExceeded { held, .. } => held.iter().collect(),
            Violation::TokenOrder { earlier, later, .. } => vec![earlier, later],
        }
    }

    /// The moment it happened: when the two holds began to overlap, or when
    /// the later grant returned.
    pub fn at(&self) -> Instant {
        self.grants()
            .iter()
            .map(|g| g.returned)
            .max()
            .unwrap_or_else(Instant::now)
    }

    /// A short label of its kind.
    pub fn label(&self) -> &'static str {
        match self {
            Violation::Overlap { .. } => "two holders",
            Violation::PermitsExceeded { .. } => "more holders than permits",
            Violation::TokenOrder { .. } => "token out of order",
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::TokenOrder { because, .. } => {
                write!(f, "{} on {} ({because})", self.label(), self.name())
            }
            Violation::PermitsExceeded { permits, held } => write!(
                f,
                "{} on {}: {} holders of {permits} permits",
                self.label(),
                self.name(),
                held.len()
            ),
            Violation::Overlap { .. } => write!(f, "{} on {}", self.label(), self.name()),
        }
    }
}

/// Checks a history whose holds that did not end by `horizon` count as held
/// until then. `fenced`: whether the backend has fencing tokens.
pub fn check(grants: &[Grant], horizon: Instant, fenced: bool) -> Vec<Violation> {
    let mut locks: BTreeMap<(&str, LockKind), Vec<&Grant>> = BTreeMap::new();
    for g in grants {
        locks
            .entry((g.name.as_str(), kind_of(g.mode)))
            .or_default()
            .push(g);
    }
    let mut found = Vec::new();
    for ((_, kind), mut grants) in locks {
        grants.sort_by_key(|g| g.returned);
        // A guard whose validity had passed when its call returned (a member
        // of `acquire_all` that expired while the call waited for the
        // others) never said held: it holds nothing.
        let held: Vec<&Grant> = grants
            .iter()
            .copied()
            .filter(|g| g.end_or(horizon) > g.returned)
            .collect();
        if kind == LockKind::Semaphore {
            found.extend(permits_exceeded(&held, horizon));
        } else {
            found.extend(overlaps(&held, horizon));
        }
        if fenced {
            found.extend(token_order(&grants, horizon));
        }
    }
    found
}

/// Pairs of excluding grants held at one moment. `grants` sorted by return.
fn overlaps(grants: &[&Grant], horizon: Instant) -> Vec<Violation> {
    let mut found = Vec::new();
    for (i, second) in grants.iter().enumerate() {
        for first in &grants[..i] {
            if first.end_or(horizon) > second.returned && conflict(first.mode, second.mode) {
                found.push(Violation::Overlap {
                    first: (*first).clone(),
                    second: (*second).clone(),
                });
            }
        }
    }
    found
}

/// Moments at which more grants were held than the semaphore has permits.
/// `grants` sorted by return.
fn permits_exceeded(grants: &[&Grant], horizon: Instant) -> Vec<Violation> {
    let mut found = Vec::new();
    for (i, g) in grants.iter().enumerate() {
        let LockMode::Permit { permits } = g.mode else {
            continue;
        };
        let held: Vec<Grant> = grants[..=i]
            .iter()
            .filter(|h| h.end_or(horizon) > g.returned)
            .map(|h| (*h).clone())
            .collect();
        if held.len() > permits as usize {
            found.push(Violation::PermitsExceeded { permits, held });
        }
    }
    found
}

/// Pairs whose order the history proves, with tokens that do not follow it:
/// - a grant that returned before another was asked for came first, whatever
///   their modes;
/// - of two grants that exclude each other, the one whose hold ended before
///   the other's began came first (the other could not be granted while it
///   was held: the overlap check covers that case).
///
/// `grants` sorted by return.
fn token_order(grants: &[&Grant], horizon: Instant) -> Vec<Violation> {
    let mut found = Vec::new();
    for (i, later) in grants.iter().enumerate() {
        let Some(later_token) = later.token else {
            continue;
        };
        for earlier in &grants[..i] {
            let Some(earlier_token) = earlier.token else {
                continue;
            };
            if earlier_token < later_token || earlier.id == later.id {
                continue;
            }
            let because = if earlier.returned < later.called {
                "the earlier grant returned before the later one was asked for"
            } else if conflict(earlier.mode, later.mode)
                && earlier.end_or(horizon) <= later.returned
            {
                "they exclude each other and the earlier hold ended before the later began"
            } else {
                continue;
            };
            found.push(Violation::TokenOrder {
                earlier: (*earlier).clone(),
                later: (*later).clone(),
                because,
            });
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::FencingToken;
    use std::time::Duration;

    fn grant(id: usize, mode: LockMode, token: u64, called: u64, returned: u64, end: u64) -> Grant {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        Grant {
            id,
            client: id,
            name: "n".into(),
            mode,
            token: Some(FencingToken::new(token)),
            via: "acquire",
            called: at(called),
            returned: at(returned),
            end: Some(at(end)),
            end_cause: "released".into(),
        }
    }

    fn horizon() -> Instant {
        Instant::now() + Duration::from_secs(3600)
    }

    /// A clean hand-off of a mutex, with increasing tokens, is no violation.
    #[test]
    fn a_clean_hand_off_passes() {
        let a = grant(0, LockMode::Exclusive, 1, 0, 1, 10);
        let b = grant(1, LockMode::Exclusive, 2, 2, 11, 20);
        assert!(check(&[a, b], horizon(), true).is_empty());
    }

    /// Two mutex holds that overlap are two holders.
    #[test]
    fn overlapping_mutex_holds_are_found() {
        let a = grant(0, LockMode::Exclusive, 1, 0, 1, 10);
        let b = grant(1, LockMode::Exclusive, 2, 2, 9, 20);
        let found = check(&[a, b], horizon(), true);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(matches!(found[0], Violation::Overlap { .. }));
    }

    /// Readers share; a writer with a reader is two holders.
    #[test]
    fn readers_share_and_a_writer_does_not() {
        let r0 = grant(0, LockMode::Read, 1, 0, 1, 10);
        let r1 = grant(1, LockMode::Read, 2, 0, 2, 10);
        assert!(check(&[r0.clone(), r1.clone()], horizon(), true).is_empty());
        let w = grant(2, LockMode::Write, 3, 0, 5, 20);
        let found = check(&[r0, r1, w], horizon(), true);
        assert_eq!(found.len(), 2, "{found:?}");
    }

    /// A semaphore of 2 admits two holders, not three.
    #[test]
    fn a_third_permit_holder_is_found() {
        let p = LockMode::Permit { permits: 2 };
        let a = grant(0, p, 1, 0, 1, 10);
        let b = grant(1, p, 2, 0, 2, 10);
        assert!(check(&[a.clone(), b.clone()], horizon(), true).is_empty());
        let c = grant(2, p, 3, 0, 3, 10);
        let found = check(&[a, b, c], horizon(), true);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(matches!(found[0], Violation::PermitsExceeded { .. }));
    }

    /// A writer granted after a reader's hold, with a lower token (the
    /// reader queued behind it: their calls overlap), is out of order.
    #[test]
    fn a_lower_token_after_an_excluding_hold_is_found() {
        let w = grant(0, LockMode::Write, 10, 0, 1, 5);
        let r = grant(1, LockMode::Read, 9, 0, 6, 8);
        let found = check(&[w, r], horizon(), true);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(matches!(found[0], Violation::TokenOrder { .. }));
        assert!(found[0].to_string().contains("exclude each other"));
    }

    /// Two readers whose calls overlapped may get their tokens in either
    /// order; one asked for after the other returned may not.
    #[test]
    fn real_time_order_binds_readers_too() {
        let r0 = grant(0, LockMode::Read, 5, 0, 3, 10);
        let r1 = grant(1, LockMode::Read, 4, 1, 4, 10);
        assert!(check(&[r0.clone(), r1], horizon(), true).is_empty());
        let r2 = grant(2, LockMode::Read, 4, 5, 6, 10);
        let found = check(&[r0, r2], horizon(), true);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].to_string().contains("returned before"));
    }

    /// A guard that was already past its validity when its call returned
    /// never said held, so it overlaps nothing.
    #[test]
    fn a_guard_born_past_its_validity_holds_nothing() {
        let a = grant(0, LockMode::Exclusive, 1, 0, 5, 20);
        let b = grant(1, LockMode::Exclusive, 2, 0, 10, 9);
        assert!(check(&[a, b], horizon(), false).is_empty());
    }

    /// Without fencing, tokens are not checked.
    #[test]
    fn unfenced_backends_skip_the_token_check() {
        let a = grant(0, LockMode::Exclusive, 2, 0, 1, 10);
        let b = grant(1, LockMode::Exclusive, 1, 11, 12, 20);
        assert!(check(&[a.clone(), b.clone()], horizon(), false).is_empty());
        assert_eq!(check(&[a, b], horizon(), true).len(), 1);
    }

    /// A mutex and a read-write lock of one name are different locks.
    #[test]
    fn different_kinds_of_one_name_do_not_conflict() {
        let m = grant(0, LockMode::Exclusive, 1, 0, 1, 10);
        let w = grant(1, LockMode::Write, 2, 0, 2, 10);
        assert!(check(&[m, w], horizon(), true).is_empty());
    }

    /// A hold that has not ended counts as held until the horizon.
    #[test]
    fn an_unended_hold_lasts_to_the_horizon() {
        let mut a = grant(0, LockMode::Exclusive, 1, 0, 1, 0);
        a.end = None;
        let b = grant(1, LockMode::Exclusive, 2, 2, 500, 600);
        assert_eq!(check(&[a, b], horizon(), true).len(), 1);
    }
}
