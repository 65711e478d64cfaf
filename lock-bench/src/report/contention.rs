//! The tables of the runs with several clients on one name: the contended
//! mutex and the read-heavy read-write lock.

use std::fmt::Write as _;

use super::format::{fmt_ms, fmt_rate, one_line, opt_ms};
use super::Report;
use crate::stats::Summary;

impl Report {
    /// The contended runs: hand-off, fairness, timeouts.
    pub(super) fn contended_table(&self, m: &mut String) {
        let _ = writeln!(m, "\n## Contended: clients on one name\n");
        let _ = writeln!(
            m,
            "Hand-off = from the holder calling release to the next holder's acquire returning \
             (one monotonic clock). \"to another\" = share of hand-offs that went to a different client \
             (a poller's releaser re-taking the lock counts as the same client).\n"
        );
        let _ = writeln!(
            m,
            "| backend | subject | clients | acquisitions/s (n) | hand-off p50 | p90 | p99 (n) | longest wait ms | to another | timeouts |"
        );
        let _ = writeln!(m, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for b in &self.backends {
            for s in &b.subjects {
                let Some(c) = &s.contended else { continue };
                let h = c.handoff.as_ref();
                let _ = writeln!(
                    m,
                    "| {} | {} | {} | {} (n={}) | {} | {} | {} (n={}) | {} | {} (n={}) | {} |",
                    b.backend,
                    s.label,
                    c.contenders,
                    fmt_rate(c.throughput_per_s),
                    c.acquisitions,
                    opt_ms(h, |s| s.p50_ms),
                    opt_ms(h, |s| s.p90_ms),
                    opt_ms(h, |s| s.p99_ms),
                    h.map(|s| s.n).unwrap_or(0),
                    c.longest_wait_ms.map(fmt_ms).unwrap_or_else(|| "-".into()),
                    c.to_other_share
                        .map(|v| format!("{:.0}%", v * 100.0))
                        .unwrap_or_else(|| "-".into()),
                    c.transitions,
                    c.timeouts
                );
            }
        }
    }

    /// The read-heavy runs: readers and a writer on one read-write lock.
    pub(super) fn read_heavy_table(&self, m: &mut String) {
        let _ = writeln!(
            m,
            "\n## Read-heavy: readers and a writer on one read-write lock\n"
        );
        let _ = writeln!(
            m,
            "Each client has its own connection and loops acquire -> hold -> release on one name. \
             Wait = acquire call to holding; a writer starved by readers shows in its wait. \
             Violations = holdings granted while a conflicting holder had not started releasing.\n"
        );
        let _ = writeln!(
            m,
            "| backend | readers + writers | hold ms | reads/s (n) | writes/s (n) | read wait p50 / p99 | write wait p50 / p99 | most readers at once | violations |"
        );
        let _ = writeln!(m, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
        for b in &self.backends {
            let Some(rh) = &b.read_heavy else { continue };
            let Some(r) = &rh.run else {
                let _ = writeln!(
                    m,
                    "| {} | FAILED: {} | | | | | | | |",
                    b.backend,
                    one_line(rh.error.as_deref().unwrap_or("-"))
                );
                continue;
            };
            let waits = |w: Option<&Summary>| {
                format!("{} / {}", opt_ms(w, |s| s.p50_ms), opt_ms(w, |s| s.p99_ms))
            };
            let _ = writeln!(
                m,
                "| {} | {} + {} | {} | {} (n={}) | {} (n={}) | {} | {} | {} | {} |",
                b.backend,
                r.readers,
                r.writers,
                r.hold_ms,
                fmt_rate(r.reads_per_s),
                r.reads,
                fmt_rate(r.writes_per_s),
                r.writes,
                waits(r.read_wait.as_ref()),
                waits(r.write_wait.as_ref()),
                r.most_readers_together,
                r.violations
            );
        }
    }
}
