//! The body shared by the backend examples: `with_lock` around a fenced write.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use distlock::{
    AcquireOptions, DistributedLock, DistributedLockExt, FencedRegister, LockError, LockName,
};

/// The URL from the first argument, else `DISTLOCK_URL`, else `default`.
pub fn url_from_args(default: &str) -> String {
    std::env::args()
        .nth(1)
        .or_else(|| std::env::var("DISTLOCK_URL").ok())
        .unwrap_or_else(|| default.to_string())
}

/// Connects to `url`, then two workers take turns on one lock and write to a
/// fenced resource; finally a stale holder's write is refused.
pub async fn run(url: &str) -> ExitCode {
    match demo(url).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("example failed: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn demo(url: &str) -> Result<(), LockError> {
    let locks: Arc<dyn DistributedLock> = distlock::connect(url).await?;
    let caps = locks.capabilities();
    println!(
        "connected to {url}: backend {}, fencing {:?}, fifo {}",
        caps.backend, caps.fencing, caps.fifo
    );

    // Stands for the protected resource (a database row, an object store):
    // it remembers the highest fencing token it accepted.
    let account = Arc::new(FencedRegister::new(0i64));
    let name = LockName::new(format!("examples/account-{}", std::process::id()))?;
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(10));

    let mut tokens = Vec::new();
    for worker in ["worker-a", "worker-b"] {
        let account = account.clone();
        let token = locks
            .with_lock(&name, &opts, |guard| async move {
                match guard.fencing_token() {
                    Some(token) => {
                        // A fenced write: applied only if no later holder wrote first.
                        let written = account.write(token, |balance| *balance += 50);
                        println!("{worker}: holds {} with token {token}; fenced write {:?}", guard.name(), written.is_ok());
                        Some(token)
                    }
                    None => {
                        println!(
                            "{worker}: holds {} without a fencing token: this backend cannot fence, \
                             so use it for efficiency, never for correctness",
                            guard.name()
                        );
                        None
                    }
                }
            })
            .await?;
        tokens.extend(token);
    }

    if let [first, .., last] = tokens.as_slice() {
        assert!(last > first, "fencing tokens increase with every grant");
        // A holder that paused past its lease and wakes up with the old token:
        match account.write(*first, |balance| *balance -= 1000) {
            Ok(()) => println!("stale write accepted (unexpected!)"),
            Err(stale) => println!("stale write refused: {stale}"),
        }
        println!(
            "balance {} (highest token {:?})",
            account.read(),
            account.highest()
        );
    }
    Ok(())
}
