//! Hand-overs: a release that hands the mutex to its first queued waiter
//! publishes `g <owner token> <fencing token> <ttl ms>`
//! ([`RELEASE_QUEUED`](crate::kit::scripts::RELEASE_QUEUED)). That wakes
//! only the waiter that expects the grant for that owner token, already
//! holding the lock; every other waiter learns the new holder's TTL, the
//! longest it has to wait if that holder vanished.

use super::state::{locked, ChannelState};

/// Delivers the grant message `grant` (after its `g `): the fencing token
/// to the waiter that expects that owner token, if it is ours, and the
/// holder's TTL to every waiter.
pub(super) fn on_grant(state: &ChannelState, grant: &[u8]) {
    let Some((owner, fence, ttl_ms)) = parse_grant(grant) else {
        return;
    };
    let slot = locked(&state.grants).get(owner).cloned();
    if let Some(slot) = slot {
        *locked(&slot.fence) = Some(fence);
        slot.notify.notify_one();
    }
    state.handed.send_replace(ttl_ms);
}

/// `<owner token> <fencing token> <ttl ms>` of a grant message.
fn parse_grant(grant: &[u8]) -> Option<(&str, u64, u64)> {
    let mut parts = std::str::from_utf8(grant).ok()?.split(' ');
    let owner = parts.next()?;
    let fence = parts.next()?.parse().ok()?;
    let ttl_ms = parts.next()?.parse().ok()?;
    Some((owner, fence, ttl_ms))
}
