//! The keep-alive table: server traffic, client requests and memory per
//! guard with many guards held.

use std::fmt::Write as _;

use super::format::{fmt_rate, one_line};
use super::{KeepAliveReport, Report};
use crate::backend::Backend;
use crate::workload::KeepAlive;

impl Report {
    /// The keep-alive runs: server traffic, client requests and memory per guard.
    pub(super) fn keep_alive_table(&self, m: &mut String) {
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
                keep_alive_row(m, b.backend, k, &idle, r);
            }
        }
    }
}

/// One keep-alive run of `backend` as a row of the keep-alive table
/// (`idle`: the server ops of its clients with no guard, in words).
fn keep_alive_row(
    m: &mut String,
    backend: Backend,
    k: &KeepAliveReport,
    idle: &str,
    r: &KeepAlive,
) {
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
