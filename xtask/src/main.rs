//! Project chores, run as `cargo xtask <task>` (matklad's xtask pattern).
//!
//! - `cargo xtask test`: installs what the build and the tests need where it is
//!   missing (see [`REQUIREMENTS`]), checks that every file is there, then
//!   checks formatting and lints, runs every test of the workspace against
//!   real servers the tests start themselves (two test binaries at a time,
//!   see [`lanes`]), and runs the benchmark's quick mode as a smoke test.
//!   With arguments (`cargo xtask test -p lock-redis`) it runs only `cargo
//!   test` with them.
//! - `cargo xtask bench [--quick]`: the same set-up, then the benchmark
//!   (`lock-bench`) in release mode.
//! - `cargo xtask nemesis [--backend B] [--minutes N] [--seed S] [...]`: the
//!   same set-up, then the nemesis (`lock-safety`'s `nemesis` binary, release
//!   mode): random faults from a seed against real servers, a workload of
//!   every lock operation and a checker over the history; `--help` lists
//!   its options.
//! - `cargo xtask setup`: only the set-up and the check.
//! - `cargo xtask ci`: the same as `test` without arguments (what `.ci/run` runs).
//! - `cargo xtask assets [DIR]`: the `distlock` command's shell completion
//!   scripts and man pages, for packagers, into `DIR` (default
//!   `target/assets`): `completions/` and `man/`.
//! - `cargo xtask package [--no-verify]`: the same set-up, then `cargo
//!   package` of every published crate (the workspace members without
//!   `publish = false`), together, each one built from its packaged sources
//!   unless `--no-verify` is given; the `.crate` files land in
//!   `target/package`.
//!
//! `test` (without arguments) and `ci` also build the `distlock` facade with
//! each backend alone (`--no-default-features --features X`), the TLS build on
//! ring with one crypto provider per build, check that the declared
//! `rust-version` is at least the highest `rust-version` of the dependencies
//! built on the main platforms ([`PLATFORMS`]), package the published crates
//! without building them (`cargo xtask package --no-verify`: building them
//! as well took over 5 minutes on a 2-core machine from a cold cache), build
//! the docs with warnings denied, and generate the assets.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

mod lanes;

/// Something the build or the tests need: a file that proves it is there, and
/// the Debian package that provides it.
struct Requirement {
    /// The Debian package.
    package: &'static str,
    /// A file the package installs and the build or a test uses.
    file: &'static str,
    /// Who needs it, for the error message.
    needed_by: &'static str,
}

/// Every file the build and the tests need, with its Debian package.
///
/// Installed with `--no-install-recommends`, so a package that is only
/// recommended by another one (`libprotobuf-dev` by `protobuf-compiler`) is
/// listed on its own.
const REQUIREMENTS: &[Requirement] = &[
    Requirement {
        package: "protobuf-compiler",
        file: "/usr/bin/protoc",
        needed_by: "etcd-client's build script (protoc)",
    },
    Requirement {
        package: "libprotobuf-dev",
        file: "/usr/include/google/protobuf/descriptor.proto",
        needed_by: "etcd-client's build script (the protobuf include files)",
    },
    Requirement {
        package: "redis-server",
        file: "/usr/bin/redis-server",
        needed_by: "the Redis and Redlock tests",
    },
    Requirement {
        package: "etcd-server",
        file: "/usr/bin/etcd",
        needed_by: "the etcd tests",
    },
    Requirement {
        package: "etcd-client",
        file: "/usr/bin/etcdctl",
        needed_by: "the etcdctl interop tests",
    },
    Requirement {
        package: "zookeeper",
        file: "/usr/share/java/zookeeper.jar",
        needed_by: "the ZooKeeper tests (server jar)",
    },
    Requirement {
        package: "libnetty-java",
        file: "/usr/share/java/netty-handler.jar",
        needed_by: "the ZooKeeper TLS tests (Netty for its secure client port)",
    },
    Requirement {
        package: "libslf4j-java",
        file: "/usr/share/java/slf4j-simple.jar",
        needed_by: "the ZooKeeper tests (server logging)",
    },
    Requirement {
        package: "default-jre-headless",
        file: "/usr/bin/java",
        needed_by: "the ZooKeeper tests (Java runtime)",
    },
    Requirement {
        package: "libcurator-recipes-java",
        file: "/usr/share/java/curator-recipes.jar",
        needed_by: "the Curator LeaderLatch interop tests (Curator 5.4)",
    },
    Requirement {
        package: "default-jdk-headless",
        file: "/usr/bin/javac",
        needed_by: "the Curator LeaderLatch interop tests (the JDK's source launcher runs the participant)",
    },
    Requirement {
        package: "postgresql",
        file: "/usr/lib/postgresql/15/bin/postgres",
        needed_by: "the lock-fence and storage safety tests (PostgreSQL 15 server, initdb, psql, the system user postgres)",
    },
    Requirement {
        package: "python3-kazoo",
        file: KAZOO_PYTHON,
        needed_by: "the kazoo interop test (Debian's Python)",
    },
];

