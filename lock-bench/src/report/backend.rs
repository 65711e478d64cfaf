//! What was measured for one backend: its subjects, its keep-alive and
//! read-heavy runs, and which of them failed.

use serde::Serialize;

use crate::backend::Backend;
use crate::subject::Kind;
use crate::workload::{Contended, Errors, KeepAlive, ReadHeavy, Renewals, Uncontended};

/// One measured thing: our backend, a raw protocol or a peer.
#[derive(Clone, Debug, Serialize)]
pub struct SubjectReport {
    /// What it is, e.g. `distlock redis`, `raw SET NX PX + EVALSHA`, `rslock`.
    pub label: String,
    /// Ours, raw or peer.
    pub kind: Kind,
    /// Why it could not be measured (server down, connect failed, ...).
    pub error: Option<String>,
    /// One entry per concurrency level.
    pub uncontended: Vec<Uncontended>,
    /// The contended run, where measured.
    pub contended: Option<Contended>,
    /// The uncontended levels again, measured while `--load` busy
    /// processes ran (ours and the raw protocol only).
    pub loaded: Vec<Uncontended>,
    /// Why the busy processes of `--load` could not be started.
    pub load_error: Option<String>,
}

impl SubjectReport {
    /// A subject with nothing measured yet.
    pub fn new(label: impl Into<String>, kind: Kind) -> Self {
        Self {
            label: label.into(),
            kind,
            error: None,
            uncontended: Vec::new(),
            contended: None,
            loaded: Vec::new(),
            load_error: None,
        }
    }

    /// The uncontended run with `tasks` tasks.
    pub fn at(&self, tasks: usize) -> Option<&Uncontended> {
        self.uncontended
            .iter()
            .find(|u| u.tasks == tasks && u.cycle.is_some())
    }

    /// Why this subject failed, if it did. Timeouts of a peer under contention
    /// are a measurement, not a failure; for our backends they are failures.
    pub fn failure(&self) -> Option<String> {
        if let Some(e) = &self.error {
            return Some(e.clone());
        }
        let mut errs: Vec<String> = Vec::new();
        let mut add = |what: String, e: &Errors| {
            if !e.is_empty() {
                errs.push(format!(
                    "{what}: {} failed ({})",
                    e.count,
                    e.first.join("; ")
                ));
            }
        };
        for u in &self.uncontended {
            add(format!("uncontended x{}", u.tasks), &u.errors);
        }
        if let Some(c) = &self.contended {
            add("contended".to_string(), &c.errors);
            if self.kind == Kind::Ours && c.timeouts > 0 {
                errs.push(format!("contended: {} acquires timed out", c.timeouts));
            }
            if c.overlaps > 0 {
                errs.push(format!(
                    "contended: {} holdings began before the previous holder released (mutual exclusion broken)",
                    c.overlaps
                ));
            }
        }
        (!errs.is_empty()).then(|| errs.join(" | "))
    }
}

/// The keep-alive runs of one backend.
#[derive(Clone, Debug, Serialize)]
pub struct KeepAliveReport {
    /// What the server counter counts.
    pub ops_source: Option<String>,
    /// Server operations per second with the clients connected and no guard.
    pub idle_ops_per_s: Option<f64>,
    /// Operations counted in the idle window.
    pub idle_ops: Option<u64>,
    /// Client requests per second in the idle window (lock-core's
    /// `distlock_requests_total`).
    pub idle_requests_per_s: Option<f64>,
    /// The idle window, s.
    pub idle_window_s: f64,
    /// The lease TTL, s (keep-alive renews every TTL/3).
    pub ttl_s: f64,
    /// One run per guard count.
    pub runs: Vec<KeepAlive>,
    /// Why it could not be measured.
    pub error: Option<String>,
}

