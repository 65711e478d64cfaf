//! The signals distlock forwards to CMD, and that interrupt it before CMD starts.

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::exit_code;
use crate::report::fail;

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT, caught from installation on.
pub struct Signals {
    streams: Vec<(i32, Signal)>,
}

impl Signals {
    /// Catches the signals; an exit status (after a message) if that fails.
    pub fn install() -> Result<Signals, i32> {
        let mut streams = Vec::new();
        for (num, kind) in [
            (libc::SIGINT, SignalKind::interrupt()),
            (libc::SIGTERM, SignalKind::terminate()),
            (libc::SIGHUP, SignalKind::hangup()),
            (libc::SIGQUIT, SignalKind::quit()),
        ] {
            let stream = signal(kind).map_err(|err| {
                fail(
                    exit_code::SOFTWARE,
                    format!("cannot install signal handlers: {err}"),
                )
            })?;
            streams.push((num, stream));
        }
        Ok(Signals { streams })
    }

    /// The next signal received.
    pub async fn recv(&mut self) -> i32 {
        let waits = self.streams.iter_mut().map(|(num, s)| {
            let num = *num;
            Box::pin(async move {
                s.recv().await;
                num
            })
        });
        futures::future::select_all(waits).await.0
    }

    /// The message and exit status (128 + N) of an interruption by signal
    /// `sig` while `doing` something before CMD started.
    pub fn interrupted(sig: i32, doing: &str) -> i32 {
        fail(
            exit_code::SIGNAL_BASE + sig,
            format!("interrupted by signal {sig} while {doing}"),
        )
    }
}
