//! One gRPC watch stream per client, carrying every watch of the client
//! (waiters watching the key ahead, guards watching their own key), as Go's
//! clientv3 does: a guard costs the client a map entry and a flag (its
//! [`KeyWatch`] keeps only whether the key is gone), not a stream.
//!
//! Each watch has an id of our own and remembers the revision it has seen
//! up to. When the stream fails (the member went away, lost its leader: every
//! request asks for one), the watcher reopens it on the next endpoint after
//! that endpoint's backoff and re-creates every watch from the revision it
//! had reached, so no event is lost and nobody else has to re-read anything.
//! Only a watch whose history was compacted meanwhile is reported lost, to
//! its owner alone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, MutexGuard};
use std::time::Duration;

use etcd_client::{
    EventType, WatchFilterType, WatchOptions, WatchRequestSender, WatchResponse,
    WatchResponseStream,
};
use lock_core::mailbox::Mailbox;
use lock_core::{LockError, Result};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::client::{EtcdClient, Failure};
use crate::deletion::Deletion;

/// What a watch reports to its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WatchEvent {
    /// The server created the watch: events after `revision` will come.
    Created {
        /// The store's revision when the watch was created.
        revision: i64,
    },
    /// A watched key was put (only for watches that want puts).
    Put {
        /// The key.
        key: Vec<u8>,
        /// Its value now.
        value: Vec<u8>,
    },
    /// A watched key was deleted (or expired with its lease).
    Deleted {
        /// The key.
        key: Vec<u8>,
        /// The revision of the deletion.
        revision: i64,
    },
    /// The watch is gone and events may have been missed (its history was
    /// compacted, or the server refused it): read again.
    Lost {
        /// Why, in words.
        reason: String,
    },
}

/// What to watch.
#[derive(Clone, Debug)]
struct Spec {
    /// Shared with the owner where it has one (a held key's name).
    key: Arc<[u8]>,
    prefix: bool,
    with_puts: bool,
}

/// Where a watch's events go.
enum Sink {
    /// Every event, queued for a [`WatchHandle`].
    Mail(Arc<Mailbox<WatchEvent>>),
    /// Only whether the key is gone, for a [`KeyWatch`].
    Deletion(Arc<Deletion>),
}

impl Sink {
    fn post(&self, key: &[u8], event: WatchEvent) {
        match self {
            Sink::Mail(mail) => {
                let _ = mail.post(event);
            }
            Sink::Deletion(gone) => gone.note(key, &event),
        }
    }
}

struct Registration {
    spec: Spec,
    /// 0: from whenever it is created; else the first revision not yet seen.
    resume_from: i64,
    /// Whether [`WatchEvent::Created`] was sent.
    announced: bool,
    sink: Sink,
}

impl Drop for Registration {
    fn drop(&mut self) {
        match &self.sink {
            Sink::Mail(mail) => mail.close(),
            Sink::Deletion(gone) => gone.end(),
        }
    }
}

#[derive(Default)]
struct State {
    next_id: i64,
    watches: HashMap<i64, Registration>,
}

enum Cmd {
    Create(i64),
    Cancel(i64),
}

struct Inner {
    state: StdMutex<State>,
    cmds: mpsc::UnboundedSender<Cmd>,
    /// How many times watches were resumed on a new stream. They resume from
    /// their revision, possibly through etcd's catch-up path, so their events
    /// no longer arrive in one revision order across watches: a waiter that
    /// relies on that order checks this first.
    generation: AtomicU64,
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The client's watch stream; see the [module docs](self).
#[derive(Clone)]
pub(crate) struct Watcher {
    inner: Arc<Inner>,
}

impl Watcher {
    /// Starts the stream's task (it connects with the first watch).
    pub(crate) fn start(client: Arc<EtcdClient>) -> Self {
        let (cmds, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            state: StdMutex::new(State::default()),
            cmds,
            generation: AtomicU64::new(0),
        });
        tokio::spawn(run(Arc::downgrade(&inner), client, rx));
        Self { inner }
    }

    /// Watches the deletions (and, `with_puts`, the puts) of `key` (or of
    /// every key under it, with `prefix`) from revision `from` on (`None`:
    /// from its creation, which never lands in etcd's slow catch-up path).
    /// The first event is [`WatchEvent::Created`] with the store's revision
    /// at the creation.
    pub(crate) fn watch(
        &self,
        key: impl Into<Arc<[u8]>>,
        prefix: bool,
        with_puts: bool,
        from: Option<i64>,
    ) -> WatchHandle {
        let mail = Arc::new(Mailbox::new());
        let spec = Spec {
            key: key.into(),
            prefix,
            with_puts,
        };
        let ticket = self.register(spec, from, Sink::Mail(mail.clone()));
        WatchHandle { ticket, mail }
    }

