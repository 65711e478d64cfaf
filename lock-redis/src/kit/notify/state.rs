//! What a client's notifier knows, shared by its node tasks, which deliver
//! the messages, and its subscriptions, which wait for them: the channels
//! its waiters need and, per channel, the wake-ups on their way.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::sync::{broadcast, watch, Notify};
use tokio::time::Instant;

/// How many recent release tokens a channel remembers, to drop the copies
/// of one release that arrive from several nodes.
pub(super) const RECENT_TOKENS: usize = 16;
/// How long a channel stays subscribed after its last local waiter left.
pub const LINGER: Duration = Duration::from_millis(100);

pub(super) fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Bit `node` of a set of nodes; 0 for nodes past the 64th, which are not
/// counted.
pub(super) fn node_bit(node: usize) -> u64 {
    u32::try_from(node)
        .ok()
        .and_then(|n| 1u64.checked_shl(n))
        .unwrap_or(0)
}

/// The state of one client's notifier, shared by its node tasks and its
/// subscriptions.
pub(super) struct Shared {
    pub(super) channels: Mutex<HashMap<String, Entry>>,
    pub(super) nodes: usize,
    /// This client's inbox channel and its id, if it has one.
    pub(super) inbox: Option<(String, String)>,
}

/// One channel that local waiters need (or needed, until [`LINGER`] after
/// the last one left).
pub(super) struct Entry {
    /// Local waiters on this channel.
    pub(super) refs: usize,
    /// When the last waiter left (the channel lingers until [`LINGER`] after).
    pub(super) idle_since: Option<Instant>,
    pub(super) state: Arc<ChannelState>,
}

/// One node's announcement of a waiter's turn: the node, and the turn
/// sequence of its reservation (`None`: a message without one).
pub type TurnAnnouncement = (usize, Option<u64>);

/// Where a grant for one owner token (or a turn for one wait id) lands.
#[derive(Default)]
pub(super) struct GrantSlot {
    /// The fencing token the grant came with.
    pub(super) fence: Mutex<Option<u64>>,
    /// The owner token of the release that made it this waiter's turn.
    pub(super) turn_of: Mutex<Option<String>>,
    /// The owner token of the latest release announced as this waiter's
    /// turn since its last attempt began, and each announcement of it: the
    /// node and the turn sequence it carried (if any), each pair once.
    pub(super) heard: Mutex<(String, Vec<TurnAnnouncement>)>,
    pub(super) notify: Notify,
}

impl GrantSlot {
    /// Node `node` announced the release by `owner` as this waiter's
    /// turn, with turn sequence `seq` (if the message carried one).
    pub(super) fn heard_turn(&self, owner: &str, node: usize, seq: Option<u64>) {
        let mut heard = locked(&self.heard);
        if heard.0 != owner {
            *heard = (owner.to_string(), Vec::new());
        }
        if !heard.1.contains(&(node, seq)) {
            heard.1.push((node, seq));
        }
    }
}

/// The wake-ups of one channel.
pub(super) struct ChannelState {
    /// One permit per release: wakes one waiter (or the next one to wait).
    pub(super) notify: Notify,
    /// Bumped on every release: wakes every `subscribe_all` waiter.
    pub(super) releases: watch::Sender<u64>,
    /// Per node: subscribed and confirmed by the server now.
    pub(super) live: Mutex<Vec<bool>>,
    /// Bumped whenever a node (re)confirms the subscription.
    pub(super) confirmations: watch::Sender<u64>,
    /// The last release messages seen, each with the nodes that sent it
    /// (bit `i`: node `i`; nodes past the 64th are not counted), for
    /// dropping duplicates.
    pub(super) recent: Mutex<VecDeque<(Vec<u8>, u64)>>,
    /// Bumped on every copy of a release (from any node, duplicates too).
    pub(super) copies: watch::Sender<u64>,
    /// The owner tokens local waiters expect a grant for.
    pub(super) grants: Mutex<HashMap<String, Arc<GrantSlot>>>,
    /// The TTL (ms) of the latest hand-over, announced to every waiter.
    pub(super) handed: watch::Sender<u64>,
    /// For a channel that followers observe ([`Notifier::observe`]): every
    /// message, as it came, to each of them (no wake-ups).
    ///
    /// [`Notifier::observe`]: super::Notifier::observe
    pub(super) observed: OnceLock<broadcast::Sender<Arc<[u8]>>>,
}

impl ChannelState {
    /// A channel that no node confirmed yet, among `nodes` nodes.
    pub(super) fn new(nodes: usize) -> Self {
        Self {
            notify: Notify::new(),
            releases: watch::channel(0).0,
            live: Mutex::new(vec![false; nodes]),
            confirmations: watch::channel(0).0,
            recent: Mutex::new(VecDeque::new()),
            copies: watch::channel(0).0,
            grants: Mutex::new(HashMap::new()),
            handed: watch::channel(0).0,
            observed: OnceLock::new(),
        }
    }

    /// Whether at least one node confirmed the subscription now.
    pub(super) fn is_live(&self) -> bool {
        locked(&self.live).iter().any(|l| *l)
    }
}

impl Shared {
    /// The channels to be subscribed on every node: those of the local
    /// waiters (lingering ones included), with the inbox if there are any.
    pub(super) fn wanted(&self) -> HashSet<String> {
        let mut wanted: HashSet<String> = locked(&self.channels).keys().cloned().collect();
        if let (false, Some((inbox, _))) = (wanted.is_empty(), &self.inbox) {
            wanted.insert(inbox.clone());
        }
        wanted
    }

    /// The state of `channel`, if local waiters need it.
    pub(super) fn state_of(&self, channel: &str) -> Option<Arc<ChannelState>> {
        locked(&self.channels).get(channel).map(|e| e.state.clone())
    }

    /// Forgets the channels nobody waited on for [`LINGER`]; when the next
    /// of the others stops lingering, if any does.
    pub(super) fn sweep(&self) -> Option<Instant> {
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
    pub(super) fn confirm(&self, node: usize, on_server: &HashSet<String>) {
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
}
