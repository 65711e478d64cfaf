//! The uncontended tables: every subject's levels, ours against the raw
//! protocol, and both again under `--load`.

use std::fmt::Write as _;

use super::format::{fmt_rate, one_line, opt_ms, ratio};
use super::{cpu_ratio, raw_ratios, BackendReport, Report};

impl Report {
    /// The uncontended runs of every subject, one row per level.
    pub(super) fn uncontended_table(&self, m: &mut String) {
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
    pub(super) fn raw_table(&self, m: &mut String) {
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

    /// Ours and the raw protocol measured again under `--load`, beside
    /// their quiet ratio (nothing when the run had no loaded pass).
    pub(super) fn loaded_table(&self, m: &mut String) {
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
}
