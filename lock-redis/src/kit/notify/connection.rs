//! The pub/sub connection of one client to one node: opened while the
//! client has waiters, subscribed to the channels they need, watched with
//! `PING`, reconnected after failures; each message it brings goes to the
//! waiters it is for.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::backoff::Backoff;
use super::cluster::NotifyCluster;
use super::state::Shared;
use super::{grant, release, turn};

/// How often an idle pub/sub connection is pinged, to notice a dead one.
pub(super) const PING_INTERVAL: Duration = Duration::from_secs(5);
/// One node the notifier listens to: a server at a fixed address, one
/// that moves (the primary of a Sentinel-managed deployment, which a
/// failover puts on another server), or a Redis Cluster (each channel at
/// the primary that owns its slot).
#[derive(Clone)]
pub struct NotifyNode {
    source: Source,
}

#[derive(Clone)]
enum Source {
    Server(Server),
    Cluster(Arc<NotifyCluster>),
}

/// A node served by one server at a time.
#[derive(Clone)]
enum Server {
    Fixed {
        addr: String,
        client: Box<redis::Client>,
    },
    Moving(Arc<dyn MovingNode>),
}

/// A node whose server changes: the notifier's connection to it is
/// opened again whenever it moved.
pub trait MovingNode: Send + Sync {
    /// Where the node is now: its address for logs (never with
    /// credentials) and a client of it.
    fn current(&self) -> (String, redis::Client);
    /// A receiver that changes whenever the node moved.
    fn moves(&self) -> watch::Receiver<u64>;
}

impl NotifyNode {
    /// The server at `addr` (for logs: `host:port`, never with
    /// credentials), reached with `client`.
    pub fn fixed(addr: impl Into<String>, client: redis::Client) -> Self {
        Self {
            source: Source::Server(Server::Fixed {
                addr: addr.into(),
                client: Box::new(client),
            }),
        }
    }

    /// A node that moves (see [`MovingNode`]).
    pub fn moving(node: Arc<dyn MovingNode>) -> Self {
        Self {
            source: Source::Server(Server::Moving(node)),
        }
    }

    /// A Redis Cluster, as one node: each channel is subscribed
    /// (`SSUBSCRIBE`) at the primary that owns its slot, and confirmed
    /// while that primary counts it (see [`NotifyCluster`]).
    pub fn cluster(cluster: NotifyCluster) -> Self {
        Self {
            source: Source::Cluster(Arc::new(cluster)),
        }
    }
}

impl Server {
    /// Where the node is now, and a client of it.
    fn current(&self) -> (String, redis::Client) {
        match self {
            Server::Fixed { addr, client } => (addr.clone(), (**client).clone()),
            Server::Moving(node) => node.current(),
        }
    }

    /// What changes when the node moves, for a node that can.
    fn moves(&self) -> Option<watch::Receiver<u64>> {
        match self {
            Server::Fixed { .. } => None,
            Server::Moving(node) => Some(node.moves()),
        }
    }
}

impl std::fmt::Debug for NotifyNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            Source::Server(server) => f
                .debug_struct("NotifyNode")
                .field("addr", &server.current().0)
                .finish_non_exhaustive(),
            Source::Cluster(cluster) => f
                .debug_struct("NotifyNode")
                .field("cluster", cluster)
                .finish_non_exhaustive(),
        }
    }
}

