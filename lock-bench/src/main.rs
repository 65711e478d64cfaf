//! # lock-bench: the distlock backends against their peers and the raw limit
//!
//! Starts its own servers through `lock-testbed` (1 Redis, 5 Redis, a 3-member
//! etcd cluster, a 3-server ZooKeeper ensemble), stops them at the end, and
//! measures per backend (memory, redis, redlock, etcd, zk):
//!
//! - uncontended acquire+release latency (p50/p90/p99) and throughput with 1,
//!   8 and 64 tasks on distinct names (one backend client per 8 tasks);
//! - contention of 8 clients on one name: hand-off latency (release call to
//!   the next holder's acquire returning, one monotonic clock), throughput,
//!   longest wait, share of hand-offs to a different client;
//! - the raw-protocol limit with the same client crates (Redis `SET NX PX` +
//!   `EVALSHA` compare-and-delete, on 1 and on 5 nodes; etcd txn put-if-absent
//!   with a lease + delete; ZooKeeper create ephemeral-sequential + delete),
//!   with what fencing alone (Redis) and a compared delete alone (etcd) add;
//! - peers on the same servers: `rslock`, etcd's Lock RPC, `zookeeper-client`'s
//!   lock recipe;
//! - keep-alive cost: server operations per second, client requests and
//!   client memory per guard (live heap, counted by the global allocator)
//!   with many guards held (TTL 3 s, renewed every 1 s);
//! - failover of an election (Redis, etcd, ZooKeeper, and etcd's Election
//!   RPC on the same cluster): the leader's connections cut as if its
//!   process died, to the next candidate leading (p50/p99/max against the
//!   TTL that bounds it below).
//!
//! Output: Markdown on stdout, JSON (`target/lock-bench/results.json`), an SVG
//! of latency percentiles (`target/lock-bench/latency.svg`), a progress bar on
//! stderr. Exits non-zero if any backend, raw protocol or peer failed to run.
//!
//! ```text
//! cargo run --release -p lock-bench -- [--quick] [--backends redis,etcd,...] [--load N] [--memory-baseline 8=RATE,64=RATE] [--data-dir PATH] [--json PATH] [--svg PATH]
//! ```

mod backend;
mod backends;
mod elections;
mod heap;
mod load;
mod peers;
mod placement;
mod plot;
mod raw;
mod report;
mod requests;
mod run;
mod servers;
mod stats;
mod subject;
mod targets;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser};

use backend::Backend;

/// Counts the live heap, for the client memory held per guard.
#[global_allocator]
static ALLOC: heap::Counting = heap::Counting;

/// The command line as typed; [`Cli::resolve`] turns it into [`Args`].
#[derive(Debug, Parser)]
#[command(
    name = "lock-bench",
    about = "Comparative benchmark of the distlock backends against their peers and the raw-protocol limit.",
    after_help = "Starts its own servers (redis-server, etcd, ZooKeeper via lock-testbed) and\n\
                  stops them at the end. Markdown report on stdout, progress on stderr.\n\
                  Exit status 1 if any backend, raw protocol or peer failed to run; 2 on a bad command line."
)]
struct Cli {
    /// Small sample counts (CI smoke test, under a minute).
    #[arg(long)]
    quick: bool,
    /// Comma-separated subset of: memory,redis,redlock,etcd,zk (default: all).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        num_args = 1,
        value_enum
    )]
    backends: Vec<Backend>,
    /// Where the servers keep their data (default: /dev/shm, a tmpfs, where it
    /// exists: etcd and ZooKeeper fsync every write, and a noisy disk would
    /// swing their rates between runs; else the system's temp dir).
    #[arg(long, value_name = "PATH")]
    data_dir: Option<PathBuf>,
    /// Where to write the JSON results (default: target/lock-bench/results.json).
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Where to write the latency plot (default: target/lock-bench/latency.svg).
    #[arg(long, value_name = "PATH")]
    svg: Option<PathBuf>,
    /// After the quiet uncontended levels, measure ours and the raw protocol
    /// again while N busy processes (one spinning core each) run, and print
    /// both ratios: how much a busy machine moves the library against the
    /// bare protocol (default: 2 in the full run, none with --quick; 0: none).
    #[arg(long, value_name = "N")]
    load: Option<usize>,
    /// The memory:// rates target 1a's speed-up counts from, as
    /// TASKS=RATE pairs (e.g. `8=540000,64=500000`): the commit before the
    /// work on the library's own overhead (ad23ec0) measured on this
    /// machine with `--backends memory --load 0`. Default: its rates on the
    /// machine the target was set on, which a faster machine flatters.
    #[arg(
        long,
        value_name = "TASKS=RATE,...",
        value_delimiter = ',',
        num_args = 1,
        value_parser = parse_level_rate
    )]
    memory_baseline: Vec<(usize, f64)>,
    /// Run as one busy process of `--load` (spins until killed).
    #[arg(long, hide = true)]
    busy_loop: bool,
}

