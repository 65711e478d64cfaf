//! Release notifications for waiting acquirers.
//!
//! The shared `RELEASE` script publishes the releasing owner's token on
//! `{name}:released` on every node where it deleted the key. Each client has,
//! per node, one pub/sub connection (opened when its first waiter appears and
//! reconnected with backoff), subscribed to the channels its waiters need,
//! demultiplexed to them: the first message of a release wakes one waiter of
//! this client (the same release arrives from up to N nodes with the same
//! token, so duplicates are dropped), which then tries the lock. Waiters also
//! re-check on a timer, so a missed message costs time, never liveness.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use rand::Rng;
use tokio::sync::{mpsc, Notify};

/// How many recent release tokens a channel remembers, to drop the copies of
/// one release that arrive from the other nodes.
const RECENT_TOKENS: usize = 16;
/// Reconnect backoff of a node's pub/sub connection.
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The notifications of one client.
pub(crate) struct Notifier {
    shared: Arc<Shared>,
    nodes: Vec<(String, redis::Client)>,
    op_timeout: Duration,
    /// One command queue per node task, started with the first waiter.
    senders: OnceLock<Vec<mpsc::UnboundedSender<Cmd>>>,
}

struct Shared {
    channels: Mutex<HashMap<String, Entry>>,
    next_gen: AtomicU64,
}

struct Entry {
    refs: usize,
    chan: Arc<Channel>,
}

/// One channel that at least one waiter of this client listens to.
struct Channel {
    /// Distinguishes this registration from an earlier one of the same name,
    /// so a late confirmation of the earlier one is not taken for this one.
    gen: u64,
    wake: Notify,
    recent: Mutex<VecDeque<Vec<u8>>>,
    /// Per node: subscribed and confirmed by the server.
    live: Mutex<Vec<bool>>,
    live_changed: Notify,
}

enum Cmd {
    Subscribe(String, u64),
    Unsubscribe(String),
}

impl Shared {
    fn set_live(&self, node: usize, channel: &str, gen: Option<u64>, on: bool) {
        let chan = lock(&self.channels).get(channel).map(|e| e.chan.clone());
        if let Some(chan) = chan {
            if gen.is_none_or(|g| g == chan.gen) {
                lock(&chan.live)[node] = on;
                if on {
                    chan.live_changed.notify_waiters();
                }
            }
        }
    }

    fn node_down(&self, node: usize) {
        let chans: Vec<Arc<Channel>> = lock(&self.channels)
            .values()
            .map(|e| e.chan.clone())
            .collect();
        for chan in chans {
            lock(&chan.live)[node] = false;
        }
    }

    fn active(&self) -> Vec<(String, u64)> {
        lock(&self.channels)
            .iter()
            .map(|(name, e)| (name.clone(), e.chan.gen))
            .collect()
    }

    fn dispatch(&self, channel: &str, token: &[u8]) {
        let chan = lock(&self.channels).get(channel).map(|e| e.chan.clone());
        let Some(chan) = chan else { return };
        {
            let mut recent = lock(&chan.recent);
            if recent.iter().any(|t| t.as_slice() == token) {
                return;
            }
            if recent.len() == RECENT_TOKENS {
                recent.pop_front();
            }
            recent.push_back(token.to_vec());
        }
        chan.wake.notify_one();
    }
}

impl Notifier {
    pub(crate) fn new(nodes: Vec<(String, redis::Client)>, op_timeout: Duration) -> Self {
        Self {
            shared: Arc::new(Shared {
                channels: Mutex::new(HashMap::new()),
                next_gen: AtomicU64::new(1),
            }),
            nodes,
            op_timeout,
            senders: OnceLock::new(),
        }
    }

    fn senders(&self) -> &[mpsc::UnboundedSender<Cmd>] {
        self.senders.get_or_init(|| {
            self.nodes
                .iter()
                .enumerate()
                .map(|(idx, (addr, client))| {
                    let (tx, rx) = mpsc::unbounded_channel();
                    let task = NodeTask {
                        idx,
                        addr: addr.clone(),
                        client: client.clone(),
                        shared: self.shared.clone(),
                        cmds: rx,
                        op_timeout: self.op_timeout,
                    };
                    tokio::spawn(task.run());
                    tx
                })
                .collect()
        })
    }

    /// Registers a waiter on `channel` (subscribing on every node if it is
    /// the first one of this client). Must run inside a Tokio runtime.
    pub(crate) fn register(self: &Arc<Self>, channel: &str) -> Waiter {
        let senders = self.senders();
        let chan = {
            let mut map = lock(&self.shared.channels);
            match map.get_mut(channel) {
                Some(e) => {
                    e.refs += 1;
                    e.chan.clone()
                }
                None => {
                    let gen = self.shared.next_gen.fetch_add(1, Ordering::Relaxed);
                    let chan = Arc::new(Channel {
                        gen,
                        wake: Notify::new(),
                        recent: Mutex::new(VecDeque::new()),
                        live: Mutex::new(vec![false; self.nodes.len()]),
                        live_changed: Notify::new(),
                    });
                    map.insert(
                        channel.to_string(),
                        Entry {
                            refs: 1,
                            chan: chan.clone(),
                        },
                    );
                    // Sent under the map lock: per node, the commands for one
                    // channel stay in the order of the map's changes.
                    for tx in senders {
                        let _ = tx.send(Cmd::Subscribe(channel.to_string(), gen));
                    }
                    chan
                }
            }
        };
        Waiter {
            notifier: self.clone(),
            channel: channel.to_string(),
            chan,
        }
    }
}

/// A registered waiter; dropping it unregisters (and unsubscribes with the last one).
pub(crate) struct Waiter {
    notifier: Arc<Notifier>,
    channel: String,
    chan: Arc<Channel>,
}

