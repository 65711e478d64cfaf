//! Release notifications, shared by `lock-redis` (one node) and
//! `lock-redlock` (N nodes).
//!
//! The release script publishes the releasing owner's token on the lock's
//! `{key} released` channel (see [`crate::kit::scripts`]). A client keeps, per
//! node, one pub/sub connection, opened when its first waiter appears,
//! subscribed to the channels its waiters need. A waiting acquire:
//!
//! 1. [`subscribe`](Notifier::subscribe)s, waits until the subscription is
//!    confirmed by a node ([`Subscription::confirmed_by`]) and only then tries
//!    the lock again (a release before the confirmation published to nobody);
//! 2. before each attempt calls [`Subscription::before_attempt`], after it
//!    [`Subscription::after_attempt`];
//! 3. sleeps in [`Subscription::wait_until`] until a release is published
//!    ([`Wake::Notified`]), a node (re)confirms the subscription
//!    ([`Wake::Subscribed`]: a release may have gone unseen while the
//!    connection was down), or its own re-check time ([`Wake::Timer`]).
//!
//! One release wakes ONE local waiter of the channel (the local waiters are
//! interchangeable; waking them all would be a herd inside the process),
//! except on channels whose waiters subscribed with
//! [`subscribe_all`](Notifier::subscribe_all), where one release may admit
//! several of them (a writer's release admits every reader); the
//! copies of one release that arrive from several nodes (Redlock) are
//! recognised by the owner token and dropped. A waiter that was woken but is
//! dropped before it retried passes the wake-up on.
//!
//! Those copies still matter to a waiter whose attempt lost to the very
//! owner whose release it heard of: the release had reached only some nodes
//! when it tried. Such a waiter asks to [follow the
//! copies](Subscription::follow_copies) and is woken by the next one
//! ([`Wake::Copy`]), instead of sleeping until the holder's TTL.
//!
//! Redlock's nodes keep a line of waiters instead
//! ([`crate::kit::scripts::ACQUIRE_IN_LINE`]): a release with someone in line
//! publishes `n <owner token> <wait id>`, which wakes only the waiter that
//! [expects](Subscription::expect_grant) that wait id (it is its turn on
//! every node), in whichever process it is; copies from several nodes are
//! dropped as above. A client with an inbox ([`Notifier::start`]) names
//! itself in its wait ids ([`Notifier::wait_id`]), and the nodes publish
//! its turns in that inbox alone, prefixed with the lock's channel: the
//! other clients waiting for the lock are not woken to drop them (with 8
//! clients on 5 nodes, 5 deliveries per hand-off instead of 35). The inbox
//! is subscribed on a node while any channel is (with the first of them),
//! and a channel counts as confirmed on a node only with the inbox. Each
//! node that announces a turn has reserved the key for that waiter, with
//! the node's turn sequence (`n <owner token> <wait id> <sequence>`): the
//! waiter learns which release woke it ([`Subscription::take_turn`]), each
//! node's announcement of it with its sequence
//! ([`Subscription::turn_announcements`]), and how many nodes named another
//! waiter instead ([`Subscription::turn_of_another`]: a node whose release
//! arrives after the next holder already left its line names the waiter
//! behind it). `lock-redlock` counts a quorum of them: a waiter that a
//! quorum named after its last round (a sequence above the one that round's
//! refusal read there) holds the lock by those reservations, with no
//! further request. An announcement alone proves nothing: it may be late,
//! or replayed.
//!
//! A release that hands the lock to a queued waiter publishes
//! `g <owner token> <fencing token> <ttl ms>`
//! ([`crate::kit::scripts::RELEASE_QUEUED`]): that wakes only the waiter that
//! [expects](Subscription::expect_grant) the grant for that owner token, in
//! whichever process it is, with [`Wake::Granted`]; every other waiter sleeps
//! on, but no longer than that TTL (if the new holder vanished, its lock
//! expires then and the next waiter must find out).
//!
//! A channel stays subscribed for [`LINGER`] after its last local waiter
//! left: a client that takes the same name again and again (the usual case
//! under contention) then finds the subscription confirmed already
//! ([`Notifier::subscribe_if_live`]) and pays no `SUBSCRIBE`, `UNSUBSCRIBE`
//! or extra attempt per wait.
//!
//! Followers of an election [observe](Notifier::observe) its change
//! channel on the same connection: its messages are not wake-ups but
//! news, each delivered in order to every local follower, and a
//! (re)confirmation of the channel tells them that some may have gone
//! unheard (see `lock-redis`'s `observe`).
//!
//! A Redis Cluster is one node ([`NotifyNode::cluster`], [`NotifyCluster`]):
//! each channel is subscribed with `SSUBSCRIBE` at the primary that owns
//! its slot, on a connection per primary that carries nothing else; a
//! channel whose slot moves (a migration, a failover) is unconfirmed and
//! subscribed at the new owner, which wakes its waiters with
//! [`Wake::Subscribed`] as a reconnection does.
//!
//! Every node connection is watched with `PING`; any failure (connect,
//! `SUBSCRIBE`, `PING`, the connection closing) reconnects after a backoff
//! with jitter that only resets once the connection proved healthy, so a
//! server that refuses the subscription (an ACL without channel rights)
//! never causes a connection storm.

