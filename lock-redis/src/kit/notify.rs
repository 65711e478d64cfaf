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
//! the node's turn sequence (`n <owner token> <wait id> <sequence>`);
//! [`Subscription::turn_reached`] reports them ([`TurnHeard`]), and a
//! waiter that a quorum named after its last round (a sequence above the
//! one that round's refusal read there) holds the lock by those
//! reservations, with no further request. An announcement alone proves
//! nothing: it may be late, or replayed. A
//! node whose release arrives after the next holder
//! already left its line names the waiter behind it; that waiter sleeps on
//! once a quorum of nodes named one other waiter that this client hears of
//! ([`Subscription::turn_reached`]).
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
//! Every node connection is watched with `PING`; any failure (connect,
//! `SUBSCRIBE`, `PING`, the connection closing) reconnects after a backoff
//! with jitter that only resets once the connection proved healthy, so a
//! server that refuses the subscription (an ACL without channel rights)
//! never causes a connection storm.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use rand::Rng;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

/// First delay before reconnecting a pub/sub connection after a failure.
const MIN_BACKOFF: Duration = Duration::from_millis(25);
/// Longest delay between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How often an idle pub/sub connection is pinged, to notice a dead one.
const PING_INTERVAL: Duration = Duration::from_secs(5);
/// How many recent release tokens a channel remembers, to drop the copies
/// of one release that arrive from several nodes.
const RECENT_TOKENS: usize = 16;
/// How long a channel stays subscribed after its last local waiter left.
pub const LINGER: Duration = Duration::from_millis(100);

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One node the notifier listens to.
#[derive(Clone, Debug)]
pub struct NotifyNode {
    /// The node's address, for logs (`host:port`, never with credentials).
    pub addr: String,
    /// A client of the node (the pub/sub connections are opened from it).
    pub client: redis::Client,
}

/// Timeouts of the pub/sub connections.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// Opening a connection.
    pub connect: Duration,
    /// One `SUBSCRIBE`, `UNSUBSCRIBE` or `PING`.
    pub request: Duration,
}

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

struct Shared {
    channels: Mutex<HashMap<String, Entry>>,
    nodes: usize,
    /// This client's inbox channel and its id, if it has one.
    inbox: Option<(String, String)>,
}

struct Entry {
    /// Local waiters on this channel.
    refs: usize,
    /// When the last waiter left (the channel lingers until [`LINGER`] after).
    idle_since: Option<Instant>,
    state: Arc<ChannelState>,
}

/// Where a grant for one owner token (or a turn for one wait id) lands.
#[derive(Default)]
struct GrantSlot {
    /// The fencing token the grant came with.
    fence: Mutex<Option<u64>>,
    /// The owner token of the release that made it this waiter's turn.
    turn_of: Mutex<Option<String>>,
    /// The owner token of the latest release announced as this waiter's
    /// turn since its last attempt began, and the nodes that announced it
    /// with their turn sequences.
    heard: Mutex<(String, TurnHeard)>,
    notify: Notify,
}

impl GrantSlot {
    /// Node `node` announced the release by `owner` as this waiter's
    /// turn, with turn sequence `seq` (if the message carried one).
    fn heard_turn(&self, owner: &str, node: usize, seq: Option<u64>) {
        let mut heard = locked(&self.heard);
        if heard.0 != owner {
            *heard = (owner.to_string(), TurnHeard::default());
        }
        heard.1.add(node, seq);
    }
}

/// The nodes that announced one release as a waiter's turn in their line
/// (see [`Subscription::turn_reached`]), each with the turn sequence of its
/// reservation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TurnHeard {
    /// Bit `i`: node `i` announced it (nodes past the 64th are left out).
    pub nodes: u64,
    /// `(node, sequence)`: the largest sequence each node announced it
    /// with (an announcement without one proves nothing and is not here).
    seqs: Vec<(usize, u64)>,
}

impl TurnHeard {
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
    pub fn seq(&self, node: usize) -> Option<u64> {
        self.seqs.iter().find(|(n, _)| *n == node).map(|(_, s)| *s)
    }
}

