//! The nemesis's bounded pass: on every backend, random faults from a seed
//! for `DISTLOCK_NEMESIS_SECS` (default 60) seconds against real servers,
//! and the checker must find nothing (no two holders, tokens in order, no
//! stale fenced write accepted, no name left blocked, no call past its
//! bound). The seed is `DISTLOCK_NEMESIS_SEED` when set, a new one each run
//! otherwise; a failure prints it and the command that replays it.

use std::process::ExitCode;
use std::time::Duration;

use libtest_mimic::{Arguments, Trial};

use lock_safety::fixture::Kind;
use lock_safety::nemesis::{run, Config};

fn seconds() -> u64 {
    std::env::var("DISTLOCK_NEMESIS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60)
}

fn seed() -> u64 {
    std::env::var("DISTLOCK_NEMESIS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| u64::from(rand::random::<u32>()))
}

fn finds_nothing(kind: Kind) {
    let config = Config::new(kind, seed(), Duration::from_secs(seconds()));
    println!("{}", config.schedule());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let outcome = runtime.block_on(run(config));
    println!("{}", outcome.summary());
    assert!(
        outcome.clean(),
        "{}\n{}left blocked: {:?}\npast their bound: {:?}\nreplay: cargo xtask nemesis --backend {} --seed {} --runs 1 --run-seconds {}",
        outcome.summary(),
        outcome.details,
        outcome.blocked,
        outcome.hung,
        kind.name(),
        config.seed,
        seconds()
    );
}

/// Every backend's pass at once (with `--test-threads`, that many): a
/// pass checks what was granted and accepted, and each call against the
/// bound of its own timeouts, and spends most of its time waiting on the
/// faults it injects. On Redis: one server under every fault it can take;
/// Redlock: five nodes, restarted no sooner than the longest lease; etcd:
/// a 3-member cluster; ZooKeeper: a 3-server ensemble with proxied quorum
/// links.
fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    args.test_threads = args.test_threads.or(Some(Kind::ALL.len()));
    let trials = Kind::ALL
        .into_iter()
        .map(|kind| {
            Trial::test(
                format!("{}_nemesis_finds_nothing", kind.name()),
                move || {
                    finds_nothing(kind);
                    Ok(())
                },
            )
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}