mod backoff;
mod cluster;
mod connection;
mod grant;
mod release;
mod shard;
mod sharded;
mod state;
mod subscription;
mod turn;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, mpsc};

/// How many messages of an observed channel wait for a slow follower
/// ([`Notifier::observe`]).
pub const OBSERVED_BACKLOG: usize = 256;

pub use cluster::NotifyCluster;
pub use connection::{MovingNode, NotifyNode, Timeouts};
pub use state::{TurnAnnouncement, LINGER};
pub use subscription::{Subscription, Wake};

use state::{locked, ChannelState, Entry, Shared};

/// The release notifications of one client. Dropping it (with every
/// [`Subscription`]) stops its tasks and closes the connections.
pub struct Notifier {
    shared: Arc<Shared>,
    /// One reconciliation trigger per node task.
    kicks: Vec<mpsc::UnboundedSender<()>>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("nodes", &self.kicks.len())
            .field("channels", &locked(&self.shared.channels).len())
            .finish()
    }
}

impl Notifier {
    /// Starts one task per node (each connects on the first subscription).
    /// With `inbox` (a channel name prefix), the client also listens on its
    /// own channel, `inbox` and a random client id, where the nodes publish
    /// the turns of the wait ids it makes ([`Notifier::wait_id`]).
    /// Must be called within a tokio runtime.
    pub fn start(nodes: Vec<NotifyNode>, timeouts: Timeouts, inbox: Option<&str>) -> Self {
        let inbox = inbox.map(|prefix| {
            let id = crate::kit::layout::owner_token();
            (format!("{prefix}{id}"), id)
        });
        let shared = Arc::new(Shared {
            channels: Mutex::new(HashMap::new()),
            nodes: nodes.len(),
            inbox,
        });
        let kicks = nodes
            .into_iter()
            .enumerate()
            .map(|(index, node)| connection::spawn(index, node, shared.clone(), timeouts))
            .collect();
        Self { shared, kicks }
    }

    /// A new wait id, for a waiter's place in Redlock's lines: random, and
    /// naming this client (`<client id>.<random>`) when it has an inbox, so
    /// that the nodes announce the waiter's turn there alone.
    pub fn wait_id(&self) -> String {
        turn::wait_id(&self.shared.inbox)
    }

    fn kick_all(&self) {
        for kick in &self.kicks {
            let _ = kick.send(());
        }
    }

    /// Whether this client is subscribed to `channel` on node `node` now (a
    /// release announced there reaches this client too).
    pub fn is_subscribed_on(&self, channel: &str, node: usize) -> bool {
        let state = self.shared.state_of(channel);
        state.is_some_and(|s| locked(&s.live).get(node).copied().unwrap_or(false))
    }

