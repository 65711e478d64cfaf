//! The one acquire path of every primitive ([`grant`]): validation, the
//! capability check, the deadline, metrics and tracing, and the start of the
//! guard.

use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::{Lease, LeaseRequest, LockBackend};
use crate::capabilities::Capabilities;
use crate::clock::{self, SuspendMark};
use crate::error::{LockError, LockErrorKind, Result};
use crate::guard::{Grant, LockGuard};
use crate::holder::Holder;
use crate::metrics as m;
use crate::mode::LockMode;
use crate::name::LockName;
use crate::options::{AcquireOptions, ERROR_BACKOFF};

/// Whether a backend with `caps` offers `mode`; the `Unsupported` error if not.
fn check_supported(caps: &Capabilities, mode: LockMode) -> Result<()> {
    let (offered, what) = match mode {
        LockMode::Exclusive => (true, ""),
        LockMode::Read | LockMode::Write => (caps.read_write, "read-write locks"),
        LockMode::Permit { .. } => (caps.semaphore, "semaphores"),
        LockMode::Leader => (caps.election, "leader elections"),
    };
    if offered {
        return Ok(());
    }
    Err(LockError::new(
        LockErrorKind::Unsupported,
        format!(
            "the {} backend has no {what}: it cannot keep them honest (see its capabilities)",
            caps.backend
        ),
    ))
}

/// What a candidate asks for besides a lease of [`LockMode::Leader`]: the
/// value it publishes and its lock-delay.
pub(crate) struct Proposal<'a> {
    pub(crate) value: &'a str,
    pub(crate) lock_delay: Duration,
}

/// The one acquire path of every primitive: `wait` = whether to wait up to
/// `opts.wait` (acquire) or try once (try_acquire). `Ok(None)` = held by
/// others (after the wait, for `acquire`).
pub(crate) async fn grant<B: LockBackend + ?Sized>(
    backend: &B,
    name: &LockName,
    opts: &AcquireOptions,
    mode: LockMode,
    wait: bool,
) -> Result<Option<LockGuard>> {
    grant_as(backend, name, opts, mode, wait, None).await
}

/// [`grant`], for a candidate of an election with its [`Proposal`].
pub(crate) async fn grant_as<B: LockBackend + ?Sized>(
    backend: &B,
    name: &LockName,
    opts: &AcquireOptions,
    mode: LockMode,
    wait: bool,
    proposal: Option<Proposal<'_>>,
) -> Result<Option<LockGuard>> {
    m::describe_once();
    let caps = backend.backend_capabilities();
    let outcome = grant_inner(backend, &caps, name, opts, mode, wait, proposal).await;
    if let Err(err) = &outcome {
        metrics::counter!(m::ERRORS, "backend" => caps.backend, "kind" => err.kind().as_str())
            .increment(1);
    }
    outcome
}

async fn grant_inner<B: LockBackend + ?Sized>(
    backend: &B,
    caps: &Capabilities,
    name: &LockName,
    opts: &AcquireOptions,
    mode: LockMode,
    wait: bool,
    proposal: Option<Proposal<'_>>,
) -> Result<Option<LockGuard>> {
    opts.validate()?;
    check_supported(caps, mode)?;
    let mut holder = Holder::this_process();
    if let Some(note) = opts.note_value() {
        holder = holder.with_note(note);
    }
    let req = LeaseRequest::new(name.clone(), opts.ttl_value())?
        .with_retry(opts.retry_value())
        .with_mode(mode)?
        .with_holder(holder);
    let req = match proposal {
        Some(p) => req.with_value(p.value)?.with_lock_delay(p.lock_delay)?,
        None => req,
    };
    let backend_name = caps.backend;
    let started = Instant::now();
    let mark = SuspendMark::now();
    let result = if wait {
        let span = tracing::debug_span!("distlock.acquire", backend = backend_name, name = %name, mode = mode.as_str());
        let deadline = crate::backend::add_saturating(started, opts.wait_value());
        wait_for(backend, &req, deadline, opts.retry_errors_value())
            .instrument(span)
            .await
    } else {
        let span = tracing::debug_span!("distlock.try_acquire", backend = backend_name, name = %name, mode = mode.as_str());
        LockBackend::try_lock(backend, &req).instrument(span).await
    };
    record_attempt(
        backend_name,
        started,
        &result.as_ref().map(|o| o.as_ref().map(|l| l.contended)),
    );
    let Some(lease) = result? else {
        if wait {
            metrics::counter!(m::TIMEOUTS, "backend" => backend_name).increment(1);
        }
        return Ok(None);
    };
    let grant = Grant {
        name: name.clone(),
        mode,
        ttl: opts.ttl_value(),
        keep_alive: opts.keep_alive_value(),
        backend: backend_name,
        mark,
    };
    let guard = admit(lease, grant)?;
    // The guard's keeper becomes a task of its own once something wakes it,
    // and must then get to run: a caller that takes locks in a loop without
    // ever waiting (an in-process lock, a remote one whose replies are
    // already in) spends a unit of its cooperative budget on each grant, so
    // that it yields often enough for the keepers it starts to run and end.
    tokio::task::coop::consume_budget().await;
    Ok(Some(guard))
}

