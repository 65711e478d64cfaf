//! Release notifications: one pub/sub connection per client, shared by all of
//! its waiters.
//!
//! A waiting acquire [`subscribe`](Notifier::subscribe)s to the lock's
//! `{key}:released` channel. A background task owns the pub/sub connection:
//! it subscribes to a channel while at least one local waiter wants it,
//! unsubscribes when the last one leaves, reconnects (and resubscribes) when
//! the connection breaks, and hands each message to ONE local waiter of that
//! channel (the local waiters are interchangeable, so waking all of them would
//! be a herd inside the process). A waiter that was woken but is dropped
//! before it retried passes the wake-up on.
//!
//! A waiter learns when its channel is confirmed on the server (it must retry
//! after that, since a release before the confirmation published to nobody)
//! and when it is confirmed again after a reconnection (messages may have been
//! missed while the connection was down).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

/// First delay before reconnecting the pub/sub connection after a failure.
const MIN_BACKOFF: Duration = Duration::from_millis(25);
/// Longest delay between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// How often an idle pub/sub connection is pinged, to notice a dead one.
const PING_INTERVAL: Duration = Duration::from_secs(5);

/// The per-client hub of release notifications. Dropping it (with every
/// [`Subscription`]) stops its task and closes the connection.
pub(crate) struct Notifier {
    shared: Arc<Shared>,
    kick: mpsc::UnboundedSender<()>,
}

#[derive(Default)]
struct Shared {
    channels: Mutex<HashMap<String, Entry>>,
}

struct Entry {
    /// Local waiters on this channel.
    refs: usize,
    state: Arc<ChannelState>,
}

struct ChannelState {
    /// One permit per message: wakes one waiter (or the next one to wait).
    notify: Notify,
    /// Whether the channel is subscribed on the server now.
    confirmed: watch::Sender<bool>,
}

impl Shared {
    fn channels(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wanted(&self) -> HashSet<String> {
        self.channels().keys().cloned().collect()
    }

    /// Marks each channel confirmed iff it is in `on_server`.
    fn confirm(&self, on_server: &HashSet<String>) {
        for (channel, entry) in self.channels().iter() {
            let now = on_server.contains(channel);
            entry
                .state
                .confirmed
                .send_if_modified(|c| std::mem::replace(c, now) != now);
        }
    }

    fn wake(&self, channel: &str) {
        if let Some(entry) = self.channels().get(channel) {
            entry.state.notify.notify_one();
        }
    }
}

/// Timeouts of the pub/sub connection.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    pub(crate) connect: Duration,
    pub(crate) request: Duration,
}

impl Notifier {
    /// Starts the task (it connects on the first subscription). Must be called
    /// within a tokio runtime.
    pub(crate) fn start(client: redis::Client, timeouts: Timeouts) -> Self {
        let shared = Arc::new(Shared::default());
        let (kick, kicks) = mpsc::unbounded_channel();
        tokio::spawn(run(shared.clone(), kicks, client, timeouts));
        Self { shared, kick }
    }

    /// Registers a waiter on `channel`; the server subscription follows in
    /// the background (see [`Subscription::confirmed_by`]).
    pub(crate) fn subscribe(&self, channel: &str) -> Subscription {
        let (state, new) = {
            let mut channels = self.shared.channels();
            let mut new = false;
            let entry = channels.entry(channel.to_string()).or_insert_with(|| {
                new = true;
                Entry {
                    refs: 0,
                    state: Arc::new(ChannelState {
                        notify: Notify::new(),
                        confirmed: watch::channel(false).0,
                    }),
                }
            });
            entry.refs += 1;
            (entry.state.clone(), new)
        };
        if new {
            let _ = self.kick.send(());
        }
        Subscription {
            shared: self.shared.clone(),
            kick: self.kick.clone(),
            channel: channel.to_string(),
            confirmed: state.confirmed.subscribe(),
            state,
            woken: false,
        }
    }
}