    /// Registers a waiter on `channel`, woken by a release unless another
    /// local waiter takes that wake-up; the server subscriptions follow in
    /// the background (see [`Subscription::confirmed_by`]).
    pub fn subscribe(&self, channel: &str) -> Subscription {
        self.register(channel, false)
    }

    /// Registers a follower on `channel`: every message published there
    /// comes, in order, on the returned receiver (which keeps the last
    /// [`OBSERVED_BACKLOG`]; a follower that lags further is told so, and
    /// must read the state afresh). The subscription says when the channel
    /// is (re)confirmed ([`Wake::Subscribed`] from
    /// [`Subscription::wait_until`]: messages may have gone unheard while
    /// it was not); its release wake-ups never come. Meant for channels
    /// only followers use (the election's change channel).
    pub fn observe(&self, channel: &str) -> (Subscription, broadcast::Receiver<Arc<[u8]>>) {
        let sub = self.register(channel, false);
        let messages = sub
            .state
            .observed
            .get_or_init(|| broadcast::channel(OBSERVED_BACKLOG).0)
            .subscribe();
        (sub, messages)
    }

    /// [`observe`](Notifier::observe), once a server confirmed the
    /// subscription, within `limit`: an `Unavailable` error (`backend`
    /// names the caller in it) if none did.
    pub async fn observe_confirmed(
        &self,
        channel: &str,
        limit: std::time::Duration,
        backend: &str,
    ) -> lock_core::Result<(Subscription, broadcast::Receiver<Arc<[u8]>>)> {
        let (mut sub, messages) = self.observe(channel);
        let until = lock_core::backend::add_saturating(tokio::time::Instant::now(), limit);
        if !sub.confirmed_by(until).await {
            return Err(lock_core::LockError::new(
                lock_core::LockErrorKind::Unavailable,
                format!(
                    "{backend}: no server confirmed the subscription to {channel} within {limit:?}"
                ),
            ));
        }
        Ok((sub, messages))
    }

    /// Registers a waiter on `channel` that every release wakes, with every
    /// other such waiter (for releases that may admit several waiters).
    pub fn subscribe_all(&self, channel: &str) -> Subscription {
        self.register(channel, true)
    }

    /// Like [`subscribe`](Notifier::subscribe), but only if the channel is
    /// confirmed by a node right now (other local waiters wait on it, or
    /// it lingers after them); `None` otherwise, without subscribing.
    pub fn subscribe_if_live(&self, channel: &str) -> Option<Subscription> {
        let state = {
            let mut channels = locked(&self.shared.channels);
            let entry = channels.get_mut(channel)?;
            if !entry.state.is_live() {
                return None;
            }
            entry.refs += 1;
            entry.idle_since = None;
            entry.state.clone()
        };
        Some(self.subscription(channel, state, false))
    }

    fn register(&self, channel: &str, all: bool) -> Subscription {
        let (state, new) = {
            let mut channels = locked(&self.shared.channels);
            let mut new = false;
            let entry = channels.entry(channel.to_string()).or_insert_with(|| {
                new = true;
                Entry {
                    refs: 0,
                    idle_since: None,
                    state: Arc::new(ChannelState::new(self.shared.nodes)),
                }
            });
            entry.refs += 1;
            entry.idle_since = None;
            (entry.state.clone(), new)
        };
        if new {
            self.kick_all();
        }
        self.subscription(channel, state, all)
    }

    fn subscription(&self, channel: &str, state: Arc<ChannelState>, all: bool) -> Subscription {
        Subscription {
            shared: self.shared.clone(),
            kicks: self.kicks.clone(),
            channel: channel.to_string(),
            confirmations: state.confirmations.subscribe(),
            releases: all.then(|| state.releases.subscribe()),
            handed: state.handed.subscribe(),
            copies: state.copies.subscribe(),
            follow_copies: false,
            state,
            woken: false,
            grant: None,
        }
    }
}
