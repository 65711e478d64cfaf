//! The notifier's task for a Redis Cluster: one subscription-only
//! connection per primary ([`Shard`]), each channel subscribed at the
//! owner of its slot, and every loss of a subscription followed by a new
//! one at the owner the refreshed slot map names.
//!
//! A channel is lost when its primary unsubscribes it without being asked
//! (a `sunsubscribe` push: the slot left the node), when `SSUBSCRIBE` is
//! answered `MOVED` (or `ASK`, `TRYAGAIN`, `CLUSTERDOWN`), or when its
//! connection fails (closed, `PING` unanswered, a reply that does not
//! answer its request). The channel is then unconfirmed at once, the slot
//! map is refreshed (at most once per backoff; asked of the node that
//! gave the slot up or named its owner, which knows where it went, while
//! others may not have heard yet), and the channel is
//! subscribed at the slot's owner: that confirmation wakes its waiters
//! with `Wake::Subscribed` (a release may have gone unheard meanwhile).
//! Every connection is pinged every [`PING_INTERVAL`], however busy the
//! others are, and the slot map is read again on each such round, for a
//! slot that moved without a word from its old owner. Messages are
//! delivered while a request is awaited, so a slow or silent primary
//! never holds up the releases heard from the others.
//!
//! The cluster counts as one node of the notifier: a channel is confirmed
//! while the owner of its slot (as far as this task knows) counts it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::Arc;

use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::backoff::Backoff;
use super::cluster::{NotifyCluster, SlotMap};
use super::connection::{dispatch, take_kicks, Timeouts, PING_INTERVAL};
use super::shard::{Push, Refused, Shard};
use super::state::Shared;

/// Starts the task of the cluster that is node `index` of the notifier;
/// it reconciles its subscriptions on each of `kicks` and ends when they
/// close.
pub(super) fn spawn(
    index: usize,
    cluster: Arc<NotifyCluster>,
    shared: Arc<Shared>,
    kicks: mpsc::UnboundedReceiver<()>,
    timeouts: Timeouts,
) {
    let (push_tx, pushes) = mpsc::unbounded_channel();
    let task = ClusterTask {
        index,
        cluster,
        shared: shared.clone(),
        kicks,
        timeouts,
        push_tx,
        pushes: Pushes {
            rx: pushes,
            later: VecDeque::new(),
            shared,
            index,
        },
        map: SlotMap::default(),
        map_stale: true,
        map_from: None,
        map_not_before: Instant::now(),
        map_backoff: Backoff::new(),
        shards: HashMap::new(),
        down: HashMap::new(),
        next_id: 0,
        retry_at: None,
        next_ping: Instant::now() + PING_INTERVAL,
    };
    tokio::spawn(task.run());
}

/// The pushes of every connection, in order.
struct Pushes {
    rx: mpsc::UnboundedReceiver<Push>,
    /// Those that came while a request was awaited, other than messages.
    later: VecDeque<Push>,
    shared: Arc<Shared>,
    index: usize,
}

impl Pushes {
    /// Awaits `request`, delivering the messages that arrive meanwhile
    /// (a slow or silent node never holds up the releases heard from the
    /// others); other pushes wait for [`next_now`](Self::next_now).
    async fn during<T>(&mut self, request: impl Future<Output = T>) -> T {
        tokio::pin!(request);
        loop {
            tokio::select! {
                out = &mut request => return out,
                Some(push) = self.rx.recv() => {
                    if !deliver(&self.shared, self.index, &push.1) {
                        self.later.push_back(push);
                    }
                }
            }
        }
    }

    /// A push that arrived already, if any.
    fn next_now(&mut self) -> Option<Push> {
        self.later.pop_front().or_else(|| self.rx.try_recv().ok())
    }
}

/// Delivers `push` if it is a message (`smessage`); whether it was.
fn deliver(shared: &Shared, index: usize, push: &PushInfo) -> bool {
    if push.kind != PushKind::SMessage {
        return false;
    }
    if let [Value::BulkString(channel), Value::BulkString(message), ..] = push.data.as_slice() {
        if let Ok(channel) = std::str::from_utf8(channel) {
            dispatch(shared, index, channel, message);
        }
    }
    true
}

/// An address whose connection failed: not tried again before `until`.
struct Down {
    backoff: Backoff,
    until: Instant,
}

