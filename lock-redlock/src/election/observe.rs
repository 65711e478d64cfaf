//! Following an election on Redlock: a subscription to its change channel
//! on every node (the client's notifier), a quorum read of who leads
//! ([`read`]), then a new quorum read whenever a node announces a change
//! (a term begun, a proclaim, an end) or confirms the subscription again
//! (a change may have gone unheard meanwhile). A renewal's announcement
//! moves the timer at the term's expiry, which nobody announces; the
//! timer reads again. The follower is told each change once; a failed read
//! ends the stream with its error (retryable when too few nodes answered).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use lock_core::backend::{add_saturating, leader_stream, LeaderStream};
use lock_core::{LeaderInfo, Result};
use lock_redis::kit::layout::LeaderKeys;
use lock_redis::kit::notify::{Subscription, Wake};
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

use super::read::{read, Seen};
use crate::inner::Inner;

/// How long a follower with no leader to watch sleeps between looks at
/// its subscription (nothing is read then: it only waits for messages).
const IDLE: Duration = Duration::from_secs(3600);

/// Starts following the election of `keys`: subscribes, waits for a node
/// to confirm (within the larger of the connect and node timeouts), reads
/// who leads, and hands the rest to a task that lives as long as the
/// returned stream.
pub(crate) async fn follow(inner: Arc<Inner>, keys: Arc<LeaderKeys>) -> Result<LeaderStream> {
    let (sub, messages) = inner
        .notifier
        .observe_confirmed(keys.changed(), inner.background_bound(), "redlock")
        .await?;
    let first = read(&inner, &keys).await?;
    let (tx, rx) = mpsc::unbounded_channel();
    let mut follower = Follower {
        inner,
        keys,
        sub,
        messages,
        tx,
        shown: None,
        expires: None,
    };
    follower.on_read(first);
    tokio::spawn(follower.run());
    Ok(leader_stream(rx))
}

/// One follower's task.
struct Follower {
    inner: Arc<Inner>,
    keys: Arc<LeaderKeys>,
    sub: Subscription,
    messages: broadcast::Receiver<Arc<[u8]>>,
    tx: mpsc::UnboundedSender<Result<Option<LeaderInfo>>>,
    /// What the follower was last told (`None`: nothing yet): the
    /// leader's value and when its term began.
    shown: Option<Option<(String, Option<SystemTime>)>>,
    /// When the current term expires on a quorum unless renewed.
    expires: Option<Instant>,
}

impl Follower {
    async fn run(mut self) {
        loop {
            let at = self
                .expires
                .unwrap_or_else(|| add_saturating(Instant::now(), IDLE));
            let reread = tokio::select! {
                _ = self.tx.closed() => return,
                msg = self.messages.recv() => match msg {
                    Ok(m) => self.on_message(&m),
                    Err(broadcast::error::RecvError::Lagged(_)) => true,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                wake = self.sub.wait_until(at) => matches!(wake, Wake::Subscribed | Wake::Timer),
            };
            if reread {
                match read(&self.inner, &self.keys).await {
                    Ok(seen) => self.on_read(seen),
                    Err(err) => {
                        let _ = self.tx.send(Err(err));
                        return;
                    }
                }
            }
        }
    }

    /// Whether an announcement calls for a read: every change does, but
    /// the other nodes' copies of a change already shown do not (one
    /// node's word is no proof: the read asks a quorum); a renewal of the
    /// term shown only moves the expiry timer.
    fn on_message(&mut self, message: &[u8]) -> bool {
        let text = String::from_utf8_lossy(message);
        let mut parts = text.splitn(6, ' ');
        match parts.next() {
            Some("leader") => {
                // `leader <version> <proclaims> <since ms> <pttl ms> <value>`
                let since = parts.nth(2).and_then(|ms| ms.parse::<u64>().ok());
                let value = parts.nth(1);
                let (Some(since), Some(value), Some(Some((shown, at)))) =
                    (since, value, &self.shown)
                else {
                    return true;
                };
                *at != Some(SystemTime::UNIX_EPOCH + Duration::from_millis(since)) || shown != value
            }
            Some("extended") => {
                // `extended <version> <proclaims> <ttl ms>`
                let ttl = parts.nth(2).and_then(|ms| ms.parse::<u64>().ok());
                if let (Some(ms), Some(Some(_))) = (ttl, &self.shown) {
                    let renewed = add_saturating(Instant::now(), Duration::from_millis(ms + 1));
                    self.expires = Some(self.expires.map_or(renewed, |e| e.max(renewed)));
                }
                false
            }
            _ => true,
        }
    }

    /// Applies a quorum read.
    fn on_read(&mut self, seen: Seen) {
        self.expires = seen
            .lasts
            .map(|d| add_saturating(Instant::now(), d + Duration::from_millis(1)));
        self.tell(seen.leader);
    }

    /// Tells the follower `leader` unless that is what it was last told.
    fn tell(&mut self, leader: Option<LeaderInfo>) {
        let shown = leader.as_ref().map(|l| (l.value.clone(), l.since));
        if self.shown.as_ref() == Some(&shown) {
            return;
        }
        self.shown = Some(shown);
        let _ = self.tx.send(Ok(leader));
    }
}
