//! The per-session monitor: the only keep-alive traffic (one request per
//! session, whatever the number of guards), and the session's state turned
//! into news for its [`lock_core::SessionHub`].
//!
//! - A heartbeat (`sync /`, which goes through the leader, so a server cut
//!   off from the quorum cannot vouch for the session) every quarter of the
//!   session timeout. Each answer confirms the session on the hub for the
//!   heartbeat's send time plus the session timeout (minus drift): every
//!   guard is held until the earlier of its own validity and that. A
//!   heartbeat is not given up when the next one is due: on a slow but
//!   healthy ensemble (answers slower than a quarter of the timeout) up to
//!   [`IN_FLIGHT`] are out at once, and a late answer still confirms from
//!   its own send time, until that confirmation would be worth nothing.
//! - `Disconnected`, or no answer through the leader for half the session
//!   timeout: every guard is suspended; the next answered heartbeat makes
//!   them held again (and the core renews at once).
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
use lock_core::{add_saturating, Sent, SessionStatus};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::session::{Liveness, Retired, Session};

/// How much earlier than the last confirmation runs out the monitor retires
/// a silent session, so that guards see `Lost(SessionExpired)` rather than a
/// bare `Lost(Expired)` of their validity.
const RETIRE_LEAD: Duration = Duration::from_millis(50);

/// How many heartbeats may be out at once: one per quarter of the session
/// timeout, so the oldest is sent a whole timeout before the newest and its
/// answer could not confirm anything more.
const IN_FLIGHT: usize = 4;

type Heartbeat = Pin<Box<dyn Future<Output = Option<Sent>> + Send>>;

/// One heartbeat: `sync /` answered within `within`; its send time if so.
fn heartbeat(client: Arc<zk::Client>, within: Duration) -> Heartbeat {
    Box::pin(async move {
        let sent = Sent::now();
        lock_core::metrics::count_request(crate::session::BACKEND, "keep-alive");
        match tokio::time::timeout(within, client.sync("/")).await {
            Ok(Ok(())) => Some(sent),
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
    let every = (live.timeout / 4).max(Duration::from_millis(10));
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
        tokio::select! {
            biased;
            state = states.changed() => match state {
                zk::SessionState::Disconnected => {
                    disconnected = true;
                    live.suspend("disconnected from ZooKeeper; reconnecting");
                }
                zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                    disconnected = false;
                    next_heartbeat = Instant::now();
                }
                zk::SessionState::Expired => return retire(Retired::Expired),
                zk::SessionState::AuthFailed => return retire(Retired::AuthFailed),
                zk::SessionState::Closed => return retire(Retired::Closed),
            },
            Some(answered) = in_flight.next(), if !in_flight.is_empty() => {
                if let Some(sent) = answered {
                    live.answered(sent.at());
                    if !disconnected {
                        live.hub.confirm(sent, live.timeout);
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
            _ = tokio::time::sleep_until(next_heartbeat), if in_flight.len() < IN_FLIGHT => {
                next_heartbeat = add_saturating(Instant::now(), every);
                let Some(s) = session.upgrade() else { return };
                match s.client() {
                    // An answer later than the session timeout confirms
                    // nothing: its send time plus the timeout has passed.
                    Ok(client) => in_flight.push(heartbeat(client, live.timeout)),
                    Err(_) => return,
                }
            }
        }
    }
}
