//! What an answered heartbeat proves: until when the server that expires
//! sessions must keep this one alive.
//!
//! A standalone server counts sessions itself: it notes the session's
//! activity when the heartbeat (`sync /`) arrives, so the answer vouches for
//! the session until the heartbeat's send time plus the session timeout
//! ([`Vouching::Direct`]).
//!
//! In an ensemble only the leader expires sessions, and a follower tells it
//! of a session's activity only in its reply to the leader's next ping. Cut
//! off right after a heartbeat is answered, the follower never sends that
//! reply: the leader counts the timeout from older news, up to a ping
//! interval earlier ([`Vouching::Relayed`] reasons around that). The leader
//! pings every follower every half tick, and a session timeout is at least
//! two ticks (ZooKeeper's minimum unless an operator lowers
//! `minSessionTimeout`), so pings are at most a quarter of the timeout
//! apart. Every `sync` is handled by the leader between its send and its
//! answer, the follower handles what the leader sends it in order, and the
//! leader reads what the follower sends in order. So for three answered
//! heartbeats `j`, `m`, `n` on one connection:
//!
//! - `m` sent [`RELAY_GAP`] of the timeout (more than a quarter) after `j`'s
//!   answer: the leader handled `m` more than a ping interval after `j`, so
//!   it pinged the follower in between, and the follower, which had noted
//!   `j`, answered that ping before it answered `m`;
//! - `n` sent after `m`'s answer: the follower forwarded `n` after that ping
//!   reply, so the leader had read the reply, `j`'s activity in it, when it
//!   handled `n`.
//!
//! Once `n` is answered, the leader has counted the session alive no earlier
//! than `j` was sent: `j`'s send time plus the timeout is what the session
//! is worth. A new connection (perhaps to another server) starts a new
//! chain.

use std::collections::VecDeque;
use std::time::Duration;

use lock_core::backend::session::Sent;
use tokio::time::Instant;

/// How long after one heartbeat's answer the next link of a chain must be
/// sent, as a fraction of the session timeout: a quarter (the longest ping
/// interval) plus a twentieth for the leader's own scheduling.
const RELAY_GAP: (u32, u32) = (3, 10);

/// Answered heartbeats kept for chains (the oldest go first).
const KEPT: usize = 64;

/// How heartbeats per session timeout are sent when answers vouch directly:
/// each answer is worth its send time plus the timeout.
const DIRECT_BEATS: u32 = 4;

/// How heartbeats per session timeout are sent on an ensemble: a chain
/// needs three answers spread over more than a quarter of the timeout, so
/// denser heartbeats keep what is proven closer to now.
const RELAYED_BEATS: u32 = 16;

/// What answered heartbeats prove, by what kind of server counts the
/// session (see the module docs).
#[derive(Debug)]
pub(crate) enum Vouching {
    /// The server that answers is the one that expires sessions.
    Direct,
    /// The leader of an ensemble expires sessions and hears of their
    /// activity through the follower's ping replies.
    Relayed(Chain),
}

impl Vouching {
    /// Until the ensemble is known: the cautious rule.
    pub fn unknown(timeout: Duration) -> Vouching {
        Vouching::Relayed(Chain::new(timeout))
    }

    /// From the ensemble's configuration (`/zookeeper/config`, empty on a
    /// standalone server): direct when it names at most one server.
    pub fn from_config(config: &[u8], timeout: Duration) -> Vouching {
        let servers = String::from_utf8_lossy(config)
            .lines()
            .filter(|line| line.trim_start().starts_with("server."))
            .count();
        if servers <= 1 {
            Vouching::Direct
        } else {
            Vouching::Relayed(Chain::new(timeout))
        }
    }

    /// How many heartbeats to send per session timeout (as many may be out
    /// at once).
    pub fn beats(&self) -> u32 {
        match self {
            Vouching::Direct => DIRECT_BEATS,
            Vouching::Relayed(_) => RELAYED_BEATS,
        }
    }

    /// A new connection: chains start again.
    pub fn reconnected(&mut self) {
        if let Vouching::Relayed(chain) = self {
            chain.answers.clear();
        }
    }

    /// A heartbeat sent at `sent` was answered at `at`, on the current
    /// connection or (`current` false) an earlier one: the send time from
    /// which the session's timeout now runs, if that is later than what was
    /// proven before.
    pub fn answered(&mut self, sent: Sent, at: Instant, current: bool) -> Option<Sent> {
        match self {
            Vouching::Direct => Some(sent),
            Vouching::Relayed(chain) if current => chain.answered(sent, at),
            Vouching::Relayed(_) => None,
        }
    }
}

