//! One waiter's registration on a channel: what it waits for, and how it
//! sleeps until then.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::release::copies_of;
use super::state::{locked, ChannelState, GrantSlot, Shared};

/// Why [`Subscription::wait_until`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// A release was published.
    Notified,
    /// A release handed the lock to the owner token this waiter expects
    /// (see [`Subscription::expect_grant`]), with this fencing token. Each
    /// announcement is reported once; the waiter must still check that it
    /// follows its last attempt (an announcement can arrive late).
    Granted(u64),
    /// A node (re)confirmed the subscription: a release may have gone unseen.
    Subscribed,
    /// Another copy of a release arrived (another node deleted a key), for
    /// a waiter that [follows the copies](Subscription::follow_copies).
    Copy,
    /// The time given.
    Timer,
}

/// One waiter's registration on a channel. Dropping it (never blocking)
/// unregisters; the channel is unsubscribed in the background
/// [`LINGER`](super::LINGER) after the last one left.
pub struct Subscription {
    pub(super) shared: Arc<Shared>,
    pub(super) kicks: Vec<mpsc::UnboundedSender<()>>,
    pub(super) channel: String,
    pub(super) state: Arc<ChannelState>,
    pub(super) confirmations: watch::Receiver<u64>,
    /// For a `subscribe_all` waiter: the release count it has seen.
    pub(super) releases: Option<watch::Receiver<u64>>,
    /// Woken by a release and not yet retried: pass the wake-up on if dropped.
    pub(super) woken: bool,
    /// The owner token whose grant this waiter expects, and where it lands.
    pub(super) grant: Option<(String, Arc<GrantSlot>)>,
    /// Hand-overs to others (their TTLs), for a waiter expecting a grant.
    pub(super) handed: watch::Receiver<u64>,
    /// Copies of releases seen, for a waiter following them.
    pub(super) copies: watch::Receiver<u64>,
    /// The next wait also ends on the next copy of a release.
    pub(super) follow_copies: bool,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("channel", &self.channel)
            .field("confirmed", &self.is_confirmed())
            .finish()
    }
}

impl Subscription {
    /// Whether at least one node confirmed the subscription now.
    pub fn is_confirmed(&self) -> bool {
        self.state.is_live()
    }

    /// Waits until a node confirms the subscription, or `until`; whether it did.
    pub async fn confirmed_by(&mut self, until: Instant) -> bool {
        loop {
            self.confirmations.borrow_and_update();
            if self.state.is_live() {
                return true;
            }
            match tokio::time::timeout_at(until, self.confirmations.changed()).await {
                Ok(Ok(())) => {}
                // The notifier is gone, or the time is up.
                Ok(Err(_)) | Err(_) => return self.state.is_live(),
            }
        }
    }

    /// From now on, a release that hands the lock to `owner` (an owner
    /// token) wakes this waiter alone with [`Wake::Granted`], and one that
    /// hands it to another waiter shortens this one's wait to that waiter's
    /// TTL. For a waiter in the Redlock nodes' line, `owner` is its wait id:
    /// a release that makes it the first in line wakes it alone
    /// ([`Wake::Notified`]).
    pub fn expect_grant(&mut self, owner: &str) {
        self.handed.borrow_and_update();
        let slot = Arc::new(GrantSlot::default());
        locked(&self.state.grants).insert(owner.to_string(), slot.clone());
        self.grant = Some((owner.to_string(), slot));
    }

    /// Call right before an attempt: a (re)confirmation from now on wakes
    /// the next wait.
    pub fn before_attempt(&mut self) {
        if let Some((_, slot)) = &self.grant {
            *locked(&slot.heard) = Default::default();
        }
        self.confirmations.borrow_and_update();
        self.copies.borrow_and_update();
        if let Some(releases) = &mut self.releases {
            releases.borrow_and_update();
        }
    }

    /// Call right after an attempt, whatever its outcome: the wake-up was used.
    pub fn after_attempt(&mut self) {
        self.woken = false;
    }

