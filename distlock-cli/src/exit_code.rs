//! The exit statuses of the `distlock` command.
//!
//! | status | constant | meaning |
//! |---|---|---|
//! | CMD's own | - | `run`: the lock was held for the whole run; CMD exited with this status. `elect`: CMD exited by itself while leading |
//! | 128 + N | [`SIGNAL_BASE`] | `run`: CMD was killed by signal N (e.g. 143 = SIGTERM, also when distlock forwarded a SIGTERM it received), or distlock itself was interrupted by signal N before CMD started |
//! | 0 | [`HELD`] | `status`: the lock is held; `list`: the locks were listed (none is fine); `release --force`: a holder was removed; `leader`: someone leads (`--watch`: interrupted) |
//! | 3 | [`FREE`] | `status`: the lock is free (as LSB `status` says "not running"); `release --force`: nothing was held; `leader`: nobody leads |
//! | 64 | [`USAGE`] | bad command line: malformed URL, unknown URL option, invalid lock name, bad duration, `release` without `--force` |
//! | 69 | [`UNAVAILABLE`] | the lock service could not be reached or did not answer in time |
//! | 70 | [`SOFTWARE`] | an internal error or an answer distlock does not understand |
//! | 75 | [`NOT_ACQUIRED`] | `run`: the lock is held by someone else (one attempt, or `--wait` elapsed); CMD was not run. `--conflict-exit-code` changes it, `--quiet` keeps it silent |
//! | 77 | [`UNAUTHORIZED`] | the lock service rejected the credentials |
//! | 78 | [`UNSUPPORTED`] | the backend does not offer what was asked: read-write locks, permits, listing its locks, a force release, or elections |
//! | 79 | [`LOST`] | `run`: the lock was lost while CMD ran; CMD got SIGTERM (SIGKILL after `--grace`) |
//! | 126 | [`CANNOT_EXECUTE`] | `run`: CMD exists but could not be executed |
//! | 127 | [`NOT_FOUND`] | `run`: CMD was not found |
//!
//! As with `timeout(1)` or `flock(1)`, a CMD that itself exits with one of
//! these numbers is indistinguishable from distlock's own status; distlock
//! always prints a one-line message on stderr when the status is its own.
//! `--conflict-exit-code` moves the "not acquired" status out of the way
//! (`flock -E` does the same), e.g. to 0 for a cron job where "someone else
//! is already running it" is success.

use distlock::LockErrorKind;

/// `status`: the lock is held. Also the status of every command that succeeded.
pub const HELD: i32 = 0;
/// `status`: the lock is free.
pub const FREE: i32 = 3;
/// Bad command line: malformed URL, unknown option, invalid name or duration (`EX_USAGE`).
pub const USAGE: i32 = 64;
/// The lock service could not be reached or did not answer in time (`EX_UNAVAILABLE`).
pub const UNAVAILABLE: i32 = 69;
/// Internal error, or a server answer distlock does not understand (`EX_SOFTWARE`).
pub const SOFTWARE: i32 = 70;
/// The lock is held by someone else; CMD was not run (`EX_TEMPFAIL`).
pub const NOT_ACQUIRED: i32 = 75;
/// The lock service rejected the credentials (`EX_NOPERM`).
pub const UNAUTHORIZED: i32 = 77;
/// The backend does not offer what was asked (read-write locks, permits, listing).
pub const UNSUPPORTED: i32 = 78;
/// The lock was lost while CMD ran; CMD was terminated.
pub const LOST: i32 = 79;
/// CMD could not be executed (permission denied, not an executable), as in shells.
pub const CANNOT_EXECUTE: i32 = 126;
/// CMD was not found, as in shells.
pub const NOT_FOUND: i32 = 127;
/// CMD (or distlock before starting CMD) died of signal N: the status is `128 + N`.
pub const SIGNAL_BASE: i32 = 128;

/// The exit status for an error of `kind` that stops the command before or
/// without running CMD.
pub fn for_error(kind: LockErrorKind) -> i32 {
    match kind {
        LockErrorKind::InvalidArgument => USAGE,
        LockErrorKind::Unavailable => UNAVAILABLE,
        LockErrorKind::Timeout => NOT_ACQUIRED,
        LockErrorKind::Unauthorized => UNAUTHORIZED,
        LockErrorKind::Lost => LOST,
        LockErrorKind::Unsupported => UNSUPPORTED,
        _ => SOFTWARE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_fit_a_byte() {
        let all = [
            FREE,
            USAGE,
            UNAVAILABLE,
            SOFTWARE,
            NOT_ACQUIRED,
            UNAUTHORIZED,
            UNSUPPORTED,
            LOST,
            CANNOT_EXECUTE,
            NOT_FOUND,
        ];
        for (i, a) in all.iter().enumerate() {
            assert!((1..=255).contains(a));
            assert!(all[i + 1..].iter().all(|b| a != b));
            assert!(*a < SIGNAL_BASE);
        }
        assert_eq!(for_error(LockErrorKind::InvalidArgument), USAGE);
        assert_eq!(for_error(LockErrorKind::Unavailable), UNAVAILABLE);
        assert_eq!(for_error(LockErrorKind::Timeout), NOT_ACQUIRED);
        assert_eq!(for_error(LockErrorKind::Unsupported), UNSUPPORTED);
        assert_eq!(for_error(LockErrorKind::Protocol), SOFTWARE);
        assert_eq!(for_error(LockErrorKind::Internal), SOFTWARE);
    }
}