/// Answered heartbeats on one connection to a follower, and what they have
/// proven so far.
#[derive(Debug)]
pub(crate) struct Chain {
    gap: Duration,
    /// `(sent, answered at)`, in the order answered.
    answers: VecDeque<(Sent, Instant)>,
    /// The send time of the latest heartbeat the leader is known to have
    /// counted.
    proven: Option<Instant>,
}

impl Chain {
    fn new(timeout: Duration) -> Chain {
        Chain {
            gap: timeout * RELAY_GAP.0 / RELAY_GAP.1,
            answers: VecDeque::new(),
            proven: None,
        }
    }

    fn answered(&mut self, sent: Sent, at: Instant) -> Option<Sent> {
        // `m`: the latest-sent heartbeat answered before this one (`n`) was sent.
        let m = self
            .answers
            .iter()
            .filter(|(_, answered)| *answered <= sent.at())
            .map(|(s, _)| s.at())
            .max();
        // `j`: the latest-sent heartbeat answered a gap before `m` was sent.
        let j = m.and_then(|m| {
            self.answers
                .iter()
                .filter(|(_, answered)| *answered + self.gap <= m)
                .map(|(s, _)| *s)
                .max_by_key(|s| s.at())
        });
        self.answers.push_back((sent, at));
        let j = j.filter(|j| self.proven.is_none_or(|p| j.at() > p))?;
        self.proven = Some(j.at());
        // Nothing sent before `j` can prove more than `j` now.
        self.answers.retain(|(s, _)| s.at() >= j.at());
        while self.answers.len() > KEPT {
            self.answers.pop_front();
        }
        Some(j)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(10);

    fn ms(base: Instant, n: u64) -> Instant {
        base + Duration::from_millis(n)
    }

    /// A heartbeat sent at `base + s` ms: the lock-core type records now,
    /// so the chain is driven with its own `Sent` at the intended offsets
    /// by sleeping on a paused clock.
    async fn sent_at(base: Instant, s: u64) -> Sent {
        tokio::time::sleep_until(ms(base, s)).await;
        Sent::now()
    }

    #[test]
    fn the_configuration_of_one_server_or_none_is_direct() {
        assert!(matches!(Vouching::from_config(b"", T), Vouching::Direct));
        assert!(matches!(
            Vouching::from_config(
                b"server.1=127.0.0.1:2888:3888:participant;0.0.0.0:2181\nversion=100000000",
                T
            ),
            Vouching::Direct
        ));
        let three = b"server.1=a:1:2:participant;c\nserver.2=b:1:2:participant;c\n\
                      server.3=c:1:2:observer;c\nversion=1";
        assert!(matches!(
            Vouching::from_config(three, T),
            Vouching::Relayed(_)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_chain_proves_the_first_link_once_the_third_is_answered() {
        let base = Instant::now();
        let mut v = Vouching::unknown(T);
        // j at 0 answered at 10; m must be sent at 10 + 3 s or later.
        let j = sent_at(base, 0).await;
        assert!(v.answered(j, ms(base, 10), true).is_none());
        let early = sent_at(base, 2_000).await;
        assert!(v.answered(early, ms(base, 2_010), true).is_none());
        let m = sent_at(base, 3_010).await;
        // `m` itself proves nothing: no heartbeat was answered before it
        // was sent a gap after another was answered.
        assert!(v.answered(m, ms(base, 3_020), true).is_none());
        // `n` sent before `m`'s answer: the follower may have forwarded it
        // before its ping reply.
        let racing = sent_at(base, 3_015).await;
        assert!(v.answered(racing, ms(base, 3_030), true).is_none());
        let n = sent_at(base, 3_020).await;
        let proven = v.answered(n, ms(base, 3_030), true).expect("a chain");
        assert_eq!(proven.at(), j.at());
        // Nothing older is proven again.
        let later = sent_at(base, 3_040).await;
        assert!(v.answered(later, ms(base, 3_050), true).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_connection_starts_the_chain_again() {
        let base = Instant::now();
        let mut v = Vouching::unknown(T);
        let j = sent_at(base, 0).await;
        v.answered(j, ms(base, 10), true);
        let m = sent_at(base, 3_010).await;
        v.answered(m, ms(base, 3_020), true);
        v.reconnected();
        let n = sent_at(base, 3_020).await;
        assert!(v.answered(n, ms(base, 3_030), true).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_standalone_server_vouches_from_each_answer() {
        let base = Instant::now();
        let mut v = Vouching::from_config(b"", T);
        let s = sent_at(base, 5).await;
        assert_eq!(
            v.answered(s, ms(base, 7), true).map(|p| p.at()),
            Some(s.at())
        );
    }
}
