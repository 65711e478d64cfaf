//! Metric names, reported through the [`metrics`](https://docs.rs/metrics)
//! facade, with a `backend` label (`memory`, `redis`, `redlock`, `etcd`,
//! `zookeeper`) unless said otherwise. They follow the monitoring table of
//! the distributed-lock literature:
//!
//! | what to watch | distlock metric | kind, unit, labels |
//! |---|---|---|
//! | acquisition time p99 | [`ACQUISITION_TIME`] | histogram, seconds, `outcome` |
//! | contention rate | [`CONTENDED`] / [`ATTEMPTS`] | counters |
//! | hold duration p99 | [`HOLD_DURATION`] | histogram, seconds |
//! | timeout rate | [`TIMEOUTS`] / [`ATTEMPTS`] | counters |
//! | failed acquisitions | [`ERRORS`] | counter, `kind` (a [`crate::LockErrorKind`] name) |
//! | fencing-token rejects | [`FENCING_REJECTS`] | counter, `storage` (no `backend`) |
//! | lost locks | [`LOSSES`] | counter, `cause` |
//! | guards held / suspended now | [`HELD`] / [`SUSPENDED`] | gauges |
//! | renewals missing | [`LATE_RENEWALS`] | counter: a guard held past 80% of its TTL without a renewal |
//! | requests to the servers | [`REQUESTS`] | counter, `op` |
//!
//! Call [`describe`] once after installing a recorder to give every metric
//! its description and unit (the first acquisition also does it, for a
//! recorder installed before it).
//!
//! Spans: every acquisition runs in a `distlock.acquire` or
//! `distlock.try_acquire` span (fields `backend`, `name`, `mode`), every held
//! guard's keep-alive task in a `distlock.guard` span (fields `backend`,
//! `name`, `mode`, `token`; [`crate::GuardView::span`] hands it to the
//! critical section).
//!
//! ## Alerts
//!
//! With a Prometheus exporter (see `examples/prometheus.rs`, whose histogram
//! buckets fit lock latencies) and the guards' TTL known per service
//! (`$ttl` seconds below), the alerts the monitoring table asks for:
//!
//! ```text
//! # acquisition p99 above half the TTL: waiters may time out, holders are slow
//! histogram_quantile(0.99, sum by (le, backend) (rate(distlock_acquisition_time_seconds_bucket[5m]))) > 0.5 * $ttl
//! # hold p99 above 80% of the TTL: the work outgrows the lease
//! histogram_quantile(0.99, sum by (le, backend) (rate(distlock_hold_duration_seconds_bucket[5m]))) > 0.8 * $ttl
//! # contention above 30%
//! sum by (backend) (rate(distlock_contended_total[5m])) / sum by (backend) (rate(distlock_attempts_total[5m])) > 0.3
//! # timeouts above 5%
//! sum by (backend) (rate(distlock_timeouts_total[5m])) / sum by (backend) (rate(distlock_attempts_total[5m])) > 0.05
//! # ANY fencing reject: a stale holder tried to write; investigate at once
//! increase(distlock_fencing_rejects_total[5m]) > 0
//! # locks lost, renewals late
//! increase(distlock_losses_total[5m]) > 0 or increase(distlock_late_renewals_total[5m]) > 0
//! ```

use std::sync::Once;

use metrics::Unit;

/// Histogram: seconds from the start of an acquisition to its outcome.
pub const ACQUISITION_TIME: &str = "distlock_acquisition_time_seconds";
/// Counter: acquisitions started (`try_acquire` and `acquire`).
pub const ATTEMPTS: &str = "distlock_attempts_total";
/// Counter: acquisitions that found the lock held by someone else.
pub const CONTENDED: &str = "distlock_contended_total";
/// Counter: `acquire` calls that gave up when their wait elapsed.
pub const TIMEOUTS: &str = "distlock_timeouts_total";
/// Counter: acquisitions that failed with an error, label `kind`.
pub const ERRORS: &str = "distlock_acquire_errors_total";
/// Histogram: seconds a guard held its lock (to release or loss).
pub const HOLD_DURATION: &str = "distlock_hold_duration_seconds";
/// Counter: writes refused for a stale fencing token, label `storage`
/// (`memory` for [`crate::TokenFence`] and [`crate::FencedRegister`]).
pub const FENCING_REJECTS: &str = "distlock_fencing_rejects_total";
/// Counter: guards that lost their lock, label `cause`.
pub const LOSSES: &str = "distlock_losses_total";
/// Gauge: guards held now (held or suspended, not yet lost or released).
pub const HELD: &str = "distlock_guards_held";
/// Gauge: guards suspended now (contact with the server lost, within validity).
pub const SUSPENDED: &str = "distlock_guards_suspended";
/// Counter: guards held past 80% of their TTL without a renewal.
pub const LATE_RENEWALS: &str = "distlock_late_renewals_total";
/// Counter: requests a client sent to its servers, label `op` (a batch or a
/// pipeline counts once): what a backend costs its servers, per guard and
/// per waiter.
pub const REQUESTS: &str = "distlock_requests_total";

/// Registers the description and unit of every distlock metric with the
/// installed recorder. Idempotent; call it after installing a recorder.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_histogram!(
        ACQUISITION_TIME,
        Unit::Seconds,
        "Time from the start of an acquisition to its outcome (label outcome: acquired, not_acquired, error)."
    );
    describe_counter!(ATTEMPTS, Unit::Count, "Acquisitions started.");
    describe_counter!(
        CONTENDED,
        Unit::Count,
        "Acquisitions that found the lock held by someone else."
    );
    describe_counter!(
        TIMEOUTS,
        Unit::Count,
        "Acquisitions that gave up when their wait ran out."
    );
    describe_counter!(
        ERRORS,
        Unit::Count,
        "Acquisitions that failed with an error (label kind)."
    );
    describe_histogram!(
        HOLD_DURATION,
        Unit::Seconds,
        "Time a guard held its lock, to its release or loss."
    );
    describe_counter!(
        FENCING_REJECTS,
        Unit::Count,
        "Writes refused for a stale fencing token (label storage). Any is worth an alert."
    );
    describe_counter!(
        LOSSES,
        Unit::Count,
        "Guards that lost their lock (label cause)."
    );
    describe_gauge!(HELD, Unit::Count, "Guards held now.");
    describe_gauge!(
        SUSPENDED,
        Unit::Count,
        "Guards suspended now (server unreachable, within validity)."
    );
    describe_counter!(
        LATE_RENEWALS,
        Unit::Count,
        "Guards held past 80% of their TTL without a renewal."
    );
    describe_counter!(
        REQUESTS,
        Unit::Count,
        "Requests sent to the servers (label op); a batch counts once."
    );
}

/// [`describe`] once per process, from the first acquisition.
pub(crate) fn describe_once() {
    static ONCE: Once = Once::new();
    ONCE.call_once(describe);
}

/// Counts one request of a backend to its servers (see [`REQUESTS`]).
pub fn count_request(backend: &'static str, op: &'static str) {
    metrics::counter!(REQUESTS, "backend" => backend, "op" => op).increment(1);
}