/// One `TASKS=RATE` pair of `--memory-baseline`: a level the benchmark
/// measures and a positive rate in cycles per second.
fn parse_level_rate(text: &str) -> Result<(usize, f64), String> {
    let (tasks, rate) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not TASKS=RATE"))?;
    let tasks: usize = tasks
        .trim()
        .parse()
        .map_err(|_| format!("`{tasks}` is not a number of tasks"))?;
    if !run::LEVELS.contains(&tasks) {
        return Err(format!(
            "the benchmark measures {:?} tasks, not {tasks}",
            run::LEVELS
        ));
    }
    let rate: f64 = rate
        .trim()
        .replace('_', "")
        .parse()
        .map_err(|_| format!("`{rate}` is not a rate"))?;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(format!("the rate must be above 0, not {rate}"));
    }
    Ok((tasks, rate))
}

impl Cli {
    /// The command line with every default filled in and the backends in report order.
    fn resolve(self) -> Args {
        let dir = out_dir();
        let picked = |b: &Backend| self.backends.is_empty() || self.backends.contains(b);
        Args {
            quick: self.quick,
            load: self
                .load
                .unwrap_or(if self.quick { 0 } else { FULL_RUN_LOAD }),
            busy_loop: self.busy_loop,
            memory_baseline: if self.memory_baseline.is_empty() {
                targets::MemoryBaseline::default()
            } else {
                targets::MemoryBaseline {
                    rates: self.memory_baseline,
                    given: true,
                }
            },
            backends: Backend::ALL.into_iter().filter(picked).collect(),
            json: self.json.unwrap_or_else(|| dir.join("results.json")),
            svg: self.svg.unwrap_or_else(|| dir.join("latency.svg")),
            data_dir: self.data_dir.or_else(|| {
                std::path::Path::new(TMPFS)
                    .is_dir()
                    .then(|| PathBuf::from(TMPFS))
            }),
        }
    }
}

/// The command line.
#[derive(Clone, Debug, PartialEq)]
pub struct Args {
    /// Small sample counts.
    pub quick: bool,
    /// Busy processes for the loaded pass (0: none).
    pub load: usize,
    /// This process is one of them.
    pub busy_loop: bool,
    /// What target 1a's memory:// speed-up counts from.
    pub memory_baseline: targets::MemoryBaseline,
    /// Selected backends, in report order.
    pub backends: Vec<Backend>,
    /// JSON output path.
    pub json: PathBuf,
    /// SVG output path.
    pub svg: PathBuf,
    /// Where the servers keep their data (`None`: the system's temp dir).
    pub data_dir: Option<PathBuf>,
}

impl Args {
    /// The data dir, in words, for the report.
    pub fn data_dir_description(&self) -> String {
        match &self.data_dir {
            Some(d) if d == std::path::Path::new(TMPFS) => format!("{} (tmpfs)", d.display()),
            Some(d) => d.display().to_string(),
            None => format!("{} (the system's temp dir)", std::env::temp_dir().display()),
        }
    }
}

/// Busy processes of the full run's loaded pass (two, as a machine busy
/// with two other jobs).
const FULL_RUN_LOAD: usize = 2;

/// The tmpfs the servers' data dirs go to by default.
const TMPFS: &str = "/dev/shm";

fn out_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
            manifest.parent().unwrap_or(&manifest).join("target")
        });
    target.join("lock-bench")
}

/// Parses the arguments (the program name first); `--help` and bad
/// arguments are clap's errors (`use_stderr()` tells which).
pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<Args, clap::Error> {
    let cli = Cli::try_parse_from(args)?;
    // A baseline covers every level the target checks, or the target
    // would be judged on fewer.
    let given: Vec<usize> = cli.memory_baseline.iter().map(|(t, _)| *t).collect();
    if !given.is_empty() {
        if let Some((missing, _)) = targets::MEMORY_BASELINE
            .iter()
            .find(|(t, _)| !given.contains(t))
        {
            return Err(Cli::command().error(
                clap::error::ErrorKind::InvalidValue,
                format!("--memory-baseline needs a rate at {missing} tasks too (the target checks 8 and 64)"),
            ));
        }
    }
    Ok(cli.resolve())
}