    /// Watches the deletion of a held key, created at revision `created`,
    /// from revision `from` on: a [`KeyWatch`], which keeps only whether
    /// the key is gone.
    pub(crate) fn watch_key(&self, key: impl Into<Arc<[u8]>>, created: i64, from: i64) -> KeyWatch {
        let gone = Arc::new(Deletion::new(created));
        let spec = Spec {
            key: key.into(),
            prefix: false,
            with_puts: false,
        };
        let ticket = self.register(spec, Some(from), Sink::Deletion(gone.clone()));
        KeyWatch { ticket, gone }
    }

    fn register(&self, spec: Spec, from: Option<i64>, sink: Sink) -> Ticket {
        let id = {
            let mut st = self.inner.state();
            st.next_id += 1;
            let id = st.next_id;
            st.watches.insert(
                id,
                Registration {
                    spec,
                    resume_from: from.unwrap_or(0),
                    announced: false,
                    sink,
                },
            );
            id
        };
        let _ = self.inner.cmds.send(Cmd::Create(id));
        Ticket {
            id,
            watcher: self.clone(),
        }
    }
}

impl Watcher {
    /// Ends watch `id` now (its owner's next event is `None`), as dropping
    /// its handle would: for an owner about to delete the watched key
    /// itself, so that the server does not send that deletion back.
    pub(crate) fn cancel(&self, id: i64) {
        if self.inner.state().watches.remove(&id).is_some() {
            let _ = self.inner.cmds.send(Cmd::Cancel(id));
        }
    }

    /// How many times watches were resumed on a new stream so far (their
    /// events may arrive out of revision order across watches, for a while).
    pub(crate) fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::SeqCst)
    }
}

/// A watch's place in its [`Watcher`]; dropping it cancels the watch.
struct Ticket {
    id: i64,
    watcher: Watcher,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.watcher.cancel(self.id);
    }
}

/// One watch; dropping it cancels it.
pub(crate) struct WatchHandle {
    ticket: Ticket,
    mail: Arc<Mailbox<WatchEvent>>,
}

impl WatchHandle {
    /// Keeps watching its key (`key`), created at revision `created`, as a
    /// [`KeyWatch`], without a gap (every event routed to this watch so far
    /// counts): for a waiter whose key is now held.
    pub(crate) fn into_key_watch(self, key: &[u8], created: i64) -> KeyWatch {
        let WatchHandle { ticket, mail } = self;
        let gone = Arc::new(Deletion::new(created));
        let mut st = ticket.watcher.inner.state();
        // Events are routed under the state's lock: none is missed.
        while let Some(event) = mail.try_recv() {
            gone.note(key, &event);
        }
        match st.watches.get_mut(&ticket.id) {
            Some(reg) => reg.sink = Sink::Deletion(gone.clone()),
            None => gone.end(),
        }
        drop(st);
        KeyWatch { ticket, gone }
    }

    /// The next event; `None` if the client is gone.
    pub(crate) async fn next(&mut self) -> Option<WatchEvent> {
        self.mail.recv().await
    }

    /// The next event if one is already here (never waits); `None` also if
    /// the client is gone.
    pub(crate) fn try_next(&mut self) -> Option<WatchEvent> {
        self.mail.try_recv()
    }

    /// Waits for the watch's creation until `deadline`: the revision it
    /// starts after. An `Unavailable` error if it is not created in time.
    pub(crate) async fn created(&mut self, deadline: Instant) -> Result<i64> {
        loop {
            match tokio::time::timeout_at(deadline, self.mail.recv()).await {
                Ok(Some(WatchEvent::Created { revision })) => return Ok(revision),
                Ok(Some(WatchEvent::Lost { reason })) => {
                    return Err(LockError::unavailable(format!(
                        "etcd: a watch failed: {reason}"
                    )))
                }
                Ok(Some(_)) => continue,
                Ok(None) => return Err(LockError::unavailable("etcd: the client is gone")),
                Err(_) => {
                    return Err(LockError::unavailable(
                        "etcd: a watch was not created within the request timeout",
                    ))
                }
            }
        }
    }
}

/// The watch of a held key ([`Watcher::watch_key`]); dropping it cancels it.
pub(crate) struct KeyWatch {
    ticket: Ticket,
    gone: Arc<Deletion>,
}

