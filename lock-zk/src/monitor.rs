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
    let mut vouching = Vouching::unknown(live.timeout);
    let mut config = read_config(&session, live.timeout);
    // Whether the read is out, and whether the ensemble is known.
    let (mut reading, mut known) = (true, false);
    // The connection heartbeats are sent on: bumped on every state change.
    let mut epoch = 0u64;
    // The latest heartbeat answered so far, and what it was when the last
    // disconnection was heard of: the session's server asks the leader to
    // revalidate the session when the client reconnects, so the leader has
    // counted it alive since then.
    let mut latest: Option<Sent> = None;
    let mut before_break: Option<Sent> = None;
    // The first at once: what vouches for the session until its answer is
    // the connect, sent a round trip or more ago.
    let mut next_heartbeat = Instant::now();
    let mut in_flight: FuturesUnordered<Heartbeat> = FuturesUnordered::new();
    let mut disconnected = false;
    let retire = |cause: Retired| match session.upgrade() {
        Some(s) => s.retire(cause),
        None => live.retire(cause),
    };
    loop {
        if live.retired().is_some() {
            return;
        }
        let Some(vouched) = live.hub.vouched_until() else {
            return retire(Retired::Closed);
        };
        let suspect_at = add_saturating(live.last_answer(), live.timeout / 2);
        let connected = matches!(live.hub.status(), SessionStatus::Live);
        let beats = vouching.beats();
        tokio::select! {
            biased;
            state = states.changed() => {
                epoch += 1;
                vouching.reconnected();
                match state {
                    zk::SessionState::Disconnected => {
                        disconnected = true;
                        before_break = latest;
                        live.suspend("disconnected from ZooKeeper; reconnecting");
                    }
                    zk::SessionState::SyncConnected => {
                        let now = Instant::now();
                        let revalidated = before_break
                            .take()
                            .filter(|sent| disconnected && sent.validity(live.timeout) > now);
                        if let Some(sent) = revalidated {
                            live.hub.confirm(sent, live.timeout);
                        }
                        if !known && !reading {
                            config = read_config(&session, live.timeout);
                            reading = true;
                        }
                        disconnected = false;
                        next_heartbeat = now;
                    }
                    zk::SessionState::ConnectedReadOnly => {
                        disconnected = false;
                        next_heartbeat = Instant::now();
                    }
                    zk::SessionState::Expired => return retire(Retired::Expired),
                    zk::SessionState::AuthFailed => return retire(Retired::AuthFailed),
                    zk::SessionState::Closed => return retire(Retired::Closed),
                }
            },
            found = &mut config, if reading => {
                reading = false;
                if let Some(found) = found {
                    known = true;
                    vouching = found;
                }
            }
            Some((on, answered)) = in_flight.next(), if !in_flight.is_empty() => {
                if let Some(sent) = answered {
                    live.answered(sent.at());
                    if latest.is_none_or(|l| sent.at() > l.at()) {
                        latest = Some(sent);
                    }
                    let now = Instant::now();
                    let proven = vouching
                        .answered(sent, now, on == epoch)
                        .filter(|proven| proven.validity(live.timeout) > now);
                    if let (Some(proven), false) = (proven, disconnected) {
                        live.hub.confirm(proven, live.timeout);
                    }
                }
            }
            _ = tokio::time::sleep_until(retire_at(vouched)) => {
                if live.hub.vouched_until().is_none_or(|v| retire_at(v) <= Instant::now()) {
                    return retire(Retired::Presumed);
                }
            }
            _ = tokio::time::sleep_until(suspect_at), if connected => {
                if add_saturating(live.last_answer(), live.timeout / 2) <= Instant::now() {
                    live.suspend("no reply from ZooKeeper for half the session timeout");
                }
            }
            _ = tokio::time::sleep_until(next_heartbeat), if in_flight.len() < beats as usize => {
                let every = (live.timeout / beats).max(Duration::from_millis(10));
                next_heartbeat = add_saturating(Instant::now(), every);
                let Some(s) = session.upgrade() else { return };
                match s.client() {
                    // An answer later than the session timeout confirms
                    // nothing: its send time plus the timeout has passed.
                    Ok(client) => in_flight.push(heartbeat(client, epoch, live.timeout)),
                    Err(_) => return,
                }
            }
        }
    }
}
