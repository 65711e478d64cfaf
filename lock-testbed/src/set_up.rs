//! Set-up that a busy machine may slow down: a test's clients connecting
//! to healthy servers.

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

/// How long a test's set-up connect to healthy servers may take in all.
///
/// A client is given the short timeouts a test is about; the connect
/// itself is set-up. On a busy machine a connect within those timeouts can
/// fail (mutual TLS to five Redlock nodes within 500 ms did, a ZooKeeper
/// session within 2 s did), so [`retry_set_up`] tries again until this much
/// time has passed. Servers that never answer still fail every try.
pub const SET_UP_CONNECT: Duration = Duration::from_secs(15);

/// Runs `attempt` until it succeeds, fails with an error that `retryable`
/// rejects, or [`SET_UP_CONNECT`] has passed (then its last error is
/// returned). Each retried failure is printed with `what`.
pub async fn retry_set_up<T, E, F, Fut>(
    what: &str,
    retryable: impl Fn(&E) -> bool,
    mut attempt: F,
) -> Result<T, E>
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let until = Instant::now() + SET_UP_CONNECT;
    loop {
        match attempt().await {
            Err(e) if retryable(&e) && Instant::now() < until => {
                eprintln!("{what} failed, trying again: {e}");
            }
            done => return done,
        }
    }
}
