//! The failover table: a leader killed, the next leader leading, per
//! election, with the TTL that bounds it below.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::format::{fmt_ms, one_line, ratio};
use super::Report;
use crate::backend::Backend;
use crate::subject::Kind;
use crate::workload::Failover;

/// The failovers of one election (ours on a backend, or a peer's).
#[derive(Clone, Debug, Serialize)]
pub struct FailoverReport {
    /// What it is, e.g. `distlock redis`, `etcd Election RPC (v3election)`.
    pub subject: String,
    /// The backend whose servers it ran on.
    pub backend: Backend,
    /// Ours or peer.
    pub kind: Kind,
    /// The term's lease or the session's length, in seconds.
    pub ttl_s: f64,
    /// Rounds asked for.
    pub rounds: u32,
    /// What was measured, if it ran.
    pub measured: Option<Failover>,
    /// Why it could not run (servers down, ...).
    pub error: Option<String>,
    /// Why it is deliberately not measured (e.g. not installed).
    pub not_measured: Option<String>,
}

impl FailoverReport {
    /// `subject` on `backend`'s servers with `ttl`, nothing measured yet.
    pub fn new(subject: impl Into<String>, backend: Backend, kind: Kind, ttl: Duration) -> Self {
        Self {
            subject: subject.into(),
            backend,
            kind,
            ttl_s: ttl.as_secs_f64(),
            rounds: 0,
            measured: None,
            error: None,
            not_measured: None,
        }
    }

    /// The median failover over the TTL (1.0: the next leader leads the
    /// moment the dead leader's lease or session could expire).
    pub fn p50_over_ttl(&self) -> Option<f64> {
        let s = self.measured.as_ref()?.failover.as_ref()?;
        (self.ttl_s > 0.0).then(|| s.p50_ms / 1e3 / self.ttl_s)
    }

    /// Why it failed, if it did: it could not run, or a round failed.
    pub fn failure(&self) -> Option<String> {
        if let Some(e) = &self.error {
            return Some(format!("failover / {}: {e}", self.subject));
        }
        let m = self.measured.as_ref()?;
        (!m.errors.is_empty()).then(|| {
            format!(
                "failover / {}: {} of {} rounds failed: {}",
                self.subject,
                m.errors.count,
                self.rounds,
                m.errors.first.join("; ")
            )
        })
    }

    /// Its row of the failover table.
    fn row(&self) -> String {
        let head = format!(
            "| {} | {} | {} | {} |",
            self.backend, self.subject, self.ttl_s, self.rounds
        );
        if let Some(why) = &self.not_measured {
            return format!("{head} not measured ({why}) | | | | |");
        }
        if let Some(e) = &self.error {
            return format!("{head} FAILED: {} | | | | |", one_line(e));
        }
        let Some(m) = &self.measured else {
            return format!("{head} - | - | - | - | - |");
        };
        let failed = if m.errors.is_empty() {
            String::new()
        } else {
            format!(
                " ({} failed: {})",
                m.errors.count,
                one_line(&m.errors.first.join("; "))
            )
        };
        match &m.failover {
            Some(s) => format!(
                "{head} {}{failed} | {} | {} | {} | {} |",
                s.n,
                fmt_ms(s.p50_ms),
                fmt_ms(s.p99_ms),
                fmt_ms(s.max_ms),
                self.p50_over_ttl().map(ratio).unwrap_or_else(|| "-".into())
            ),
            None => format!("{head} 0{failed} | - | - | - | - |"),
        }
    }
}

impl Report {
    /// The failover runs, one row per election.
    pub(super) fn failover_table(&self, m: &mut String) {
        if self.failover.is_empty() {
            return;
        }
        let _ = writeln!(m, "\n## Failover (leader killed -> next leader leads)\n");
        let _ = writeln!(
            m,
            "Per round: candidate A (a client of its own, connected through proxies) campaigns and leads; \
             candidate B (another client, straight to the servers) campaigns and waits; then A's proxies \
             are cut (every connection reset, every reconnect refused: a crashed process, so no \
             resignation, release or keep-alive reaches the servers) and failover = the time from the cut \
             to B's campaign returning. A's term ends only when the servers expire its lease (Redis key, \
             etcd lease) or session (ZooKeeper), so the TTL bounds it roughly below (A last renewed its \
             lease up to a renewal interval before the cut, so a failover can come in just under the \
             TTL): p50/TTL = median failover over the TTL. The elections of all backends run at the same time (their rounds mostly wait \
             on expiries). Report only: the issue sets no target.\n"
        );
        let _ = writeln!(
            m,
            "| backend | election | TTL s | rounds | samples | p50 ms | p99 ms | max ms | p50/TTL |"
        );
        let _ = writeln!(m, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
        for f in &self.failover {
            let _ = writeln!(m, "{}", f.row());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Summary;
    use crate::workload::Errors;

    fn measured(ms: &[u64], errors: usize) -> FailoverReport {
        let mut samples: Vec<Duration> = ms.iter().map(|&v| Duration::from_millis(v)).collect();
        let mut e = Errors::default();
        for i in 0..errors {
            e.count += 1;
            e.first.push(format!("round {i}: boom"));
        }
        FailoverReport {
            rounds: (ms.len() + errors) as u32,
            measured: Some(Failover {
                failover: Summary::of(&mut samples),
                errors: e,
            }),
            ..FailoverReport::new(
                "distlock etcd",
                Backend::Etcd,
                Kind::Ours,
                Duration::from_secs(2),
            )
        }
    }

    #[test]
    fn a_row_has_the_percentiles_and_the_ratio_to_the_ttl() {
        let r = measured(&[2_500, 3_000, 2_100, 2_900], 0);
        assert_eq!(r.p50_over_ttl(), Some(1.25));
        assert_eq!(r.failure(), None);
        assert_eq!(
            r.row(),
            "| etcd | distlock etcd | 2 | 4 | 4 | 2500 | 3000 | 3000 | 1.25x |"
        );
    }

    #[test]
    fn failed_rounds_are_counted_and_reported() {
        let r = measured(&[1_000], 1);
        assert!(
            r.row().contains("| 1 (1 failed: round 0: boom) | 1000 |"),
            "{}",
            r.row()
        );
        assert!(r.failure().unwrap().contains("1 of 2 rounds failed"));
        let none = measured(&[], 2);
        assert_eq!(none.p50_over_ttl(), None);
        assert!(none.row().ends_with("| - | - | - | - |"), "{}", none.row());
    }

    #[test]
    fn unmeasured_and_failed_elections_say_why() {
        let curator = FailoverReport {
            not_measured: Some("Curator not installed".into()),
            ..FailoverReport::new(
                "Curator LeaderLatch",
                Backend::Zk,
                Kind::Peer,
                Duration::from_secs(2),
            )
        };
        assert!(curator
            .row()
            .contains("not measured (Curator not installed)"));
        assert_eq!(curator.failure(), None, "not installed is not a failure");
        let down = FailoverReport {
            error: Some("the servers did not start".into()),
            ..FailoverReport::new(
                "distlock zk",
                Backend::Zk,
                Kind::Ours,
                Duration::from_secs(2),
            )
        };
        assert!(down.row().contains("FAILED: the servers did not start"));
        assert!(down
            .failure()
            .unwrap()
            .starts_with("failover / distlock zk:"));
    }
}