/// The subscriptions of one client to one cluster.
struct ClusterTask {
    index: usize,
    cluster: Arc<NotifyCluster>,
    shared: Arc<Shared>,
    kicks: mpsc::UnboundedReceiver<()>,
    timeouts: Timeouts,
    /// Given to each shard's connection; its pushes come on `pushes`.
    push_tx: mpsc::UnboundedSender<Push>,
    pushes: Pushes,
    map: SlotMap,
    /// The slot map may be wrong: refresh it when allowed.
    map_stale: bool,
    /// The node to ask for it: one that just told where a slot went.
    map_from: Option<String>,
    /// No refresh before this.
    map_not_before: Instant,
    map_backoff: Backoff,
    /// The connection to each primary that has subscriptions, by address.
    shards: HashMap<String, Shard>,
    down: HashMap<String, Down>,
    next_id: u64,
    /// When a reconciliation left something undone that can be tried again.
    retry_at: Option<Instant>,
    /// The next `PING` round: every connection, every [`PING_INTERVAL`],
    /// however busy the others are (a message on one connection says
    /// nothing of another).
    next_ping: Instant,
}

/// The earlier of `a` and `b`, either possibly absent.
fn earliest(a: Option<Instant>, b: Instant) -> Option<Instant> {
    Some(a.map_or(b, |a| a.min(b)))
}

impl ClusterTask {
    /// Reconciles whenever the waiters' channels change, a push or a
    /// failure asks for it, or a backoff ends; pings the connections.
    async fn run(mut self) {
        let mut dirty = true;
        loop {
            // Nothing to listen to: wait for the first waiter.
            while self.shards.is_empty() && self.shared.wanted().is_empty() {
                match self.kicks.recv().await {
                    Some(()) => dirty = true,
                    None => return,
                }
            }
            let linger_ends = self.shared.sweep();
            match take_kicks(&mut self.kicks) {
                Some(kicked) => dirty |= kicked,
                None => return,
            }
            while let Some(push) = self.pushes.next_now() {
                dirty |= self.on_push(push);
            }
            if dirty {
                dirty = false;
                self.reconcile().await;
            }
            let retry_at = self.retry_at;
            tokio::select! {
                kick = self.kicks.recv() => match kick {
                    None => return,
                    Some(()) => dirty = true,
                },
                Some(push) = self.pushes.rx.recv() => dirty |= self.on_push(push),
                _ = tokio::time::sleep_until(linger_ends.unwrap_or_else(Instant::now)), if linger_ends.is_some() => {
                    // A channel stopped lingering: the sweep at the top drops it.
                    dirty = true;
                }
                _ = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {
                    dirty = true;
                }
                _ = tokio::time::sleep_until(self.next_ping), if !self.shards.is_empty() => {
                    self.next_ping = Instant::now() + PING_INTERVAL;
                    self.ping_all().await;
                    // The slot map is read again on each round too: a
                    // slot that moved without a word from its old owner
                    // is then subscribed where it is now.
                    self.map_stale = true;
                    dirty = true;
                }
            }
        }
    }

    /// Handles one push; whether the subscriptions need a reconciliation.
    fn on_push(&mut self, (id, push): Push) -> bool {
        // A release heard is a release, whichever connection brought it.
        if deliver(&self.shared, self.index, &push) {
            return false;
        }
        let Some(addr) = self
            .shards
            .iter()
            .find(|(_, s)| s.id == id)
            .map(|(addr, _)| addr.clone())
        else {
            // From a connection closed since.
            return false;
        };
        let channel = match push.data.first() {
            Some(Value::BulkString(c)) => std::str::from_utf8(c).ok(),
            _ => None,
        };
        match (push.kind, channel) {
            (PushKind::SUnsubscribe, Some(channel)) => {
                // Our own SUNSUBSCRIBE took the channel off `on_server`
                // before its copy of the reply comes here: this one the
                // node sent by itself (the slot left it).
                let lost = self
                    .shards
                    .get_mut(&addr)
                    .is_some_and(|s| s.on_server.remove(channel));
                if lost {
                    tracing::debug!(node = %addr, %channel, "distlock redis: the node unsubscribed a release channel (its slot moved); subscribing at the new owner");
                    self.map_stale = true;
                    self.map_from = Some(addr);
                    self.confirm();
                }
                lost
            }
            (PushKind::Disconnection, _) => {
                self.fail(&addr, "the connection closed".into());
                true
            }
            _ => false,
        }
    }

    /// Marks each channel live iff the owner of its slot counts it.
    fn confirm(&self) {
        let on_server: HashSet<String> = self
            .shards
            .values()
            .flat_map(|s| s.on_server.iter().cloned())
            .collect();
        self.shared.confirm(self.index, &on_server);
    }

    /// The connection to `addr` failed: its channels are unconfirmed now,
    /// the address is not tried again before its backoff ends, and the
    /// slot map is refreshed (the node may have lost its slots).
    fn fail(&mut self, addr: &str, reason: String) {
        let healthy = self.shards.remove(addr).is_some_and(|s| s.healthy);
        self.back_off(addr, healthy, &reason);
        self.confirm();
    }

