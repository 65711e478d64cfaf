//! The results, the targets, and the Markdown report.

use std::fmt::Write as _;

use serde::Serialize;

use crate::stats::Summary;
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
    /// `memory`, `redis`, `redlock`, `etcd` or `zk`.
    pub backend: String,
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
    pub backend: String,
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
    /// The targets.
    pub targets: Vec<Target>,
    /// Every failure, one line each.
    pub failures: Vec<String>,
    /// Seconds from start to report, server start-up included.
    pub total_s: f64,
    /// Seconds spent starting the servers.
    pub server_start_s: f64,
}

/// Milliseconds with 3 significant digits.
pub fn fmt_ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A rate, rounded, with thousands separators.
pub fn fmt_rate(v: f64) -> String {
    if v < 10.0 {
        return format!("{v:.1}");
    }
    let n = v.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn opt_ms(s: Option<&Summary>, f: impl Fn(&Summary) -> f64) -> String {
    s.map(|s| fmt_ms(f(s))).unwrap_or_else(|| "-".into())
}

fn ratio(v: f64) -> String {
    format!("{v:.2}x")
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
    /// Ours and the raw protocol measured again under `--load`, beside
    /// their quiet ratio (nothing when the run had no loaded pass).
    fn loaded_table(&self, m: &mut String) {
        let loaded = |b: &&BackendReport| {
            b.ours()
                .is_some_and(|o| !o.loaded.is_empty() || o.load_error.is_some())
        };
        if !self.backends.iter().any(|b| loaded(&b)) {
            return;
        }
        let _ = writeln!(
            m,
            "\n## Under load: ours and the raw protocol again, with busy processes running\n"
        );
        let _ = writeln!(
            m,
            "| backend | tasks | ours/raw quiet | ours/raw loaded | ours/s loaded (n) | raw/s loaded (n) | ours/raw CPU per cycle loaded | failed cycles under load (ours / raw) |"
        );
        let _ = writeln!(m, "|---|---:|---:|---:|---:|---:|---:|---:|");
        for b in self.backends.iter().filter(loaded) {
            let (Some(o), Some(r)) = (b.ours(), b.raw()) else {
                continue;
            };
            if let Some(e) = &o.load_error {
                let _ = writeln!(
                    m,
                    "| {} | - | FAILED: {} | | | | | |",
                    b.backend,
                    one_line(e)
                );
                continue;
            }
            for ol in &o.loaded {
                let Some(rl) = r.loaded.iter().find(|u| u.tasks == ol.tasks) else {
                    continue;
                };
                let quiet = o
                    .at(ol.tasks)
                    .zip(r.at(ol.tasks))
                    .and_then(|(oq, rq)| raw_ratios(oq, rq));
                let _ = writeln!(
                    m,
                    "| {} | {} | {} | {} | {} (n={}) | {} (n={}) | {} | {} / {}{} |",
                    b.backend,
                    ol.tasks,
                    quiet.map_or_else(|| "-".into(), |(_, thr)| ratio(thr)),
                    raw_ratios(ol, rl).map_or_else(|| "-".into(), |(_, thr)| ratio(thr)),
                    fmt_rate(ol.throughput_per_s),
                    ol.cycles,
                    fmt_rate(rl.throughput_per_s),
                    rl.cycles,
                    cpu_ratio(ol, rl).map_or_else(|| "-".into(), ratio),
                    ol.errors.count,
                    rl.errors.count,
                    ol.errors
                        .first
                        .first()
                        .map(|e| format!(" ({})", one_line(e)))
                        .unwrap_or_default()
                );
            }
        }
    }

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
        self.targets_table(&mut m);
        self.failures_list(&mut m);
        m
    }

    /// The uncontended runs of every subject, one row per level.
    fn uncontended_table(&self, m: &mut String) {
        let _ = writeln!(
            m,
            "## Uncontended acquire+release (each task on its own name)\n"
        );
        let _ = writeln!(
            m,
            "Latency of one acquire+release cycle in ms; throughput in cycles/s of all tasks together; \
             CPU = this process's CPU time per cycle in µs (the client's work, all threads; the servers \
             are other processes); every figure of a row comes from the n cycles of that row.\n"
        );
        let _ = writeln!(
            m,
            "| backend | subject | tasks | clients | n | p50 | p90 | p99 | acquire p50 | release p50 | throughput/s | CPU µs/cycle |"
        );
        let _ = writeln!(
            m,
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for b in &self.backends {
            for s in &b.subjects {
                if let Some(e) = &s.error {
                    let _ = writeln!(
                        m,
                        "| {} | {} | - | - | - | FAILED: {} | | | | | | |",
                        b.backend,
                        s.label,
                        one_line(e)
                    );
                    continue;
                }
                for u in &s.uncontended {
                    let c = u.cycle.as_ref();
                    let failed = if u.errors.is_empty() {
                        String::new()
                    } else {
                        format!(" (FAILED: {} errors)", u.errors.count)
                    };
                    let _ = writeln!(
                        m,
                        "| {} | {} | {} | {} | n={} | {} | {} | {} | {} | {} | {}{} | {} |",
                        b.backend,
                        s.label,
                        u.tasks,
                        u.clients,
                        u.cycles,
                        opt_ms(c, |s| s.p50_ms),
                        opt_ms(c, |s| s.p90_ms),
                        opt_ms(c, |s| s.p99_ms),
                        opt_ms(u.acquire.as_ref(), |s| s.p50_ms),
                        opt_ms(u.release.as_ref(), |s| s.p50_ms),
                        fmt_rate(u.throughput_per_s),
                        failed,
                        u.cpu_us_per_cycle
                            .map_or_else(|| "-".into(), |c| format!("{c:.1}"))
                    );
                }
            }
        }
    }

    /// Ours against the raw protocol at each level both measured.
    fn raw_table(&self, m: &mut String) {
        let _ = writeln!(
            m,
            "\n## Ours vs the raw-protocol limit (same client crates, same run)\n"
        );
        let _ = writeln!(
            m,
            "| backend | tasks | ours p50 ms (n) | raw p50 ms (n) | raw/ours latency | ours/s | raw/s | ours/raw throughput | ours/raw CPU per cycle |"
        );
        let _ = writeln!(m, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for b in &self.backends {
            let (Some(o), Some(r)) = (b.ours(), b.raw()) else {
                continue;
            };
            for ou in &o.uncontended {
                let Some(ru) = r.at(ou.tasks) else { continue };
                let Some((lat, thr)) = raw_ratios(ou, ru) else {
                    continue;
                };
                let _ = writeln!(
                    m,
                    "| {} | {} | {} (n={}) | {} (n={}) | {} | {} | {} | {} | {} |",
                    b.backend,
                    ou.tasks,
                    opt_ms(ou.cycle.as_ref(), |s| s.p50_ms),
                    ou.cycles,
                    opt_ms(ru.cycle.as_ref(), |s| s.p50_ms),
                    ru.cycles,
                    ratio(lat),
                    fmt_rate(ou.throughput_per_s),
                    fmt_rate(ru.throughput_per_s),
                    ratio(thr),
                    cpu_ratio(ou, ru).map_or_else(|| "-".into(), ratio)
                );
            }
        }
    }

    /// The contended runs: hand-off, fairness, timeouts.
    fn contended_table(&self, m: &mut String) {
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
    fn read_heavy_table(&self, m: &mut String) {
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

    /// The keep-alive runs: server traffic, client requests and memory per guard.
    fn keep_alive_table(&self, m: &mut String) {
        let _ = writeln!(m, "\n## Keep-alive: many guards held at once\n");
        let _ = writeln!(
            m,
            "Server operations per second while the guards are held (summed over the nodes), measured over \
             the window, which opens {} ms after the last guard was created (the acquisitions' own \
             follow-up requests, such as a ZooKeeper guard's watch on its node, are done by then); idle = \
             the same clients connected with no guard. Client requests = lock-core's \
             `distlock_requests_total` of the backend over the same window (what the clients sent; Redis \
             also counts the commands a script runs as server operations); per renewal interval = \
             requests/s x TTL/3. Renewals \"batching off\" = the same backend with a zero batching window \
             (one request per renewal, as before batching), run right after the default in the same run. \
             Heap/guard = growth of this process's live heap (counted by its global allocator) while \
             creating them, divided by their number: what the client keeps per guard held. RSS/guard = \
             growth of its resident memory over the same time (lower than the heap when memory freed \
             by an earlier run is reused).\n",
            crate::workload::KEEP_ALIVE_SETTLE.as_millis()
        );
        let _ = writeln!(
            m,
            "| backend | renewals | guards | sessions | TTL s | idle ops/s (n ops) | holding ops/s (n ops) | extra ops/s per guard | client requests/s (n) | requests per guard per s | requests per renewal interval | heap/guard | RSS/guard | lost | created in s (retries) |"
        );
        let _ = writeln!(
            m,
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for b in &self.backends {
            let Some(k) = &b.keep_alive else { continue };
            if let Some(e) = &k.error {
                let _ = writeln!(
                    m,
                    "| {} | FAILED: {} | | | | | | | | | | | | | |",
                    b.backend,
                    one_line(e)
                );
                continue;
            }
            let idle = match (k.idle_ops_per_s, k.idle_ops) {
                (Some(r), Some(n)) => format!("{} (n={n})", fmt_rate(r)),
                _ => "n/a".into(),
            };
            for r in &k.runs {
                keep_alive_row(m, &b.backend, k, &idle, r);
            }
        }
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

/// One keep-alive run of `backend` as a row of the keep-alive table
/// (`idle`: the server ops of its clients with no guard, in words).
fn keep_alive_row(m: &mut String, backend: &str, k: &KeepAliveReport, idle: &str, r: &KeepAlive) {
    let hold = match (r.hold_ops_per_s, r.hold_ops) {
        (Some(v), Some(n)) => format!("{} (n={n})", fmt_rate(v)),
        _ => "n/a".into(),
    };
    let per_guard = match (r.hold_ops_per_s, k.idle_ops_per_s) {
        (Some(h), Some(i)) if r.guards > 0 => {
            format!("{:.3}", (h - i) / r.guards as f64)
        }
        _ => "n/a".into(),
    };
    let (requests, per_guard_requests, per_interval) =
        match (r.hold_requests_per_s, r.hold_requests) {
            (Some(v), Some(n)) if r.guards > 0 => (
                format!("{} (n={n})", fmt_rate(v)),
                format!("{:.3}", v / r.guards as f64),
                format!("{:.1}", v * k.ttl_s / 3.0),
            ),
            _ => ("n/a".into(), "n/a".into(), "n/a".into()),
        };
    let _ = writeln!(
        m,
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} ({}) |",
        backend,
        if r.errors.is_empty() {
            r.renewals.to_string()
        } else {
            format!(
                "{}; {} operations failed: {}",
                r.renewals,
                r.errors.count,
                one_line(&r.errors.first.join("; "))
            )
        },
        r.guards,
        r.sessions,
        k.ttl_s,
        idle,
        hold,
        per_guard,
        requests,
        per_guard_requests,
        per_interval,
        r.heap_per_guard_bytes
            .map(|v| format!("{:.2} KiB", v / 1024.0))
            .unwrap_or_else(|| "n/a".into()),
        r.rss_per_guard_bytes
            .map(|v| format!("{:.1} KiB", v / 1024.0))
            .unwrap_or_else(|| "n/a".into()),
        r.lost,
        r.create_s,
        r.create_retries
    );
}

fn one_line(s: &str) -> String {
    let s = s.replace(['\n', '|'], " ");
    match s.char_indices().nth(600) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_ms(0.21349), "0.213");
        assert_eq!(fmt_ms(2.1349), "2.13");
        assert_eq!(fmt_ms(21.349), "21.3");
        assert_eq!(fmt_ms(213.49), "213");
        assert_eq!(fmt_rate(4921.4), "4,921");
        assert_eq!(fmt_rate(1234567.0), "1,234,567");
        assert_eq!(fmt_rate(999.0), "999");
        assert_eq!(fmt_rate(2.25), "2.2");
    }
}