impl Waiter {
    /// Whether at least one node confirmed the subscription: a release will
    /// then wake us (unless every subscribed node fails at that moment).
    pub(crate) fn is_live(&self) -> bool {
        lock(&self.chan.live).iter().any(|l| *l)
    }

    /// Waits until [`Waiter::is_live`] or `limit` passes.
    pub(crate) async fn ready(&self, limit: Duration) {
        let _ = tokio::time::timeout(limit, async {
            loop {
                let changed = self.chan.live_changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if self.is_live() {
                    return;
                }
                changed.await;
            }
        })
        .await;
    }

    /// Resolves at the next release notification for this client (one waiter
    /// per release; a notification that finds no one waiting is kept for the
    /// next).
    pub(crate) async fn notified(&self) {
        self.chan.wake.notified().await;
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut map = lock(&self.notifier.shared.channels);
        let last = match map.get_mut(&self.channel) {
            Some(e) if Arc::ptr_eq(&e.chan, &self.chan) => {
                e.refs -= 1;
                e.refs == 0
            }
            _ => false,
        };
        if last {
            map.remove(&self.channel);
            if let Some(senders) = self.notifier.senders.get() {
                for tx in senders {
                    let _ = tx.send(Cmd::Unsubscribe(self.channel.clone()));
                }
            }
        }
    }
}

/// The pub/sub connection of one client to one node.
struct NodeTask {
    idx: usize,
    addr: String,
    client: redis::Client,
    shared: Arc<Shared>,
    cmds: mpsc::UnboundedReceiver<Cmd>,
    op_timeout: Duration,
}

impl NodeTask {
    async fn run(mut self) {
        let mut backoff = MIN_BACKOFF;
        loop {
            // No waiter of this client needs the node: connect when one does
            // (the command that wakes us is covered by the active set).
            while self.shared.active().is_empty() {
                if self.cmds.recv().await.is_none() {
                    return;
                }
            }
            let served = self.serve().await;
            self.shared.node_down(self.idx);
            match served {
                Served::Shutdown => return,
                Served::Dropped(why) => {
                    tracing::debug!(node = %self.addr, reason = %why, "redlock: release-notification connection down; reconnecting");
                }
                Served::Healthy => backoff = MIN_BACKOFF,
            }
            let pause = rand::rng().random_range(backoff / 2..=backoff);
            backoff = (backoff * 2).min(MAX_BACKOFF);
            if !self.sleep_unless_shutdown(pause).await {
                return;
            }
        }
    }

    /// Sleeps for `d`; false if the client was dropped meanwhile. Commands
    /// that arrive are dropped: the next connection subscribes to the whole
    /// active set.
    async fn sleep_unless_shutdown(&mut self, d: Duration) -> bool {
        let sleep = tokio::time::sleep(d);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => return true,
                cmd = self.cmds.recv() => if cmd.is_none() { return false },
            }
        }
    }

    /// One connection's life.
    async fn serve(&mut self) -> Served {
        let pubsub = match tokio::time::timeout(self.op_timeout, self.client.get_async_pubsub())
            .await
        {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => return Served::Dropped(format!("connect: {e}")),
            Err(_) => {
                return Served::Dropped(format!("connect: no answer within {:?}", self.op_timeout))
            }
        };
        let (mut sink, mut stream) = pubsub.split();
        // What was queued while disconnected is covered by the active set.
        loop {
            match self.cmds.try_recv() {
                Ok(_) => continue,
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => return Served::Shutdown,
            }
        }
        let active = self.shared.active();
        if !active.is_empty() {
            let names: Vec<&str> = active.iter().map(|(n, _)| n.as_str()).collect();
            match tokio::time::timeout(self.op_timeout, sink.subscribe(&names)).await {
                Ok(Ok(())) => {
                    for (name, gen) in &active {
                        self.shared.set_live(self.idx, name, Some(*gen), true);
                    }
                }
                Ok(Err(e)) => return Served::Dropped(format!("subscribe: {e}")),
                Err(_) => return Served::Dropped("subscribe: no answer".into()),
            }
        }
        let mut healthy = false;
        loop {
            tokio::select! {
                cmd = self.cmds.recv() => match cmd {
                    None => return Served::Shutdown,
                    Some(Cmd::Subscribe(name, gen)) => {
                        match tokio::time::timeout(self.op_timeout, sink.subscribe(&name)).await {
                            Ok(Ok(())) => {
                                healthy = true;
                                self.shared.set_live(self.idx, &name, Some(gen), true);
                            }
                            Ok(Err(e)) => return Served::Dropped(format!("subscribe: {e}")),
                            Err(_) => return Served::Dropped("subscribe: no answer".into()),
                        }
                    }
                    Some(Cmd::Unsubscribe(name)) => {
                        // A newer registration of the same name is not live
                        // on this node until its own subscribe is confirmed.
                        self.shared.set_live(self.idx, &name, None, false);
                        match tokio::time::timeout(self.op_timeout, sink.unsubscribe(&name)).await {
                            Ok(Ok(())) => healthy = true,
                            Ok(Err(e)) => return Served::Dropped(format!("unsubscribe: {e}")),
                            Err(_) => return Served::Dropped("unsubscribe: no answer".into()),
                        }
                    }
                },
                msg = stream.next() => match msg {
                    Some(msg) => {
                        healthy = true;
                        self.shared.dispatch(msg.get_channel_name(), msg.get_payload_bytes());
                    }
                    None if healthy => return Served::Healthy,
                    None => return Served::Dropped("connection closed".into()),
                },
            }
        }
    }
}

enum Served {
    /// The client was dropped.
    Shutdown,
    /// The connection worked for a while, then closed.
    Healthy,
    /// The connection failed.
    Dropped(String),
}