    /// `addr` is not tried again before its backoff ends.
    fn back_off(&mut self, addr: &str, healthy: bool, reason: &str) {
        let down = self.down.entry(addr.to_string()).or_insert(Down {
            backoff: Backoff::new(),
            until: Instant::now(),
        });
        let pause = down.backoff.pause(healthy);
        down.until = Instant::now() + pause;
        self.map_stale = true;
        self.retry_at = earliest(self.retry_at, down.until);
        tracing::debug!(node = %addr, %reason, ?pause, "distlock redis: release-notification connection to a cluster node failed; its waiters re-check at the holder's TTL until it is back");
    }

    /// Pings every connection; those that fail are closed.
    async fn ping_all(&mut self) {
        let t = self.timeouts;
        let mut failed = Vec::new();
        for (addr, shard) in &mut self.shards {
            if let Err(reason) = self.pushes.during(shard.ping(t)).await {
                failed.push((addr.clone(), reason));
            }
        }
        for (addr, reason) in failed {
            self.fail(&addr, reason);
        }
    }

    /// Refreshes the slot map if it is stale and the backoff allows it.
    async fn refresh_map(&mut self) {
        if !self.map_stale || Instant::now() < self.map_not_before {
            return;
        }
        self.map_not_before = Instant::now() + self.map_backoff.pause(false);
        let from = self.map_from.take();
        let asking = self.cluster.slot_map(from.as_deref());
        let limit = self.timeouts.request;
        match self
            .pushes
            .during(tokio::time::timeout(limit, asking))
            .await
        {
            Ok(Ok(map)) => {
                self.map = map;
                self.map_stale = false;
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "distlock redis: CLUSTER SLOTS failed; the notifier tries again")
            }
            Err(_) => {
                tracing::debug!(
                    "distlock redis: CLUSTER SLOTS unanswered; the notifier tries again"
                )
            }
        }
    }

    /// Unsubscribes the channels no waiter needs and those whose slot the
    /// map puts on another node; subscribes every wanted channel at its
    /// slot's owner; closes the connections left without channels.
    async fn reconcile(&mut self) {
        let t = self.timeouts;
        self.retry_at = None;
        let wanted = self.shared.wanted();
        if !wanted.is_empty() {
            self.refresh_map().await;
        }
        let mut failed = Vec::new();
        for (addr, shard) in &mut self.shards {
            let leaving: Vec<String> = shard
                .on_server
                .iter()
                .filter(|c| !wanted.contains(*c) || self.map.owner(c) != Some(addr.as_str()))
                .cloned()
                .collect();
            for channel in leaving {
                if let Err(reason) = self.pushes.during(shard.unsubscribe(&channel, t)).await {
                    failed.push((addr.clone(), reason));
                    break;
                }
            }
        }
        for (addr, reason) in failed {
            self.fail(&addr, reason);
        }
        self.confirm();
        let subscribed: HashSet<String> = self
            .shards
            .values()
            .flat_map(|s| s.on_server.iter().cloned())
            .collect();
        for channel in wanted.difference(&subscribed) {
            let Some(owner) = self.map.owner(channel).map(str::to_string) else {
                self.map_stale = true;
                continue;
            };
            if let Some(down) = self.down.get(&owner).filter(|d| Instant::now() < d.until) {
                self.retry_at = earliest(self.retry_at, down.until);
                continue;
            }
            if !self.shards.contains_key(&owner) {
                if let Err(reason) = self.open(&owner).await {
                    self.back_off(&owner, false, &reason);
                    continue;
                }
            }
            let Some(shard) = self.shards.get_mut(&owner) else {
                continue;
            };
            match self.pushes.during(shard.subscribe(channel, t)).await {
                Ok(()) => {}
                Err(Refused::Elsewhere(reason, named)) => {
                    tracing::debug!(node = %owner, %reason, "distlock redis: a release channel's slot is not served where the slot map says; refreshing it");
                    self.map_stale = true;
                    self.map_from = named.or(Some(owner));
                }
                Err(Refused::Failed(reason)) => self.fail(&owner, reason),
            }
        }
        self.shards.retain(|_, s| !s.on_server.is_empty());
        self.confirm();
        if self.map_stale {
            self.retry_at = earliest(self.retry_at, self.map_not_before);
        } else if self.retry_at.is_none() {
            self.map_backoff = Backoff::new();
        }
    }

    /// Opens the connection to the primary at `addr`.
    async fn open(&mut self, addr: &str) -> Result<(), String> {
        let client = self.cluster.client(addr)?;
        self.next_id += 1;
        let opening = Shard::open(&client, self.next_id, self.push_tx.clone(), self.timeouts);
        let shard = self.pushes.during(opening).await?;
        self.shards.insert(addr.to_string(), shard);
        Ok(())
    }
}
