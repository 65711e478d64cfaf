//! The targets from the issue, checked against the measured values. A target
//! is never loosened here: what is missed is reported as missed.

use crate::report::{fmt_ms, fmt_rate, raw_ratios, BackendReport, Status, SubjectReport, Target};

/// Uncontended acquire+release at least this fraction of the raw limit.
pub const RAW_FRACTION: f64 = 0.85;
/// Redlock acquire latency at most this multiple of single Redis.
pub const REDLOCK_LATENCY: f64 = 1.5;
/// Redlock throughput at least this multiple of rslock's.
pub const REDLOCK_VS_RSLOCK: f64 = 2.0;
/// Contended hand-off within this many round trips of the backend.
pub const HANDOFF_ROUND_TRIPS: f64 = 3.0;
/// Keep-alive traffic at the larger guard count at most this multiple of the
/// traffic at the smaller count (per-guard renewals would grow with the guard
/// ratio, 10x in the full run).
pub const KEEPALIVE_GROWTH: f64 = 1.5;
/// Contended (8 clients on one name): the share of hand-offs that must go
/// to another client for a throughput to count (fair, not a releaser
/// re-taking its own lock).
pub const FAIR_SHARE: f64 = 0.90;
/// Contended acquisitions per second a single Redis must reach.
pub const REDIS_CONTENDED: f64 = 7_000.0;
/// Contended acquisitions per second etcd must reach...
pub const ETCD_CONTENDED: f64 = 800.0;
/// ...with a hand-off p99 of at most this many ms.
pub const ETCD_HANDOFF_P99_MS: f64 = 10.0;
/// Client memory per guard held (live heap), at most this many bytes.
pub const MEMORY_PER_GUARD: f64 = 2048.0;
/// Read-heavy run: the writer's p99 wait among readers that each hold for
/// milliseconds (a writer starved by a stream of readers waits for ever).
pub const READ_HEAVY_WRITE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

fn status(ok: bool) -> Status {
    if ok {
        Status::Met
    } else {
        Status::Missed
    }
}

fn target(target: &str, backend: &str, measured: String, status: Status) -> Target {
    Target {
        target: target.to_string(),
        backend: backend.to_string(),
        measured,
        status,
    }
}

fn find<'a>(backends: &'a [BackendReport], name: &str) -> Option<&'a BackendReport> {
    backends.iter().find(|b| b.backend == name)
}