/// The waiting attempt of `acquire` until `deadline`; with `retry_errors`,
/// an attempt that fails with a retryable error (the server restarting, a
/// failover) is made again after [`ERROR_BACKOFF`] while the deadline has
/// not passed, and the last error is returned if it has.
async fn wait_for<B: LockBackend + ?Sized>(
    backend: &B,
    req: &LeaseRequest,
    deadline: Instant,
    retry_errors: bool,
) -> Result<Option<Lease>> {
    let mut failures = 0u32;
    loop {
        let err = match LockBackend::lock(backend, req, deadline).await {
            Err(err) if retry_errors && err.is_retryable() => err,
            done => return done,
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(err);
        }
        let delay = ERROR_BACKOFF.delay(failures).min(deadline - now);
        failures = failures.saturating_add(1);
        tracing::warn!(error = %err, retry_in = ?delay, "distlock: acquire failed; trying again");
        tokio::time::sleep(delay).await;
    }
}

/// `acquire`'s answer: a timeout error when the wait ran out.
pub(crate) fn granted(
    name: &LockName,
    opts: &AcquireOptions,
    outcome: Result<Option<LockGuard>>,
) -> Result<LockGuard> {
    outcome?.ok_or_else(|| {
        LockError::new(
            LockErrorKind::Timeout,
            format!(
                "lock {name} is held by another owner; gave up after {:?}",
                opts.wait_value()
            ),
        )
    })
}

/// Starts the guard of a granted lease, unless the lease is already past its
/// validity (a reply slower than the TTL): then it is released in the
/// background and the caller gets a retryable `Unavailable` error, never a
/// guard that is born lost.
pub(crate) fn admit(lease: Lease, grant: Grant) -> Result<LockGuard> {
    let until = lease
        .session_until
        .map_or(lease.valid_until, |s| s.min(lease.valid_until));
    if clock::corrected(until, grant.mark) <= Instant::now() {
        let handle = lease.handle;
        tokio::spawn(async move {
            let _ = handle.release().await;
        });
        return Err(LockError::unavailable(format!(
            "lock {}: the grant arrived after its validity had passed (the request took longer than the ttl {:?} allows); released it",
            grant.name, grant.ttl
        )));
    }
    Ok(LockGuard::start(lease, grant))
}

fn record_attempt(
    backend: &'static str,
    started: Instant,
    outcome: &std::result::Result<Option<bool>, &LockError>,
) {
    let label = match outcome {
        Ok(Some(_)) => "acquired",
        Ok(None) => "not_acquired",
        Err(_) => "error",
    };
    metrics::counter!(m::ATTEMPTS, "backend" => backend).increment(1);
    if matches!(outcome, Ok(None) | Ok(Some(true))) {
        metrics::counter!(m::CONTENDED, "backend" => backend).increment(1);
    }
    metrics::histogram!(m::ACQUISITION_TIME, "backend" => backend, "outcome" => label)
        .record(started.elapsed().as_secs_f64());
}
