//! The keep-alive targets: with many guards held, the server traffic and
//! the client requests grow with the sessions, not the guards, and each
//! guard costs the client little memory.

use super::{find, status, target, KEEPALIVE_GROWTH, MEMORY_PER_GUARD};
use crate::backend::Backend;
use crate::report::{fmt_rate, BackendReport, Status, Target};
use crate::workload::{KeepAlive, Renewals};

/// Target 5: Keep-alive server traffic grows with sessions, not guards (etcd, ZooKeeper).
pub(super) fn keep_alive_server(backends: &[BackendReport], out: &mut Vec<Target>) {
    let t4 = format!(
        "keep-alive server traffic grows with sessions, not guards: ops/s at the larger guard count <= {KEEPALIVE_GROWTH}x the smaller (same sessions)"
    );
    for name in [Backend::Etcd, Backend::Zk] {
        let Some(b) = find(backends, name) else {
            continue;
        };
        let runs: Vec<_> = b
            .keep_alive
            .iter()
            .flat_map(|k| k.runs.iter())
            .filter(|r| {
                r.hold_ops_per_s.is_some() && r.errors.is_empty() && r.renewals == Renewals::Batched
            })
            .collect();
        let small = runs.iter().min_by_key(|r| r.guards);
        let large = runs.iter().max_by_key(|r| r.guards);
        match (small, large) {
            (Some(s), Some(l)) if l.guards > s.guards => {
                let (so, lo) = (
                    s.hold_ops_per_s.unwrap_or(0.0),
                    l.hold_ops_per_s.unwrap_or(0.0),
                );
                let growth = if so > 0.0 { lo / so } else { f64::INFINITY };
                out.push(target(
                    &t4,
                    name,
                    format!(
                        "{growth:.2}x for {:.0}x the guards: {} ops/s (n={} ops) with {} guards vs {} ops/s (n={} ops) with {}, {} sessions",
                        l.guards as f64 / s.guards as f64,
                        fmt_rate(lo),
                        l.hold_ops.unwrap_or(0),
                        l.guards,
                        fmt_rate(so),
                        s.hold_ops.unwrap_or(0),
                        s.guards,
                        l.sessions
                    ),
                    status(growth <= KEEPALIVE_GROWTH),
                ));
            }
            _ => out.push(target(
                &t4,
                name,
                "not measured".into(),
                Status::NotMeasured,
            )),
        }
    }
}

/// Target 5: Keep-alive client requests per renewal interval grow with nodes x
/// connections, not guards, on every remote backend (Redis and Redlock batch
/// a client's renewals per node).
pub(super) fn keep_alive_client(backends: &[BackendReport], out: &mut Vec<Target>) {
    let t4b = format!(
        "keep-alive client requests per renewal interval grow with (nodes x connections), not guards: requests/s at the larger guard count <= {KEEPALIVE_GROWTH}x the smaller (same sessions)"
    );
    for name in Backend::REMOTE {
        let Some(b) = find(backends, name) else {
            continue;
        };
        let ttl_s = b.keep_alive.as_ref().map_or(0.0, |k| k.ttl_s);
        let runs = |renewals: Renewals| -> Vec<&KeepAlive> {
            b.keep_alive
                .iter()
                .flat_map(|k| k.runs.iter())
                .filter(|r| r.errors.is_empty() && r.renewals == renewals)
                .collect()
        };
        let batched = runs(Renewals::Batched);
        let small = batched.iter().min_by_key(|r| r.guards);
        let large = batched.iter().max_by_key(|r| r.guards);
        let per_interval = |r: &KeepAlive| r.hold_requests_per_s.unwrap_or(0.0) * ttl_s / 3.0;
        match (small, large) {
            (Some(s), Some(l))
                if l.guards > s.guards
                    && s.hold_requests.is_some()
                    && l.hold_requests.is_some() =>
            {
                let (so, lo) = (
                    s.hold_requests_per_s.unwrap_or(0.0),
                    l.hold_requests_per_s.unwrap_or(0.0),
                );
                if so <= 0.0 && lo <= 0.0 {
                    out.push(target(
                        &t4b,
                        name,
                        "not measured: the backend counts no requests in distlock_requests_total"
                            .into(),
                        Status::NotMeasured,
                    ));
                } else {
                    let growth = if so > 0.0 { lo / so } else { f64::INFINITY };
                    let off = runs(Renewals::Unbatched);
                    let baseline = off
                        .iter()
                        .max_by_key(|r| r.guards)
                        .filter(|r| r.hold_requests_per_s.is_some())
                        .map(|r| {
                            format!(
                                "; batching off: {}/s (n={}), {:.0} per interval with {} guards",
                                fmt_rate(r.hold_requests_per_s.unwrap_or(0.0)),
                                r.hold_requests.unwrap_or(0),
                                per_interval(r),
                                r.guards
                            )
                        })
                        .unwrap_or_default();
                    out.push(target(
                        &t4b,
                        name,
                        format!(
                            "{growth:.2}x for {:.0}x the guards: {:.0} requests per interval ({}/s, n={}, {:.4} per guard per s) with {} guards vs {:.0} ({}/s, n={}, {:.4} per guard per s) with {}, {} sessions{baseline}",
                            l.guards as f64 / s.guards as f64,
                            per_interval(l),
                            fmt_rate(lo),
                            l.hold_requests.unwrap_or(0),
                            lo / l.guards.max(1) as f64,
                            l.guards,
                            per_interval(s),
                            fmt_rate(so),
                            s.hold_requests.unwrap_or(0),
                            so / s.guards.max(1) as f64,
                            s.guards,
                            l.sessions
                        ),
                        status(growth <= KEEPALIVE_GROWTH),
                    ));
                }
            }
            _ => out.push(target(
                &t4b,
                name,
                "not measured".into(),
                Status::NotMeasured,
            )),
        }
    }
}

