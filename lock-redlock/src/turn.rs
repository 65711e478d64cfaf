//! A waiter's turn in the nodes' line: the announcements of the nodes that
//! reserved the key for it after a release (see `lock_redis::kit::notify`),
//! and Redlock's rule for when a quorum of them made it its turn.

use lock_redis::kit::notify::{Subscription, TurnAnnouncement};
use tokio::time::Instant;

/// The nodes that announced one release as a waiter's turn in their line
/// (see [`turn_reached`]), each with the turn sequence of its reservation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TurnHeard {
    /// Bit `i`: node `i` announced it (nodes past the 64th are left out).
    pub(crate) nodes: u64,
    /// `(node, sequence)`: the largest sequence each node announced it
    /// with (an announcement without one proves nothing and is not here).
    seqs: Vec<(usize, u64)>,
}

impl TurnHeard {
    /// What `announcements` (in any order, repeats included) tell.
    fn of(announcements: Vec<TurnAnnouncement>) -> Self {
        let mut heard = Self::default();
        for (node, seq) in announcements {
            heard.add(node, seq);
        }
        heard
    }

    fn add(&mut self, node: usize, seq: Option<u64>) {
        let bit = u32::try_from(node)
            .ok()
            .and_then(|n| 1u64.checked_shl(n))
            .unwrap_or(0);
        if bit == 0 {
            return;
        }
        self.nodes |= bit;
        let Some(seq) = seq else { return };
        match self.seqs.iter_mut().find(|(n, _)| *n == node) {
            Some((_, s)) => *s = (*s).max(seq),
            None => self.seqs.push((node, seq)),
        }
    }

    /// The turn sequence node `node` announced, if any.
    pub(crate) fn seq(&self, node: usize) -> Option<u64> {
        self.seqs.iter().find(|(n, _)| *n == node).map(|(_, s)| *s)
    }
}

/// After a wake-up of `sub` that made it this waiter's turn in the nodes'
/// line: waits until `n` of the nodes `among` (bit `i`: node `i`; any nodes
/// when fewer than `n` are given), at most as many as this client is
/// subscribed on, announced the release that did, or `until`. A release
/// reaches the nodes at about the same time, but its announcements arrive
/// one by one; a round sent at the first would still find the key on the
/// nodes whose delete is on its way, and fail.
///
/// Returns the nodes that announced that release as this waiter's turn
/// since its last attempt began, with their turn sequences (an
/// announcement is no proof of a reservation: the caller compares each
/// sequence with the one its round's refusal read on that node); none when
/// the wake-up named no release (a waiter left the line) or was not a turn.
/// `None` when `n` nodes announced that same release as the turn of one
/// other waiter before `n` announced it as ours: the nodes' lines differed
/// (that waiter had already left this node's line, holding the lock the
/// others gave it), so the lock is that waiter's on a quorum and a round of
/// ours would fail. We go on waiting; its release makes it our turn
/// everywhere.
pub(crate) async fn turn_reached(
    sub: &mut Subscription,
    n: usize,
    among: u64,
    until: Instant,
) -> Option<TurnHeard> {
    let Some(owner) = sub.take_turn() else {
        return Some(TurnHeard::default());
    };
    let enough = n.min(sub.live_nodes()).max(1);
    let among = if (among.count_ones() as usize) < n {
        u64::MAX
    } else {
        among
    };
    loop {
        sub.mark_copies_seen();
        let ours = TurnHeard::of(sub.turn_announcements(&owner));
        let another = sub.turn_of_another(&owner);
        if (ours.nodes & among).count_ones() as usize >= enough {
            return Some(ours);
        }
        if another >= n {
            // Not a wake-up of ours: nothing to pass on if dropped.
            sub.wake_used();
            return None;
        }
        if !sub.next_copy(until).await {
            return Some(ours);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_node_counts_once_with_its_largest_sequence() {
        let mut heard = TurnHeard::default();
        heard.add(1, Some(7));
        heard.add(1, Some(5));
        heard.add(3, None);
        assert_eq!(heard.nodes, 0b1010);
        assert_eq!(
            heard.seq(1),
            Some(7),
            "the largest sequence a node announced"
        );
        assert_eq!(heard.seq(3), None, "no sequence, no proof");
    }
}
