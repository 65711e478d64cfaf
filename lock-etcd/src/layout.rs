//! The key layout, and which contenders ahead block which.
//!
//! For lock name `N` and key prefix `P`:
//!
//! - mutex: `P N/<lease id in lowercase hex>`: exactly etcd's own
//!   `concurrency.Mutex`, its Lock RPC and `etcdctl lock` (with no
//!   prefix), which put an empty value and never read it; ours holds the
//!   holder's description as JSON (`lock_core::Holder`). A contender of `N` is a key `P N/` followed by hex digits and
//!   nothing else, so the keys of a child name (`N/child/...`) or of the
//!   other kinds below never count.
//! - read-write lock: `P N/ rw/<lease hex>-<seq hex>`, value `read` or
//!   `write` (a downgrade puts `read` on the same key, keeping its place).
//! - semaphore: `P N/ sem/<lease hex>-<seq hex>`, value the holder's
//!   description as JSON with the permit count (`"permits":"<n>"`; every
//!   client of a name uses the same count).
//!
//! - leader election: the mutex's keys (`P N/<lease hex>`), as etcd's own
//!   `concurrency.Election` and `etcdctl elect N`, value the leader's
//!   proposal; while a term with a lock-delay leads, its marker
//!   `P N delay/<marker lease hex>` (see `crate::election::delay`).
//!
//! The space in ` rw` and ` sem` is what no lock name can contain, so these
//! keys never belong to a child name's mutex (`N/rw` is a lock name; `N/ rw`
//! is not).
//!
//! Contenders queue by create revision. A contender is held when nothing
//! ahead of it blocks it: for a mutex or a writer, any contender ahead; for
//! a reader, a writer ahead (so a reader arriving after a waiting writer
//! waits behind it: writers are not starved); for a permit of N, N
//! contenders ahead.

use lock_core::backend::line;
use lock_core::{Holder, LockMode, LockName};

/// Which of the three kinds of lock a mode belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Mutex,
    ReadWrite,
    Semaphore,
}

impl Kind {
    pub(crate) fn of(mode: LockMode) -> Self {
        match mode {
            LockMode::Read | LockMode::Write => Self::ReadWrite,
            LockMode::Permit { .. } => Self::Semaphore,
            _ => Self::Mutex,
        }
    }
}

/// The value a contender key of `mode` is put with: `read` or `write` for
/// the read-write lock (the queue reads it); for a semaphore, the
/// description of `holder` with the permit count (`"permits":"<n>"`, which
/// tells its holders from its waiters for a force release); for a mutex
/// the description of `holder` ([`Holder::to_json`]; empty without one, as
/// etcd's own mutex).
pub(crate) fn value_of(mode: LockMode, holder: Option<&Holder>) -> String {
    match mode {
        LockMode::Read => READ.to_owned(),
        LockMode::Write => WRITE.to_owned(),
        LockMode::Permit { permits } => holder
            .cloned()
            .unwrap_or_default()
            .to_json_with(&[("permits", &permits.to_string())]),
        _ => holder.map(Holder::to_json).unwrap_or_default(),
    }
}

/// The value a contender key of `req` is put with: a leader's proposal
/// ([`LockMode::Leader`]), else [`value_of`].
pub(crate) fn request_value(req: &lock_core::backend::LeaseRequest) -> String {
    match req.mode {
        LockMode::Leader => req.value.clone().unwrap_or_default(),
        mode => value_of(mode, req.holder.as_ref()),
    }
}

/// The value of a read contender.
pub(crate) const READ: &str = "read";
/// The value of a write contender.
pub(crate) const WRITE: &str = "write";

/// The queue of one lock name and kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Queue {
    /// Every contender key starts with this.
    pub(crate) prefix: String,
    pub(crate) kind: Kind,
    /// The name's fence keys start with this: `P N fence/`.
    fence: String,
    /// The name's lock-delay markers start with this: `P N delay/`.
    pub(crate) delay: String,
}

impl Queue {
    /// The queue of `name` for `kind` under the key prefix `key_prefix`.
    pub(crate) fn new(key_prefix: &str, name: &LockName, kind: Kind) -> Self {
        let prefix = match kind {
            Kind::Mutex => format!("{key_prefix}{name}/"),
            Kind::ReadWrite => format!("{key_prefix}{name}/ rw/"),
            Kind::Semaphore => format!("{key_prefix}{name}/ sem/"),
        };
        Self {
            prefix,
            kind,
            fence: format!("{key_prefix}{name} fence/"),
            delay: format!("{key_prefix}{name} delay/"),
        }
    }

    /// A session's fence key of the name, `P N fence/<lease hex>`, on the
    /// session's lease: every put of a contender key of the session
    /// compares it, and after a put whose outcome is unknown the session
    /// moves it on ([`crate::session::Session::bump`]), so that no copy of
    /// that put can be applied any more. It is no contender of any queue,
    /// and under no name's prefix `P M/` (that would need `M` to hold the
    /// space): etcd's `etcdctl lock`, `concurrency.Mutex` and elections on
    /// `N` never see it. It is beside `N` so that a role allowed the keys
    /// of `N` by a prefix of the name (`P N` or shorter) is allowed it too.
    pub(crate) fn fence_key(&self, lease: i64) -> String {
        format!("{}{}", self.fence, lease_hex(lease))
    }

    /// The lock-delay marker of a term whose marker lease is `lease`,
    /// `P N delay/<lease hex>`: like the fence key, under no name's prefix
    /// (no name holds a space), so `etcdctl elect N` never sees it as a
    /// candidate and no other name's keys are ever taken for it.
    pub(crate) fn delay_key(&self, lease: i64) -> String {
        format!("{}{}", self.delay, lease_hex(lease))
    }