struct ChannelState {
    /// One permit per release: wakes one waiter (or the next one to wait).
    notify: Notify,
    /// Bumped on every release: wakes every `subscribe_all` waiter.
    releases: watch::Sender<u64>,
    /// Per node: subscribed and confirmed by the server now.
    live: Mutex<Vec<bool>>,
    /// Bumped whenever a node (re)confirms the subscription.
    confirmations: watch::Sender<u64>,
    /// The last release messages seen, each with the nodes that sent it
    /// (bit `i`: node `i`; nodes past the 64th are not counted), for
    /// dropping duplicates.
    recent: Mutex<VecDeque<(Vec<u8>, u64)>>,
    /// Bumped on every copy of a release (from any node, duplicates too).
    copies: watch::Sender<u64>,
    /// The owner tokens local waiters expect a grant for.
    grants: Mutex<HashMap<String, Arc<GrantSlot>>>,
    /// The TTL (ms) of the latest hand-over, announced to every waiter.
    handed: watch::Sender<u64>,
}

impl ChannelState {
    fn is_live(&self) -> bool {
        locked(&self.live).iter().any(|l| *l)
    }
}

impl Shared {
    fn wanted(&self) -> HashSet<String> {
        let mut wanted: HashSet<String> = locked(&self.channels).keys().cloned().collect();
        if let (false, Some((inbox, _))) = (wanted.is_empty(), &self.inbox) {
            wanted.insert(inbox.clone());
        }
        wanted
    }

    /// Forgets the channels nobody waited on for [`LINGER`]; when the next
    /// of the others stops lingering, if any does.
    fn sweep(&self) -> Option<Instant> {
        let mut channels = locked(&self.channels);
        let now = Instant::now();
        channels.retain(|_, e| e.refs > 0 || e.idle_since.is_some_and(|t| now < t + LINGER));
        channels
            .values()
            .filter(|e| e.refs == 0)
            .filter_map(|e| e.idle_since)
            .min()
            .map(|t| t + LINGER)
    }

    /// Marks each channel live on `node` iff it is in `on_server` (with the
    /// inbox, if the client has one), and announces the channels that
    /// became live.
    fn confirm(&self, node: usize, on_server: &HashSet<String>) {
        let inbox = self
            .inbox
            .as_ref()
            .is_none_or(|(inbox, _)| on_server.contains(inbox));
        let states: Vec<(bool, Arc<ChannelState>)> = locked(&self.channels)
            .iter()
            .map(|(name, e)| (inbox && on_server.contains(name), e.state.clone()))
            .collect();
        for (now, state) in states {
            let was = std::mem::replace(&mut locked(&state.live)[node], now);
            if now && !was {
                state.confirmations.send_modify(|n| *n += 1);
            }
        }
    }

    fn dispatch(&self, node: usize, channel: &str, message: &[u8]) {
        if self
            .inbox
            .as_ref()
            .is_some_and(|(inbox, _)| inbox == channel)
        {
            // `<release channel>\n<message>`: handled as if it came on that channel.
            let split = message.iter().position(|b| *b == b'\n').and_then(|at| {
                let channel = std::str::from_utf8(&message[..at]).ok()?;
                Some((channel, &message[at + 1..]))
            });
            if let Some((channel, message)) = split {
                self.dispatch(node, channel, message);
            }
            return;
        }
        let state = locked(&self.channels).get(channel).map(|e| e.state.clone());
        let Some(state) = state else { return };
        if let Some(grant) = message.strip_prefix(b"g ") {
            // A hand-over to one waiter: wake it alone, if it is ours.
            let Some((owner, fence, ttl_ms)) = parse_grant(grant) else {
                return;
            };
            let slot = locked(&state.grants).get(owner).cloned();
            if let Some(slot) = slot {
                *locked(&slot.fence) = Some(fence);
                slot.notify.notify_one();
            }
            state.handed.send_replace(ttl_ms);
            return;
        }
        let bit = u32::try_from(node)
            .ok()
            .and_then(|n| 1u64.checked_shl(n))
            .unwrap_or(0);
        // The turn of one waiter in the nodes' line, if it is ours. Copies
        // from several nodes differ only by the node's turn sequence: that
        // is left out of the message remembered below.
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
        if self.nodes > 1 {
            state.copies.send_modify(|n| *n += 1);
            let mut recent = locked(&state.recent);
            if let Some((_, seen)) = recent.iter_mut().find(|(t, _)| t.as_slice() == message) {
                *seen |= bit;
                return;
            }
            if recent.len() == RECENT_TOKENS {
                recent.pop_front();
            }
            recent.push_back((message.to_vec(), bit));
        }
        state.releases.send_modify(|n| *n += 1);
        if message.starts_with(b"n ") {
            // A turn wakes its waiter alone, if it is ours; the others
            // sleep on.
            if let Some((owner, slot)) = turn {
                *locked(&slot.turn_of) = Some(owner.to_string());
                slot.notify.notify_one();
            }
        } else {
            state.notify.notify_one();
        }
    }
}

