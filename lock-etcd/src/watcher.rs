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
//!
//! A guard that did not wait watches its own key, but the server hears of
//! that watch only [`KEY_WATCH_DELAY`] after the grant: most locks are
//! released sooner and then cost no watch at all. The watch starts from the
//! revision after the grant, so a deletion before it went out is still
//! reported (from the server's history).
//!
//! Waiters do not create a watch per wait: the waiters and guards of one
//! queue on this client share one watch of the queue's prefix
//! ([`Watcher::queue_watch`]), kept for [`LINGER`] after its last user
//! leaves. A watch created "from now" can start in etcd's slow catch-up
//! path: the server turns "now" into the revision it read just before
//! registering the watch, and a write that lands in between leaves the
//! watch behind the store, to be caught up by a loop that runs every
//! 100 ms. Under contention that happens to a fraction of new watches,
//! and each time a hand-off waits up to 100 ms. A shared watch pays that at
//! most once, when it is first created, and then stays in step with the
//! store while the queue is busy.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex as StdMutex, MutexGuard};
use std::time::Duration;

use etcd_client::{
    EventType, WatchFilterType, WatchOptions, WatchRequestSender, WatchResponse,
    WatchResponseStream,
};
use lock_core::backend::mailbox::Mailbox;
use lock_core::{LockError, Result};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::client::{EtcdClient, Failure};
use crate::deletion::Deletion;
use crate::event::WatchEvent;

/// How long a shared queue watch is kept after its last waiter or guard
/// left: a contender that comes back within it (as the contenders of a busy
/// lock do) finds the watch created and in step with the store.
pub(crate) const LINGER: Duration = Duration::from_secs(2);

/// How long after a grant the watch on a held key is sent to the server:
/// a lock released sooner (most are) costs no watch at all. The watch
/// starts from the revision after the grant, so a deletion in between is
/// still reported (from the server's history), only later.
pub(crate) const KEY_WATCH_DELAY: Duration = Duration::from_millis(50);

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
    /// Only whether the key is gone, for a [`KeyWatch`] of its own.
    Deletion(Arc<Deletion>),
    /// The waiters and guards of one queue ([`Watcher::queue_watch`]).
    Shared(Shared),
}

/// The users of a shared queue watch.
struct Shared {
    subs: Vec<(u64, Sub)>,
    /// When the last user left: the watch ends [`LINGER`] later unless
    /// another comes.
    idle_since: Option<Instant>,
}

/// One user of a shared queue watch.
enum Sub {
    /// A waiter: every event.
    Mail(Arc<Mailbox<WatchEvent>>),
    /// A guard that waited for its lock: whether its key is gone.
    Key(Arc<[u8]>, Arc<Deletion>),
}

impl Sub {
    fn post(&self, event: &WatchEvent) {
        match self {
            Sub::Mail(mail) => {
                let _ = mail.post(event.clone());
            }
            Sub::Key(key, gone) => note_key(gone, key, event),
        }
    }
}

/// Takes in `event` of a queue's watch for the guard of `key`.
fn note_key(gone: &Deletion, key: &[u8], event: &WatchEvent) {
    match event {
        WatchEvent::Deleted { key: k, .. } if k.as_slice() == key => gone.note(key, event),
        WatchEvent::Lost { .. } => gone.note(key, event),
        _ => {}
    }
}

impl Sink {
    fn post(&self, key: &[u8], event: WatchEvent) {
        match self {
            Sink::Deletion(gone) => gone.note(key, &event),
            Sink::Shared(shared) => {
                for (_, sub) in &shared.subs {
                    sub.post(&event);
                }
            }
        }
    }
}

struct Registration {
    spec: Spec,
    /// 0: from whenever it is created; else the first revision not yet seen.
    resume_from: i64,
    /// Whether [`WatchEvent::Created`] was sent.
    announced: bool,
    /// Whether its create request went out on the current stream (else
    /// ending it needs no cancel request).
    sent: bool,
    /// When a held key's watch goes to the server ([`KEY_WATCH_DELAY`]
    /// after its grant); `None`: at once.
    due: Option<Instant>,
    sink: Sink,
}

impl Drop for Registration {
    fn drop(&mut self) {
        match &self.sink {
            Sink::Deletion(gone) => gone.end(),
            Sink::Shared(shared) => {
                for (_, sub) in &shared.subs {
                    match sub {
                        Sub::Mail(mail) => mail.close(),
                        Sub::Key(_, gone) => gone.end(),
                    }
                }
            }
        }
    }
}

