//! Project chores, run as `cargo xtask <task>` (matklad's xtask pattern).
//!
//! - `cargo xtask test`: installs what the tests need where it is missing
//!   (Debian packages `redis-server`, `etcd-server`, `etcd-client`,
//!   `zookeeper`, `protobuf-compiler`; the Python package `kazoo` for the
//!   ZooKeeper interop test), then runs every test of the workspace against
//!   real servers the tests start themselves.
//! - `cargo xtask bench [--quick]`: the same set-up, then the benchmark
//!   (`lock-bench`) in release mode.
//! - `cargo xtask setup`: only the set-up.
//! - `cargo xtask ci`: what CI runs: formatting and clippy checks, `test`,
//!   and the benchmark's `--quick` mode as a smoke test (dev profile).

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Debian packages the tests and the benchmark need, with a file each installs.
const DEBIAN_PACKAGES: &[(&str, &str)] = &[
    ("redis-server", "/usr/bin/redis-server"),
    ("etcd-server", "/usr/bin/etcd"),
    ("etcd-client", "/usr/bin/etcdctl"),
    ("zookeeper", "/usr/share/java/zookeeper.jar"),
    ("protobuf-compiler", "/usr/bin/protoc"),
];

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let task = args.first().map(String::as_str).unwrap_or("help");
    let rest = &args[args.len().min(1)..];
    let result = match task {
        "setup" => setup(),
        "test" => setup().and_then(|()| test(rest)),
        "bench" => setup().and_then(|()| bench(rest)),
        "ci" => setup().and_then(|()| ci()),
        _ => {
            eprintln!("usage: cargo xtask <setup | test [cargo test args] | bench [--quick] | ci>");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("xtask {task}: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

fn run(cmd: &mut Command) -> Result<(), String> {
    eprintln!("xtask: running {cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed with {status}"))
    }
}

fn cargo() -> Command {
    let mut cmd = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

/// Installs the servers and tools the tests need, where missing.
fn setup() -> Result<(), String> {
    let missing: Vec<&str> = DEBIAN_PACKAGES
        .iter()
        .filter(|(_, file)| !Path::new(file).exists())
        .map(|(pkg, _)| *pkg)
        .collect();
    if !missing.is_empty() {
        install_debian(&missing)?;
    }
    if !python_has_kazoo() {
        install_kazoo()?;
    }
    Ok(())
}

fn install_debian(packages: &[&str]) -> Result<(), String> {
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    let has_apt = Path::new("/usr/bin/apt-get").exists();
    if !(is_root && has_apt) {
        return Err(format!(
            "missing packages {packages:?}: install them (Debian/Ubuntu: `sudo apt-get install {}`), \
             or point the testbed at your own binaries and servers (see lock-testbed's docs)",
            packages.join(" ")
        ));
    }
    eprintln!("xtask: installing {packages:?} from Debian packages");
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

fn python() -> &'static str {
    "python3"
}

fn python_has_kazoo() -> bool {
    Command::new(python())
        .args(["-c", "import kazoo"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn install_kazoo() -> Result<(), String> {
    eprintln!("xtask: installing the Python package kazoo (ZooKeeper interop test)");
    run(Command::new(python()).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "kazoo",
    ]))
    .map_err(|e| format!("{e}; install kazoo with `python3 -m pip install kazoo`"))
}

/// Every test of the workspace: unit, integration (real servers), doc tests.
fn test(extra: &[String]) -> Result<(), String> {
    run(cargo().args(["test", "--workspace"]).args(extra))
}

/// The benchmark, in release mode (the numbers mean something only there).
fn bench(extra: &[String]) -> Result<(), String> {
    run(cargo()
        .args(["run", "--release", "--package", "lock-bench", "--"])
        .args(extra))
}

/// The benchmark's quick mode as a smoke test, in the dev profile that the
/// tests already built (CI checks that it runs end to end, not its numbers).
fn bench_smoke() -> Result<(), String> {
    run(cargo().args(["run", "--package", "lock-bench", "--", "--quick"]))
}

fn ci() -> Result<(), String> {
    run(cargo().args(["fmt", "--all", "--", "--check"]))?;
    run(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    test(&[])?;
    bench_smoke()
}
