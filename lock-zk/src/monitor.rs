//! The per-session monitor: the only keep-alive traffic (one request per
//! session, whatever the number of guards), and the session's state turned
//! into news for its [`lock_core::backend::session::SessionHub`].
//!
//! - A heartbeat (`sync /`, which goes through the leader, so a server cut
//!   off from the quorum cannot vouch for the session) several times per
//!   session timeout. What the answers prove ([`crate::vouch`]) confirms
//!   the session on the hub: on a standalone server each answer is worth
//!   its send time plus the session timeout (minus drift); on an ensemble,
//!   whose leader hears of the session only through the follower's ping
//!   replies, a heartbeat counts once later answers show the leader has
//!   seen it. Every guard is held until the earlier of its own validity
//!   and that. A heartbeat is not given up when the next one is due: on a
//!   slow but healthy ensemble as many as are sent per timeout may be out
//!   at once, and a late answer still counts from its own send time, until
//!   that would be worth nothing.
//! - `Disconnected`, or no answer through the leader for half the session
//!   timeout: every guard is suspended; the next confirmation makes them
//!   held again (and the core renews at once).
//! - `Expired` (or `AuthFailed`/`Closed`), or no heartbeat answered until
//!   shortly before the last confirmation runs out (the server may have
//!   expired the session by then, and a partitioned client only hears of it
//!   when it reconnects): the session is retired. Every guard is
//!   `Lost(SessionExpired)` and the client is dropped.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use lock_core::backend::add_saturating;
use lock_core::backend::session::{Sent, SessionStatus};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::Retired;
use crate::session::{Liveness, Session};
use crate::vouch::Vouching;

/// How much earlier than the last confirmation runs out the monitor retires
/// a silent session, so that guards see `Lost(SessionExpired)` rather than a
/// bare `Lost(Expired)` of their validity.
const RETIRE_LEAD: Duration = Duration::from_millis(50);

/// A heartbeat's outcome: the connection it was sent on, and its send time
/// if it was answered.
type Heartbeat = Pin<Box<dyn Future<Output = (u64, Option<Sent>)> + Send>>;

/// A read of the ensemble's configuration.
type ConfigRead = Pin<Box<dyn Future<Output = Option<Vouching>> + Send>>;

/// One heartbeat on connection `epoch`: `sync /` answered within `within`;
/// its send time if so.
fn heartbeat(client: Arc<zk::Client>, epoch: u64, within: Duration) -> Heartbeat {
    // Taken now, not when the future is first polled: a heartbeat sent
    // before the monitor hears of a disconnection is sent before the
    // reconnection, which the leader counts (see `monitor`).
    let sent = Sent::now();
    lock_core::metrics::count_request(crate::session::BACKEND, "keep-alive");
    Box::pin(async move {
        match tokio::time::timeout(within, client.sync("/")).await {
            Ok(Ok(())) => (epoch, Some(sent)),
            _ => (epoch, None),
        }
    })
}

/// What kind of ensemble the session is on, from its configuration, read
/// within the session timeout; `None` if it cannot be (the cautious rule
/// stays).
fn read_config(session: &Weak<Session>, timeout: Duration) -> ConfigRead {
    let client = session.upgrade().and_then(|s| s.client().ok());
    Box::pin(async move {
        let read = tokio::time::timeout(timeout, client?.get_config()).await;
        match read {
            Ok(Ok((config, _))) => Some(Vouching::from_config(&config, timeout)),
            _ => None,
        }
    })
}

/// When a silent session whose last confirmation runs out at `vouched` is
/// retired.
fn retire_at(vouched: Instant) -> Instant {
    vouched.checked_sub(RETIRE_LEAD).unwrap_or(vouched)
}

/// The monitor of one session (see the module docs). Holds only a weak
/// reference to the session, so dropping its last user closes it.
pub(crate) async fn monitor(
    session: Weak<Session>,
    live: Arc<Liveness>,
    mut states: zk::StateWatcher,
) {
    let mut m = Monitor::new(session, live);
    loop {
        if m.live.retired().is_some() {
            return;
        }
        let Some(vouched) = m.live.hub.vouched_until() else {
            return m.retire(Retired::Closed);
        };
        let suspect_at = add_saturating(m.live.last_answer(), m.live.timeout / 2);
        let connected = matches!(m.live.hub.status(), SessionStatus::Live);
        let beats = m.vouching.beats();
        tokio::select! {
            biased;
            state = states.changed() => {
                if let Err(cause) = m.state_changed(state) {
                    return m.retire(cause);
                }
            },
            found = &mut m.config, if m.reading => {
                m.reading = false;
                if let Some(found) = found {
                    m.known = true;
                    m.vouching = found;
                }
            }
            Some((on, answered)) = m.in_flight.next(), if !m.in_flight.is_empty() => {
                if let Some(sent) = answered {
                    m.answered(on, sent);
                }
            }
            _ = tokio::time::sleep_until(retire_at(vouched)) => {
                if m.live.hub.vouched_until().is_none_or(|v| retire_at(v) <= Instant::now()) {
                    return m.retire(Retired::Presumed);
                }
            }
            _ = tokio::time::sleep_until(suspect_at), if connected => {
                if add_saturating(m.live.last_answer(), m.live.timeout / 2) <= Instant::now() {
                    m.live.suspend("no reply from ZooKeeper for half the session timeout");
                }
            }
            _ = tokio::time::sleep_until(m.next_heartbeat), if m.in_flight.len() < beats as usize => {
                if m.send_heartbeat(beats).is_none() {
                    return;
                }
            }
        }
    }
}