    /// Our contender key for a session lease and, for the kinds where one
    /// client may hold several leases of a name, a sequence number.
    pub(crate) fn key(&self, lease: i64, seq: u64) -> String {
        match self.kind {
            Kind::Mutex => format!("{}{}", self.prefix, lease_hex(lease)),
            Kind::ReadWrite | Kind::Semaphore => {
                format!("{}{}-{seq:x}", self.prefix, lease_hex(lease))
            }
        }
    }

    /// Whether `key` is a contender of this queue (and not a key of a
    /// child name or of another kind that shares the prefix).
    pub(crate) fn is_contender(&self, key: &[u8]) -> bool {
        let Some(rest) = key.strip_prefix(self.prefix.as_bytes()) else {
            return false;
        };
        let hex = |s: &[u8]| {
            let digits = s.strip_prefix(b"-").unwrap_or(s);
            !digits.is_empty()
                && digits
                    .iter()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        };
        match self.kind {
            Kind::Mutex => hex(rest),
            Kind::ReadWrite | Kind::Semaphore => {
                // `<lease hex>-<seq hex>`, the lease possibly negative.
                let (lease, seq) = match rest.strip_prefix(b"-") {
                    Some(r) => match r.iter().position(|b| *b == b'-') {
                        Some(i) => (&rest[..i + 1], &r[i + 1..]),
                        None => return false,
                    },
                    None => match rest.iter().position(|b| *b == b'-') {
                        Some(i) => (&rest[..i], &rest[i + 1..]),
                        None => return false,
                    },
                };
                hex(lease) && !seq.is_empty() && hex(seq)
            }
        }
    }
}

/// A contender seen ahead of ours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Contender {
    pub(crate) key: Vec<u8>,
    pub(crate) create_revision: i64,
    pub(crate) writes: bool,
}

/// What blocks a contender of `mode`, given the contenders ahead of it,
/// nearest first: the one to watch, or `None` if it holds the lock. A
/// semaphore is blocked by the N-th contender ahead (watched as part of the
/// whole queue, see the acquire path).
pub(crate) fn blocker(mode: LockMode, ahead_nearest_first: &[Contender]) -> Option<&Contender> {
    let writers = ahead_nearest_first.iter().map(|c| c.writes);
    line::blocker(mode, writers).and_then(|i| ahead_nearest_first.get(i))
}

/// The lease id as etcd's Go client writes it into the key (`%x`).
pub(crate) fn lease_hex(id: i64) -> String {
    if id < 0 {
        format!("-{:x}", id.unsigned_abs())
    } else {
        format!("{id:x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> LockName {
        LockName::new(s).unwrap()
    }

    #[test]
    fn lease_ids_format_like_go() {
        assert_eq!(lease_hex(0x694d_81a3_5c1f_0b2e), "694d81a35c1f0b2e");
        assert_eq!(lease_hex(255), "ff");
        assert_eq!(lease_hex(-255), "-ff");
    }

    #[test]
    fn contenders_never_include_children_or_other_kinds() {
        let m = Queue::new("", &n("billing"), Kind::Mutex);
        assert_eq!(m.key(0x1f, 9), "billing/1f");
        assert!(m.is_contender(b"billing/1f"));
        assert!(m.is_contender(b"billing/-ff"));
        assert!(!m.is_contender(b"billing/nightly/1f"));
        assert!(!m.is_contender(b"billing/7f3a/1f"));
        assert!(!m.is_contender(b"billing/ rw/1f-1"));
        assert!(!m.is_contender(b"billing/x-lock-0000000001"));
        assert!(!m.is_contender(b"billing/"));
        let rw = Queue::new("p/", &n("billing"), Kind::ReadWrite);
        assert_eq!(rw.key(0x1f, 10), "p/billing/ rw/1f-a");
        assert!(rw.is_contender(b"p/billing/ rw/1f-a"));
        assert!(rw.is_contender(b"p/billing/ rw/-1f-a"));
        assert!(!rw.is_contender(b"p/billing/ rw/1f"));
        assert!(!rw.is_contender(b"p/billing/ rw/1f-a/x"));
        // A child named `billing/rw` is a different lock.
        let child = Queue::new("p/", &n("billing/rw"), Kind::Mutex);
        assert!(!child.is_contender(b"p/billing/ rw/1f-a"));
        assert!(!rw.is_contender(b"p/billing/rw/1f"));
    }

    #[test]
    fn blockers_follow_the_modes() {
        let c = |rev, writes| Contender {
            key: format!("k{rev}").into_bytes(),
            create_revision: rev,
            writes,
        };
        let ahead = [c(5, false), c(4, true), c(3, false)];
        assert_eq!(
            blocker(LockMode::Read, &ahead).map(|c| c.create_revision),
            Some(4)
        );
        assert_eq!(
            blocker(LockMode::Write, &ahead).map(|c| c.create_revision),
            Some(5)
        );
        assert_eq!(blocker(LockMode::Exclusive, &[]), None);
        assert_eq!(blocker(LockMode::Read, &[c(5, false)]), None);
        let permits = |p| LockMode::Permit { permits: p };
        assert_eq!(blocker(permits(4), &ahead), None);
        assert_eq!(
            blocker(permits(3), &ahead).map(|c| c.create_revision),
            Some(3)
        );
        assert_eq!(
            blocker(permits(1), &ahead).map(|c| c.create_revision),
            Some(5)
        );
    }
}