impl KeyWatch {
    /// Whether the key is gone, shared with whoever waits for it.
    pub(crate) fn deletion(&self) -> &Arc<Deletion> {
        &self.gone
    }

    /// The watcher it is on.
    pub(crate) fn watcher(&self) -> &Watcher {
        &self.ticket.watcher
    }

    /// Ends the watch now, as dropping it would: for an owner about to
    /// delete the key itself, so that the server does not send that
    /// deletion back.
    pub(crate) fn cancel(&self) {
        self.ticket.watcher.cancel(self.ticket.id);
    }
}

fn create_request(id: i64, reg: &Registration) -> (Vec<u8>, WatchOptions) {
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

struct Conn {
    sender: WatchRequestSender,
    stream: WatchResponseStream,
    endpoint: usize,
}

/// The stream's task: opens it while watches exist, routes responses,
/// reopens it after failures. Ends when the client is dropped.
async fn run(
    inner: std::sync::Weak<Inner>,
    client: Arc<EtcdClient>,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
) {
    let mut conn: Option<Conn> = None;
    let mut retry = Duration::from_millis(50);
    loop {
        let Some(me) = inner.upgrade() else { return };
        if conn.is_none() {
            let first = {
                let st = me.state();
                st.watches
                    .iter()
                    .min_by_key(|(id, _)| **id)
                    .map(|(id, reg)| (*id, create_request(*id, reg)))
            };
            let Some((first_id, (key, opts))) = first else {
                drop(me);
                // Nothing to watch: wait for a command.
                if cmds.recv().await.is_none() {
                    return;
                }
                continue;
            };
            match open(&client, key, opts).await {
                Ok(mut c) => {
                    if me.state().watches.values().any(|reg| reg.announced) {
                        me.generation.fetch_add(1, Ordering::SeqCst);
                    }
                    // Every other watch, from where it was.
                    let rest: Vec<(Vec<u8>, WatchOptions)> = {
                        let st = me.state();
                        let mut ids: Vec<&i64> =
                            st.watches.keys().filter(|id| **id != first_id).collect();
                        ids.sort();
                        ids.into_iter()
                            .map(|id| create_request(*id, &st.watches[id]))
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
                    if ok {
                        // Commands queued meanwhile are covered by the re-creation.
                        while cmds.try_recv().is_ok() {}
                        retry = Duration::from_millis(50);
                        conn = Some(c);
                    } else {
                        client.failed(c.endpoint);
                    }
                }
                Err(reason) => {
                    tracing::debug!(%reason, ?retry, "distlock etcd: watch stream could not be opened; retrying");
                    drop(me);
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(Duration::from_secs(1));
                }
            }
            continue;
        }
        let Some(c) = conn.as_mut() else { continue };
        drop(me);
        tokio::select! {
            cmd = cmds.recv() => match cmd {
                None => return,
                Some(Cmd::Create(id)) => {
                    let request = inner
                        .upgrade()
                        .and_then(|me| me.state().watches.get(&id).map(|reg| create_request(id, reg)));
                    if let Some((key, opts)) = request {
                        lock_core::metrics::count_request("etcd", "watch");
                        if c.sender.watch(key, Some(opts)).await.is_err() {
                            client.failed(c.endpoint);
                            conn = None;
                        }
                    }
                }
                Some(Cmd::Cancel(id)) => {
                    if c.sender.cancel(id).await.is_err() {
                        client.failed(c.endpoint);
                        conn = None;
                    }
                }
            },
            msg = c.stream.message() => match msg {
                Ok(Some(resp)) => {
                    client.stream_ok(c.endpoint);
                    if let Some(me) = inner.upgrade() {
                        route(&me, resp);
                    }
                }
                Ok(None) => {
                    tracing::debug!("distlock etcd: watch stream ended; reopening");
                    client.failed(c.endpoint);
                    conn = None;
                }
                Err(e) => {
                    let err = client.stream_error(c.endpoint, Failure::Etcd(e), "watch");
                    tracing::debug!(error = %err, "distlock etcd: watch stream failed; reopening");
                    conn = None;
                }
            },
        }
    }
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
fn route(inner: &Inner, resp: WatchResponse) {
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
            },
        };
        reg.sink.post(&reg.spec.key, event);
    }
    if !resp.created() && resp.events().is_empty() && header_rev > 0 {
        // A progress notification: everything up to the header was sent.
        reg.resume_from = reg.resume_from.max(header_rev + 1);
    }
}