/// Target 5: Client memory per guard at the largest guard count, every remote backend.
pub(super) fn memory_per_guard(backends: &[BackendReport], out: &mut Vec<Target>) {
    let t4c = format!(
        "client memory per guard < {:.0} KiB with the most guards held (live heap growth of the client)",
        MEMORY_PER_GUARD / 1024.0
    );
    for name in Backend::REMOTE {
        let Some(b) = find(backends, name) else {
            continue;
        };
        let largest = b
            .keep_alive
            .iter()
            .flat_map(|k| k.runs.iter())
            .filter(|r| r.errors.is_empty() && r.renewals == Renewals::Batched)
            .max_by_key(|r| r.guards);
        match largest.and_then(|r| Some((r, r.heap_per_guard_bytes?))) {
            Some((r, bytes)) => out.push(target(
                &t4c,
                name,
                format!(
                    "{:.2} KiB per guard with {} guards on {} sessions",
                    bytes / 1024.0,
                    r.guards,
                    r.sessions
                ),
                status(bytes < MEMORY_PER_GUARD),
            )),
            None => out.push(target(
                &t4c,
                name,
                "not measured".into(),
                Status::NotMeasured,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::KeepAliveReport;
    use crate::targets::{evaluate, MemoryBaseline};
    use crate::workload::Errors;

    fn run(guards: usize, renewals: Renewals, requests_per_s: f64, heap: f64) -> KeepAlive {
        KeepAlive {
            guards,
            sessions: 8,
            create_s: 0.5,
            create_retries: 0,
            hold_ops_per_s: Some(requests_per_s),
            hold_ops: Some(requests_per_s as u64 * 3),
            hold_requests_per_s: Some(requests_per_s),
            hold_requests: Some(requests_per_s as u64 * 3),
            renewals,
            window_s: 3.0,
            rss_per_guard_bytes: None,
            heap_per_guard_bytes: Some(heap),
            lost: 0,
            errors: Errors::default(),
        }
    }

    /// The keep-alive targets judge the default renewals; the runs with
    /// batching off (more guards, more requests and memory here) are only
    /// quoted beside them.
    #[test]
    fn keep_alive_targets_judge_the_default_renewals() {
        let redis = BackendReport {
            backend: Backend::Redis,
            servers: "1 redis-server".into(),
            subjects: Vec::new(),
            keep_alive: Some(KeepAliveReport {
                ops_source: None,
                idle_ops_per_s: None,
                idle_ops: None,
                idle_requests_per_s: None,
                idle_window_s: 3.0,
                ttl_s: 3.0,
                runs: vec![
                    run(100, Renewals::Batched, 30.0, 1100.0),
                    run(1000, Renewals::Batched, 33.0, 1200.0),
                    run(1000, Renewals::Unbatched, 600.0, 1300.0),
                    run(5000, Renewals::Unbatched, 3000.0, 4096.0),
                ],
                error: None,
            }),
            read_heavy: None,
        };
        let rows = evaluate(&[redis], &MemoryBaseline::default());
        let row = |start: &str| {
            rows.iter()
                .find(|t| t.target.starts_with(start))
                .unwrap_or_else(|| panic!("no row `{start}`: {rows:?}"))
        };
        let memory = row("client memory per guard");
        assert_eq!(
            memory.measured,
            "1.17 KiB per guard with 1000 guards on 8 sessions"
        );
        assert_eq!(memory.status, Status::Met);
        let requests = row("keep-alive client requests");
        assert!(
            requests
                .measured
                .starts_with("1.10x for 10x the guards: 33 requests per interval"),
            "{}",
            requests.measured
        );
        assert!(
            requests
                .measured
                .ends_with("; batching off: 3,000/s (n=9000), 3000 per interval with 5000 guards"),
            "{}",
            requests.measured
        );
        assert_eq!(requests.status, Status::Met);
        assert_eq!(
            serde_json::to_value(run(1, Renewals::Unbatched, 1.0, 1.0)).unwrap()["renewals"],
            "batching off (one request per renewal)"
        );
    }
}