/// Resolves when `moves` changes (never without one).
async fn moved(moves: &mut Option<watch::Receiver<u64>>) {
    match moves {
        Some(rx) => {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

/// Timeouts of the pub/sub connections.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// Opening a connection.
    pub connect: Duration,
    /// One `SUBSCRIBE`, `UNSUBSCRIBE` or `PING`.
    pub request: Duration,
}

/// Delivers `message`, published on `channel` and received from node
/// `node`, to the waiters it is for: a message in this client's inbox as
/// if it came on the channel it names; a grant to the waiter it names
/// ([`grant`]); a turn to the waiter it names, if ours ([`turn`]); a plain
/// release to one waiter ([`release`]). Every release but a grant counts
/// for the `subscribe_all` waiters, once however many nodes sent it.
pub(super) fn dispatch(shared: &Shared, node: usize, channel: &str, message: &[u8]) {
    if let Some(inner) = turn::from_inbox(shared, channel, message) {
        // `<release channel>\n<message>`: handled as if it came on that channel.
        if let Some((channel, message)) = inner {
            dispatch(shared, node, channel, message);
        }
        return;
    }
    let Some(state) = shared.state_of(channel) else {
        return;
    };
    if let Some(followers) = state.observed.get() {
        // A channel followers observe: every message to each of them.
        let _ = followers.send(Arc::from(message));
        return;
    }
    if let Some(grant) = message.strip_prefix(b"g ") {
        // A hand-over to one waiter: wake it alone, if it is ours.
        grant::on_grant(&state, grant);
        return;
    }
    // The turn of one waiter in the nodes' line, if it is ours. Copies
    // from several nodes differ only by the node's turn sequence: that
    // is left out of the message remembered below.
    let (message, turn) = turn::on_turn(&state, node, message);
    if shared.nodes > 1 && !release::first_copy(&state, node, message) {
        return;
    }
    state.releases.send_modify(|n| *n += 1);
    if message.starts_with(b"n ") {
        // A turn wakes its waiter alone, if it is ours; the others
        // sleep on.
        if let Some(turn) = turn {
            turn::wake(turn);
        }
    } else {
        state.notify.notify_one();
    }
}

/// Takes every pending kick (one reconciliation serves them all): whether
/// there was one; `None` once the notifier is gone.
pub(super) fn take_kicks(kicks: &mut mpsc::UnboundedReceiver<()>) -> Option<bool> {
    let mut kicked = false;
    loop {
        match kicks.try_recv() {
            Ok(()) => kicked = true,
            Err(mpsc::error::TryRecvError::Empty) => return Some(kicked),
            Err(mpsc::error::TryRecvError::Disconnected) => return None,
        }
    }
}

/// Starts the task of node `index` (it connects on the first
/// subscription); the returned sender kicks it to reconcile its
/// subscriptions with what the waiters need, and closing it ends the task.
pub(super) fn spawn(
    index: usize,
    node: NotifyNode,
    shared: Arc<Shared>,
    timeouts: Timeouts,
) -> mpsc::UnboundedSender<()> {
    let (kick, kicks) = mpsc::unbounded_channel();
    match node.source {
        Source::Server(node) => {
            let task = NodeTask {
                index,
                node,
                shared,
                kicks,
                timeouts,
            };
            tokio::spawn(task.run());
        }
        Source::Cluster(cluster) => {
            super::sharded::spawn(index, cluster, shared, kicks, timeouts);
        }
    }
    kick
}

/// The pub/sub connection of one client to one node.
struct NodeTask {
    index: usize,
    node: Server,
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
        let mut backoff = Backoff::new();
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
                    let pause = backoff.pause(healthy);
                    tracing::debug!(node = %self.node.current().0, %reason, ?pause, "distlock redis: release-notification connection failed; waiters re-check at the holder's TTL until it is back");
                    // A node that moves meanwhile is tried at once where it is now.
                    let mut moves = self.node.moves();
                    if !self.sleep(pause, &mut moves).await {
                        return;
                    }
                }
            }
        }
    }

    /// Sleeps for `d`, or until the node moved; false if the notifier
    /// closed meanwhile.
    async fn sleep(&mut self, d: Duration, moves: &mut Option<watch::Receiver<u64>>) -> bool {
        let until = lock_core::backend::add_saturating(Instant::now(), d);
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => return true,
                () = moved(moves) => return true,
                kick = self.kicks.recv() => if kick.is_none() { return false },
            }
        }
    }

    /// One connection's life.
    async fn serve(&mut self) -> Ended {
        let t = self.timeouts;
        let mut moves = self.node.moves();
        if let Some(rx) = &mut moves {
            rx.borrow_and_update();
        }
        let (_, client) = self.node.current();
        let (mut sink, mut stream): (PubSubSink, PubSubStream) =
            match tokio::time::timeout(t.connect, client.get_async_pubsub()).await {
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
            match take_kicks(&mut self.kicks) {
                Some(kicked) => dirty |= kicked,
                None => return Ended::Shutdown,
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
                        dispatch(&self.shared, self.index, msg.get_channel_name(), msg.get_payload_bytes());
                    }
                    None => return failed("the connection closed".into(), healthy),
                },
                _ = tokio::time::sleep_until(linger_ends.unwrap_or_else(Instant::now)), if linger_ends.is_some() => {
                    // A channel stopped lingering: the sweep at the top drops it.
                    dirty = true;
                }
                () = moved(&mut moves) => {
                    // Subscribed to a server that is no longer the node:
                    // open the connection again where it is now.
                    return failed("the node moved (a failover)".into(), true);
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
