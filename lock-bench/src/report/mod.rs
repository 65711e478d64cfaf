//! The results, the targets, and the Markdown report. What was measured for
//! one backend, and what failed, is in `backend.rs`; each section of tables
//! in a file of its own (`uncontended.rs`, `contention.rs`, `keep_alive.rs`,
//! `failover.rs`).

mod backend;
mod contention;
mod failover;
mod format;
mod keep_alive;
mod uncontended;

use std::fmt::Write as _;

use serde::Serialize;

use crate::backend::Backend;
use crate::workload::Uncontended;
pub use backend::{BackendReport, KeepAliveReport, ReadHeavyReport, SubjectReport};
pub use failover::FailoverReport;
use format::one_line;
pub use format::{fmt_ms, fmt_rate};

/// Met, missed, or not measurable in this run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Status {
    /// The measured value meets the target.
    #[serde(rename = "MET")]
    Met,
    /// It does not.
    #[serde(rename = "MISSED")]
    Missed,
    /// Something it needs was not measured (filtered out or failed).
    #[serde(rename = "NOT MEASURED")]
    NotMeasured,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::Met => "MET",
            Status::Missed => "MISSED",
            Status::NotMeasured => "NOT MEASURED",
        })
    }
}

/// One target row.
#[derive(Clone, Debug, Serialize)]
pub struct Target {
    /// The target, in words.
    pub target: String,
    /// The backend it is about.
    pub backend: Backend,
    /// The measured value, in words, with sample counts.
    pub measured: String,
    /// The verdict.
    pub status: Status,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// `quick` or `full`.
    pub mode: String,
    /// What the run did, in words (durations, counts).
    pub profile: Vec<(String, String)>,
    /// Per backend.
    pub backends: Vec<BackendReport>,
    /// The failover runs, one per election.
    pub failover: Vec<FailoverReport>,
    /// The targets.
    pub targets: Vec<Target>,
    /// Every failure, one line each.
    pub failures: Vec<String>,
    /// Seconds from start to report, server start-up included.
    pub total_s: f64,
    /// Seconds spent starting the servers.
    pub server_start_s: f64,
}

/// Ours' CPU time per cycle over the raw protocol's at one level.
pub fn cpu_ratio(ours: &Uncontended, raw: &Uncontended) -> Option<f64> {
    let (o, r) = (ours.cpu_us_per_cycle?, raw.cpu_us_per_cycle?);
    (r > 0.0).then(|| o / r)
}

/// The uncontended ratio of ours to the raw limit at one level:
/// (latency ratio raw p50 / ours p50, throughput ratio ours / raw).
pub fn raw_ratios(ours: &Uncontended, raw: &Uncontended) -> Option<(f64, f64)> {
    let (o, r) = (ours.cycle.as_ref()?, raw.cycle.as_ref()?);
    if o.p50_ms <= 0.0 || raw.throughput_per_s <= 0.0 {
        return None;
    }
    Some((
        r.p50_ms / o.p50_ms,
        ours.throughput_per_s / raw.throughput_per_s,
    ))
}

impl Report {
    /// The report as Markdown.
    pub fn markdown(&self) -> String {
        let mut m = String::new();
        let _ = writeln!(m, "# distlock benchmark ({} run)\n", self.mode);
        for (k, v) in &self.profile {
            let _ = writeln!(m, "- {k}: {v}");
        }
        let _ = writeln!(
            m,
            "- servers started in {:.1} s; whole run {:.1} s\n",
            self.server_start_s, self.total_s
        );
        self.uncontended_table(&mut m);
        self.raw_table(&mut m);
        self.loaded_table(&mut m);
        self.contended_table(&mut m);
        self.read_heavy_table(&mut m);
        self.keep_alive_table(&mut m);
        self.failover_table(&mut m);
        self.targets_table(&mut m);
        self.failures_list(&mut m);
        m
    }

    /// Every target with its figures and verdict.
    fn targets_table(&self, m: &mut String) {
        let _ = writeln!(m, "\n## Targets\n");
        let _ = writeln!(m, "| target | backend | measured | status |");
        let _ = writeln!(m, "|---|---|---|---|");
        for t in &self.targets {
            let _ = writeln!(
                m,
                "| {} | {} | {} | **{}** |",
                t.target, t.backend, t.measured, t.status
            );
        }
    }

    /// Every failure, one line each.
    fn failures_list(&self, m: &mut String) {
        let _ = writeln!(m, "\n## Failures\n");
        if self.failures.is_empty() {
            let _ = writeln!(m, "None.");
        } else {
            for f in &self.failures {
                let _ = writeln!(m, "- {}", one_line(f));
            }
        }
    }
}
