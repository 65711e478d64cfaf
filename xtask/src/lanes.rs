//! Every test of the workspace, test binaries side by side.
//!
//! Most suites spend their time waiting on servers (TTLs running out, waiters
//! woken, servers restarted), so one after the other they leave the cores
//! idle most of the time. This builds every test binary once
//! (`cargo build --workspace --all-targets`, the same build as `cargo test
//! --workspace`), then runs the few that must not share the machine with
//! another suite ([`ALONE`]) one after the other, then the rest [`LANES`]
//! at a time, each in its package's directory as cargo runs it, with the
//! doc tests (`cargo test --workspace --doc`) as one more job and the
//! caller's own work beside them ([`Side`]: build checks) first in the
//! lanes. Each job's output goes to a log file under
//! `target/xtask-tests/`; a failing job's log is printed whole, and every
//! job runs even after one failed.
//!
//! The tests themselves are written for a busy machine (their bounds come
//! from the configured timeouts plus slack, and they pass beside two busy
//! loops), which is what running two binaries at once makes of it.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Instant;

/// How many test binaries run at once.
pub const LANES: usize = 2;

/// Test binaries that run alone, first, by package and target: lock-safety's
/// safety suite (its soaks run four at a time) and its nemesis pass (every
/// backend at once), which keep both cores busy themselves, and
/// lock-redlock's conformance suites, whose cases hold locks of a 1 s TTL
/// with rounds to five nodes (over TLS in one), four cases at a time. Beside
/// the safety suite's soaks, every node of a Redlock release missed its
/// 200 ms node timeout; beside another suite and two busy loops, a guard's
/// renewals did.
const ALONE: &[(&str, &str)] = &[
    ("lock-safety", "safety"),
    ("lock-safety", "nemesis"),
    ("lock-redlock", "conformance"),
    ("lock-redlock", "conformance_tls"),
];

/// One thing to run: a test binary, the doc tests, or work of the caller's
/// that runs beside the tests ([`Side`]).
struct Job {
    /// What the log and the summary call it: `package target (kind)`.
    label: String,
    /// The package's directory name (`lock-redis`, ...; the package's name
    /// in this workspace).
    package: String,
    /// The test target's name (`safety`, `conformance`, `lock_core`, ...).
    target: String,
    /// The target's kind: `test` for a file in `tests/`, `lib` or `bin`
    /// for a crate's unit tests, `doc` for the doc tests.
    kind: String,
    /// The commands, run one after the other until one fails, with their
    /// working directory set.
    cmds: Vec<Command>,
    /// Where its output goes.
    log: PathBuf,
}

/// How one job ended.
struct Outcome {
    label: String,
    log: PathBuf,
    passed: bool,
    status: String,
    secs: f64,
}

/// Work of the caller's that runs in the lanes beside the tests, after the
/// jobs that run alone: a name and commands run one after the other (cargo
/// commands of one job wait for each other on cargo's lock anyway).
pub type Side = Vec<(String, Vec<Command>)>;

/// Builds the test binaries, then runs them and the doc tests [`LANES`] at a
/// time, with the work of `side` first in the lanes; fails naming every job
/// that failed, or returns the programs that the build made.
pub fn run_all(root: &Path, cargo: impl Fn() -> Command, side: Side) -> Result<Programs, String> {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let logs = target.join("xtask-tests");
    std::fs::create_dir_all(&logs).map_err(|e| format!("cannot create {}: {e}", logs.display()))?;
    let (built, programs) = build(cargo(), &logs)?;
    let (alone, tests): (Vec<Job>, Vec<Job>) = built.into_iter().partition(|job| {
        job.kind == "test" && ALONE.contains(&(job.package.as_str(), job.target.as_str()))
    });
    let mut jobs: Vec<Job> = side
        .into_iter()
        .enumerate()
        .map(|(i, (label, cmds))| Job {
            label,
            package: "(workspace)".into(),
            target: format!("side-{i}"),
            kind: "side".into(),
            cmds,
            log: logs.join(format!("side-{i}.log")),
        })
        .collect();
    jobs.extend(tests);
    let mut doc = cargo();
    doc.args(["test", "--workspace", "--doc"]);
    jobs.push(Job {
        label: "doc tests (cargo test --workspace --doc)".into(),
        package: "(workspace)".into(),
        target: "doc".into(),
        kind: "doc".into(),
        cmds: vec![doc],
        log: logs.join("doc-tests.log"),
    });
    let total = alone.len() + jobs.len();
    eprintln!(
        "xtask: {total} test jobs: {} alone, then {LANES} at a time; logs in {}",
        alone.len(),
        logs.display()
    );
    let started = Instant::now();
    let mut outcomes = run_in_lanes(alone, 1, 0, total);
    outcomes.extend(run_in_lanes(jobs, LANES, outcomes.len(), total));
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.passed).collect();
    eprintln!(
        "xtask: {} of {total} test jobs passed in {:.0} s",
        total - failed.len(),
        started.elapsed().as_secs_f64()
    );
    // libtest's count over every job; a job that failed without a failed
    // test (it crashed, or could not start) counts as one failed test.
    let (mut passed, mut failed_tests) = (0, 0);
    for o in &outcomes {
        let (p, f) = counts(&o.log);
        passed += p;
        failed_tests += if o.passed || f > 0 { f } else { 1 };
    }
    println!("tests: {passed} passed, {failed_tests} failed");
    if failed.is_empty() {
        return Ok(programs);
    }
    let names: Vec<String> = failed
        .iter()
        .map(|o| format!("  {} ({}, log {})", o.label, o.status, o.log.display()))
        .collect();
    Err(format!("failed:\n{}", names.join("\n")))
}

