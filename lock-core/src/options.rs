//! Options for acquiring a lock.

use std::time::Duration;

use rand::Rng;

use crate::error::LockError;

/// The longest TTL accepted: one day. A longer lease is almost always a bug
/// (a crashed holder would block everyone for that long).
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The shortest TTL accepted: 10 ms. A lease's validity is its TTL minus the
/// clock-drift allowance ([`crate::backend::drift`]: 1% + 2 ms) minus the time the
/// request took; below this there is nothing left to hold the lock with.
pub const MIN_TTL: Duration = Duration::from_millis(10);

/// The longest bounded wait accepted by [`AcquireOptions::wait`]: one day.
/// [`AcquireOptions::wait_forever`] waits without a bound.
pub const MAX_WAIT: Duration = Duration::from_secs(24 * 60 * 60);

/// The wait of [`AcquireOptions::wait_forever`]: until the lock is acquired.
pub const WAIT_FOREVER: Duration = Duration::MAX;

/// The backoff between two attempts of an acquire that rides out errors
/// ([`AcquireOptions::retry_errors`]): 100 ms, doubling up to 5 s, with
/// jitter.
pub const ERROR_BACKOFF: RetryPolicy = RetryPolicy {
    min_delay: Duration::from_millis(100),
    max_delay: Duration::from_secs(5),
};

/// Delays between attempts for backends (or fallbacks) that retry, with
/// random jitter so that contenders do not retry in lock-step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The first delay.
    pub min_delay: Duration,
    /// The largest delay; delays double from `min_delay` up to this.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            min_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(200),
        }
    }
}

impl RetryPolicy {
    /// The delay before attempt `attempt` (0-based): exponential from
    /// `min_delay`, capped at `max_delay`, then "full jitter" (uniform in
    /// `[delay/2, delay]`).
    pub fn delay(&self, attempt: u32) -> Duration {
        let base = self
            .min_delay
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.max_delay)
            .max(Duration::from_micros(100));
        let nanos = base.as_nanos() as u64;
        Duration::from_nanos(rand::rng().random_range(nanos / 2..=nanos))
    }
}

/// How a guard keeps its lock alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepAlive {
    /// No renewal: the lock is held for one TTL at most, then the guard is lost
    /// (and its server state removed) unless [`crate::LockGuard::extend`] is called.
    Disabled,
    /// Renew every `interval`; `None` means every TTL/3.
    Enabled {
        /// The renewal period; `None` = TTL/3.
        interval: Option<Duration>,
    },
}

/// How to acquire a lock: lease TTL, how long to wait, retry, keep-alive and
/// the note stored with the holder.
///
/// ```
/// use std::time::Duration;
/// use lock_core::AcquireOptions;
/// let opts = AcquireOptions::new()
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_secs(2))
///     .keep_alive(true);
/// assert_eq!(opts.ttl_value(), Duration::from_secs(10));
/// assert!(opts.validate().is_ok());
/// assert!(AcquireOptions::new().ttl(Duration::ZERO).validate().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquireOptions {
    ttl: Duration,
    wait: Duration,
    retry: RetryPolicy,
    keep_alive: KeepAlive,
    retry_errors: bool,
    note: Option<String>,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(30),
            wait: Duration::from_secs(10),
            retry: RetryPolicy::default(),
            keep_alive: KeepAlive::Enabled { interval: None },
            retry_errors: false,
            note: None,
        }
    }
}

impl AcquireOptions {
    /// Defaults: TTL 30 s, wait 10 s, keep-alive every TTL/3.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lease TTL: how long the lock outlives its holder if the holder
    /// stops renewing (crash, pause, partition). Backends with coarser leases
    /// round it up (etcd: whole seconds; ZooKeeper: the session timeout).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long [`crate::DistributedLock::acquire`] waits for a held lock
    /// before returning a [`crate::LockErrorKind::Timeout`] error. Zero means
    /// one attempt; at most [`MAX_WAIT`], or [`WAIT_FOREVER`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Waits until the lock is acquired, however long that takes (a hot
    /// standby). Such an acquire ends only with the lock, an error, or when
    /// its future is dropped; with [`retry_errors`](Self::retry_errors) it
    /// also rides out outages of any length.
    pub fn wait_forever(self) -> Self {
        self.wait(WAIT_FOREVER)
    }