/// Why [`Subscription::wait_until`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// A release was published.
    Notified,
    /// The channel was (re)subscribed: a release may have gone unseen.
    Subscribed,
    /// The time given.
    Timer,
}

/// One waiter's registration on a channel. Dropping it (never blocking)
/// unregisters; the last one out unsubscribes in the background.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    kick: mpsc::UnboundedSender<()>,
    channel: String,
    state: Arc<ChannelState>,
    confirmed: watch::Receiver<bool>,
    /// Woken by a message and not yet retried: pass the wake-up on if dropped.
    woken: bool,
}

impl Subscription {
    /// Waits until the channel is subscribed on the server, or `until`.
    pub(crate) async fn confirmed_by(&mut self, until: Instant) -> bool {
        matches!(
            tokio::time::timeout_at(until, self.confirmed.wait_for(|c| *c)).await,
            Ok(Ok(_))
        )
    }

    /// Call right before an attempt: later (re)subscriptions wake the next wait.
    pub(crate) fn before_attempt(&mut self) {
        self.confirmed.borrow_and_update();
    }

    /// Call right after an attempt, whatever its outcome: the wake-up was used.
    pub(crate) fn after_attempt(&mut self) {
        self.woken = false;
    }

    /// Sleeps until a release is published on the channel, the channel is
    /// (re)subscribed, or `at`.
    pub(crate) async fn wait_until(&mut self, at: Instant) -> Wake {
        let (state, confirmed) = (&self.state, &mut self.confirmed);
        let wake = tokio::select! {
            _ = state.notify.notified() => Wake::Notified,
            _ = became_confirmed(confirmed) => Wake::Subscribed,
            _ = tokio::time::sleep_until(at) => Wake::Timer,
        };
        if wake == Wake::Notified {
            self.woken = true;
        }
        wake
    }
}

