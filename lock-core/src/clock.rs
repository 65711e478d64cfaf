//! Time the machine spent suspended.
//!
//! Validity is kept on the monotonic clock (`tokio::time::Instant`,
//! `CLOCK_MONOTONIC` on Linux), which stops while the machine is suspended
//! (a laptop's lid closed, a VM paused by its host). The server's lease runs
//! on regardless, so after a resume a guard must not trust a validity that
//! was computed before the suspension. On Linux, `CLOCK_BOOTTIME` counts the
//! suspended time too: the growth of `BOOTTIME - MONOTONIC` is exactly the
//! time spent suspended, and everything that holds a validity subtracts the
//! growth since it computed it ([`SuspendMark`]).
//!
//! One thread per process ([`resumes`]) samples the difference every
//! [`SAMPLE_PERIOD`] and announces each resume, so that keepers whose timers
//! (on the stopped clock) would fire late react at once. Elsewhere than on
//! Linux the suspended time reads as zero.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;

/// How often the resume detector samples the clocks.
pub(crate) const SAMPLE_PERIOD: Duration = Duration::from_millis(500);

/// Growth of the suspended time that counts as a resume (below it: noise
/// between the two clock reads).
const RESUME_THRESHOLD: Duration = Duration::from_millis(20);

/// Suspended time injected by unit tests (nanoseconds).
static SIMULATED_NS: AtomicU64 = AtomicU64::new(0);

#[cfg(target_os = "linux")]
fn read(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; both clock ids exist on
    // every Linux this crate supports.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// Time this machine has really spent suspended since it booted.
fn real_suspended() -> Duration {
    #[cfg(target_os = "linux")]
    {
        let mono = read(libc::CLOCK_MONOTONIC);
        let boot = read(libc::CLOCK_BOOTTIME);
        boot.saturating_sub(mono)
    }
    #[cfg(not(target_os = "linux"))]
    Duration::ZERO
}

/// Total time this machine has spent suspended since it booted.
pub(crate) fn suspended_total() -> Duration {
    real_suspended() + Duration::from_nanos(SIMULATED_NS.load(Ordering::Relaxed))
}

/// Unit tests that hold guards share this; a test that simulates a
/// suspension holds it alone. A simulated suspension is process-wide: a
/// guard that another test acquires meanwhile counts it against its
/// validity (its grant may even arrive already expired).
#[cfg(test)]
pub(crate) static SUSPENSIONS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Pretends the machine was just suspended for `d` (unit tests only; the
/// caller holds [`SUSPENSIONS`] for writing).
#[cfg(test)]
pub(crate) fn simulate_suspend(d: Duration) {
    SIMULATED_NS.fetch_add(
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    if DETECTOR.get().is_some() {
        crate::resume::machine_resumed();
    }
}

/// The suspended time at one moment: whatever holds a validity computed at
/// that moment subtracts [`SuspendMark::since`] from it before trusting it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SuspendMark(Duration);

impl SuspendMark {
    /// The mark now.
    pub(crate) fn now() -> Self {
        Self(suspended_total())
    }

    /// Time spent suspended since the mark; zero below [`RESUME_THRESHOLD`]
    /// (the two clocks are read one after the other, so their difference
    /// jitters by nanoseconds while nothing is suspended).
    pub(crate) fn since(self) -> Duration {
        let lost = suspended_total().saturating_sub(self.0);
        if lost < RESUME_THRESHOLD {
            Duration::ZERO
        } else {
            lost
        }
    }

    /// Nanoseconds, for an atomic.
    pub(crate) fn as_nanos(self) -> u64 {
        u64::try_from(self.0.as_nanos()).unwrap_or(u64::MAX)
    }

    /// From [`SuspendMark::as_nanos`].
    pub(crate) fn from_nanos(n: u64) -> Self {
        Self(Duration::from_nanos(n))
    }
}

/// `at`, moved earlier by the time spent suspended since `mark`.
pub(crate) fn corrected(at: Instant, mark: SuspendMark) -> Instant {
    let lost = mark.since();
    if lost.is_zero() {
        return at;
    }
    at.checked_sub(lost).unwrap_or_else(Instant::now)
}

static DETECTOR: OnceLock<()> = OnceLock::new();

/// Starts the resume detector, once per process (one sampling thread): after
/// every resume from a suspension it tells the live guards' keepers
/// ([`crate::resume::machine_resumed`]).
pub(crate) fn watch_resumes() {
    DETECTOR.get_or_init(|| {
        let spawned = std::thread::Builder::new()
            .name("distlock-resume".into())
            .spawn(detect);
        if let Err(err) = spawned {
            tracing::warn!(error = %err, "distlock: cannot start the resume detector; a guard notices a suspension at its next state read or renewal");
        }
    });
}

fn detect() {
    let mut last = suspended_total();
    loop {
        std::thread::sleep(SAMPLE_PERIOD);
        let now = suspended_total();
        if now.saturating_sub(last) >= RESUME_THRESHOLD {
            tracing::info!(suspended = ?(now - last), "distlock: the machine was suspended; guards re-check with their servers");
            crate::resume::machine_resumed();
        }
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suspended_total_is_stable_while_running() {
        let a = real_suspended();
        std::thread::sleep(Duration::from_millis(30));
        let b = real_suspended();
        assert!(b.saturating_sub(a) < RESUME_THRESHOLD, "{a:?} -> {b:?}");
    }
}