/// All the targets, in the order.
pub fn evaluate(backends: &[BackendReport]) -> Vec<Target> {
    let mut out = Vec::new();
    let remote = ["redis", "redlock", "etcd", "zk"];

    // 1. Uncontended acquire+release >= 0.85x the raw limit, every backend.
    let t1 = format!(
        "uncontended acquire+release >= {RAW_FRACTION}x the raw-protocol limit (raw p50 / ours p50, ours/raw throughput, every level)"
    );
    for name in remote {
        let Some(b) = find(backends, name) else {
            continue;
        };
        let (Some(ours), Some(raw)) = (b.ours(), b.raw()) else {
            out.push(target(
                &t1,
                name,
                "not measured".into(),
                Status::NotMeasured,
            ));
            continue;
        };
        let mut parts = Vec::new();
        let mut worst: Option<f64> = None;
        for ou in &ours.uncontended {
            let Some(ru) = raw.at(ou.tasks) else { continue };
            let Some((lat, thr)) = raw_ratios(ou, ru) else {
                continue;
            };
            parts.push(format!(
                "x{}: latency {lat:.2}, throughput {thr:.2} (n={}/{})",
                ou.tasks, ou.cycles, ru.cycles
            ));
            let w = lat.min(thr);
            worst = Some(worst.map_or(w, |x: f64| x.min(w)));
        }
        // What a fencing counter alone (Redis, Redlock) or a compared
        // delete alone (etcd) costs, in the same run: the bare protocol with
        // only that added.
        let reference = |subject: Option<&SubjectReport>, what: &str| {
            subject.map(|f| {
                let levels: Vec<String> = f
                    .uncontended
                    .iter()
                    .filter_map(|fu| {
                        let ru = raw.at(fu.tasks)?;
                        let (_, thr) = raw_ratios(fu, ru)?;
                        Some(format!("x{} {thr:.2} (n={})", fu.tasks, fu.cycles))
                    })
                    .collect();
                format!("; {what}, its throughput/raw: {}", levels.join(", "))
            })
        };
        let fenced = reference(
            b.fenced(),
            "the raw protocol with a fencing counter alone (MULTI SET NX PX + INCR, no queue, no counter floor, no wake-up)",
        )
        .or_else(|| {
            reference(
                b.checked(),
                "the raw protocol with a compared delete alone (a txn on the key's create revision)",
            )
        });
        match worst {
            Some(w) => out.push(target(
                &t1,
                name,
                format!(
                    "worst {w:.2}x; {}{}",
                    parts.join("; "),
                    fenced.unwrap_or_default()
                ),
                status(w >= RAW_FRACTION),
            )),
            None => out.push(target(
                &t1,
                name,
                "not measured".into(),
                Status::NotMeasured,
            )),
        }
    }

    // 2. Redlock on 5 nodes: acquire latency <= 1.5x single Redis; throughput >= 2x rslock.
    let t2a = format!("Redlock (5 nodes) acquire p50 <= {REDLOCK_LATENCY}x single Redis (1 task)");
    match (find(backends, "redlock"), find(backends, "redis")) {
        (None, _) => {}
        (Some(rl), Some(r)) => {
            let a = rl
                .ours()
                .and_then(|s| s.at(1))
                .and_then(|u| u.acquire.clone());
            let b = r
                .ours()
                .and_then(|s| s.at(1))
                .and_then(|u| u.acquire.clone());
            // The same ratio for the bare round trips: the floor on this machine.
            let floor = match (
                rl.raw()
                    .and_then(|s| s.at(1))
                    .and_then(|u| u.acquire.as_ref()),
                r.raw()
                    .and_then(|s| s.at(1))
                    .and_then(|u| u.acquire.as_ref()),
            ) {
                (Some(a), Some(b)) if b.p50_ms > 0.0 => format!(
                    "; raw floor: 5-node SET NX {} ms (n={}) / 1-node {} ms (n={}) = {:.2}x",
                    fmt_ms(a.p50_ms),
                    a.n,
                    fmt_ms(b.p50_ms),
                    b.n,
                    a.p50_ms / b.p50_ms
                ),
                _ => String::new(),
            };
            match (a, b) {
                (Some(a), Some(b)) if b.p50_ms > 0.0 => {
                    let x = a.p50_ms / b.p50_ms;
                    out.push(target(
                        &t2a,
                        "redlock",
                        format!(
                            "{x:.2}x: {} ms (n={}) vs {} ms (n={}){floor}",
                            fmt_ms(a.p50_ms),
                            a.n,
                            fmt_ms(b.p50_ms),
                            b.n
                        ),
                        status(x <= REDLOCK_LATENCY),
                    ))
                }
                _ => out.push(target(
                    &t2a,
                    "redlock",
                    "not measured".into(),
                    Status::NotMeasured,
                )),
            }
        }
        _ => out.push(target(
            &t2a,
            "redlock",
            "needs both redis and redlock in the run".into(),
            Status::NotMeasured,
        )),
    }
    if let Some(rl) = find(backends, "redlock") {
        let ours = rl.ours();
        let peer = rl.peer();
        let t2b = format!("Redlock throughput >= {REDLOCK_VS_RSLOCK}x rslock's on the same nodes: contended (one name)");
        match (
            ours.and_then(|s| s.contended.as_ref()),
            peer.and_then(|s| s.contended.as_ref()),
        ) {
            (Some(o), Some(p)) => {
                let x = if p.throughput_per_s > 0.0 {
                    o.throughput_per_s / p.throughput_per_s
                } else {
                    f64::INFINITY
                };
                let share =
                    |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.0}%", v * 100.0));
                out.push(target(
                    &t2b,
                    "redlock",
                    format!(
                        "{x:.2}x: {}/s (n={}) vs {}/s (n={}); hand-offs to another client: {} vs {}",
                        fmt_rate(o.throughput_per_s),
                        o.acquisitions,
                        fmt_rate(p.throughput_per_s),
                        p.acquisitions,
                        share(o.to_other_share),
                        share(p.to_other_share)
                    ),
                    status(x >= REDLOCK_VS_RSLOCK),
                ));
            }
            _ => out.push(target(
                &t2b,
                "redlock",
                "not measured".into(),
                Status::NotMeasured,
            )),
        }
        let max_tasks = ours
            .and_then(|s| s.uncontended.iter().map(|u| u.tasks).max())
            .unwrap_or(0);
        let t2c = format!(
            "Redlock throughput >= {REDLOCK_VS_RSLOCK}x rslock's on the same nodes: uncontended, {max_tasks} tasks"
        );
        match (
            ours.and_then(|s| s.at(max_tasks)),
            peer.and_then(|s| s.at(max_tasks)),
        ) {
            (Some(o), Some(p)) if p.throughput_per_s > 0.0 => {
                let x = o.throughput_per_s / p.throughput_per_s;
                out.push(target(
                    &t2c,
                    "redlock",
                    format!(
                        "{x:.2}x: {}/s (n={}) vs {}/s (n={})",
                        fmt_rate(o.throughput_per_s),
                        o.cycles,
                        fmt_rate(p.throughput_per_s),
                        p.cycles
                    ),
                    status(x >= REDLOCK_VS_RSLOCK),
                ));
            }
            _ => out.push(target(
                &t2c,
                "redlock",
                "not measured".into(),
                Status::NotMeasured,
            )),
        }
    }

    // 3. Contended hand-off within 3 round trips of the backend (no polling).
    let t3 = format!(
        "contended hand-off p50 <= {HANDOFF_ROUND_TRIPS} round trips (round trip = raw acquire p50, 1 task)"
    );
    for name in remote {
        let Some(b) = find(backends, name) else {
            continue;
        };
        let handoff = b
            .ours()
            .and_then(|s| s.contended.as_ref())
            .and_then(|c| c.handoff.clone());
        let rt = b
            .raw()
            .and_then(|s| s.at(1))
            .and_then(|u| u.acquire.clone());
        match (handoff, rt) {
            (Some(h), Some(rt)) if rt.p50_ms > 0.0 => {
                let trips = h.p50_ms / rt.p50_ms;
                out.push(target(
                    &t3,
                    name,
                    format!(
                        "{trips:.2} round trips: hand-off p50 {} ms (n={}), round trip {} ms (n={})",
                        fmt_ms(h.p50_ms),
                        h.n,
                        fmt_ms(rt.p50_ms),
                        rt.n
                    ),
                    status(trips <= HANDOFF_ROUND_TRIPS),
                ));
            }
            _ => out.push(target(
                &t3,
                name,
                "not measured".into(),
                Status::NotMeasured,
            )),
        }
    }

    // 4. Keep-alive traffic grows with sessions, not guards, on etcd and ZooKeeper.
    let t4 = format!(
        "keep-alive server traffic grows with sessions, not guards: ops/s at the larger guard count <= {KEEPALIVE_GROWTH}x the smaller (same sessions)"
    );
    for name in ["etcd", "zk"] {
        let Some(b) = find(backends, name) else {
            continue;
        };
        let runs: Vec<_> = b
            .keep_alive
            .iter()
            .flat_map(|k| k.runs.iter())
            .filter(|r| {
                r.hold_ops_per_s.is_some()
                    && r.errors.is_empty()
                    && r.renewals == crate::run::BATCHED
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
    // 4b. Client requests per renewal interval grow with nodes x connections,
    //     not with guards, on every backend (Redis and Redlock batch a
    //     client's renewals per node).
    let t4b = format!(
        "keep-alive client requests per renewal interval grow with (nodes x connections), not guards: requests/s at the larger guard count <= {KEEPALIVE_GROWTH}x the smaller (same sessions)"
    );
    for name in remote {
        let Some(b) = find(backends, name) else {
            continue;
        };
        let ttl_s = b.keep_alive.as_ref().map_or(0.0, |k| k.ttl_s);
        let runs = |renewals: &str| -> Vec<&crate::workload::KeepAlive> {
            b.keep_alive
                .iter()
                .flat_map(|k| k.runs.iter())
                .filter(|r| r.errors.is_empty() && r.renewals == renewals)
                .collect()
        };
        let batched = runs(crate::run::BATCHED);
        let small = batched.iter().min_by_key(|r| r.guards);
        let large = batched.iter().max_by_key(|r| r.guards);
        let per_interval =
            |r: &crate::workload::KeepAlive| r.hold_requests_per_s.unwrap_or(0.0) * ttl_s / 3.0;
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
                    let off = runs(crate::run::UNBATCHED);
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

    // 4c. Client memory per guard at the largest guard count, every remote backend.
    let t4c = format!(
        "client memory per guard < {:.0} KiB with the most guards held (live heap growth of the client)",
        MEMORY_PER_GUARD / 1024.0
    );
    for name in remote {
        let Some(b) = find(backends, name) else {
            continue;
        };
        let largest = b
            .keep_alive
            .iter()
            .flat_map(|k| k.runs.iter())
            .filter(|r| r.errors.is_empty() && r.renewals == crate::run::BATCHED)
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

    // 6. Contended, fair AND fast: each backend's own bar, with at least
    //    FAIR_SHARE of the hand-offs going to another client.
    for b in backends {
        let Some(c) = b.ours().and_then(|s| s.contended.as_ref()) else {
            continue;
        };
        let peer = b.peer().and_then(|s| s.contended.as_ref());
        let share = c.to_other_share.unwrap_or(0.0);
        let fair = share >= FAIR_SHARE;
        let p99 = c.handoff.as_ref().map(|h| h.p99_ms);
        let (what, bar_met) = match b.backend.as_str() {
            "redis" => (
                format!("contended (8 clients): >= {REDIS_CONTENDED} acquisitions/s, >= 90% to another client"),
                c.throughput_per_s >= REDIS_CONTENDED,
            ),
            "etcd" => (
                format!("contended (8 clients): >= {ETCD_CONTENDED} acquisitions/s, hand-off p99 <= {ETCD_HANDOFF_P99_MS} ms, >= 90% to another client"),
                c.throughput_per_s >= ETCD_CONTENDED
                    && p99.is_some_and(|p| p <= ETCD_HANDOFF_P99_MS),
            ),
            "zk" | "redlock" => (
                "contended (8 clients): >= the peer's acquisitions/s on the same servers, >= 90% to another client".to_string(),
                peer.is_some_and(|p| c.throughput_per_s >= p.throughput_per_s),
            ),
            _ => continue,
        };
        out.push(target(
            &what,
            &b.backend,
            format!(
                "{}/s (n={}), hand-off p99 {} ms, {:.0}% to another{}",
                fmt_rate(c.throughput_per_s),
                c.acquisitions,
                p99.map(fmt_ms).unwrap_or_else(|| "-".into()),
                share * 100.0,
                peer.map(|p| format!(
                    "; peer {}/s (n={}), {:.0}% to another",
                    fmt_rate(p.throughput_per_s),
                    p.acquisitions,
                    p.to_other_share.unwrap_or(0.0) * 100.0
                ))
                .unwrap_or_default()
            ),
            status(bar_met && fair),
        ));
    }

    // 5. Read-heavy: readers share, the writer is not starved, nobody conflicts.
    let t5 = "read-heavy (readers + 1 writer): readers hold together, the writer is not starved (write wait p99 <= 1 s), 0 violations";
    for b in backends {
        let Some(rh) = &b.read_heavy else { continue };
        match &rh.run {
            Some(r) => {
                let p99 = r.write_wait.as_ref().map(|w| w.p99_ms);
                let bound_ms = READ_HEAVY_WRITE_WAIT.as_secs_f64() * 1e3;
                out.push(target(
                    t5,
                    &b.backend,
                    format!(
                        "{} readers at once; write wait p99 {} ms (n={}); {} violations",
                        r.most_readers_together,
                        p99.map(fmt_ms).unwrap_or_else(|| "-".into()),
                        r.writes,
                        r.violations
                    ),
                    status(
                        r.most_readers_together > 1
                            && r.violations == 0
                            && r.writes > 0
                            && p99.is_some_and(|p| p <= bound_ms),
                    ),
                ));
            }
            None => out.push(target(
                t5,
                &b.backend,
                "not measured".into(),
                Status::NotMeasured,
            )),
        }
    }
    out
}
