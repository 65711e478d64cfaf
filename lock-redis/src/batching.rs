//! How a client batches the renewals of its guards (see
//! [`kit::renew`](crate::kit::renew) for how the batcher works).

use std::time::Duration;

use lock_core::{LockError, Result};

/// The default [`RenewBatching::window`]: 50 ms: at most 20 renewal
/// requests per second per connection, whatever the number of guards.
pub const DEFAULT_RENEW_WINDOW: Duration = Duration::from_millis(50);
/// The default [`RenewBatching::max_keys`]: 256 renewals per request (a few
/// hundred microseconds of script time on the server).
pub const DEFAULT_RENEW_MAX_KEYS: usize = 256;
/// The longest [`RenewBatching::window`] accepted: 1 s.
pub const MAX_RENEW_WINDOW: Duration = Duration::from_secs(1);
/// The largest [`RenewBatching::max_keys`] accepted: 10,000.
pub const MAX_RENEW_KEYS: usize = 10_000;

/// How a client batches its renewals (see [`kit::renew`](crate::kit::renew)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RenewBatching {
    /// The shortest time between two renewal requests of a connection: a
    /// renewal that comes sooner after the last request waits for the next
    /// one, with the others that come meanwhile, but never longer than 1/50
    /// of its TTL (so that no renewal is late: keep-alive renews with two
    /// thirds of the TTL left). A renewal on a connection quiet for a window
    /// goes at once. `Duration::ZERO` sends every renewal on its own, at
    /// once: one request per guard per renewal (per node, on Redlock),
    /// which many guards can turn into more than the servers answer in
    /// time (10,000 Redlock guards renewed every second are 50,000
    /// requests a second; on a 2-core machine their renewals missed the
    /// 50 ms node timeout and the guards were lost). Default:
    /// [`DEFAULT_RENEW_WINDOW`] (50 ms); at most [`MAX_RENEW_WINDOW`].
    pub window: Duration,
    /// The most renewals one request carries; a larger batch is split.
    /// Bounds how long one script runs on the server. Default:
    /// [`DEFAULT_RENEW_MAX_KEYS`] (256); 1 ..= [`MAX_RENEW_KEYS`].
    pub max_keys: usize,
}

impl Default for RenewBatching {
    fn default() -> Self {
        Self {
            window: DEFAULT_RENEW_WINDOW,
            max_keys: DEFAULT_RENEW_MAX_KEYS,
        }
    }
}

impl RenewBatching {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`RenewBatching::window`].
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Sets [`RenewBatching::max_keys`].
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// Checks the bounds: `window` at most [`MAX_RENEW_WINDOW`], `max_keys`
    /// in 1 ..= [`MAX_RENEW_KEYS`].
    pub fn validate(&self) -> Result<()> {
        if self.window > MAX_RENEW_WINDOW {
            return Err(LockError::invalid(format!(
                "renew batching window {:?} is above the limit of {MAX_RENEW_WINDOW:?}",
                self.window
            )));
        }
        if self.max_keys == 0 || self.max_keys > MAX_RENEW_KEYS {
            return Err(LockError::invalid(format!(
                "renew batching max_keys must be 1 ..= {MAX_RENEW_KEYS}, not {}",
                self.max_keys
            )));
        }
        Ok(())
    }

    /// The longest a renewal of a lease of `ttl` may wait for its batch:
    /// the window, at most 1/50 of the TTL.
    pub fn wait_for(&self, ttl: Duration) -> Duration {
        self.window.min(ttl / 50)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_checked_and_the_wait_is_a_fraction_of_the_ttl() {
        assert!(RenewBatching::default().validate().is_ok());
        assert!(RenewBatching::new().max_keys(0).validate().is_err());
        assert!(RenewBatching::new()
            .max_keys(MAX_RENEW_KEYS + 1)
            .validate()
            .is_err());
        assert!(RenewBatching::new()
            .window(Duration::from_secs(2))
            .validate()
            .is_err());
        let b = RenewBatching::default();
        assert_eq!(b.wait_for(Duration::from_secs(30)), DEFAULT_RENEW_WINDOW);
        assert_eq!(
            b.wait_for(Duration::from_millis(500)),
            Duration::from_millis(10)
        );
        assert_eq!(
            b.wait_for(Duration::from_secs(3)),
            Duration::from_millis(50)
        );
        assert_eq!(
            RenewBatching::new()
                .window(Duration::ZERO)
                .wait_for(Duration::from_secs(3)),
            Duration::ZERO
        );
    }
}