#[derive(Default)]
struct State {
    next_id: i64,
    watches: HashMap<i64, Registration>,
    /// The shared watch of each queue prefix (and whether it wants puts).
    shared: HashMap<(Arc<[u8]>, bool), i64>,
    next_sub: u64,
}

impl State {
    /// Ends the shared watches idle for [`LINGER`] at `now`; returns the
    /// ids to cancel on the stream and when the next one is due.
    fn expire_idle(&mut self, now: Instant) -> (Vec<i64>, Option<Instant>) {
        let mut expired = Vec::new();
        let mut next: Option<Instant> = None;
        for (id, reg) in &self.watches {
            if let Sink::Shared(Shared {
                idle_since: Some(since),
                ..
            }) = &reg.sink
            {
                let due = *since + LINGER;
                if due <= now {
                    expired.push(*id);
                } else {
                    next = Some(next.map_or(due, |n| n.min(due)));
                }
            }
        }
        self.shared.retain(|_, id| !expired.contains(id));
        // Only a watch the server knows needs its cancel.
        expired.retain(|id| self.watches.remove(id).is_some_and(|reg| reg.sent));
        (expired, next)
    }
}

enum Cmd {
    Create(i64),
    /// Create it at that time, if it is still wanted then.
    CreateAt(i64, Instant),
    Cancel(i64),
    /// A shared watch lost its last user.
    Idle,
}

