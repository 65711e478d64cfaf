//! The failover phase: which elections are measured on the servers of the
//! selected backends, all at once.

use std::net::SocketAddr;
use std::sync::Arc;

use futures::future::join_all;
use indicatif::ProgressBar;
use lock_testbed::{Kind as ServerKind, Started};

use super::Profile;
use crate::backend::Backend;
use crate::elections::{CuratorElection, EtcdElectionRpc, OursElection};
use crate::report::FailoverReport;
use crate::servers::Servers;
use crate::subject::Kind;
use crate::workload::{failover, Electorate, FailoverParams};

/// One election to measure: what it is, and its candidates (or why there
/// are none).
pub(super) struct FailoverPlan {
    report: FailoverReport,
    electorate: Result<Arc<dyn Electorate>, String>,
}

impl FailoverPlan {
    /// Whether it runs rounds (for the progress bar).
    pub(super) fn runs(&self) -> bool {
        self.electorate.is_ok()
    }
}

/// The client addresses of the servers of `kind`.
fn addrs(servers: &Servers, kind: ServerKind) -> Result<Vec<SocketAddr>, String> {
    let pick = |s: &Started| -> Option<Vec<SocketAddr>> {
        match kind {
            ServerKind::Redis => s.as_redis().map(|r| vec![r.addr()]),
            ServerKind::Redlock => s.as_redis_set().map(|r| r.addrs()),
            ServerKind::Etcd => s.as_etcd().map(|c| c.addrs()),
            ServerKind::Zk => s.as_zk().map(|z| z.addrs()),
        }
    };
    match servers.get(kind) {
        Some(Ok(s)) => pick(s).ok_or_else(|| format!("no client addresses for {kind:?}")),
        Some(Err(e)) => Err(format!("the servers did not start: {e}")),
        None => Err("the servers were not started".into()),
    }
}

/// The elections measured for the selected `backends`: ours on Redis,
/// Redlock, etcd and ZooKeeper, etcd's Election RPC, and Curator's LeaderLatch.
pub(super) fn plans(
    backends: &[Backend],
    profile: &Profile,
    servers: &Servers,
) -> Vec<FailoverPlan> {
    let mut out = Vec::new();
    for &b in backends {
        let (Some(ttl), Some(kind)) = (profile.failover_ttl(b), b.servers()) else {
            continue;
        };
        let found = addrs(servers, kind);
        let ours = found.clone().map(|servers| {
            Arc::new(OursElection {
                backend: b,
                servers,
                ttl,
            }) as Arc<dyn Electorate>
        });
        out.push(plan(
            format!("distlock {b}"),
            b,
            Kind::Ours,
            ttl,
            profile,
            ours,
        ));
        match b {
            Backend::Etcd => {
                let rpc = found.map(|servers| {
                    Arc::new(EtcdElectionRpc { servers, ttl }) as Arc<dyn Electorate>
                });
                let label = "etcd Election RPC (v3election)".to_string();
                out.push(plan(label, b, Kind::Peer, ttl, profile, rpc));
            }
            Backend::Zk => {
                let curator = found.map(|servers| {
                    Arc::new(CuratorElection {
                        servers,
                        ttl,
                        wait: profile.failover_wait,
                    }) as Arc<dyn Electorate>
                });
                let label = "Curator LeaderLatch (5.4)".to_string();
                out.push(plan(label, b, Kind::Peer, ttl, profile, curator));
            }
            _ => {}
        }
    }
    out
}

fn plan(
    label: String,
    backend: Backend,
    kind: Kind,
    ttl: std::time::Duration,
    profile: &Profile,
    electorate: Result<Arc<dyn Electorate>, String>,
) -> FailoverPlan {
    FailoverPlan {
        report: FailoverReport {
            rounds: profile.failover_rounds,
            ..FailoverReport::new(label, backend, kind, ttl)
        },
        electorate,
    }
}

/// Runs every plan's rounds, the plans concurrently (each round waits out
/// a lease or session expiry, so the phase takes about as long as its
/// slowest election).
pub(super) async fn measure_failovers(
    plans: Vec<FailoverPlan>,
    profile: &Profile,
    run_id: &str,
    bar: &ProgressBar,
) -> Vec<FailoverReport> {
    let params = FailoverParams {
        rounds: profile.failover_rounds,
        settle: profile.failover_settle,
        wait: profile.failover_wait,
    };
    bar.set_message("failover");
    join_all(plans.into_iter().map(|p| {
        let params = params.clone();
        let prefix = format!("{run_id}-failover-{}", super::slug(&p.report.subject));
        async move {
            let mut report = p.report;
            match p.electorate {
                Ok(e) => report.measured = Some(failover(e, &params, &prefix, || bar.inc(1)).await),
                Err(e) if report.not_measured.is_none() => report.error = Some(e),
                Err(_) => {}
            }
            report
        }
    }))
    .await
}