impl KeepAliveReport {
    /// Why the keep-alive measurement failed, if it did.
    pub fn failure(&self) -> Option<String> {
        if let Some(e) = &self.error {
            return Some(format!("keep-alive: {e}"));
        }
        // The runs with batching off are the comparison, not the subject:
        // what fails there (10,000 guards renewing one request each can
        // overload the servers) is shown in their rows, not as a failure.
        let errs: Vec<String> = self
            .runs
            .iter()
            .filter(|r| r.renewals == Renewals::Batched)
            .flat_map(|r| {
                let mut v = Vec::new();
                if !r.errors.is_empty() {
                    v.push(format!(
                        "keep-alive x{}: {} failed ({})",
                        r.guards,
                        r.errors.count,
                        r.errors.first.join("; ")
                    ));
                }
                if r.lost > 0 {
                    v.push(format!(
                        "keep-alive x{}: {} guards lost their lock while the servers were up",
                        r.guards, r.lost
                    ));
                }
                v
            })
            .collect();
        (!errs.is_empty()).then(|| errs.join(" | "))
    }
}

/// Everything measured for one backend and its comparisons.
#[derive(Clone, Debug, Serialize)]
pub struct BackendReport {
    /// Which backend.
    pub backend: Backend,
    /// The servers it ran against.
    pub servers: String,
    /// Ours first, then the raw protocol, then the peers.
    pub subjects: Vec<SubjectReport>,
    /// Keep-alive cost of our backend.
    pub keep_alive: Option<KeepAliveReport>,
    /// Our backend's read-write lock under a read-heavy load, where it has one.
    pub read_heavy: Option<ReadHeavyReport>,
}

/// The read-heavy run of one backend, or why it could not run.
#[derive(Clone, Debug, Serialize)]
pub struct ReadHeavyReport {
    /// The measurement.
    pub run: Option<ReadHeavy>,
    /// Why there is none.
    pub error: Option<String>,
}

impl ReadHeavyReport {
    /// Why this run failed, if it did: an error, a failed operation, a
    /// timed-out acquire, or a writer granted beside another holder.
    pub fn failure(&self) -> Option<String> {
        if let Some(e) = &self.error {
            return Some(format!("read-heavy: {e}"));
        }
        let r = self.run.as_ref()?;
        let mut errs = Vec::new();
        if !r.errors.is_empty() {
            errs.push(format!(
                "{} failed ({})",
                r.errors.count,
                r.errors.first.join("; ")
            ));
        }
        if r.timeouts > 0 {
            errs.push(format!("{} acquires timed out", r.timeouts));
        }
        if r.violations > 0 {
            errs.push(format!(
                "{} holdings granted beside a conflicting holder",
                r.violations
            ));
        }
        (!errs.is_empty()).then(|| format!("read-heavy: {}", errs.join(" | ")))
    }
}

impl BackendReport {
    /// Our backend's subject.
    pub fn ours(&self) -> Option<&SubjectReport> {
        self.subjects.iter().find(|s| s.kind == Kind::Ours)
    }

    /// The raw-protocol subject.
    pub fn raw(&self) -> Option<&SubjectReport> {
        self.subjects.iter().find(|s| s.kind == Kind::Raw)
    }

    /// The raw protocol with a fencing counter (Redis and Redlock).
    pub fn fenced(&self) -> Option<&SubjectReport> {
        self.subjects.iter().find(|s| s.kind == Kind::Fenced)
    }

    /// The raw protocol with a compared delete (etcd).
    pub fn checked(&self) -> Option<&SubjectReport> {
        self.subjects.iter().find(|s| s.kind == Kind::Checked)
    }

    /// The first peer.
    pub fn peer(&self) -> Option<&SubjectReport> {
        self.subjects.iter().find(|s| s.kind == Kind::Peer)
    }

    /// The failures, one line each.
    pub fn failures(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .subjects
            .iter()
            .filter_map(|s| {
                s.failure()
                    .map(|f| format!("{} / {}: {f}", self.backend, s.label))
            })
            .collect();
        if let Some(f) = self.keep_alive.as_ref().and_then(|k| k.failure()) {
            out.push(format!("{}: {f}", self.backend));
        }
        if let Some(f) = self.read_heavy.as_ref().and_then(|r| r.failure()) {
            out.push(format!("{}: {f}", self.backend));
        }
        out
    }
}
