//! How long a waiter's place in a line lasts on the server: the mutex queue
//! and the read-write lock's queue of `lock-redis`, and the line of
//! `lock-redlock` on every node.

use std::time::Duration;

use lock_core::backend::add_saturating;
use tokio::time::Instant;

/// The lifetime of a waiter's place in a line. Every attempt of the waiter
/// renews the place for [`lasts_ms`](PlaceLife::lasts_ms) from when it
/// reaches the server: twice the longest the waiter sleeps between two
/// attempts (it re-checks at least every `max(ttl, max_recheck)`), so a
/// waiter that is still there never loses its place, but never past the
/// call's deadline plus a slack (the attempt in flight at the deadline and
/// the leaving of the line after it). So the place of a waiter that gave up
/// and could not leave the line (the server was out of reach), or of a
/// process that died while it waited, holds nobody up for longer than that
/// waiter would have waited.
#[derive(Clone, Copy, Debug)]
pub struct PlaceLife {
    lasts: Duration,
    until: Instant,
}

impl PlaceLife {
    /// The place of a call that waits for a lease of `ttl` until `deadline`,
    /// re-checking at least every `max_recheck`; it lasts at most `slack`
    /// past the deadline.
    pub fn new(ttl: Duration, max_recheck: Duration, deadline: Instant, slack: Duration) -> Self {
        Self {
            lasts: ttl.max(max_recheck).saturating_mul(2),
            until: add_saturating(deadline, slack),
        }
    }

    /// How long a place taken or renewed by an attempt sent at `sent` lasts
    /// at most: until `sent` + [`lasts`](PlaceLife::lasts) (the server
    /// counts from when the attempt arrives) or the end, whichever comes
    /// first.
    pub fn lapse_after(&self, sent: Instant) -> Instant {
        add_saturating(sent, self.lasts).min(self.until)
    }

    /// How long a renewal lasts when the place has no end before it.
    pub fn lasts(&self) -> Duration {
        self.lasts
    }

    /// How long a place taken or renewed now lasts, in ms (at least 1): the
    /// script argument of an attempt sent now.
    pub fn lasts_ms(&self) -> u64 {
        let left = self.until.saturating_duration_since(Instant::now());
        u64::try_from(self.lasts.min(left).as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_place_never_outlasts_the_deadline_plus_the_slack() {
        let now = Instant::now();
        let ttl = Duration::from_secs(1);
        let recheck = Duration::from_secs(10);
        let slack = Duration::from_millis(250);
        let far = PlaceLife::new(ttl, recheck, now + Duration::from_secs(3600), slack);
        assert_eq!(far.lasts_ms(), 20_000);
        let near = PlaceLife::new(ttl, recheck, now + Duration::from_secs(2), slack);
        assert_eq!(near.lasts_ms(), 2_250);
        assert_eq!(near.lapse_after(now), now + Duration::from_millis(2_250));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(near.lasts_ms(), 1, "a place past its end lasts 1 ms");
        let endless = PlaceLife::new(Duration::MAX, recheck, now, Duration::MAX);
        assert_eq!(endless.lasts(), Duration::MAX);
        assert!(endless.lasts_ms() > 0);
    }
}
