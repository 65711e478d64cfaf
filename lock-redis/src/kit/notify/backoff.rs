//! The pause before a notifier connection is opened again after a
//! failure: doubling, with jitter, and back to the minimum only once a
//! connection proved healthy, so that a server that refuses the
//! subscription never causes a connection storm.

use std::time::Duration;

use rand::Rng;

/// First delay before reconnecting a pub/sub connection after a failure.
pub(super) const MIN_BACKOFF: Duration = Duration::from_millis(25);
/// Longest delay between reconnection attempts.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The reconnection backoff of one connection (or one node address).
#[derive(Clone, Copy, Debug)]
pub(super) struct Backoff {
    next: Duration,
}

impl Backoff {
    /// A backoff that starts at [`MIN_BACKOFF`].
    pub(super) fn new() -> Self {
        Self { next: MIN_BACKOFF }
    }

    /// The pause after a failure of a connection that had (`healthy`) or
    /// had not proved itself first: between half and all of the current
    /// backoff, which restarts from [`MIN_BACKOFF`] after a healthy
    /// connection and doubles (up to [`MAX_BACKOFF`]) after each failure.
    pub(super) fn pause(&mut self, healthy: bool) -> Duration {
        if healthy {
            self.next = MIN_BACKOFF;
        }
        let pause = rand::rng().random_range(self.next / 2..=self.next);
        self.next = (self.next * 2).min(MAX_BACKOFF);
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_maximum_and_restarts_after_a_healthy_connection() {
        let mut b = Backoff::new();
        let first = b.pause(false);
        assert!(first >= MIN_BACKOFF / 2 && first <= MIN_BACKOFF);
        for _ in 0..20 {
            assert!(b.pause(false) <= MAX_BACKOFF);
        }
        assert!(b.pause(false) >= MAX_BACKOFF / 2);
        assert!(b.pause(true) <= MIN_BACKOFF);
    }
}
