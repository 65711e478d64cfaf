//! `nemesis`: random faults from a seed against real servers of each
//! backend, a workload of every lock operation, and one checker over the
//! history (see `lock_safety::nemesis`). Run through `cargo xtask nemesis`.
//!
//! Each run lasts `--run-seconds` of faults; runs follow each other, seed
//! after seed, until `--minutes` per backend are used. Each run prints its
//! schedule first, so a seed that finds something replays its faults with
//! `--seed S --runs 1` (with `RUST_LOG`, e.g. `lock_zk=debug`, the
//! libraries' logs go to stderr). Exits 1 if any run found anything.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use lock_safety::fixture::Kind;
use lock_safety::nemesis::{run, Config, Outcome};

/// Random faults from a seed against real servers, and a checker over the history.
#[derive(Parser, Debug)]
#[command(name = "nemesis")]
struct Args {
    /// Backends to run (redis, redlock, etcd, zookeeper); every one if none is named.
    #[arg(long = "backend", value_parser = parse_kind)]
    backends: Vec<Kind>,
    /// Minutes of runs per backend (runs are `--run-seconds` long).
    #[arg(long, default_value_t = 1.0)]
    minutes: f64,
    /// Seconds of faults in one run.
    #[arg(long, default_value_t = 60)]
    run_seconds: u64,
    /// At most this many runs per backend (after `--minutes`, whichever comes first).
    #[arg(long)]
    runs: Option<u64>,
    /// The first run's seed (each next run adds 1); random if not given.
    #[arg(long)]
    seed: Option<u64>,
    /// Clients per run.
    #[arg(long, default_value_t = 6)]
    clients: usize,
    /// Lock names per run.
    #[arg(long, default_value_t = 2)]
    names: usize,
    /// Where to write the Markdown report.
    #[arg(long, default_value = "target/lock-safety/nemesis.md")]
    report: std::path::PathBuf,
}

fn parse_kind(s: &str) -> Result<Kind, String> {
    Kind::parse(s).ok_or_else(|| {
        let names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
        format!("unknown backend {s:?}; one of {}", names.join(", "))
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    // The libraries' own logs, on stderr, when `RUST_LOG` asks for them
    // (e.g. `RUST_LOG=lock_zk=debug` while replaying a seed).
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let backends = if args.backends.is_empty() {
        Kind::ALL.to_vec()
    } else {
        args.backends.clone()
    };
    let first_seed = args
        .seed
        .unwrap_or_else(|| u64::from(rand::random::<u32>()));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("nemesis: cannot start a tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let budget = Duration::from_secs_f64(args.minutes.max(0.0) * 60.0);
    let mut outcomes: Vec<(Outcome, Duration)> = Vec::new();
    for kind in backends {
        let started = std::time::Instant::now();
        let mut seed = first_seed;
        let mut runs = 0;
        while (runs == 0 || started.elapsed() < budget) && args.runs.is_none_or(|r| runs < r) {
            let config = Config {
                clients: args.clients.max(1),
                names: args.names.max(1),
                ..Config::new(kind, seed, Duration::from_secs(args.run_seconds))
            };
            println!("== {} run {} {}", kind.name(), runs + 1, config.schedule());
            let run_started = std::time::Instant::now();
            let outcome = runtime.block_on(run(config));
            println!("{}", outcome.summary());
            let ops: Vec<String> = outcome
                .operations
                .iter()
                .map(|(op, n)| format!("{op} {n}"))
                .collect();
            println!("  operations: {}", ops.join(", "));
            if !outcome.clean() {
                print!("{}", outcome.details);
                for b in &outcome.blocked {
                    println!("  left blocked: {} ({}): {}", b.name, b.mode, b.outcome);
                }
                for h in &outcome.hung {
                    println!("  past its bound: {h}");
                }
                println!(
                    "  replay: cargo xtask nemesis --backend {} --seed {} --runs 1 --run-seconds {}",
                    kind.name(),
                    seed,
                    args.run_seconds
                );
            }
            outcomes.push((outcome, run_started.elapsed()));
            seed += 1;
            runs += 1;
        }
    }
    let report = markdown(&outcomes);
    println!("\n{report}");
    if let Some(dir) = args.report.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = std::fs::write(&args.report, &report) {
        eprintln!("nemesis: writing {}: {e}", args.report.display());
    }
    if outcomes.iter().all(|(o, _)| o.clean()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The report: per backend the runs, seeds, operations, faults by kind, and
/// what was found.
fn markdown(outcomes: &[(Outcome, Duration)]) -> String {
    let mut out = String::from(
        "| backend | runs | seeds | minutes | grants | operations | faults | two holders | token order | stale writes accepted | names left blocked | calls past bound | overlaps allowed by the documented guarantees |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut faults: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for kind in Kind::ALL {
        let runs: Vec<&(Outcome, Duration)> = outcomes
            .iter()
            .filter(|(o, _)| o.config.kind == kind)
            .collect();
        if runs.is_empty() {
            continue;
        }
        let seeds: Vec<u64> = runs.iter().map(|(o, _)| o.config.seed).collect();
        let seeds = match (seeds.first(), seeds.last()) {
            (Some(a), Some(b)) if a != b => format!("{a}..={b}"),
            (Some(a), _) => a.to_string(),
            _ => String::new(),
        };
        let sum = |f: &dyn Fn(&Outcome) -> u64| runs.iter().map(|(o, _)| f(o)).sum::<u64>();
        let count = |label: &str| {
            sum(&|o: &Outcome| o.violations.iter().filter(|v| v.label() == label).count() as u64)
        };
        for (o, _) in &runs {
            for (k, n) in &o.faults {
                *faults.entry((kind.name(), k)).or_default() += n;
            }
        }
        let minutes = runs.iter().map(|(_, d)| d.as_secs_f64()).sum::<f64>() / 60.0;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            kind.name(),
            runs.len(),
            seeds,
            minutes,
            sum(&|o| o.grants as u64),
            sum(&|o| o.operations.values().sum()),
            sum(&|o| o.faults.values().sum()),
            count("two holders") + count("more holders than permits"),
            count("token out of order"),
            sum(&|o| o.stale_accepted),
            sum(&|o| o.blocked.len() as u64),
            sum(&|o| o.hung.len() as u64),
            sum(&|o| o.excused as u64),
        );
    }
    out.push_str("\n| backend | fault | times |\n|---|---|---|\n");
    for ((backend, fault), n) in faults {
        let _ = writeln!(out, "| {backend} | {fault} | {n} |");
    }
    out
}