async fn became_confirmed(rx: &mut watch::Receiver<bool>) {
    loop {
        if rx.changed().await.is_err() {
            // The notifier task is gone: only the timer is left.
            std::future::pending::<()>().await;
        }
        if *rx.borrow_and_update() {
            return;
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.woken {
            self.state.notify.notify_one();
        }
        let last = {
            let mut channels = self.shared.channels();
            match channels.get_mut(&self.channel) {
                Some(entry) if entry.refs > 1 => {
                    entry.refs -= 1;
                    false
                }
                Some(_) => {
                    channels.remove(&self.channel);
                    true
                }
                None => false,
            }
        };
        if last {
            let _ = self.kick.send(());
        }
    }
}

/// The pub/sub connection's task. Ends when the notifier and every
/// subscription are gone (the kick channel closes).
async fn run(
    shared: Arc<Shared>,
    mut kicks: mpsc::UnboundedReceiver<()>,
    client: redis::Client,
    timeouts: Timeouts,
) {
    let mut conn: Option<(PubSubSink, PubSubStream)> = None;
    let mut on_server: HashSet<String> = HashSet::new();
    let mut dirty = true;
    let mut backoff = MIN_BACKOFF;
    loop {
        // Take every pending kick: one reconciliation serves them all.
        loop {
            match kicks.try_recv() {
                Ok(()) => dirty = true,
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => return,
            }
        }
        if conn.is_none() {
            if shared.wanted().is_empty() {
                // Nobody waits: stay disconnected until someone does.
                if kicks.recv().await.is_none() {
                    return;
                }
                dirty = true;
                continue;
            }
            match tokio::time::timeout(timeouts.connect, client.get_async_pubsub()).await {
                Ok(Ok(pubsub)) => {
                    tracing::debug!("distlock redis: pub/sub connection established");
                    conn = Some(pubsub.split());
                    on_server.clear();
                    dirty = true;
                    backoff = MIN_BACKOFF;
                }
                Ok(Err(err)) => {
                    tracing::debug!(error = %err, "distlock redis: pub/sub connection failed; waiters re-check at the holder's TTL");
                    if !sleep_or_closed(&mut kicks, &mut backoff).await {
                        return;
                    }
                    continue;
                }
                Err(_) => {
                    tracing::debug!(timeout = ?timeouts.connect, "distlock redis: pub/sub connection timed out; waiters re-check at the holder's TTL");
                    if !sleep_or_closed(&mut kicks, &mut backoff).await {
                        return;
                    }
                    continue;
                }
            }
        }
        let Some((sink, stream)) = conn.as_mut() else {
            continue;
        };
        if dirty {
            dirty = false;
            if let Err(reason) = reconcile(&shared, sink, &mut on_server, timeouts.request).await {
                tracing::debug!(%reason, "distlock redis: pub/sub (un)subscribe failed; reconnecting");
                conn = None;
                on_server.clear();
                shared.confirm(&on_server);
                dirty = true;
                continue;
            }
        }
        enum Event {
            Closed,
            Kick,
            Message(String),
            Alive,
            Dead(String),
        }
        let event = tokio::select! {
            kick = kicks.recv() => match kick {
                None => Event::Closed,
                Some(()) => Event::Kick,
            },
            msg = stream.next() => match msg {
                Some(msg) => Event::Message(msg.get_channel_name().to_string()),
                None => Event::Dead("the pub/sub connection closed".into()),
            },
            _ = tokio::time::sleep(PING_INTERVAL) => {
                match tokio::time::timeout(timeouts.request, sink.ping::<redis::Value>()).await {
                    Ok(Ok(_)) => Event::Alive,
                    Ok(Err(err)) => Event::Dead(format!("ping failed: {err}")),
                    Err(_) => Event::Dead(format!("no reply to ping within {:?}", timeouts.request)),
                }
            }
        };
        match event {
            Event::Closed => return,
            Event::Kick => dirty = true,
            Event::Alive => {}
            Event::Message(channel) => shared.wake(&channel),
            Event::Dead(reason) => {
                tracing::debug!(%reason, "distlock redis: pub/sub connection lost; reconnecting");
                conn = None;
                on_server.clear();
                shared.confirm(&on_server);
                dirty = true;
            }
        }
    }
}

/// Subscribes to the wanted channels not yet subscribed, unsubscribes from
/// the others, and marks which channels are confirmed.
async fn reconcile(
    shared: &Shared,
    sink: &mut PubSubSink,
    on_server: &mut HashSet<String>,
    timeout: Duration,
) -> Result<(), String> {
    let wanted = shared.wanted();
    let to_subscribe: Vec<String> = wanted.difference(on_server).cloned().collect();
    let to_unsubscribe: Vec<String> = on_server.difference(&wanted).cloned().collect();
    if !to_subscribe.is_empty() {
        match tokio::time::timeout(timeout, sink.subscribe(&to_subscribe)).await {
            Ok(Ok(())) => on_server.extend(to_subscribe),
            Ok(Err(err)) => return Err(format!("SUBSCRIBE failed: {err}")),
            Err(_) => return Err(format!("no reply to SUBSCRIBE within {timeout:?}")),
        }
    }
    if !to_unsubscribe.is_empty() {
        match tokio::time::timeout(timeout, sink.unsubscribe(&to_unsubscribe)).await {
            Ok(Ok(())) => {
                for channel in &to_unsubscribe {
                    on_server.remove(channel);
                }
            }
            Ok(Err(err)) => return Err(format!("UNSUBSCRIBE failed: {err}")),
            Err(_) => return Err(format!("no reply to UNSUBSCRIBE within {timeout:?}")),
        }
    }
    shared.confirm(on_server);
    Ok(())
}

/// Sleeps the backoff (doubling it); `false` if the notifier closed meanwhile.
async fn sleep_or_closed(kicks: &mut mpsc::UnboundedReceiver<()>, backoff: &mut Duration) -> bool {
    let until = Instant::now() + *backoff;
    *backoff = (*backoff * 2).min(MAX_BACKOFF);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(until) => return true,
            kick = kicks.recv() => if kick.is_none() { return false },
        }
    }
}
