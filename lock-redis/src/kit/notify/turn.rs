//! Turns in Redlock's line of waiters
//! ([`ACQUIRE_IN_LINE`](crate::kit::scripts::ACQUIRE_IN_LINE)): a node whose
//! release finds someone in line reserves the key for the first in line and
//! publishes `n <owner token> <wait id> <turn sequence>` (`n - <wait id>
//! <turn sequence>` when a waiter left the line instead), which wakes only
//! the waiter that expects that wait id.
//!
//! A client with an inbox names itself in its wait ids
//! (`<client id>.<random>`), and the nodes publish its waiters' turns in
//! that inbox alone, as `<release channel>\n<message>`.
//!
//! Each node announces a turn on its own: the notifier reports every
//! announcement to the waiter it names ([`Subscription::turn_announcements`])
//! and how many nodes named another waiter
//! ([`Subscription::turn_of_another`]); the waiter decides from those
//! whether a quorum of nodes made it its turn.

use std::sync::Arc;

use tokio::time::Instant;

use super::state::{locked, ChannelState, GrantSlot, Shared, TurnAnnouncement};
use super::subscription::{changed, Subscription};

/// A turn message that names a waiter of this client: the owner token of
/// the release (`-`: a waiter left the line) and where the waiter expects
/// it.
pub(super) type Turn<'a> = (&'a str, Arc<GrantSlot>);

/// A new wait id of the client whose inbox is `inbox`: random, and naming
/// the client (`<client id>.<random>`) when it has an inbox.
pub(super) fn wait_id(inbox: &Option<(String, String)>) -> String {
    let random = crate::kit::layout::owner_token();
    match inbox {
        Some((_, client)) => format!("{client}.{random}"),
        None => random,
    }
}

/// `Some` if `channel` is this client's inbox: the release channel and the
/// message of an inbox message (`<release channel>\n<message>`), if it has
/// that form.
pub(super) fn from_inbox<'a>(
    shared: &Shared,
    channel: &str,
    message: &'a [u8],
) -> Option<Option<(&'a str, &'a [u8])>> {
    let (inbox, _) = shared.inbox.as_ref()?;
    if inbox != channel {
        return None;
    }
    Some(message.iter().position(|b| *b == b'\n').and_then(|at| {
        let channel = std::str::from_utf8(&message[..at]).ok()?;
        Some((channel, &message[at + 1..]))
    }))
}

/// For a turn message (`n ...`) from node `node`: records the announcement
/// for the waiter it names, if that waiter is ours. Returns the message as
/// the copies of one release are told apart (without the node's turn
/// sequence: copies from several nodes differ only by it) and the waiter's
/// turn. Any other message comes back as it is, with no turn.
pub(super) fn on_turn<'a>(
    state: &ChannelState,
    node: usize,
    message: &'a [u8],
) -> (&'a [u8], Option<Turn<'a>>) {
    let parsed = message.strip_prefix(b"n ").and_then(parse_turn);
    let message = match parsed {
        Some((_, _, Some(_))) => message
            .iter()
            .rposition(|b| *b == b' ')
            .map_or(message, |at| &message[..at]),
        _ => message,
    };
    let turn = parsed.and_then(|(owner, wait_id, seq)| {
        let slot = locked(&state.grants).get(wait_id).cloned()?;
        slot.heard_turn(owner, node, seq);
        Some((owner, slot))
    });
    (message, turn)
}

/// Wakes the waiter whose turn it is, alone.
pub(super) fn wake(turn: Turn<'_>) {
    let (owner, slot) = turn;
    *locked(&slot.turn_of) = Some(owner.to_string());
    slot.notify.notify_one();
}

/// `<owner token or -> <wait id> [<turn sequence>]` of a turn message (a
/// last field that is not a number is no sequence).
pub(super) fn parse_turn(turn: &[u8]) -> Option<(&str, &str, Option<u64>)> {
    let (owner, rest) = std::str::from_utf8(turn).ok()?.split_once(' ')?;
    Some(match rest.split_once(' ') {
        Some((wait_id, seq)) => (owner, wait_id, Some(seq.parse().ok()?)),
        None => (owner, rest, None),
    })
}

/// What a waiter in Redlock's line learns of its turn, after a wake-up
/// ([`Wake::Notified`](super::Wake::Notified)) that may have been one.
impl Subscription {
    /// The owner token of the release whose announcement woke this waiter,
    /// as its turn in the nodes' line (taken: each wake-up is reported
    /// once). `None` when the wake-up was no turn of this waiter's, or named
    /// no release (a waiter left the line: no release is on its way).
    pub fn take_turn(&mut self) -> Option<String> {
        let (_, slot) = self.grant.as_ref()?;
        locked(&slot.turn_of).take().filter(|owner| owner != "-")
    }

