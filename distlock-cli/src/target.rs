//! What a command works on: the lock service (its URL from the command line,
//! a file or the environment) and the lock names.

use std::path::Path;
use std::sync::Arc;

use distlock::{LockName, LockService, LockUrl};

use crate::args::Connection;
use crate::exit_code;
use crate::report::{fail, fail_error, warn};
use crate::signals::Signals;

/// Where each of `--url` and `--url-file` came from: `true` = the command
/// line, `false` = the environment (or absent).
#[derive(Clone, Copy, Debug, Default)]
pub struct OnCommandLine {
    /// `--url` was given on the command line.
    pub url: bool,
    /// `--url-file` was given on the command line.
    pub url_file: bool,
}

/// The lock service URL: from `--url` or `--url-file`, else `DISTLOCK_URL`
/// or `DISTLOCK_URL_FILE`. The command line wins over the environment; two
/// sources at the same level are a usage error. The URL text is never
/// printed: only [`LockUrl`]'s redacted form is.
pub fn lock_url(conn: &Connection, cli: OnCommandLine) -> Result<LockUrl, i32> {
    let use_url = match (&conn.url, &conn.url_file) {
        (Some(_), Some(_)) if cli.url == cli.url_file => {
            let both = if cli.url {
                "--url and --url-file are both given"
            } else {
                "DISTLOCK_URL and DISTLOCK_URL_FILE are both set"
            };
            return Err(fail(
                exit_code::USAGE,
                format!("{both}: give the lock service URL once"),
            ));
        }
        (Some(_), Some(_)) => cli.url,
        (Some(_), None) => true,
        (None, Some(_)) => false,
        (None, None) => return Err(fail(
            exit_code::USAGE,
            "no lock service: give --url or --url-file (or set DISTLOCK_URL or DISTLOCK_URL_FILE)",
        )),
    };
    let (text, from) = match (&conn.url, &conn.url_file) {
        (Some(url), _) if use_url => (url.clone(), None),
        (_, Some(path)) => (read_url_file(path)?, Some(path)),
        _ => unreachable!("a source was chosen above"),
    };
    let url = LockUrl::parse(&text).map_err(|e| match from {
        Some(path) => fail(
            exit_code::USAGE,
            format!("{} (in {})", e.message(), path.display()),
        ),
        None => fail(exit_code::USAGE, e.message()),
    })?;
    if use_url && cli.url && url.has_password() {
        warn("the URL on the command line holds a password, which every user of this machine can read (ps); use --url-file or DISTLOCK_URL");
    }
    Ok(url)
}

/// The URL held in `path`, without surrounding whitespace.
fn read_url_file(path: &Path) -> Result<String, i32> {
    let text = std::fs::read_to_string(path).map_err(|err| {
        fail(
            exit_code::USAGE,
            format!("cannot read the URL file {}: {err}", path.display()),
        )
    })?;
    Ok(text.trim().to_string())
}

/// Parses one lock name (exit 64 on a bad one).
pub fn lock_name(name: &str) -> Result<LockName, i32> {
    LockName::new(name).map_err(|e| {
        fail(
            exit_code::USAGE,
            format!("invalid lock name {name:?}: {}", e.message()),
        )
    })
}

/// A connected lock service, with the signals caught from before connecting.
pub struct Opened {
    /// The URL it was reached at (printed only redacted).
    pub url: LockUrl,
    /// The client.
    pub locks: Arc<dyn LockService>,
    /// The signals that interrupt distlock (or go to CMD).
    pub signals: Signals,
}

/// Finds the URL ([`lock_url`]), catches the signals and connects, giving
/// up at once on a signal: `Err(exit status)` after a one-line message.
pub async fn open(conn: &Connection, cli: OnCommandLine) -> Result<Opened, i32> {
    let url = lock_url(conn, cli)?;
    let mut signals = Signals::install()?;
    let locks = tokio::select! {
        result = url.connect() => result.map_err(|e| fail_error(&format!("cannot use {url}"), &e))?,
        sig = signals.recv() => return Err(Signals::interrupted(sig, "connecting")),
    };
    Ok(Opened {
        url,
        locks,
        signals,
    })
}