/// The programs of the workspace (`distlock`, `lock-bench`, ...) by name, as
/// the test build built them.
pub type Programs = HashMap<String, PathBuf>;

/// `cargo build --workspace --all-targets` (what `cargo test --workspace`
/// builds, with the same features, and the programs beside), a job for each
/// test binary it built, and the programs (from cargo's JSON messages:
/// artifacts with an executable, of the test profile or of a `bin` target).
/// The programs come from this build so that running them builds nothing
/// again: `cargo run -p distlock-cli` resolves the features of that package
/// alone, and rebuilt its dependencies for it (2 minutes beside two busy
/// loops).
fn build(mut cargo: Command, logs: &Path) -> Result<(Vec<Job>, Programs), String> {
    cargo
        .args([
            "build",
            "--workspace",
            "--all-targets",
            "--message-format=json-render-diagnostics",
        ])
        .stdout(Stdio::piped());
    eprintln!("xtask: running {cargo:?}");
    let started = Instant::now();
    let mut child = cargo
        .spawn()
        .map_err(|e| format!("cannot run {cargo:?}: {e}"))?;
    let stdout = child.stdout.take().ok_or("cargo's output is not piped")?;
    let (mut jobs, mut programs) = (Vec::new(), Programs::new());
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("cannot read cargo's output: {e}"))?;
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if let Some(job) = job_of(&msg, logs) {
            jobs.push(job);
        } else if let Some((name, exe)) = program_of(&msg) {
            programs.insert(name, exe);
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("cannot wait for {cargo:?}: {e}"))?;
    eprintln!(
        "xtask: {:.0} s for {cargo:?}",
        started.elapsed().as_secs_f64()
    );
    if !status.success() {
        return Err(format!("{cargo:?} failed with {status}"));
    }
    if jobs.is_empty() {
        return Err("cargo built no test binary".into());
    }
    Ok((jobs, programs))
}

/// A program that one of cargo's JSON messages names: a `bin` target built
/// outside the test profile, with its executable.
fn program_of(msg: &serde_json::Value) -> Option<(String, PathBuf)> {
    if msg["reason"] != "compiler-artifact"
        || msg["profile"]["test"] != false
        || msg["target"]["kind"][0] != "bin"
    {
        return None;
    }
    let exe = msg["executable"].as_str()?;
    Some((
        msg["target"]["name"].as_str()?.to_owned(),
        PathBuf::from(exe),
    ))
}

/// The job for one of cargo's JSON messages, if it names a test binary (a
/// bench target's is left out: `cargo test` does not run those).
fn job_of(msg: &serde_json::Value, logs: &Path) -> Option<Job> {
    if msg["reason"] != "compiler-artifact"
        || msg["profile"]["test"] != true
        || msg["target"]["kind"][0] == "bench"
    {
        return None;
    }
    let exe = msg["executable"].as_str()?;
    let dir = Path::new(msg["manifest_path"].as_str()?).parent()?;
    let package = dir.file_name()?.to_string_lossy().into_owned();
    let target = msg["target"]["name"].as_str()?;
    let kind = msg["target"]["kind"][0].as_str().unwrap_or("test");
    let mut cmd = Command::new(exe);
    cmd.current_dir(dir).env("CARGO_MANIFEST_DIR", dir);
    Some(Job {
        label: format!("{package} {target} ({kind})"),
        package: package.clone(),
        target: target.to_owned(),
        kind: kind.to_owned(),
        cmds: vec![cmd],
        log: logs.join(format!("{package}-{kind}-{target}.log")),
    })
}