struct Inner {
    state: StdMutex<State>,
    cmds: mpsc::UnboundedSender<Cmd>,
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
        });
        tokio::spawn(run(Arc::downgrade(&inner), client, rx));
        Self { inner }
    }

    /// Joins the shared watch of the deletions (and, `with_puts`, the
    /// puts) of every key under `prefix`, creating it if this client has
    /// none. The first event is [`WatchEvent::Created`] with the revision
    /// after which every event reaches this user: the watch's creation, or,
    /// for a watch already there, the last revision it had passed on.
    pub(crate) fn queue_watch(&self, prefix: &[u8], with_puts: bool) -> QueueWatch {
        let mail = Arc::new(Mailbox::new());
        let mut st = self.inner.state();
        st.next_sub += 1;
        let sub = st.next_sub;
        let key: Arc<[u8]> = prefix.into();
        let existing = st.shared.get(&(key.clone(), with_puts)).copied();
        let joined = existing.and_then(|id| {
            let reg = st.watches.get_mut(&id)?;
            let Sink::Shared(shared) = &mut reg.sink else {
                return None;
            };
            shared.subs.push((sub, Sub::Mail(mail.clone())));
            shared.idle_since = None;
            if reg.announced {
                let _ = mail.post(WatchEvent::Created {
                    revision: reg.resume_from - 1,
                });
            }
            Some(id)
        });
        let id = match joined {
            Some(id) => id,
            None => {
                st.next_id += 1;
                let id = st.next_id;
                st.watches.insert(
                    id,
                    Registration {
                        spec: Spec {
                            key: key.clone(),
                            prefix: true,
                            with_puts,
                        },
                        resume_from: 0,
                        announced: false,
                        sent: false,
                        due: None,
                        sink: Sink::Shared(Shared {
                            subs: vec![(sub, Sub::Mail(mail.clone()))],
                            idle_since: None,
                        }),
                    },
                );
                st.shared.insert((key, with_puts), id);
                let _ = self.inner.cmds.send(Cmd::Create(id));
                id
            }
        };
        drop(st);
        QueueWatch {
            member: Member {
                watcher: self.clone(),
                id,
                sub,
            },
            mail,
            covers: None,
        }
    }

    /// Leaves shared watch `id` as user `sub`.
    fn leave(&self, id: i64, sub: u64) {
        let mut st = self.inner.state();
        let Some(Registration {
            sink: Sink::Shared(shared),
            ..
        }) = st.watches.get_mut(&id)
        else {
            return;
        };
        let before = shared.subs.len();
        shared.subs.retain(|(s, _)| *s != sub);
        if shared.subs.len() < before && shared.subs.is_empty() {
            shared.idle_since = Some(Instant::now());
            let _ = self.inner.cmds.send(Cmd::Idle);
        }
    }

    /// Watches the deletion of a held key, created at revision `created`,
    /// from revision `from` on: a [`KeyWatch`], which keeps only whether
    /// the key is gone. The server hears of it [`KEY_WATCH_DELAY`] later,
    /// if the key is still held then.
    pub(crate) fn watch_key(&self, key: impl Into<Arc<[u8]>>, created: i64, from: i64) -> KeyWatch {
        let gone = Arc::new(Deletion::new(created));
        let spec = Spec {
            key: key.into(),
            prefix: false,
            with_puts: false,
        };
        let ticket = self.register(spec, from, Sink::Deletion(gone.clone()));
        KeyWatch {
            place: Place::Own(ticket),
            gone,
        }
    }

    /// A watch of its own, created [`KEY_WATCH_DELAY`] from now.
    fn register(&self, spec: Spec, from: i64, sink: Sink) -> Ticket {
        let due = Instant::now() + KEY_WATCH_DELAY;
        let id = {
            let mut st = self.inner.state();
            st.next_id += 1;
            let id = st.next_id;
            st.watches.insert(
                id,
                Registration {
                    spec,
                    resume_from: from,
                    announced: false,
                    sent: false,
                    due: Some(due),
                    sink,
                },
            );
            id
        };
        let _ = self.inner.cmds.send(Cmd::CreateAt(id, due));
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
        let removed = self.inner.state().watches.remove(&id);
        // A watch not yet sent to the server ends here.
        if removed.is_some_and(|reg| reg.sent) {
            let _ = self.inner.cmds.send(Cmd::Cancel(id));
        }
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

/// One user's place in a shared queue watch; dropping it leaves the watch.
struct Member {
    watcher: Watcher,
    id: i64,
    sub: u64,
}

impl Drop for Member {
    fn drop(&mut self) {
        self.watcher.leave(self.id, self.sub);
    }
}

/// A waiter's view of its queue's shared watch ([`Watcher::queue_watch`]):
/// the events routed to the watch since it joined, in revision order.
pub(crate) struct QueueWatch {
    member: Member,
    mail: Arc<Mailbox<WatchEvent>>,
    /// The revision after which every event reaches this waiter, once known.
    covers: Option<i64>,
}

impl QueueWatch {
    /// Keeps watching `key`, our key created at revision `created`, as a
    /// [`KeyWatch`], without a gap (every event routed to this waiter so far
    /// counts): for a waiter whose key is now held.
    pub(crate) fn into_key_watch(self, key: &[u8], created: i64) -> KeyWatch {
        let QueueWatch { member, mail, .. } = self;
        let gone = Arc::new(Deletion::new(created));
        let key: Arc<[u8]> = key.into();
        let mut st = member.watcher.inner.state();
        // Events are routed under the state's lock: none is missed.
        while let Some(event) = mail.try_recv() {
            note_key(&gone, &key, &event);
        }
        let place = match st.watches.get_mut(&member.id) {
            Some(Registration {
                sink: Sink::Shared(shared),
                ..
            }) => shared.subs.iter_mut().find(|(s, _)| *s == member.sub),
            _ => None,
        };
        match place {
            Some((_, sub)) => *sub = Sub::Key(key, gone.clone()),
            None => gone.end(),
        }
        drop(st);
        KeyWatch {
            place: Place::Shared(member),
            gone,
        }
    }

    /// The next event; `None` if the client is gone.
    pub(crate) async fn next(&mut self) -> Option<WatchEvent> {
        self.mail.recv().await
    }

    /// Waits for the watch's creation until `deadline` (at once after the
    /// first time): the revision after which every event reaches this
    /// waiter. An `Unavailable` error if it is not created in time.
    pub(crate) async fn created(&mut self, deadline: Instant) -> Result<i64> {
        if let Some(c) = self.covers {
            return Ok(c);
        }
        loop {
            match tokio::time::timeout_at(deadline, self.mail.recv()).await {
                Ok(Some(WatchEvent::Created { revision })) => {
                    self.covers = Some(revision);
                    return Ok(revision);
                }
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

/// Where a [`KeyWatch`] gets its events.
enum Place {
    /// A watch of the key alone.
    Own(Ticket),
    /// The key's queue watch, shared.
    Shared(Member),
}

/// The watch of a held key; dropping it ends it.
pub(crate) struct KeyWatch {
    place: Place,
    gone: Arc<Deletion>,
}

impl KeyWatch {
    /// Whether the key is gone, shared with whoever waits for it.
    pub(crate) fn deletion(&self) -> &Arc<Deletion> {
        &self.gone
    }

    /// The watcher it is on.
    pub(crate) fn watcher(&self) -> &Watcher {
        match &self.place {
            Place::Own(ticket) => &ticket.watcher,
            Place::Shared(member) => &member.watcher,
        }
    }

    /// Stops listening now, as dropping it would: for an owner about to
    /// delete the key itself. A watch of the key alone is cancelled, so
    /// that the server does not send that deletion back; a shared one goes
    /// on for the queue's waiters.
    pub(crate) fn cancel(&self) {
        match &self.place {
            Place::Own(ticket) => ticket.watcher.cancel(ticket.id),
            Place::Shared(member) => member.watcher.leave(member.id, member.sub),
        }
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
    // When the next idle shared watch is due to end.
    let mut sweep: Option<Instant> = None;
    // Watches to create later, in the order they are due.
    let mut later: VecDeque<(Instant, i64)> = VecDeque::new();
    loop {
        let Some(me) = inner.upgrade() else { return };
        if conn.is_none() {
            // A watch due later waits for its time, also to open the stream;
            // the others are created when it opens.
            while let Ok(cmd) = cmds.try_recv() {
                if let Cmd::CreateAt(id, due) = cmd {
                    later.push_back((due, id));
                }
            }
            let now = Instant::now();
            while later.front().is_some_and(|(due, _)| *due <= now) {
                later.pop_front();
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
                sweep = None;
                // Nothing to watch yet: wait for a command, or for the
                // first watch due later.
                let due = later.front().map(|(due, _)| *due);
                tokio::select! {
                    cmd = cmds.recv() => match cmd {
                        None => return,
                        Some(Cmd::CreateAt(id, due)) => later.push_back((due, id)),
                        Some(_) => {}
                    },
                    _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {}
                }
                continue;
            };
            match open(&client, key, opts).await {
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
                        retry = Duration::from_millis(50);
                        sweep = Some(Instant::now());
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
        let sweep_at = sweep;
        let create_at = later.front().map(|(due, _)| *due);
        tokio::select! {
            _ = tokio::time::sleep_until(create_at.unwrap_or_else(Instant::now)), if create_at.is_some() => {
                let Some(me) = inner.upgrade() else { return };
                let now = Instant::now();
                let mut due = Vec::new();
                while let Some(&(at, id)) = later.front() {
                    if at > now {
                        break;
                    }
                    later.pop_front();
                    due.push(id);
                }
                let requests = due_requests(&me, &due);
                drop(me);
                for (key, opts) in requests {
                    lock_core::metrics::count_request("etcd", "watch");
                    if c.sender.watch(key, Some(opts)).await.is_err() {
                        client.failed(c.endpoint);
                        conn = None;
                        break;
                    }
                }
            }
            _ = tokio::time::sleep_until(sweep_at.unwrap_or_else(Instant::now)), if sweep_at.is_some() => {
                let Some(me) = inner.upgrade() else { return };
                let (expired, next) = me.state().expire_idle(Instant::now());
                drop(me);
                sweep = next;
                for id in expired {
                    if c.sender.cancel(id).await.is_err() {
                        client.failed(c.endpoint);
                        conn = None;
                        break;
                    }
                }
            }
            cmd = cmds.recv() => match cmd {
                None => return,
                Some(Cmd::Idle) => {
                    sweep = Some(sweep.unwrap_or_else(|| Instant::now() + LINGER));
                }
                Some(Cmd::CreateAt(id, due)) => later.push_back((due, id)),
                Some(Cmd::Create(id)) => {
                    let request = inner
                        .upgrade()
                        .and_then(|me| due_requests(&me, &[id]).pop());
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

/// The create request of `reg`, marked sent.
fn sent_request(id: i64, reg: &mut Registration) -> (Vec<u8>, WatchOptions) {
    reg.sent = true;
    create_request(id, reg)
}

/// The create requests of the watches `ids` still wanted and not yet sent,
/// marked sent.
fn due_requests(inner: &Inner, ids: &[i64]) -> Vec<(Vec<u8>, WatchOptions)> {
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
            },
        };
        reg.sink.post(&reg.spec.key, event);
    }
    if !resp.created() && resp.events().is_empty() && header_rev > 0 {
        // A progress notification: everything up to the header was sent.
        reg.resume_from = reg.resume_from.max(header_rev + 1);
    }
}
