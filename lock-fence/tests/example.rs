//! The `fenced_debits` example runs end to end: workers in separate
//! processes, one stopped past its lease, its late write refused, no debit lost.

use std::path::PathBuf;
use std::process::Command;

/// `cargo test` builds the examples next to the test binaries' `deps/` dir.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    profile_dir.join("examples").join(name)
}

#[test]
fn paused_worker_is_refused_and_no_debit_is_lost() {
    let bin = example("fenced_debits");
    assert!(bin.exists(), "{} not built", bin.display());
    let out = Command::new(&bin).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("REFUSED debit"), "{stdout}");
    assert!(stdout.contains("no debit lost"), "{stdout}");
}