/// What the monitor knows of its session between two events.
struct Monitor {
    session: Weak<Session>,
    live: Arc<Liveness>,
    /// What answered heartbeats prove about the session's expiry.
    vouching: Vouching,
    /// The read of the ensemble's configuration.
    config: ConfigRead,
    /// Whether the read is out.
    reading: bool,
    /// Whether the ensemble is known.
    known: bool,
    /// The connection heartbeats are sent on: bumped on every state change.
    epoch: u64,
    /// The latest heartbeat answered so far.
    latest: Option<Sent>,
    /// What `latest` was when the last disconnection was heard of: the
    /// session's server asks the leader to revalidate the session when the
    /// client reconnects, so the leader has counted it alive since then.
    before_break: Option<Sent>,
    /// When the next heartbeat goes out. The first at once: what vouches
    /// for the session until its answer is the connect, sent a round trip
    /// or more ago.
    next_heartbeat: Instant,
    in_flight: FuturesUnordered<Heartbeat>,
    disconnected: bool,
}

impl Monitor {
    fn new(session: Weak<Session>, live: Arc<Liveness>) -> Self {
        let config = read_config(&session, live.timeout);
        Monitor {
            vouching: Vouching::unknown(live.timeout),
            config,
            reading: true,
            known: false,
            epoch: 0,
            latest: None,
            before_break: None,
            next_heartbeat: Instant::now(),
            in_flight: FuturesUnordered::new(),
            disconnected: false,
            session,
            live,
        }
    }

    /// Retires the session (or, when it is gone, its liveness) for `cause`.
    fn retire(&self, cause: Retired) {
        match self.session.upgrade() {
            Some(s) => s.retire(cause),
            None => self.live.retire(cause),
        }
    }

    /// The client's connection changed state; `Err` when the session ended.
    fn state_changed(&mut self, state: zk::SessionState) -> Result<(), Retired> {
        self.epoch += 1;
        self.vouching.reconnected();
        match state {
            zk::SessionState::Disconnected => {
                self.disconnected = true;
                self.before_break = self.latest;
                self.live
                    .suspend("disconnected from ZooKeeper; reconnecting");
            }
            zk::SessionState::SyncConnected => {
                let now = Instant::now();
                let revalidated = self
                    .before_break
                    .take()
                    .filter(|sent| self.disconnected && sent.validity(self.live.timeout) > now);
                if let Some(sent) = revalidated {
                    self.live.hub.confirm(sent, self.live.timeout);
                }
                if !self.known && !self.reading {
                    self.config = read_config(&self.session, self.live.timeout);
                    self.reading = true;
                }
                self.disconnected = false;
                self.next_heartbeat = now;
            }
            zk::SessionState::ConnectedReadOnly => {
                self.disconnected = false;
                self.next_heartbeat = Instant::now();
            }
            zk::SessionState::Expired => return Err(Retired::Expired),
            zk::SessionState::AuthFailed => return Err(Retired::AuthFailed),
            zk::SessionState::Closed => return Err(Retired::Closed),
        }
        Ok(())
    }

    /// A heartbeat sent at `sent` on connection `on` was answered.
    fn answered(&mut self, on: u64, sent: Sent) {
        self.live.answered(sent.at());
        if self.latest.is_none_or(|l| sent.at() > l.at()) {
            self.latest = Some(sent);
        }
        let now = Instant::now();
        let proven = self
            .vouching
            .answered(sent, now, on == self.epoch)
            .filter(|proven| proven.validity(self.live.timeout) > now);
        if let (Some(proven), false) = (proven, self.disconnected) {
            self.live.hub.confirm(proven, self.live.timeout);
        }
    }

    /// Sends the next heartbeat (`beats` per session timeout); `None` when
    /// the session or its client is gone.
    fn send_heartbeat(&mut self, beats: u32) -> Option<()> {
        let every = (self.live.timeout / beats).max(Duration::from_millis(10));
        self.next_heartbeat = add_saturating(Instant::now(), every);
        let s = self.session.upgrade()?;
        // An answer later than the session timeout confirms nothing: its
        // send time plus the timeout has passed.
        let client = s.client().ok()?;
        self.in_flight
            .push(heartbeat(client, self.epoch, self.live.timeout));
        Some(())
    }
}