    /// Whether the wait has no bound ([`wait_forever`](Self::wait_forever)).
    pub fn waits_forever(&self) -> bool {
        self.wait == WAIT_FOREVER
    }

    /// Rides out retryable errors while waiting (off by default): an
    /// acquire whose attempt fails with an error that
    /// [`crate::LockError::is_retryable`] (the server restarting, a
    /// failover, a network blip) tries again after [`ERROR_BACKOFF`], until
    /// it gets the lock or its wait runs out; then it returns the last
    /// error (or the timeout, if the lock was last seen held). A new
    /// attempt queues anew: a FIFO backend serves it after those that
    /// waited through the outage. `try_acquire` is never retried.
    pub fn retry_errors(mut self, on: bool) -> Self {
        self.retry_errors = on;
        self
    }

    /// Whether retryable errors are ridden out ([`retry_errors`](Self::retry_errors)).
    pub fn retry_errors_value(&self) -> bool {
        self.retry_errors
    }

    /// A note stored with the holder's description (see [`crate::Holder`]:
    /// the host name and process id are always stored), which
    /// [`crate::DistributedLock::inspect`] and `list` show to anyone looking
    /// at the lock: what the holder is doing, a job id, a user name. At most
    /// [`crate::MAX_NOTE_LEN`] bytes of one line of text; a longer note or
    /// one with a control character (a line break) fails the acquire with
    /// an `InvalidArgument` error. Stored in clear text on the server: it is
    /// no place for a secret.
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// The configured note ([`note`](Self::note)).
    pub fn note_value(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// The retry delays used where a backend has to retry.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Turns keep-alive on (every TTL/3) or off.
    pub fn keep_alive(mut self, on: bool) -> Self {
        self.keep_alive = if on {
            KeepAlive::Enabled { interval: None }
        } else {
            KeepAlive::Disabled
        };
        self
    }

    /// Turns keep-alive on with an explicit renewal interval (must be below the TTL).
    pub fn keep_alive_every(mut self, interval: Duration) -> Self {
        self.keep_alive = KeepAlive::Enabled {
            interval: Some(interval),
        };
        self
    }

    /// The configured TTL.
    pub fn ttl_value(&self) -> Duration {
        self.ttl
    }

    /// The configured wait.
    pub fn wait_value(&self) -> Duration {
        self.wait
    }

    /// The configured retry policy.
    pub fn retry_value(&self) -> RetryPolicy {
        self.retry
    }

    /// The configured keep-alive.
    pub fn keep_alive_value(&self) -> KeepAlive {
        self.keep_alive
    }

    /// The renewal interval, if keep-alive is on.
    pub fn keep_alive_interval(&self) -> Option<Duration> {
        match self.keep_alive {
            KeepAlive::Disabled => None,
            KeepAlive::Enabled { interval } => Some(interval.unwrap_or(self.ttl / 3)),
        }
    }

    /// Checks the options: TTL in [`MIN_TTL`]` ..= `[`MAX_TTL`], wait at most
    /// [`MAX_WAIT`] (or [`WAIT_FOREVER`]), keep-alive interval positive and
    /// below the TTL, retry delays ordered, the note at most
    /// [`crate::MAX_NOTE_LEN`] bytes of one line.
    pub fn validate(&self) -> Result<(), LockError> {
        check_ttl(self.ttl)?;
        if let Some(note) = &self.note {
            crate::holder::check_note(note)?;
        }
        if self.wait > MAX_WAIT && !self.waits_forever() {
            return Err(LockError::invalid(format!(
                "wait {:?} is longer than the maximum {:?}",
                self.wait, MAX_WAIT
            )));
        }
        if let KeepAlive::Enabled {
            interval: Some(interval),
        } = self.keep_alive
        {
            if interval.is_zero() || interval >= self.ttl {
                return Err(LockError::invalid(format!(
                    "keep-alive interval {interval:?} must be positive and below the ttl {:?}",
                    self.ttl
                )));
            }
        }
        if self.retry.min_delay > self.retry.max_delay {
            return Err(LockError::invalid("retry min_delay is above max_delay"));
        }
        if self.retry.max_delay > MAX_WAIT {
            return Err(LockError::invalid(format!(
                "retry max_delay {:?} is longer than the maximum wait {MAX_WAIT:?}",
                self.retry.max_delay
            )));
        }
        Ok(())
    }
}

/// Checks a configured duration: an `InvalidArgument` error naming `what`
/// unless it lies in `min ..= max`. Backends validate their configuration
/// with it, so that no configured duration can panic later in `Instant`
/// arithmetic or make a call wait for days.
pub fn check_duration(
    what: &str,
    d: Duration,
    min: Duration,
    max: Duration,
) -> Result<(), LockError> {
    if d < min {
        return Err(LockError::invalid(format!(
            "{what} {d:?} is too short; the minimum is {min:?}"
        )));
    }
    if d > max {
        return Err(LockError::invalid(format!(
            "{what} {d:?} is too long; the maximum is {max:?}"
        )));
    }
    Ok(())
}

/// Checks a lease TTL: [`MIN_TTL`]` ..= `[`MAX_TTL`], with an error that says the bound.
pub(crate) fn check_ttl(ttl: Duration) -> Result<(), LockError> {
    if ttl < MIN_TTL {
        return Err(LockError::invalid(format!(
            "ttl {ttl:?} is too short to leave any validity after the clock-drift allowance; the minimum is {MIN_TTL:?}"
        )));
    }
    if ttl > MAX_TTL {
        return Err(LockError::invalid(format!(
            "ttl {ttl:?} is longer than the maximum {MAX_TTL:?}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_zero_and_huge_ttl() {
        assert!(AcquireOptions::new()
            .ttl(Duration::ZERO)
            .validate()
            .is_err());
        let msg = AcquireOptions::new()
            .ttl(Duration::from_millis(3))
            .validate()
            .unwrap_err()
            .to_string();
        assert!(msg.contains("minimum is 10ms"), "{msg}");
        assert!(AcquireOptions::new().ttl(MIN_TTL).validate().is_ok());
        assert!(AcquireOptions::new()
            .ttl(MAX_TTL + Duration::from_secs(1))
            .validate()
            .is_err());
        assert!(AcquireOptions::new()
            .ttl(Duration::from_secs(1))
            .keep_alive_every(Duration::from_secs(2))
            .validate()
            .is_err());
    }

    #[test]
    fn a_wait_is_bounded_by_a_day_unless_it_is_forever() {
        let day = AcquireOptions::new().wait(MAX_WAIT);
        assert!(day.validate().is_ok() && !day.waits_forever());
        let more = AcquireOptions::new().wait(MAX_WAIT + Duration::from_secs(1));
        assert!(more.validate().is_err());
        let forever = AcquireOptions::new().wait_forever();
        assert!(forever.validate().is_ok() && forever.waits_forever());
        assert!(!forever.retry_errors_value());
        assert!(forever.retry_errors(true).retry_errors_value());
        for attempt in 0..40 {
            assert!(ERROR_BACKOFF.delay(attempt) <= ERROR_BACKOFF.max_delay);
        }
    }

    #[test]
    fn retry_delays_grow_and_stay_bounded() {
        let p = RetryPolicy::default();
        for attempt in 0..40 {
            let d = p.delay(attempt);
            assert!(d <= p.max_delay, "{d:?}");
        }
        assert!(p.delay(0) <= p.min_delay);
    }
}