/// `<owner token or -> <wait id> [<turn sequence>]` of a turn message (a
/// last field that is not a number is no sequence).
fn parse_turn(turn: &[u8]) -> Option<(&str, &str, Option<u64>)> {
    let (owner, rest) = std::str::from_utf8(turn).ok()?.split_once(' ')?;
    Some(match rest.split_once(' ') {
        Some((wait_id, seq)) => (owner, wait_id, Some(seq.parse().ok()?)),
        None => (owner, rest, None),
    })
}

/// `<owner token> <fencing token> <ttl ms>` of a grant message.
fn parse_grant(grant: &[u8]) -> Option<(&str, u64, u64)> {
    let mut parts = std::str::from_utf8(grant).ok()?.split(' ');
    let owner = parts.next()?;
    let fence = parts.next()?.parse().ok()?;
    let ttl_ms = parts.next()?.parse().ok()?;
    Some((owner, fence, ttl_ms))
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
            .map(|(index, node)| {
                let (kick, kicks) = mpsc::unbounded_channel();
                let task = NodeTask {
                    index,
                    node,
                    shared: shared.clone(),
                    kicks,
                    timeouts,
                };
                tokio::spawn(task.run());
                kick
            })
            .collect();
        Self { shared, kicks }
    }

    /// A new wait id, for a waiter's place in Redlock's lines: random, and
    /// naming this client (`<client id>.<random>`) when it has an inbox, so
    /// that the nodes announce the waiter's turn there alone.
    pub fn wait_id(&self) -> String {
        let random = crate::kit::layout::owner_token();
        match &self.shared.inbox {
            Some((_, client)) => format!("{client}.{random}"),
            None => random,
        }
    }

    fn kick_all(&self) {
        for kick in &self.kicks {
            let _ = kick.send(());
        }
    }

    /// Whether this client is subscribed to `channel` on node `node` now (a
    /// release announced there reaches this client too).
    pub fn is_subscribed_on(&self, channel: &str, node: usize) -> bool {
        let state = locked(&self.shared.channels)
            .get(channel)
            .map(|e| e.state.clone());
        state.is_some_and(|s| locked(&s.live).get(node).copied().unwrap_or(false))
    }

    /// Registers a waiter on `channel`, woken by a release unless another
    /// local waiter takes that wake-up; the server subscriptions follow in
    /// the background (see [`Subscription::confirmed_by`]).
    pub fn subscribe(&self, channel: &str) -> Subscription {
        self.register(channel, false)
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
                    state: Arc::new(ChannelState {
                        notify: Notify::new(),
                        releases: watch::channel(0).0,
                        live: Mutex::new(vec![false; self.shared.nodes]),
                        confirmations: watch::channel(0).0,
                        recent: Mutex::new(VecDeque::new()),
                        copies: watch::channel(0).0,
                        grants: Mutex::new(HashMap::new()),
                        handed: watch::channel(0).0,
                    }),
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
/// unregisters; the channel is unsubscribed in the background [`LINGER`]
/// after the last one left.
pub struct Subscription {
    shared: Arc<Shared>,
    kicks: Vec<mpsc::UnboundedSender<()>>,
    channel: String,
    state: Arc<ChannelState>,
    confirmations: watch::Receiver<u64>,
    /// For a `subscribe_all` waiter: the release count it has seen.
    releases: Option<watch::Receiver<u64>>,
    /// Woken by a release and not yet retried: pass the wake-up on if dropped.
    woken: bool,
    /// The owner token whose grant this waiter expects, and where it lands.
    grant: Option<(String, Arc<GrantSlot>)>,
    /// Hand-overs to others (their TTLs), for a waiter expecting a grant.
    handed: watch::Receiver<u64>,
    /// Copies of releases seen, for a waiter following them.
    copies: watch::Receiver<u64>,
    /// The next wait also ends on the next copy of a release.
    follow_copies: bool,
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
        self.copies_of(owner) > 0
    }

    /// How many nodes announced the release by `owner` lately.
    fn copies_of(&self, owner: &str) -> usize {
        let owner = owner.as_bytes();
        locked(&self.state.recent)
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

    /// After a wake-up that made it this waiter's turn in the nodes' line:
    /// waits until `n` of the nodes `among` (bit `i`: node `i`; any nodes
    /// when fewer than `n` are given), at most as many as this client is
    /// subscribed on, announced the release that did, or `until`. A release
    /// reaches the nodes at about the same time, but its announcements
    /// arrive one by one; a round sent at the first would still find the
    /// key on the nodes whose delete is on its way, and fail.
    ///
    /// Returns the nodes that announced that release as this waiter's turn
    /// since its last attempt began, with their turn sequences (an
    /// announcement is no proof of a reservation: the caller compares each
    /// sequence with the one its round's refusal read on that node); none
    /// when the wake-up named no release (a waiter left the line) or was not
    /// a turn. `None` when `n` nodes announced that same
    /// release as the turn of one other waiter before `n` announced it as
    /// ours: the nodes' lines differed (that waiter had already left this
    /// node's line, holding the lock the others gave it), so the lock is
    /// that waiter's on a quorum and a round of ours would fail. We go on
    /// waiting; its release makes it our turn everywhere.
    pub async fn turn_reached(
        &mut self,
        n: usize,
        among: u64,
        until: Instant,
    ) -> Option<TurnHeard> {
        let Some((id, slot)) = &self.grant else {
            return Some(TurnHeard::default());
        };
        let Some(owner) = locked(&slot.turn_of).take() else {
            return Some(TurnHeard::default());
        };
        if owner == "-" {
            // A waiter left the line; no release is on its way.
            return Some(TurnHeard::default());
        }
        let id = id.clone();
        let live = locked(&self.state.live).iter().filter(|l| **l).count();
        let enough = n.min(live).max(1);
        let among = if (among.count_ones() as usize) < n {
            u64::MAX
        } else {
            among
        };
        loop {
            self.copies.borrow_and_update();
            let ours = {
                let heard = locked(&slot.heard);
                if heard.0 == owner {
                    heard.1.clone()
                } else {
                    TurnHeard::default()
                }
            };
            let another = self.turns_of(&owner, &id);
            if (ours.nodes & among).count_ones() as usize >= enough {
                return Some(ours);
            }
            if another >= n {
                // Not a wake-up of ours: nothing to pass on if dropped.
                self.woken = false;
                return None;
            }
            tokio::select! {
                _ = changed(&mut self.copies) => {}
                _ = tokio::time::sleep_until(until) => return Some(ours),
            }
        }
    }

    /// The most nodes that lately announced the release by `owner` as the
    /// turn of one waiter other than `id` (each distinct announcement is
    /// one entry of `recent`).
    fn turns_of(&self, owner: &str, id: &str) -> usize {
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
                        at = at.min(lock_core::add_saturating(Instant::now(), ttl));
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
async fn changed(rx: &mut watch::Receiver<u64>) {
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

/// The pub/sub connection of one client to one node.
struct NodeTask {
    index: usize,
    node: NotifyNode,
    shared: Arc<Shared>,
    kicks: mpsc::UnboundedReceiver<()>,
    timeouts: Timeouts,
}

/// How a connection ended.
enum Ended {
    /// The notifier and every subscription are gone.
    Shutdown,
    /// A failure; `healthy` if the connection had proved itself first.
    Failed { reason: String, healthy: bool },
}

impl NodeTask {
    /// Connects while someone waits, reconnects after failures with backoff.
    async fn run(mut self) {
        let mut backoff = MIN_BACKOFF;
        loop {
            while self.shared.wanted().is_empty() {
                if self.kicks.recv().await.is_none() {
                    return;
                }
            }
            match self.serve().await {
                Ended::Shutdown => return,
                Ended::Failed { reason, healthy } => {
                    self.shared.confirm(self.index, &HashSet::new());
                    if healthy {
                        backoff = MIN_BACKOFF;
                    }
                    let pause = rand::rng().random_range(backoff / 2..=backoff);
                    tracing::debug!(node = %self.node.addr, %reason, ?pause, "distlock redis: release-notification connection failed; waiters re-check at the holder's TTL until it is back");
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    if !self.sleep(pause).await {
                        return;
                    }
                }
            }
        }
    }

    /// Sleeps for `d`; false if the notifier closed meanwhile.
    async fn sleep(&mut self, d: Duration) -> bool {
        let until = lock_core::add_saturating(Instant::now(), d);
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => return true,
                kick = self.kicks.recv() => if kick.is_none() { return false },
            }
        }
    }

    /// One connection's life.
    async fn serve(&mut self) -> Ended {
        let t = self.timeouts;
        let (mut sink, mut stream): (PubSubSink, PubSubStream) =
            match tokio::time::timeout(t.connect, self.node.client.get_async_pubsub()).await {
                Ok(Ok(pubsub)) => pubsub.split(),
                Ok(Err(e)) => return failed(format!("connect: {e}"), false),
                Err(_) => {
                    return failed(format!("connect: no answer within {:?}", t.connect), false)
                }
            };
        let mut on_server: HashSet<String> = HashSet::new();
        let mut healthy = false;
        let mut dirty = true;
        loop {
            let linger_ends = self.shared.sweep();
            // Take every pending kick: one reconciliation serves them all.
            loop {
                match self.kicks.try_recv() {
                    Ok(()) => dirty = true,
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => return Ended::Shutdown,
                }
            }
            if dirty {
                dirty = false;
                if let Err(reason) = self.reconcile(&mut sink, &mut on_server).await {
                    return failed(reason, healthy);
                }
            }
            tokio::select! {
                kick = self.kicks.recv() => match kick {
                    None => return Ended::Shutdown,
                    Some(()) => dirty = true,
                },

                msg = stream.next() => match msg {
                    Some(msg) => {
                        healthy = true;
                        self.shared.dispatch(self.index, msg.get_channel_name(), msg.get_payload_bytes());
                    }
                    None => return failed("the connection closed".into(), healthy),
                },
                _ = tokio::time::sleep_until(linger_ends.unwrap_or_else(Instant::now)), if linger_ends.is_some() => {
                    // A channel stopped lingering: the sweep at the top drops it.
                    dirty = true;
                }
                _ = tokio::time::sleep(PING_INTERVAL) => {
                    match tokio::time::timeout(t.request, sink.ping::<redis::Value>()).await {
                        Ok(Ok(_)) => healthy = true,
                        Ok(Err(e)) => return failed(format!("PING: {e}"), healthy),
                        Err(_) => return failed(format!("PING: no reply within {:?}", t.request), healthy),
                    }
                }
            }
        }
    }

    /// Subscribes to the wanted channels not yet subscribed, unsubscribes
    /// from the others, and marks which channels are live on this node.
    async fn reconcile(
        &self,
        sink: &mut PubSubSink,
        on_server: &mut HashSet<String>,
    ) -> Result<(), String> {
        let limit = self.timeouts.request;
        let wanted = self.shared.wanted();
        let to_subscribe: Vec<String> = wanted.difference(on_server).cloned().collect();
        let to_unsubscribe: Vec<String> = on_server.difference(&wanted).cloned().collect();
        if !to_subscribe.is_empty() {
            match tokio::time::timeout(limit, sink.subscribe(&to_subscribe)).await {
                Ok(Ok(())) => on_server.extend(to_subscribe),
                Ok(Err(e)) => return Err(format!("SUBSCRIBE: {e}")),
                Err(_) => return Err(format!("SUBSCRIBE: no reply within {limit:?}")),
            }
        }
        if !to_unsubscribe.is_empty() {
            match tokio::time::timeout(limit, sink.unsubscribe(&to_unsubscribe)).await {
                Ok(Ok(())) => {
                    for channel in &to_unsubscribe {
                        on_server.remove(channel);
                    }
                }
                Ok(Err(e)) => return Err(format!("UNSUBSCRIBE: {e}")),
                Err(_) => return Err(format!("UNSUBSCRIBE: no reply within {limit:?}")),
            }
        }
        self.shared.confirm(self.index, on_server);
        Ok(())
    }
}

fn failed(reason: String, healthy: bool) -> Ended {
    Ended::Failed { reason, healthy }
}

#[cfg(test)]
mod tests {
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
        n.shared.dispatch(0, &inbox, message);
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

    #[test]
    fn without_an_inbox_wait_ids_are_random_and_name_no_client() {
        let n = no_nodes(None);
        let (a, b) = (n.wait_id(), n.wait_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
    }
}