/// The interpreter the kazoo interop test runs (lock-testbed's default for
/// `DISTLOCK_PYTHON`): Debian's own Python, which `python3-kazoo` serves. A
/// Python from pyenv or a venv earlier on `PATH` does not see Debian's
/// packages, and Debian's refuses `pip install` (PEP 668).
const KAZOO_PYTHON: &str = "/usr/bin/python3";
/// The Debian package that gives [`KAZOO_PYTHON`] the `kazoo` module.
const KAZOO_PACKAGE: &str = "python3-kazoo";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let task = args.first().map(String::as_str).unwrap_or("help");
    let rest = &args[args.len().min(1)..];
    let result = match task {
        "setup" => setup(),
        "test" if rest.is_empty() => setup().and_then(|()| ci()),
        "test" => setup().and_then(|()| test(rest)),
        "bench" => setup().and_then(|()| bench(rest)),
        "nemesis" => setup().and_then(|()| nemesis(rest)),
        "ci" => setup().and_then(|()| ci()),
        "package" if rest.is_empty() => setup().and_then(|()| package(true)),
        "package" if rest == ["--no-verify"] => setup().and_then(|()| package(false)),
        "assets" if rest.len() <= 1 => setup().and_then(|()| {
            assets(
                &rest
                    .first()
                    .map_or_else(|| root().join("target/assets"), PathBuf::from),
                &|| {
                    let mut cmd = cargo();
                    cmd.args(["run", "--quiet", "-p", "distlock-cli", "--"]);
                    Ok(cmd)
                },
            )
        }),
        _ => {
            eprintln!(
                "usage: cargo xtask <setup | test [cargo test args] | bench [--quick] | nemesis [--backend B] [--minutes N] [--seed S] | ci | package [--no-verify] | assets [DIR]>"
            );
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

/// Runs `cmd` and says how long it took, so that a slow step of a run is
/// a number in its log.
fn run(cmd: &mut Command) -> Result<(), String> {
    eprintln!("xtask: running {cmd:?}");
    let started = Instant::now();
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    eprintln!(
        "xtask: {:.0} s for {cmd:?}",
        started.elapsed().as_secs_f64()
    );
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

/// What is still missing: the requirements whose file is absent, and kazoo
/// if Debian's Python cannot import it.
fn missing() -> Vec<&'static Requirement> {
    let mut missing: Vec<&Requirement> = REQUIREMENTS
        .iter()
        .filter(|r| !Path::new(r.file).exists())
        .collect();
    if Path::new(KAZOO_PYTHON).exists() && !python_has_kazoo() {
        missing.extend(REQUIREMENTS.iter().filter(|r| r.package == KAZOO_PACKAGE));
    }
    missing
}

/// Installs what the build and the tests need where it is missing, then
/// checks every file again and names the package of anything still missing.
fn setup() -> Result<(), String> {
    let before = missing();
    if !before.is_empty() {
        let mut packages: Vec<&str> = before.iter().map(|r| r.package).collect();
        packages.dedup();
        install_debian(&packages)?;
    }
    let after = missing();
    if after.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = after
        .iter()
        .map(|r| {
            format!(
                "  {} (Debian package `{}`), needed by {}",
                r.file, r.package, r.needed_by
            )
        })
        .collect();
    Err(format!(
        "still missing after the install:\n{}",
        lines.join("\n")
    ))
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

fn python_has_kazoo() -> bool {
    Command::new(KAZOO_PYTHON)
        .args(["-c", "import kazoo"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// `cargo test` over the whole workspace with the caller's arguments.
fn test(extra: &[String]) -> Result<(), String> {
    run(cargo().args(["test", "--workspace"]).args(extra))
}

/// The benchmark, in release mode (the numbers mean something only there).
fn bench(extra: &[String]) -> Result<(), String> {
    run(cargo()
        .args(["run", "--release", "--package", "lock-bench", "--"])
        .args(extra))
}

/// The nemesis, in release mode (more operations per second of faults).
fn nemesis(extra: &[String]) -> Result<(), String> {
    run(cargo()
        .args([
            "run",
            "--release",
            "--package",
            "lock-safety",
            "--bin",
            "nemesis",
            "--",
        ])
        .args(extra))
}

/// A program of the tests' build, run from the workspace's root as `cargo
/// run` runs it.
fn program(programs: &lanes::Programs, name: &str) -> Result<Command, String> {
    let exe = programs
        .get(name)
        .ok_or_else(|| format!("the tests' build made no program {name}"))?;
    let mut cmd = Command::new(exe);
    cmd.current_dir(root());
    Ok(cmd)
}

/// The features of the `distlock` facade that each bring one backend.
const BACKEND_FEATURES: &[&str] = &["redis", "redlock", "etcd", "zk"];

/// The shells `distlock completions` writes scripts for, with the file name
/// each shell's completion directory expects.
const SHELLS: &[(&str, &str)] = &[
    ("bash", "distlock.bash"),
    ("zsh", "_distlock"),
    ("fish", "distlock.fish"),
    ("elvish", "distlock.elv"),
    ("powershell", "_distlock.ps1"),
];

/// Formatting, lints, the facade with each backend alone, the declared
/// `rust-version`, the published crates' packages, the docs, every test, the
/// assets, the benchmark's smoke run.
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
    one_crypto_provider()?;
    rust_version()?;
    // Builds that only check, beside the tests, which spend their time
    // waiting on servers. The bench's smoke run comes after them: beside a
    // test binary, its 64-task Redlock row (a dev build, 50 ms node
    // timeout) saw releases time out.
    let mut checks = feature_checks();
    checks.push(package_cmd(false)?);
    checks.push(docs_cmd());
    let side = vec![(
        "the facade's feature builds, the packages, the docs".to_owned(),
        checks,
    )];
    let programs = lanes::run_all(&root(), cargo, side)?;
    assets(&root().join("target/assets"), &|| {
        program(&programs, "distlock")
    })?;
    run(program(&programs, "lock-bench")?.arg("--quick"))
}

/// `distlock` builds with no backend, with each backend alone (so that a
/// library user who turns the others off gets a working build) and with
/// every backend on ring ([`one_crypto_provider`] checks that each build
/// has one crypto provider). One job at a time (`-j 1`): these run beside
/// the tests, as one busy process.
fn feature_checks() -> Vec<Command> {
    let mut checks = Vec::new();
    for features in [""].iter().chain(BACKEND_FEATURES).chain([&RING_BUILD]) {
        let mut cmd = cargo();
        cmd.args([
            "check",
            "-j",
            "1",
            "-p",
            "distlock",
            "--no-default-features",
        ]);
        if !features.is_empty() {
            cmd.args(["--features", features]);
        }
        checks.push(cmd);
    }
    checks
}

/// Every backend with TLS on rustls's ring provider instead of aws-lc-rs.
const RING_BUILD: &str = "redis,redlock,etcd,zk,rustls-ring";

/// Each build has one rustls crypto provider, so that rustls never has to
/// choose: the default build has no ring, the `rustls-ring` one no
/// aws-lc-rs (`cargo tree -i` prints nothing for a crate not in the build).
fn one_crypto_provider() -> Result<(), String> {
    for (features, absent) in [(None, "ring"), (Some(RING_BUILD), "aws-lc-rs")] {
        let mut cmd = cargo();
        cmd.args(["tree", "-p", "distlock", "-e", "normal", "-i", absent]);
        if let Some(features) = features {
            cmd.args(["--no-default-features", "--features", features]);
        }
        let out = cmd
            .output()
            .map_err(|e| format!("cannot run cargo tree: {e}"))?;
        let tree = String::from_utf8_lossy(&out.stdout);
        if !tree.trim().is_empty() {
            return Err(format!(
                "the distlock build with features {} has {absent} as a second crypto provider:\n{tree}",
                features.unwrap_or("(default)")
            ));
        }
    }
    Ok(())
}

/// The platforms whose builds set the minimum Rust version. Only what a build
/// on one of them compiles counts (`cargo metadata --filter-platform`): a
/// dependency behind a cfg that no build sets, such as `cfg(loom)`, is in
/// `Cargo.lock` but never compiled.
const PLATFORMS: &[&str] = &[
    "x86_64-unknown-linux-gnu",
    "aarch64-unknown-linux-gnu",
    "x86_64-apple-darwin",
    "aarch64-apple-darwin",
    "x86_64-pc-windows-msvc",
];

/// `cargo metadata` as JSON, with `args` added (`--no-deps`,
/// `--filter-platform T`, ...).
fn metadata(args: &[&str]) -> Result<serde_json::Value, String> {
    let mut cmd = cargo();
    cmd.args(["metadata", "--format-version", "1"]).args(args);
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed with {}:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("{cmd:?} printed no JSON: {e}"))
}

/// A `rust-version` as (major, minor, patch): `1.88` is 1.88.0.
fn parse_rust_version(version: &str) -> Option<(u64, u64, u64)> {
    let mut parts = version.split('.').map(str::parse::<u64>);
    let major = parts.next()?.ok()?;
    let minor = parts.next().unwrap_or(Ok(0)).ok()?;
    let patch = parts.next().unwrap_or(Ok(0)).ok()?;
    parts.next().is_none().then_some((major, minor, patch))
}

/// Every workspace member declares a `rust-version` at least the highest
/// `rust-version` among the dependencies built on [`PLATFORMS`] (normal,
/// build and dev-dependencies, as locked in `Cargo.lock`), so that the
/// declared minimum is one the locked tree really builds with.
fn rust_version() -> Result<(), String> {
    let mut args = Vec::new();
    for platform in PLATFORMS {
        args.extend(["--filter-platform", platform]);
    }
    let meta = metadata(&args)?;
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let members = strings(&meta["workspace_members"]);
    let built: Vec<String> = meta["resolve"]["nodes"]
        .as_array()
        .map(|nodes| {
            nodes
                .iter()
                .filter_map(|n| n["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut highest: Option<((u64, u64, u64), String)> = None;
    let mut declared = Vec::new();
    for package in meta["packages"].as_array().into_iter().flatten() {
        let id = package["id"].as_str().unwrap_or_default();
        let name = package["name"].as_str().unwrap_or_default();
        let version = package["version"].as_str().unwrap_or_default();
        let rust_version = package["rust_version"].as_str();
        if members.iter().any(|m| m == id) {
            declared.push((name.to_owned(), rust_version.map(str::to_owned)));
            continue;
        }
        let Some(rust_version) = rust_version else {
            continue;
        };
        if !built.iter().any(|b| b == id) {
            continue;
        }
        let parsed = parse_rust_version(rust_version)
            .ok_or_else(|| format!("{name} {version}: unreadable rust-version {rust_version:?}"))?;
        if highest.as_ref().is_none_or(|(h, _)| parsed > *h) {
            highest = Some((
                parsed,
                format!("{name} {version} declares rust-version {rust_version}"),
            ));
        }
    }
    let Some((needed, by)) = highest else {
        return Err("no dependency declares a rust-version".into());
    };
    let mut low = Vec::new();
    for (name, rust_version) in declared {
        match rust_version.as_deref().map(|v| (v, parse_rust_version(v))) {
            Some((_, Some(v))) if v >= needed => {}
            Some((v, _)) => low.push(format!("{name} declares rust-version {v}")),
            None => low.push(format!("{name} declares no rust-version")),
        }
    }
    if low.is_empty() {
        eprintln!("xtask: rust-version: the highest among the dependencies: {by}");
        Ok(())
    } else {
        Err(format!(
            "the dependencies need Rust {}.{}.{} ({by}), but {}: raise `rust-version` in the workspace's Cargo.toml",
            needed.0,
            needed.1,
            needed.2,
            low.join(", ")
        ))
    }
}

/// The workspace members that are published: those whose `publish` is not
/// `false` (`cargo metadata` shows `null` for any registry, `[]` for none).
fn published_crates() -> Result<Vec<String>, String> {
    let meta = metadata(&["--no-deps"])?;
    let mut names = Vec::new();
    for package in meta["packages"].as_array().into_iter().flatten() {
        let publish = &package["publish"];
        if publish.is_null() || publish.as_array().is_some_and(|r| !r.is_empty()) {
            let name = package["name"].as_str().unwrap_or_default().to_owned();
            let missing: Vec<&str> = [
                "description",
                "license",
                "repository",
                "readme",
                "keywords",
                "categories",
            ]
            .into_iter()
            .filter(|field| {
                let v = &package[*field];
                v.is_null() || v.as_array().is_some_and(Vec::is_empty)
            })
            .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "{name} is published but its Cargo.toml has no {}",
                    missing.join(", ")
                ));
            }
            names.push(name);
        }
    }
    if names.is_empty() {
        return Err("no workspace member is published".into());
    }
    Ok(names)
}

/// `cargo package` of every published crate at once, so that cargo resolves
/// their dependencies on each other among the packages it makes: each
/// manifest is complete, every internal dependency has a version, and no
/// published crate needs a test-only one. With `verify`, each package is
/// also built from its own packaged sources. Uncommitted changes are
/// packaged as they are (`--allow-dirty`), so that the check runs on a
/// working tree too.
fn package(verify: bool) -> Result<(), String> {
    run(&mut package_cmd(verify)?)
}

/// The `cargo package` command of [`package`].
fn package_cmd(verify: bool) -> Result<Command, String> {
    let crates = published_crates()?;
    let mut cmd = cargo();
    cmd.args(["package", "--allow-dirty"]);
    if !verify {
        cmd.arg("--no-verify");
    }
    for name in &crates {
        cmd.args(["-p", name]);
    }
    Ok(cmd)
}

/// The API docs of every crate, with rustdoc's warnings (broken links, ...)
/// denied.
fn docs_cmd() -> Command {
    let mut cmd = cargo();
    cmd.args(["doc", "--workspace", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings");
    cmd
}

/// Shell completion scripts into `dir/completions` and man pages into
/// `dir/man`, generated by the `distlock` command from its own definition.
///
/// `distlock` makes the command that runs the program: `cargo run` of it,
/// or the program the tests' build made.
fn assets(dir: &Path, distlock: &dyn Fn() -> Result<Command, String>) -> Result<(), String> {
    let completions = dir.join("completions");
    let man = dir.join("man");
    for d in [&completions, &man] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    for (shell, file) in SHELLS {
        let path = completions.join(file);
        let out = std::fs::File::create(&path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        run(distlock()?.args(["completions", shell]).stdout(out))?;
    }
    run(distlock()?.arg("man").arg("--out").arg(&man))?;
    eprintln!(
        "xtask: completions in {}, man pages in {}",
        completions.display(),
        man.display()
    );
    Ok(())
}