fn write_file(path: &std::path::Path, contents: &[u8]) -> Result<(), String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    }
    std::fs::write(path, contents).map_err(|e| format!("write {}: {e}", path.display()))
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args()) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    if args.busy_loop {
        load::busy_loop();
        return ExitCode::SUCCESS;
    }
    lock_testbed::set_data_root(args.data_dir.clone());
    if let Err(e) = requests::install() {
        eprintln!("lock-bench: {e}; client requests are not counted");
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lock-bench: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (report, servers) = rt.block_on(run::run(&args));
    // Background clean-ups (released guards, closing sessions) get a moment,
    // then the servers are stopped.
    rt.shutdown_timeout(Duration::from_secs(2));
    drop(servers);

    print!("{}", report.markdown());
    let mut ok = report.failures.is_empty();
    match serde_json::to_vec_pretty(&report) {
        Ok(json) => match write_file(&args.json, &json) {
            Ok(()) => eprintln!("lock-bench: JSON written to {}", args.json.display()),
            Err(e) => {
                eprintln!("lock-bench: {e}");
                ok = false;
            }
        },
        Err(e) => {
            eprintln!("lock-bench: JSON: {e}");
            ok = false;
        }
    }
    if let Some(dir) = args.svg.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::create_dir_all(dir);
    }
    match plot::write_svg(&report, &args.svg) {
        Ok(()) => eprintln!("lock-bench: plot written to {}", args.svg.display()),
        Err(e) => {
            eprintln!("lock-bench: {e}");
            ok = false;
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        if !report.failures.is_empty() {
            eprintln!(
                "lock-bench: {} failure(s); see the Failures section",
                report.failures.len()
            );
        }
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Args, clap::Error> {
        parse_args(
            std::iter::once("lock-bench")
                .chain(list.iter().copied())
                .map(str::to_string),
        )
    }

    #[test]
    fn parses_the_command_line() {
        let a = args(&[]).unwrap();
        assert!(!a.quick);
        assert_eq!(a.load, FULL_RUN_LOAD, "the full run has a loaded pass");
        assert!(!a.busy_loop);
        assert_eq!(a.backends, Backend::ALL.to_vec());
        assert_eq!(args(&["--load", "0"]).unwrap().load, 0);
        assert_eq!(args(&["--quick", "--load", "3"]).unwrap().load, 3);
        assert!(a.json.ends_with("lock-bench/results.json"));
        assert!(a.svg.ends_with("lock-bench/latency.svg"));
        let a = args(&[
            "--quick",
            "--backends",
            "zk,redis",
            "--json=/tmp/x.json",
            "--data-dir",
            "/tmp/data",
        ])
        .unwrap();
        assert!(a.quick);
        assert_eq!(a.load, 0, "no loaded pass in the quick run unless asked");
        assert_eq!(
            a.backends,
            vec![Backend::Redis, Backend::Zk],
            "report order"
        );
        assert_eq!(a.json, PathBuf::from("/tmp/x.json"));
        assert_eq!(a.data_dir, Some(PathBuf::from("/tmp/data")));
        assert!(args(&["--backends", "mysql"]).is_err());
        assert!(args(&["--backends", ""]).is_err());
        assert!(args(&["--json"]).is_err());
        assert!(args(&["--frobnicate"]).is_err());
        let help = args(&["--help"]).unwrap_err();
        assert!(!help.use_stderr(), "--help is not an error");
        assert!(help.to_string().contains("--data-dir"));
    }

    #[test]
    fn parses_a_memory_baseline_measured_here() {
        let built_in = args(&[]).unwrap().memory_baseline;
        assert!(!built_in.given);
        assert_eq!(built_in.rates, targets::MEMORY_BASELINE.to_vec());
        let a = args(&["--memory-baseline", "8=540_000,64=500000.5"]).unwrap();
        assert!(a.memory_baseline.given);
        assert_eq!(
            a.memory_baseline.rates,
            vec![(8, 540_000.0), (64, 500_000.5)]
        );
        for bad in [
            "8", "8=", "=5", "7=100", "8=0", "8=-1", "8=NaN", "8=inf", "x=1", "8=1,", "8=1000",
            "64=1000", "1=5,8=5",
        ] {
            assert!(args(&["--memory-baseline", bad]).is_err(), "{bad} accepted");
        }
    }
}