/// Runs `jobs` in order, `lanes` at a time, reporting each as it ends (as
/// one of `total`, after `done` others).
fn run_in_lanes(jobs: Vec<Job>, lanes: usize, done: usize, total: usize) -> Vec<Outcome> {
    let queue = Mutex::new(jobs.into_iter().collect::<VecDeque<Job>>());
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..lanes {
            let tx = tx.clone();
            let queue = &queue;
            scope.spawn(move || loop {
                let next = queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
                let Some(job) = next else { break };
                if tx.send(run_one(job)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        let mut outcomes = Vec::new();
        for outcome in rx {
            report(&outcome, done + outcomes.len() + 1, total);
            outcomes.push(outcome);
        }
        outcomes
    })
}

/// Runs one job with its output in its log file.
fn run_one(mut job: Job) -> Outcome {
    let started = Instant::now();
    // A log of an earlier run is emptied first: the commands append.
    let (mut passed, mut status) = match File::create(&job.log) {
        Ok(_) => (true, String::new()),
        Err(e) => (false, format!("cannot create {}: {e}", job.log.display())),
    };
    for cmd in &mut job.cmds {
        if !passed {
            break;
        }
        let result = File::options()
            .create(true)
            .append(true)
            .open(&job.log)
            .and_then(|out| Ok((out.try_clone()?, out)))
            .and_then(|(out, err)| cmd.stdout(out).stderr(err).status());
        (passed, status) = match result {
            Ok(done) => (done.success(), format!("{cmd:?}: {done}")),
            Err(e) => (false, format!("cannot run {cmd:?}: {e}")),
        };
    }
    Outcome {
        label: job.label,
        log: job.log,
        passed,
        status,
        secs: started.elapsed().as_secs_f64(),
    }
}

/// The passed and failed tests that libtest's (and libtest-mimic's) closing
/// lines in `log` count: `test result: ok. 7 passed; 0 failed; ...`.
fn counts(log: &Path) -> (u64, u64) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut totals = (0, 0);
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("test result: ") else {
            continue;
        };
        for part in rest.split(['.', ';']) {
            match part.trim().split_once(' ') {
                Some((n, "passed")) => totals.0 += n.parse().unwrap_or(0),
                Some((n, "failed")) => totals.1 += n.parse().unwrap_or(0),
                _ => {}
            }
        }
    }
    totals
}

/// One line per finished job; a failed job's log whole.
fn report(outcome: &Outcome, done: usize, total: usize) {
    let verdict = if outcome.passed { "passed" } else { "FAILED" };
    eprintln!(
        "xtask: [{done}/{total}] {} {verdict} in {:.0} s",
        outcome.label, outcome.secs
    );
    if !outcome.passed {
        let log = std::fs::read_to_string(&outcome.log)
            .unwrap_or_else(|e| format!("(cannot read {}: {e})", outcome.log.display()));
        eprintln!(
            "---- {} ({}) ----\n{log}---- end of {} ----",
            outcome.label, outcome.status, outcome.label
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{counts, run_one, Job};
    use std::process::Command;

    fn job(log: &std::path::Path, lines: &[&str]) -> Job {
        Job {
            label: "echo".into(),
            package: "(workspace)".into(),
            target: "echo".into(),
            kind: "side".into(),
            cmds: lines
                .iter()
                .map(|l| {
                    let mut cmd = Command::new("sh");
                    cmd.args(["-c", l]);
                    cmd
                })
                .collect(),
            log: log.to_path_buf(),
        }
    }

    #[test]
    fn a_job_runs_its_commands_in_order_into_a_fresh_log_until_one_fails() {
        let log = std::env::temp_dir().join(format!("xtask-job-{}.log", std::process::id()));
        std::fs::write(&log, "an earlier run\n").unwrap();
        let done = run_one(job(&log, &["echo a", "echo b >&2", "exit 3", "echo never"]));
        let text = std::fs::read_to_string(&log).unwrap();
        std::fs::remove_file(&log).unwrap();
        assert!(!done.passed);
        assert!(done.status.contains("exit status: 3"), "{}", done.status);
        assert_eq!(text, "a\nb\n");
    }

    #[test]
    fn counts_add_up_every_closing_line_of_a_log() {
        let log = std::env::temp_dir().join(format!("xtask-counts-{}.log", std::process::id()));
        std::fs::write(
            &log,
            "running 7 tests\n\
             test a ... ok\n\
             test result: ok. 7 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 4.18s\n\
             test result: FAILED. 12 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.00s\n\
             not a test result: 5 passed; 5 failed\n",
        )
        .unwrap();
        let got = counts(&log);
        std::fs::remove_file(&log).unwrap();
        assert_eq!(got, (19, 2));
        assert_eq!(
            counts(std::path::Path::new("/nonexistent/xtask.log")),
            (0, 0)
        );
    }
}
