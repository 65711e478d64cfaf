//! The client's one watch stream: opened while watches exist, reopened on
//! the next endpoint after a failure with every watch resumed from the
//! revision it had reached, and the events routed to their watches.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::{Arc, Weak};
use std::time::Duration;

use etcd_client::{
    EventType, WatchFilterType, WatchOptions, WatchRequestSender, WatchResponse,
    WatchResponseStream,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::registry::{Cmd, Inner, Registration, LINGER};
use crate::client::{EtcdClient, Failure};
use crate::event::WatchEvent;

pub(super) fn create_request(id: i64, reg: &Registration) -> (Vec<u8>, WatchOptions) {
    let mut opts = WatchOptions::new().with_watch_id(id).with_progress_notify();
    if reg.spec.prefix {
        opts = opts.with_prefix();
    }
    if !reg.spec.with_puts {
        opts = opts.with_filters([WatchFilterType::NoPut]);
    }
    if reg.resume_from > 0 {
        opts = opts.with_start_revision(reg.resume_from);
    }
    (reg.spec.key.to_vec(), opts)
}

pub(super) struct Conn {
    sender: WatchRequestSender,
    stream: WatchResponseStream,
    endpoint: usize,
}

/// The stream's task: opens it while watches exist, routes responses,
/// reopens it after failures. Ends when the client is dropped.
pub(super) async fn run(
    inner: Weak<Inner>,
    client: Arc<EtcdClient>,
    cmds: mpsc::UnboundedReceiver<Cmd>,
) {
    let mut task = Task {
        inner,
        client,
        cmds,
        conn: None,
        retry: Duration::from_millis(50),
        sweep: None,
        later: VecDeque::new(),
    };
    loop {
        let Some(me) = task.inner.upgrade() else {
            return;
        };
        let step = if task.conn.is_none() {
            task.open_with_watches(me).await
        } else {
            drop(me);
            task.serve().await
        };
        if step.is_break() {
            return;
        }
    }
}

/// What the stream task keeps between its steps.
struct Task {
    inner: Weak<Inner>,
    client: Arc<EtcdClient>,
    cmds: mpsc::UnboundedReceiver<Cmd>,
    /// The stream, while it is open.
    conn: Option<Conn>,
    /// How long to wait before the next try to open the stream.
    retry: Duration,
    /// When the next idle shared watch is due to end.
    sweep: Option<Instant>,
    /// Watches to create later, in the order they are due.
    later: VecDeque<(Instant, i64)>,
}

impl Task {
    /// While the stream is closed: opens it with the first watch due and
    /// creates every other one from where it was, or waits for a watch to
    /// be wanted. Breaks when the client is gone.
    async fn open_with_watches(&mut self, me: Arc<Inner>) -> ControlFlow<()> {
        // A watch due later waits for its time, also to open the stream;
        // the others are created when it opens.
        while let Ok(cmd) = self.cmds.try_recv() {
            if let Cmd::CreateAt(id, due) = cmd {
                self.later.push_back((due, id));
            }
        }
        let now = Instant::now();
        while self.later.front().is_some_and(|(due, _)| *due <= now) {
            self.later.pop_front();
        }
        // By the registration's own due time: its command may still be
        // on its way (it is sent after the registration is made).
        let first = {
            let mut st = me.state();
            st.watches
                .iter_mut()
                .filter(|(_, reg)| reg.due.is_none_or(|due| due <= now))
                .min_by_key(|(id, _)| **id)
                .map(|(id, reg)| (*id, sent_request(*id, reg)))
        };
        let Some((first_id, (key, opts))) = first else {
            drop(me);
            self.sweep = None;
            // Nothing to watch yet: wait for a command, or for the
            // first watch due later.
            let due = self.later.front().map(|(due, _)| *due);
            tokio::select! {
                cmd = self.cmds.recv() => match cmd {
                    None => return ControlFlow::Break(()),
                    Some(Cmd::CreateAt(id, due)) => self.later.push_back((due, id)),
                    Some(_) => {}
                },
                _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {}
            }
            return ControlFlow::Continue(());
        };
        match open(&self.client, key, opts).await {
            Ok(mut c) => {
                // Every other watch, from where it was.
                let rest: Vec<(Vec<u8>, WatchOptions)> = {
                    let mut st = me.state();
                    let mut rest: Vec<(&i64, &mut Registration)> = st
                        .watches
                        .iter_mut()
                        .filter(|(id, _)| **id != first_id)
                        .collect();
                    rest.sort_by_key(|(id, _)| **id);
                    rest.into_iter()
                        .map(|(id, reg)| sent_request(*id, reg))
                        .collect()
                };
                let mut ok = true;
                for (key, opts) in rest {
                    lock_core::metrics::count_request("etcd", "watch");
                    if c.sender.watch(key, Some(opts)).await.is_err() {
                        ok = false;
                        break;
                    }
                }
                // Watches asked for while these went out, and watches
                // ended meanwhile, have their commands still queued:
                // the loop below sends what is not sent yet (a watch
                // in `rest` is marked sent, and one due later is sent
                // when due) and the cancels.
                if ok {
                    self.retry = Duration::from_millis(50);
                    self.sweep = Some(Instant::now());
                    self.conn = Some(c);
                } else {
                    self.client.failed(c.endpoint);
                }
            }
            Err(reason) => {
                tracing::debug!(%reason, retry = ?self.retry, "distlock etcd: watch stream could not be opened; retrying");
                drop(me);
                tokio::time::sleep(self.retry).await;
                self.retry = (self.retry * 2).min(Duration::from_secs(1));
            }
        }
        ControlFlow::Continue(())
    }

    /// While the stream is open: one event of the stream, of the commands,
    /// or of the timers (a watch due, an idle shared watch to end). Breaks
    /// when the client is gone.
    async fn serve(&mut self) -> ControlFlow<()> {
        let Some(c) = self.conn.as_mut() else {
            return ControlFlow::Continue(());
        };
        let sweep_at = self.sweep;
        let create_at = self.later.front().map(|(due, _)| *due);
        tokio::select! {
            _ = tokio::time::sleep_until(create_at.unwrap_or_else(Instant::now)), if create_at.is_some() => {
                let Some(me) = self.inner.upgrade() else { return ControlFlow::Break(()) };
                let now = Instant::now();
                let mut due = Vec::new();
                while let Some(&(at, id)) = self.later.front() {
                    if at > now {
                        break;
                    }
                    self.later.pop_front();
                    due.push(id);
                }
                let requests = due_requests(&me, &due);
                drop(me);
                for (key, opts) in requests {
                    lock_core::metrics::count_request("etcd", "watch");
                    if c.sender.watch(key, Some(opts)).await.is_err() {
                        self.client.failed(c.endpoint);
                        self.conn = None;
                        break;
                    }
                }
            }
            _ = tokio::time::sleep_until(sweep_at.unwrap_or_else(Instant::now)), if sweep_at.is_some() => {
                let Some(me) = self.inner.upgrade() else { return ControlFlow::Break(()) };
                let (expired, next) = me.state().expire_idle(Instant::now());
                drop(me);
                self.sweep = next;
                for id in expired {
                    if c.sender.cancel(id).await.is_err() {
                        self.client.failed(c.endpoint);
                        self.conn = None;
                        break;
                    }
                }
            }
            cmd = self.cmds.recv() => match cmd {
                None => return ControlFlow::Break(()),
                Some(Cmd::Idle) => {
                    self.sweep = Some(self.sweep.unwrap_or_else(|| Instant::now() + LINGER));
                }
                Some(Cmd::CreateAt(id, due)) => self.later.push_back((due, id)),
                Some(Cmd::Create(id)) => {
                    let request = self.inner
                        .upgrade()
                        .and_then(|me| due_requests(&me, &[id]).pop());
                    if let Some((key, opts)) = request {
                        lock_core::metrics::count_request("etcd", "watch");
                        if c.sender.watch(key, Some(opts)).await.is_err() {
                            self.client.failed(c.endpoint);
                            self.conn = None;
                        }
                    }
                }
                Some(Cmd::Cancel(id)) => {
                    if c.sender.cancel(id).await.is_err() {
                        self.client.failed(c.endpoint);
                        self.conn = None;
                    }
                }
            },
            msg = c.stream.message() => match msg {
                Ok(Some(resp)) => {
                    self.client.stream_ok(c.endpoint);
                    if let Some(me) = self.inner.upgrade() {
                        route(&me, resp);
                    }
                }
                Ok(None) => {
                    tracing::debug!("distlock etcd: watch stream ended; reopening");
                    self.client.failed(c.endpoint);
                    self.conn = None;
                }
                Err(e) => {
                    let err = self.client.stream_error(c.endpoint, Failure::Etcd(e), "watch");
                    tracing::debug!(error = %err, "distlock etcd: watch stream failed; reopening");
                    self.conn = None;
                }
            },
        }
        ControlFlow::Continue(())
    }
}

/// The create request of `reg`, marked sent.
pub(super) fn sent_request(id: i64, reg: &mut Registration) -> (Vec<u8>, WatchOptions) {
    reg.sent = true;
    create_request(id, reg)
}

/// The create requests of the watches `ids` still wanted and not yet sent,
/// marked sent.
pub(super) fn due_requests(inner: &Inner, ids: &[i64]) -> Vec<(Vec<u8>, WatchOptions)> {
    let mut st = inner.state();
    ids.iter()
        .filter_map(|id| {
            let reg = st.watches.get_mut(id).filter(|reg| !reg.sent)?;
            Some(sent_request(*id, reg))
        })
        .collect()
}

/// Opens the stream with its first watch.
async fn open(
    client: &EtcdClient,
    key: Vec<u8>,
    opts: WatchOptions,
) -> std::result::Result<Conn, String> {
    let (c, endpoint) = client.stream_client().await.map_err(|e| e.to_string())?;
    // A slow member still opens the stream; a dead one is left after half a
    // lease TTL (its watches resume elsewhere from where they were).
    let limit = client.request_timeout().max(client.config().lease_ttl / 2);
    lock_core::metrics::count_request("etcd", "watch");
    match tokio::time::timeout(limit, c.watch_client().watch(key, Some(opts))).await {
        Ok(Ok(stream)) => {
            let (sender, stream) = stream.split();
            Ok(Conn {
                sender,
                stream,
                endpoint,
            })
        }
        Ok(Err(e)) => Err(client
            .stream_error(endpoint, Failure::Etcd(e), "open the watch stream")
            .to_string()),
        Err(_) => {
            client.failed(endpoint);
            Err(format!("opening the watch stream took more than {limit:?}"))
        }
    }
}

/// Hands one response to its watch, keeping its resume revision current.
pub(super) fn route(inner: &Inner, resp: WatchResponse) {
    let id = resp.watch_id();
    let header_rev = resp.header().map(|h| h.revision()).unwrap_or(0);
    let mut st = inner.state();
    let Some(reg) = st.watches.get_mut(&id) else {
        return;
    };
    if resp.canceled() {
        let reason = if resp.compact_revision() > 0 {
            format!(
                "its history was compacted at revision {}",
                resp.compact_revision()
            )
        } else {
            format!("the server cancelled it: {}", resp.cancel_reason())
        };
        reg.sink.post(&reg.spec.key, WatchEvent::Lost { reason });
        st.watches.remove(&id);
        st.shared.retain(|_, shared| *shared != id);
        return;
    }
    if resp.created() {
        if reg.resume_from == 0 {
            reg.resume_from = header_rev + 1;
        }
        if !reg.announced {
            reg.announced = true;
            reg.sink.post(
                &reg.spec.key,
                WatchEvent::Created {
                    revision: header_rev,
                },
            );
        }
    }
    for ev in resp.events() {
        let Some(kv) = ev.kv() else { continue };
        reg.resume_from = reg.resume_from.max(kv.mod_revision() + 1);
        let event = match ev.event_type() {
            EventType::Delete => WatchEvent::Deleted {
                key: kv.key().to_vec(),
                revision: kv.mod_revision(),
            },
            EventType::Put => WatchEvent::Put {
                key: kv.key().to_vec(),
                value: kv.value().to_vec(),
                create: kv.create_revision(),
                revision: kv.mod_revision(),
            },
        };
        reg.sink.post(&reg.spec.key, event);
    }
    if !resp.created() && resp.events().is_empty() && header_rev > 0 {
        // A progress notification: everything up to the header was sent.
        reg.resume_from = reg.resume_from.max(header_rev + 1);
    }
}