    /// Whether a release by `owner` (an owner token) was announced on the
    /// channel lately (one of the last few releases, from any node).
    pub fn was_released(&self, owner: &str) -> bool {
        copies_of(&self.state, owner) > 0
    }

    /// The next [`wait_until`](Subscription::wait_until) also ends, with
    /// [`Wake::Copy`], on the next copy of a release from any node,
    /// counting those that arrived since [`before_attempt`](Subscription::before_attempt).
    /// For a waiter whose attempt lost to an owner whose release it has
    /// already heard of from some nodes ([`was_released`](Subscription::was_released)):
    /// the other nodes' deletes are on their way, and each announces itself.
    pub fn follow_copies(&mut self) {
        self.follow_copies = true;
    }

    /// Sleeps until a release is published on the channel, a node
    /// (re)confirms the subscription, or `at`.
    pub async fn wait_until(&mut self, at: Instant) -> Wake {
        if let Some((_, slot)) = &self.grant {
            if let Some(fence) = locked(&slot.fence).take() {
                return Wake::Granted(fence);
            }
            let follow = std::mem::take(&mut self.follow_copies);
            let (state, confirmations, handed, copies) = (
                &self.state,
                &mut self.confirmations,
                &mut self.handed,
                &mut self.copies,
            );
            let mut at = at;
            let wake = loop {
                tokio::select! {
                    _ = slot.notify.notified() => break match locked(&slot.fence).take() {
                        Some(fence) => Wake::Granted(fence),
                        None => Wake::Notified,
                    },
                    _ = state.notify.notified() => break Wake::Notified,
                    _ = changed(copies), if follow => break Wake::Copy,
                    _ = changed(confirmations) => break Wake::Subscribed,
                    _ = changed(handed) => {
                        // Someone else got it: it is free again by its TTL at the latest.
                        let ttl = Duration::from_millis(handed.borrow_and_update().saturating_add(1));
                        at = at.min(lock_core::backend::add_saturating(Instant::now(), ttl));
                    }
                    _ = tokio::time::sleep_until(at) => break Wake::Timer,
                }
            };
            if wake == Wake::Notified {
                self.woken = true;
            }
            return wake;
        }
        let follow = std::mem::take(&mut self.follow_copies);
        let (state, confirmations, copies) =
            (&self.state, &mut self.confirmations, &mut self.copies);
        if let Some(releases) = &mut self.releases {
            return tokio::select! {
                _ = changed(releases) => Wake::Notified,
                _ = changed(copies), if follow => Wake::Copy,
                _ = changed(confirmations) => Wake::Subscribed,
                _ = tokio::time::sleep_until(at) => Wake::Timer,
            };
        }
        let wake = tokio::select! {
            _ = state.notify.notified() => Wake::Notified,
            _ = changed(copies), if follow => Wake::Copy,
            _ = changed(confirmations) => Wake::Subscribed,
            _ = tokio::time::sleep_until(at) => Wake::Timer,
        };
        if wake == Wake::Notified {
            self.woken = true;
        }
        wake
    }
}

/// Until `rx` changes; never if its notifier is gone (only the timer is left then).
pub(super) async fn changed(rx: &mut watch::Receiver<u64>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.woken {
            self.state.notify.notify_one();
        }
        if let Some((owner, _)) = self.grant.take() {
            locked(&self.state.grants).remove(&owner);
        }
        let last = {
            let mut channels = locked(&self.shared.channels);
            match channels.get_mut(&self.channel) {
                Some(entry) if Arc::ptr_eq(&entry.state, &self.state) => {
                    entry.refs = entry.refs.saturating_sub(1);
                    if entry.refs == 0 {
                        entry.idle_since = Some(Instant::now());
                    }
                    entry.refs == 0
                }
                _ => false,
            }
        };
        if last {
            // The node tasks set their timers to unsubscribe after LINGER.
            for kick in &self.kicks {
                let _ = kick.send(());
            }
        }
    }
}
