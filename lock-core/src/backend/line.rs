//! The rule of a lock's line: which contender ahead a newcomer waits for.
//!
//! Backends that keep a queue of contenders on the server (etcd keys,
//! ZooKeeper sequential nodes) and the in-process backend share one rule,
//! the same for every client of a name:
//!
//! - a mutex holder or a writer waits for the contender just ahead (anyone
//!   ahead blocks it);
//! - a reader waits for the nearest writer ahead (readers share; a reader
//!   behind a waiting writer waits too, so writers are not starved);
//! - one of N permits waits for the N-th contender ahead (the N nearest hold
//!   or wait for the permits before it).
//!
//! Nothing ahead that blocks: the contender holds. Redis's scripts apply the
//! same rule on the server.

use crate::mode::LockMode;

/// Which contender ahead a contender of `mode` waits for, given whether each
/// contender ahead of it is a writer, nearest first (`true` for a writer or a
/// mutex holder). Returns its position in that order (0: the one just
/// ahead), or `None` when nothing ahead blocks, so the contender holds.
///
/// ```
/// use lock_core::backend::line::blocker;
/// use lock_core::LockMode;
///
/// // Ahead of us, nearest first: a reader, a writer, a reader.
/// let ahead = [false, true, false];
/// assert_eq!(blocker(LockMode::Read, ahead), Some(1));
/// assert_eq!(blocker(LockMode::Write, ahead), Some(0));
/// assert_eq!(blocker(LockMode::Permit { permits: 3 }, ahead), Some(2));
/// assert_eq!(blocker(LockMode::Permit { permits: 4 }, ahead), None);
/// ```
pub fn blocker(
    mode: LockMode,
    writers_nearest_first: impl IntoIterator<Item = bool>,
) -> Option<usize> {
    let mut ahead = writers_nearest_first.into_iter();
    match mode {
        LockMode::Read => ahead.position(|writes| writes),
        LockMode::Permit { permits } => {
            let n = usize::try_from(permits).unwrap_or(usize::MAX).max(1);
            ahead.nth(n - 1).map(|_| n - 1)
        }
        LockMode::Exclusive | LockMode::Write | LockMode::Leader => ahead.next().map(|_| 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `line` is what stands ahead, nearest first: `R` a reader or a permit
    /// holder, `W` a writer or a mutex holder.
    fn ahead(line: &str) -> Vec<bool> {
        line.chars().map(|c| c == 'W').collect()
    }

    #[test]
    fn the_rule_of_the_line() {
        let permits = |permits| LockMode::Permit { permits };
        let table: &[(LockMode, &str, Option<usize>)] = &[
            (LockMode::Exclusive, "", None),
            (LockMode::Exclusive, "W", Some(0)),
            (LockMode::Exclusive, "WWW", Some(0)),
            (LockMode::Leader, "", None),
            (LockMode::Leader, "W", Some(0)),
            (LockMode::Leader, "WW", Some(0)),
            (LockMode::Write, "", None),
            (LockMode::Write, "R", Some(0)),
            (LockMode::Write, "RRW", Some(0)),
            (LockMode::Write, "W", Some(0)),
            (LockMode::Read, "", None),
            (LockMode::Read, "RRR", None),
            (LockMode::Read, "W", Some(0)),
            (LockMode::Read, "RW", Some(1)),
            (LockMode::Read, "RRWRW", Some(2)),
            (permits(1), "", None),
            (permits(1), "R", Some(0)),
            (permits(2), "R", None),
            (permits(2), "RR", Some(1)),
            (permits(2), "RRR", Some(1)),
            (permits(3), "RR", None),
            (permits(0), "", None),
            (permits(0), "R", Some(0)),
            (permits(u32::MAX), "RRRR", None),
        ];
        for (mode, line, want) in table {
            assert_eq!(
                blocker(*mode, ahead(line)),
                *want,
                "{mode} behind {line:?} (nearest first)"
            );
        }
    }
}
