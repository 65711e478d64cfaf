//! Plain releases: a release publishes its owner token on the lock's
//! channel, which wakes one local waiter (or every waiter that subscribed
//! with `subscribe_all`). With several nodes (Redlock) each node publishes
//! its own copy of one release: the first wakes, the others are dropped,
//! and every copy is counted for the waiters that follow them.

use super::state::{locked, node_bit, ChannelState, RECENT_TOKENS};

/// Counts a copy of the release `message` from node `node` and remembers
/// which nodes sent it; whether it is the first copy of that release among
/// the last few (the others are dropped). `message` is a turn message
/// without its node's sequence, or an owner token.
pub(super) fn first_copy(state: &ChannelState, node: usize, message: &[u8]) -> bool {
    state.copies.send_modify(|n| *n += 1);
    let mut recent = locked(&state.recent);
    if let Some((_, seen)) = recent.iter_mut().find(|(t, _)| t.as_slice() == message) {
        *seen |= node_bit(node);
        return false;
    }
    if recent.len() == RECENT_TOKENS {
        recent.pop_front();
    }
    recent.push_back((message.to_vec(), node_bit(node)));
    true
}

/// How many nodes announced the release by `owner` lately: as a plain
/// release, or as the turn of a waiter in the nodes' line.
pub(super) fn copies_of(state: &ChannelState, owner: &str) -> usize {
    let owner = owner.as_bytes();
    locked(&state.recent)
        .iter()
        .filter(|(t, _)| {
            t.as_slice() == owner
                || t.strip_prefix(b"n ")
                    .and_then(|turn| turn.strip_prefix(owner))
                    .is_some_and(|rest| rest.starts_with(b" "))
        })
        .map(|(_, seen)| seen.count_ones() as usize)
        .sum()
}
