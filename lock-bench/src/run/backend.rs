//! Everything measured for one backend group, each part in a task of its
//! own: the subjects, then the read-heavy and keep-alive runs of our backend.

use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;

use super::groups::{Group, KeepAlivePlan};
use super::subjects::measure_group;
use super::Profile;
use crate::backend::Backend;
use crate::report::{BackendReport, KeepAliveReport, ReadHeavyReport, SubjectReport};
use crate::subject::{Connector, Kind, Locker};
use crate::workload::{self, KeepAliveParams, ReadHeavyParams, Renewals};

/// Everything measured for one backend group: its subjects, then the
/// read-heavy and keep-alive runs of our backend.
pub(super) async fn measure_backend(
    g: Group,
    profile: &Profile,
    run_id: &str,
    bar: &ProgressBar,
) -> BackendReport {
    let Group {
        backend,
        servers: desc,
        subjects: plans,
        keep_alive,
        read_heavy,
    } = g;
    // Each measurement runs in its own task: a panic in a client crate
    // becomes a failed row, not a crashed benchmark.
    let labels: Vec<(String, Kind)> = plans.iter().map(|p| (p.label.clone(), p.kind)).collect();
    let task = tokio::spawn(measure_group(
        backend,
        plans,
        profile.clone(),
        run_id.to_string(),
        bar.clone(),
    ));
    let subjects = match task.await {
        Ok(s) => s,
        Err(e) => labels
            .into_iter()
            .map(|(label, kind)| {
                let mut r = SubjectReport::new(label, kind);
                r.error = Some(format!("the measurement task failed: {e}"));
                r
            })
            .collect(),
    };
    let mut rep = BackendReport {
        backend,
        servers: desc,
        subjects,
        keep_alive: None,
        read_heavy: None,
    };
    if let Some(conn) = read_heavy {
        bar.set_message(format!("{backend}: read-heavy"));
        rep.read_heavy = Some(measure_read_heavy(conn, profile, run_id).await);
        bar.inc(1);
    }
    if let Some(plan) = keep_alive {
        bar.set_message(format!("{backend}: keep-alive"));
        let task = tokio::spawn(measure_keep_alive(
            plan,
            profile.clone(),
            run_id.to_string(),
            backend,
            bar.clone(),
        ));
        rep.keep_alive = Some(match task.await {
            Ok(k) => k,
            Err(e) => KeepAliveReport {
                ops_source: None,
                idle_ops_per_s: None,
                idle_ops: None,
                idle_requests_per_s: None,
                idle_window_s: profile.ka_idle.as_secs_f64(),
                ttl_s: profile.ka_ttl.as_secs_f64(),
                runs: Vec::new(),
                error: Some(format!("the measurement task failed: {e}")),
            },
        });
    }
    rep
}

/// The read-heavy run of our backend, in a task of its own.
async fn measure_read_heavy(
    conn: Result<Arc<dyn Connector>, String>,
    profile: &Profile,
    run_id: &str,
) -> ReadHeavyReport {
    let p = ReadHeavyParams {
        readers: profile.rh_readers,
        writers: profile.rh_writers,
        hold: profile.rh_hold,
        duration: profile.rh_duration,
        wait: profile.wait,
        name: format!("{run_id}/read-heavy"),
    };
    let run = match conn {
        Ok(c) => tokio::spawn(async move { workload::read_heavy(c, &p).await })
            .await
            .unwrap_or_else(|e| Err(format!("the measurement task failed: {e}"))),
        Err(e) => Err(e),
    };
    match run {
        Ok(r) => ReadHeavyReport {
            run: Some(r),
            error: None,
        },
        Err(e) => ReadHeavyReport {
            run: None,
            error: Some(e),
        },
    }
}

/// The keep-alive runs of our backend, in a task of its own: the idle
/// rate, then each guard count in each way of sending the renewals.
async fn measure_keep_alive(
    plan: KeepAlivePlan,
    profile: Profile,
    run_id: String,
    backend: Backend,
    bar: ProgressBar,
) -> KeepAliveReport {
    let KeepAlivePlan {
        conn,
        source,
        unbatched,
    } = plan;
    let mut rep = KeepAliveReport {
        ops_source: source.as_ref().map(|s| s.describe().to_string()),
        idle_ops_per_s: None,
        idle_ops: None,
        idle_requests_per_s: None,
        idle_window_s: profile.ka_idle.as_secs_f64(),
        ttl_s: profile.ka_ttl.as_secs_f64(),
        runs: Vec::new(),
        error: None,
    };
    let requests = backend.metrics_label();
    let steps = profile.ka_guards.len() as u64;
    let connect = |conn: Result<Arc<dyn Connector>, String>| async move {
        let conn = conn?;
        futures::future::join_all((0..profile.ka_sessions).map(|_| conn.connect()))
            .await
            .into_iter()
            .collect::<Result<Vec<Arc<dyn Locker>>, String>>()
    };
    let clients = match connect(conn).await {
        Ok(c) => c,
        Err(e) => {
            rep.error = Some(e);
            bar.inc(steps);
            return rep;
        }
    };
    let baseline = match unbatched {
        Some(conn) => match connect(conn).await {
            Ok(c) => Some(c),
            Err(e) => {
                rep.error = Some(format!("batching off: {e}"));
                bar.inc(steps);
                return rep;
            }
        },
        None => None,
    };
    // Let the sessions settle (first keep-alives, pings), then the idle rate.
    tokio::time::sleep(Duration::from_millis(300)).await;
    if let Some(src) = &source {
        let before = crate::requests::sent(requests);
        let t0 = Instant::now();
        match workload::ops_rate(src, profile.ka_idle).await {
            Ok((rate, ops)) => {
                rep.idle_ops_per_s = Some(rate);
                rep.idle_ops = Some(ops);
            }
            Err(e) => {
                rep.error = Some(format!("server counter: {e}"));
                bar.inc(steps);
                return rep;
            }
        }
        if let (Some(b), Some(a)) = (before, crate::requests::sent(requests)) {
            rep.idle_requests_per_s = Some(crate::stats::rate(a.saturating_sub(b), t0.elapsed()));
        }
    }
    for &guards in &profile.ka_guards {
        bar.set_message(format!("{backend}: keep-alive with {guards} guards"));
        let variants = std::iter::once((&clients, Renewals::Batched))
            .chain(baseline.as_ref().map(|b| (b, Renewals::Unbatched)));
        for (clients, renewals) in variants {
            let p = KeepAliveParams {
                guards,
                creators: profile.ka_creators,
                window: profile.ka_window,
                spread: profile.ka_ttl / 3,
                prefix: format!("{run_id}/keepalive/{}{guards}", renewals.tag()),
                requests: Some(requests),
                renewals,
            };
            match workload::keep_alive(clients, source.as_ref(), &p).await {
                Ok(k) => rep.runs.push(k),
                Err(e) => rep.error = Some(e),
            }
        }
        bar.inc(1);
    }
    rep
}