    /// The announcements, since this waiter's last attempt began, of the
    /// release by `owner` as its turn: each node that announced it, with
    /// the turn sequence of its reservation (`None`: an announcement
    /// without one). An announcement alone proves nothing: it may be late,
    /// or replayed.
    pub fn turn_announcements(&self, owner: &str) -> Vec<TurnAnnouncement> {
        let Some((_, slot)) = &self.grant else {
            return Vec::new();
        };
        let heard = locked(&slot.heard);
        if heard.0 == owner {
            heard.1.clone()
        } else {
            Vec::new()
        }
    }

    /// The most nodes that lately announced the release by `owner` as the
    /// turn of one waiter other than this one (each distinct announcement
    /// is one entry of the recent releases).
    pub fn turn_of_another(&self, owner: &str) -> usize {
        let Some((id, _)) = &self.grant else {
            return 0;
        };
        let mut another = 0;
        for (t, seen) in locked(&self.state.recent).iter() {
            let Some(turn) = t.strip_prefix(b"n ") else {
                continue;
            };
            match parse_turn(turn) {
                Some((o, waiter, _)) if o == owner && waiter != id => {
                    another = another.max(seen.count_ones() as usize);
                }
                _ => {}
            }
        }
        another
    }

    /// On how many nodes the subscription is confirmed now.
    pub fn live_nodes(&self) -> usize {
        locked(&self.state.live).iter().filter(|l| **l).count()
    }

    /// From now on, only a copy of a release that arrives later ends
    /// [`next_copy`](Subscription::next_copy).
    pub fn mark_copies_seen(&mut self) {
        self.copies.borrow_and_update();
    }

    /// Waits until a copy of a release arrives from any node (after those
    /// marked seen), or `until`; whether one did.
    pub async fn next_copy(&mut self, until: Instant) -> bool {
        tokio::select! {
            _ = changed(&mut self.copies) => true,
            _ = tokio::time::sleep_until(until) => false,
        }
    }

    /// The wake-up was not this waiter's to use: dropping the subscription
    /// now passes nothing on.
    pub fn wake_used(&mut self) {
        self.woken = false;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{connection, Notifier, Timeouts, Wake};
    use super::*;

    fn no_nodes(inbox: Option<&str>) -> Notifier {
        let t = Duration::from_millis(100);
        Notifier::start(
            Vec::new(),
            Timeouts {
                connect: t,
                request: t,
            },
            inbox,
        )
    }

    /// What one message in this client's inbox does to a waiter expecting
    /// the turn of `id` on `channel`.
    async fn wake_after(n: &Notifier, channel: &str, id: &str, message: &[u8]) -> Wake {
        let mut s = n.subscribe(channel);
        s.expect_grant(id);
        let (inbox, _) = n.shared.inbox.clone().expect("an inbox");
        connection::dispatch(&n.shared, 0, &inbox, message);
        let wake = s
            .wait_until(Instant::now() + Duration::from_millis(50))
            .await;
        // As after an attempt: the wake-up was used, not passed on.
        s.after_attempt();
        wake
    }

    #[tokio::test]
    async fn a_turn_in_the_inbox_wakes_the_waiter_it_names_on_its_channel() {
        let n = no_nodes(Some("distlock inbox "));
        let id = n.wait_id();
        let (_, client) = n.shared.inbox.clone().unwrap();
        assert!(id.starts_with(&format!("{client}.")), "{id}");
        let turn = format!("{{k}} released\nn owner {id}");
        assert_eq!(
            wake_after(&n, "{k} released", &id, turn.as_bytes()).await,
            Wake::Notified
        );
        // Another waiter's turn, another channel's, or no channel at all:
        // nobody wakes.
        let other = format!("{{k}} released\nn owner {}", n.wait_id());
        assert_eq!(
            wake_after(&n, "{k} released", &id, other.as_bytes()).await,
            Wake::Timer
        );
        let elsewhere = format!("{{j}} released\nn owner {id}");
        assert_eq!(
            wake_after(&n, "{k} released", &id, elsewhere.as_bytes()).await,
            Wake::Timer
        );
        let bare = format!("n owner {id}");
        assert_eq!(
            wake_after(&n, "{k} released", &id, bare.as_bytes()).await,
            Wake::Timer
        );
    }

    #[test]
    fn turn_messages_carry_the_nodes_sequence() {
        assert_eq!(
            parse_turn(b"tok w.1+5+9 42"),
            Some(("tok", "w.1+5+9", Some(42)))
        );
        assert_eq!(parse_turn(b"- w.1+5+9"), Some(("-", "w.1+5+9", None)));
        assert_eq!(parse_turn(b"tok w.1 not-a-number"), None);
    }

    #[test]
    fn without_an_inbox_wait_ids_are_random_and_name_no_client() {
        let n = no_nodes(None);
        let (a, b) = (n.wait_id(), n.wait_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
    }
}
