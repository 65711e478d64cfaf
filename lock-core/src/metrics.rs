//! Metric names, reported through the [`metrics`] facade with a `backend`
//! label. They follow the seed documents' monitoring table:
//!
//! | seed metric | distlock metric | kind |
//! |---|---|---|
//! | `lock_acquisition_time_p99` | [`ACQUISITION_TIME`] | histogram, seconds, label `outcome` |
//! | `lock_contention_rate` | [`CONTENDED`] / [`ATTEMPTS`] | counters |
//! | `lock_hold_duration_p99` | [`HOLD_DURATION`] | histogram, seconds |
//! | `lock_timeout_rate` | [`TIMEOUTS`] / [`ATTEMPTS`] | counters |
//! | `fencing_token_reject_rate` | [`FENCING_REJECTS`] | counter (no `backend` label) |
//! | (lost locks) | [`LOSSES`] | counter, label `cause` |
//!
//! Spans: every acquisition runs in a `distlock.acquire` or
//! `distlock.try_acquire` span with fields `backend` and `name`.

/// Histogram: seconds from the start of an acquisition to its outcome.
pub const ACQUISITION_TIME: &str = "distlock_acquisition_time_seconds";
/// Counter: acquisitions started (`try_acquire` and `acquire`).
pub const ATTEMPTS: &str = "distlock_attempts_total";
/// Counter: acquisitions that found the lock held by someone else.
pub const CONTENDED: &str = "distlock_contended_total";
/// Counter: `acquire` calls that gave up when their wait elapsed.
pub const TIMEOUTS: &str = "distlock_timeouts_total";
/// Histogram: seconds a guard held its lock (to release or loss).
pub const HOLD_DURATION: &str = "distlock_hold_duration_seconds";
/// Counter: writes refused by a [`crate::TokenFence`] or [`crate::FencedRegister`].
pub const FENCING_REJECTS: &str = "distlock_fencing_rejects_total";
/// Counter: guards that lost their lock, by cause.
pub const LOSSES: &str = "distlock_losses_total";
