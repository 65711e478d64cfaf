//! The run: start the servers, measure every selected backend with its raw
//! protocol and peer, evaluate the targets.

mod backend;
mod failover;
mod groups;
mod profile;
mod subjects;

use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lock_testbed::Kind as ServerKind;

use crate::report::Report;
use crate::servers::Servers;
use crate::Args;
use backend::measure_backend;
use failover::{measure_failovers, plans as failover_plans};
use groups::{groups, Group};
pub use profile::{Profile, LEVELS};
use subjects::loaded_subjects;

/// Runs everything; returns the report and the servers (to stop after the
/// runtime has shut down).
pub async fn run(args: &Args) -> (Report, Servers) {
    let started = Instant::now();
    let profile = Profile {
        load: args.load,
        ..if args.quick {
            Profile::quick()
        } else {
            Profile::full()
        }
    };
    // The servers of the selected backends, each once.
    let needed: Vec<ServerKind> = ServerKind::ALL
        .into_iter()
        .filter(|k| args.backends.iter().any(|b| b.servers() == Some(*k)))
        .collect();
    let run_id = format!("bench-{}", std::process::id());

    let bar = progress(1);
    bar.set_message("starting servers");
    let servers = start_servers(needed).await;
    let server_start_s = started.elapsed().as_secs_f64();

    let groups = groups(args, &profile, &servers);
    let failovers = failover_plans(&args.backends, &profile, &servers);
    let failover_steps =
        failovers.iter().filter(|p| p.runs()).count() as u64 * u64::from(profile.failover_rounds);
    bar.set_length(total_steps(&groups, &profile) + failover_steps);
    bar.inc(1);

    let mut backends = Vec::new();
    for g in groups {
        backends.push(measure_backend(g, &profile, &run_id, &bar).await);
    }
    let failover_started = Instant::now();
    let failover = measure_failovers(failovers, &profile, &run_id, &bar).await;
    let failover_s = failover_started.elapsed().as_secs_f64();
    bar.finish_and_clear();

    let targets = crate::targets::evaluate(&backends, &args.memory_baseline);
    let failures = backends
        .iter()
        .flat_map(|b| b.failures())
        .chain(failover.iter().filter_map(|f| f.failure()))
        .collect();
    let report = Report {
        mode: if args.quick {
            "quick".into()
        } else {
            "full".into()
        },
        profile: {
            let mut p = profile.describe(args.quick);
            p.push(("server data dirs".into(), args.data_dir_description()));
            p.push(("failover phase took".into(), format!("{failover_s:.1} s")));
            p
        },
        backends,
        failover,
        targets,
        failures,
        total_s: started.elapsed().as_secs_f64(),
        server_start_s,
    };
    (report, servers)
}

/// Starts the servers `needed`, off the async threads; a start-up task that
/// failed counts as every server failing to start.
async fn start_servers(needed: Vec<ServerKind>) -> Servers {
    let kinds = needed.clone();
    tokio::task::spawn_blocking(move || Servers::start(&kinds))
        .await
        .unwrap_or_else(|e| {
            Servers::failed(&needed, &format!("the server start-up task failed: {e}"))
        })
}

/// The steps of the progress bar: the server start-up, every measured and
/// warm-up round of every level of every subject (and of the loaded pass),
/// the contended runs, every keep-alive guard count and the read-heavy runs.
fn total_steps(groups: &[Group], profile: &Profile) -> u64 {
    let per_level = profile.levels.len() as u64 * u64::from(profile.warmup_rounds + profile.rounds);
    groups
        .iter()
        .map(|g| {
            let loaded = if profile.load > 0 {
                loaded_subjects(&g.subjects).len() as u64
            } else {
                0
            };
            g.subjects
                .iter()
                .map(|s| per_level + u64::from(s.contended))
                .sum::<u64>()
                + loaded * per_level
                + profile.ka_guards.len() as u64
                + u64::from(g.read_heavy.is_some())
        })
        .sum::<u64>()
        + 1
}

/// The first three words of a subject's label, lower case, for the names
/// of its locks.
fn slug(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect::<String>()
        .split('-')
        .filter(|s| !s.is_empty())
        .take(3)
        .collect::<Vec<_>>()
        .join("-")
}

/// The progress bar on stderr, `steps` long.
fn progress(steps: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(steps), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {wide_msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}
