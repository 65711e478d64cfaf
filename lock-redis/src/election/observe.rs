//! Following an election: a subscription to its change channel (on the
//! client's notifier connection) and a read of who leads, then every
//! change as the scripts announce it. Each announcement and each read
//! carries a version (the server's clock in µs), so that a message older
//! than the read it raced with is dropped and the follower is told every
//! change once, in order. A term's expiry is announced by nobody: a timer
//! at the leader's TTL (re-armed by each announced renewal) reads the
//! election then. When the subscription is lost and comes back (the
//! notifier reconnects), the follower reads again and is told the current
//! state if it changed meanwhile; a failed read ends the stream with its
//! error (retryable when the server could not be reached).

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{add_saturating, leader_stream, LeaderStream};
use lock_core::{FencingToken, LeaderInfo, Result};
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

use super::{info, read, Read};
use crate::client::Inner;
use crate::kit::layout::LeaderKeys;
use crate::kit::notify::{Subscription, Wake};

/// How long a follower with no leader to watch sleeps between looks at
/// its subscription (nothing is read then: it only waits for messages).
const IDLE: Duration = Duration::from_secs(3600);

/// Starts following the election of `keys`: subscribes, waits for the
/// server to confirm (within the request timeout), reads who leads, and
/// hands the rest to a task that lives as long as the returned stream.
pub(crate) async fn follow(inner: Arc<Inner>, keys: LeaderKeys) -> Result<LeaderStream> {
    let limit = inner.client.config.request_timeout;
    let (sub, messages) = inner
        .notifier
        .observe_confirmed(keys.changed(), limit, "redis")
        .await?;
    let first = read(&inner.client, &keys).await?;
    let (tx, rx) = mpsc::unbounded_channel();
    let mut follower = Follower {
        inner,
        keys,
        sub,
        messages,
        tx,
        version: 0,
        shown: None,
        expires: None,
    };
    follower.on_read(first);
    tokio::spawn(follower.run());
    Ok(leader_stream(rx))
}

/// What a follower shows of a leader: its value and epoch.
type Shown = Option<(String, Option<FencingToken>)>;

/// One follower's task.
struct Follower {
    inner: Arc<Inner>,
    keys: LeaderKeys,
    sub: Subscription,
    messages: broadcast::Receiver<Arc<[u8]>>,
    tx: mpsc::UnboundedSender<Result<Option<LeaderInfo>>>,
    /// The version of the last change or read applied.
    version: u64,
    /// What the follower was last told (`None`: nothing yet).
    shown: Option<Shown>,
    /// When the current term expires unless renewed.
    expires: Option<Instant>,
}

/// What woke the follower.
enum Event {
    Gone,
    Message(Arc<[u8]>),
    Lagged,
    Read,
}

impl Follower {
    async fn run(mut self) {
        loop {
            let at = self
                .expires
                .unwrap_or_else(|| add_saturating(Instant::now(), IDLE));
            let event = tokio::select! {
                _ = self.tx.closed() => Event::Gone,
                msg = self.messages.recv() => match msg {
                    Ok(m) => Event::Message(m),
                    Err(broadcast::error::RecvError::Lagged(_)) => Event::Lagged,
                    Err(broadcast::error::RecvError::Closed) => Event::Gone,
                },
                wake = self.sub.wait_until(at) => match wake {
                    // (Re)subscribed: a change may have gone unheard.
                    Wake::Subscribed | Wake::Timer => Event::Read,
                    _ => continue,
                },
            };
            let reread = match event {
                Event::Gone => return,
                Event::Message(m) => {
                    self.on_message(&m);
                    false
                }
                Event::Lagged | Event::Read => true,
            };
            if reread {
                match read(&self.inner.client, &self.keys).await {
                    Ok(seen) => self.on_read(seen),
                    Err(err) => {
                        let _ = self.tx.send(Err(err));
                        return;
                    }
                }
            }
        }
    }

    /// Applies a read, unless a newer announcement was applied already.
    fn on_read(&mut self, seen: Read) {
        if seen.version < self.version {
            return;
        }
        self.version = seen.version;
        match seen.leader {
            Some((leader, pttl)) => {
                self.arm(pttl);
                self.tell(Some(leader));
            }
            None => {
                self.expires = None;
                self.tell(None);
            }
        }
    }

    /// Applies an announcement (see [`crate::kit::layout::LeaderKeys`]);
    /// older ones than the last applied, and malformed ones, are dropped.
    fn on_message(&mut self, message: &[u8]) {
        let Ok(text) = std::str::from_utf8(message) else {
            return;
        };
        let mut parts = text.splitn(6, ' ');
        let kind = parts.next().unwrap_or_default();
        let Some(version) = parts.next().and_then(|v| v.parse::<u64>().ok()) else {
            return;
        };
        if version <= self.version {
            return;
        }
        let mut number = || parts.next().and_then(|n| n.parse::<u64>().ok());
        match kind {
            "leader" => {
                let (Some(epoch), Some(since), Some(pttl)) = (number(), number(), number()) else {
                    return;
                };
                let value = parts.next().unwrap_or_default();
                self.version = version;
                self.arm(i64::try_from(pttl).unwrap_or(i64::MAX));
                self.tell(Some(info(value, epoch, since)));
            }
            "extended" => {
                let (Some(epoch), Some(pttl)) = (number(), number()) else {
                    return;
                };
                self.version = version;
                let current = self.shown.as_ref().and_then(|s| s.as_ref()?.1);
                if current == Some(FencingToken::new(epoch)) {
                    self.arm(i64::try_from(pttl).unwrap_or(i64::MAX));
                }
            }
            "none" => {
                self.version = version;
                self.expires = None;
                self.tell(None);
            }
            _ => {}
        }
    }

    /// The timer at the term's expiry, `pttl` ms from now (none for a key
    /// without expiry, which only an announcement can end).
    fn arm(&mut self, pttl: i64) {
        self.expires = u64::try_from(pttl)
            .ok()
            .map(|ms| add_saturating(Instant::now(), Duration::from_millis(ms + 1)));
    }

    /// Tells the follower `leader` unless that is what it was last told.
    fn tell(&mut self, leader: Option<LeaderInfo>) {
        let shown: Shown = leader.as_ref().map(|l| (l.value.clone(), l.epoch));
        if self.shown.as_ref() == Some(&shown) {
            return;
        }
        self.shown = Some(shown);
        let _ = self.tx.send(Ok(leader));
    }
}
