//! [`EtcdLock`]: the [`LockBackend`] on etcd. The acquire path reads top to
//! bottom in [`EtcdLock::acquire`]; the queue protocol is in
//! [`crate::queue`], the key layout in [`crate::layout`], a held lock in
//! [`crate::held`], the session in [`crate::session`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{GetOptions, SortOrder, SortTarget};
use lock_core::backend::session::Sent;
use lock_core::backend::{LeaderStream, Lease, LeaseRequest, LockBackend};
use lock_core::{
    Capabilities, Fencing, FencingToken, ForceReleased, Holder, LeaderInfo, LockError,
    LockErrorKind, LockMode, LockName, LockStatus, Result,
};
use tokio::time::Instant;

use crate::client::{bounded_by, EtcdClient};
use crate::config::EtcdConfig;
use crate::election::delay::{self, Cleared};
use crate::held::{grant, Confirmed};
use crate::key::{Carry, OurKey};
use crate::layout::{lease_hex, request_value, Kind, Queue};
use crate::permit::Turns;
use crate::queue::{in_line, Line, Placed, Position, QueueOps, Turn};
use crate::session::Session;
use crate::watcher::{QueueWatch, Watcher};

/// How often one acquisition may find its own key in the way (a leftover of a
/// request that timed out after the server applied it) or lose its session
/// before it gives up.
const MAX_ROUNDS: u32 = 8;

/// What the rounds of one acquisition carry from one to the next.
#[derive(Default)]
struct Attempt {
    /// The turn, and the doubt about a put of our mutex key that may still
    /// be applied (a later round puts a key of the same name).
    carry: Carry,
    /// Until when a put of unknown outcome is tried again (with a key of
    /// its own name, or once the late put is ruled out): within the request
    /// timeout of the first such put, as a request that fails over within
    /// its call.
    place_until: Option<Instant>,
    /// Whether the acquisition waited (for its turn in the process, or for
    /// a key ahead).
    contended: bool,
}

/// How one round ended.
enum Round {
    /// Queue again with a new key, carrying this.
    Again(Carry),
    /// The acquisition's outcome: the lease, or none (the deadline passed,
    /// or a single attempt found the lock taken).
    Done(Option<Lease>),
}

/// How a wait for our turn ended.
enum Waited {
    /// Nothing blocks our key any more, as of revision `at`, learnt by a
    /// request sent (or an event received) at `sent`.
    Turn {
        ours: OurKey,
        at: i64,
        sent: Sent,
        own: Option<QueueWatch>,
    },
    /// The round ends here.
    End(Round),
}

/// The put of our key has an unknown outcome: it may still be applied.
/// `again`: there is time and a round left to put a key again.
fn put_unknown(
    req: &LeaseRequest,
    queue: &Queue,
    mut ours: OurKey,
    e: LockError,
    again: bool,
) -> Result<Round> {
    tracing::debug!(name = %req.name, error = %e, "distlock etcd: the put of our key has an unknown outcome");
    ours.doubt();
    if queue.kind == Kind::Mutex && again {
        // The next key has the same name: while it is there, the late put
        // cannot land (it puts only if absent); once it is gone, its
        // clean-up settles the late put (moves the session's fence on,
        // then looks for the key), holding the turn.
        return Ok(Round::Again(ours.nothing_written()));
    }
    // Settled in the background (dropped armed: the fence moved on, then
    // the key looked for and removed), at once: a key of its own name, or
    // the end.
    drop(ours);
    if !again {
        return Err(e);
    }
    Ok(Round::Again(Carry::default()))
}

/// A distributed lock client on etcd. Cheap to clone (clones share the
/// connections, the session lease, the watch stream and the in-process turns).
///
/// Every client has ONE session: an etcd lease of [`EtcdConfig::lease_ttl`],
/// kept alive by one background keep-alive stream while the client or any of
/// its guards lives, and ONE watch stream carrying every watch it needs. All
/// its locks are keys attached to that lease. Two mutex acquisitions of one
/// name from the same client take turns in the process (FIFO) before the key
/// is put, since they would share one key.
///
/// See the crate documentation for the guarantees and the key layout.
#[derive(Clone)]
pub struct EtcdLock {
    inner: Arc<Inner>,
}

struct Inner {
    client: Arc<EtcdClient>,
    ops: QueueOps,
    /// The current session; read without waiting on every acquisition.
    current: std::sync::Mutex<Option<Arc<Session>>>,
    /// Held while a new session lease is granted (one at a time).
    renewing: tokio::sync::Mutex<()>,
    turns: Arc<Turns>,
    /// Makes the keys of read-write locks and permits unique per acquisition.
    seq: AtomicU64,
}

impl std::fmt::Debug for EtcdLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdLock")
            .field("config", self.inner.client.config())
            .finish_non_exhaustive()
    }
}

impl EtcdLock {
    /// Connects to etcd and opens the client's session (grants its lease),
    /// within [`EtcdConfig::connect_timeout`] in all.
    ///
    /// Fails with [`LockErrorKind::InvalidArgument`] for a bad configuration,
    /// [`LockErrorKind::Unauthorized`] for rejected credentials, and
    /// [`LockErrorKind::Unavailable`] when no endpoint answers in time.
    pub async fn connect(config: EtcdConfig) -> Result<Self> {
        config.validate()?;
        let limit = config.connect_timeout;
        let connect_deadline = Instant::now() + limit;
        let client = Arc::new(EtcdClient::new(config)?);
        let session = match tokio::time::timeout(limit, Session::grant(client.clone())).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(LockError::unavailable(format!(
                    "etcd: no endpoint of {:?} granted a session lease within the connect timeout of {limit:?}",
                    client.config().endpoints
                )))
            }
        };
        // What is left of the connect timeout, for finding the leader.
        let left = connect_deadline.saturating_duration_since(Instant::now());
        if !left.is_zero() {
            client
                .prefer_leader(left.min(client.request_timeout()))
                .await;
        }
        let watcher = Watcher::start(client.clone());
        Ok(Self {
            inner: Arc::new(Inner {
                ops: QueueOps {
                    client: client.clone(),
                    watcher,
                },
                client,
                current: std::sync::Mutex::new(Some(session)),
                renewing: tokio::sync::Mutex::new(()),
                turns: Arc::new(Turns::default()),
                seq: AtomicU64::new(0),
            }),
        })
    }

    /// The configuration this client was made with.
    pub fn config(&self) -> &EtcdConfig {
        self.inner.client.config()
    }

    /// The etcd key prefix of the mutex `name`: [`EtcdConfig::key_prefix`] +
    /// `name` + `/`. Its contender keys are this prefix plus a lease id in
    /// lowercase hex.
    pub fn key_prefix(&self, name: &LockName) -> String {
        Queue::new(&self.config().key_prefix, name, Kind::Mutex).prefix
    }

    /// The id and the granted TTL of the client's current session lease, if
    /// it has a live one (the next acquisition after an expiry grants a new
    /// one). The granted TTL can be above [`EtcdConfig::lease_ttl`] when the
    /// server raises it to its minimum.
    pub async fn session_lease(&self) -> Option<(i64, Duration)> {
        self.live_session().map(|s| (s.id(), s.granted_ttl()))
    }

    /// The current session if it has not ended.
    fn live_session(&self) -> Option<Arc<Session>> {
        self.inner
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .filter(|s| !s.is_ended())
            .cloned()
    }

    /// The live session, granting a new lease if the last one ended. The
    /// usual case takes no lock an acquisition could wait on.
    async fn session(&self) -> Result<Arc<Session>> {
        if let Some(s) = self.live_session() {
            return Ok(s);
        }
        let _one_at_a_time = self.inner.renewing.lock().await;
        if let Some(s) = self.live_session() {
            return Ok(s);
        }
        let s = Session::grant(self.inner.client.clone()).await?;
        *self.inner.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(s.clone());
        Ok(s)
    }

    /// One acquisition of `req.mode`. `deadline: None` is a single attempt
    /// that never waits. Every request it makes is answered by the deadline
    /// (now for a single attempt) plus ONE request timeout, or given up: so
    /// is the whole call (a delete left unfinished goes on in the
    /// background).
    async fn acquire(
        &self,
        req: &LeaseRequest,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>> {
        let bound = deadline.unwrap_or_else(Instant::now) + self.inner.client.request_timeout();
        bounded_by(bound, self.acquire_within(req, deadline)).await
    }

    /// [`EtcdLock::acquire`] within its bound: rounds of [`EtcdLock::round`]
    /// until one ends the acquisition.
    async fn acquire_within(
        &self,
        req: &LeaseRequest,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>> {
        let queue = Queue::new(&self.config().key_prefix, &req.name, Kind::of(req.mode));
        // A mutex key is one per session and name: this client's acquisitions
        // of the name take turns first.
        let mut attempt = Attempt::default();
        if queue.kind == Kind::Mutex {
            match self.inner.turns.enter(&req.name, deadline).await {
                Some((permit, waited)) => {
                    attempt.carry = Carry::from(Some(permit));
                    attempt.contended = waited;
                }
                None => return Ok(None),
            }
        }
        for round in 0..MAX_ROUNDS {
            match self
                .round(req, &queue, deadline, &mut attempt, round)
                .await?
            {
                Round::Again(carry) => attempt.carry = carry,
                Round::Done(lease) => return Ok(lease),
            }
        }
        Err(LockError::unavailable(format!(
            "etcd: could not place a contender key for {} after {MAX_ROUNDS} attempts",
            req.name
        )))
    }

    /// One round: put our key, wait for our turn if something is ahead,
    /// and make the grant. Whatever ends the round removes our key
    /// (`OurKey` is armed), unless it becomes a guard's.
    async fn round(
        &self,
        req: &LeaseRequest,
        queue: &Queue,
        deadline: Option<Instant>,
        attempt: &mut Attempt,
        round: u32,
    ) -> Result<Round> {
        let inner = &self.inner;
        let session = self.session().await?;
        let seq = inner.seq.fetch_add(1, Ordering::Relaxed);
        let mut ours = OurKey::new(
            inner.client.clone(),
            session.clone(),
            queue.key(session.id(), seq),
            queue.fence_key(session.id()),
            std::mem::take(&mut attempt.carry),
        );
        let sent = Sent::now();
        let place_by = *attempt
            .place_until
            .get_or_insert_with(|| Instant::now() + inner.client.request_timeout());
        // Until the put's answer comes, its outcome is unknown: an
        // acquisition dropped meanwhile (a cancelled wait) or failing
        // after the put (a read that pages further) leaves our key in
        // doubt, and the clean-up settles it.
        let before = ours.sending();
        let value = request_value(req);
        let placed = match inner
            .ops
            .place(queue, &ours.key, &session, req.mode, value)
            .await
        {
            Err(e) if e.kind() == LockErrorKind::Lost => {
                // A put with an expired lease writes nothing.
                session.end("the server no longer knows the session lease");
                ours.answered(before);
                return Ok(Round::Again(ours.nothing_written()));
            }
            other => other?,
        };
        if !matches!(placed, Placed::Unknown(_)) {
            ours.answered(before);
        }
        let (rev, position) = match placed {
            Placed::Stale { rev } => {
                // Our own key from an attempt whose answer we never saw.
                ours.rev = Some(rev);
                return Ok(Round::Again(ours.remove_and_carry().await?.1));
            }
            // Nothing written; the session knows its fence now.
            Placed::Fenced => return Ok(Round::Again(ours.nothing_written())),
            Placed::Unknown(e) => {
                let again = Instant::now() < place_by && round + 1 < MAX_ROUNDS;
                return put_unknown(req, queue, ours, e, again);
            }
            Placed::At { rev, position } => {
                attempt.place_until = None;
                (rev, position)
            }
        };
        ours.rev = Some(rev);
        let (ours, at, sent, own, waited) = match position {
            Position::Held { at } => (ours, at, sent, None, false),
            Position::Gone => return Ok(Round::Again(ours.nothing_written())),
            Position::Blocked(line) => {
                attempt.contended = true;
                let Some(deadline) = deadline else {
                    // On an error the delete goes on in the background.
                    if let Err(e) = ours.remove().await {
                        tracing::debug!(name = %req.name, error = %e, "distlock etcd: leaving the queue goes on in the background");
                    }
                    return Ok(Round::Done(None));
                };
                match self
                    .wait(req, queue, &session, ours, rev, line, deadline)
                    .await?
                {
                    Waited::Turn {
                        ours,
                        at,
                        sent,
                        own,
                    } => (ours, at, sent, own, true),
                    Waited::End(round) => return Ok(round),
                }
            }
        };
        let waited = (waited, attempt.contended);
        self.grant_to(
            req, queue, deadline, &session, ours, rev, at, sent, own, waited,
        )
        .await
    }

    /// Waits in line (a mutex, a writer) or for the writers ahead (a
    /// reader, a permit) until our turn comes or the deadline passes.
    #[allow(clippy::too_many_arguments)]
    async fn wait(
        &self,
        req: &LeaseRequest,
        queue: &Queue,
        session: &Session,
        ours: OurKey,
        rev: i64,
        line: Line,
        deadline: Instant,
    ) -> Result<Waited> {
        let (ops, key) = (&self.inner.ops, &ours.key);
        let turn_came = if in_line(req.mode) {
            ops.wait_in_line(session, queue, key, rev, req.mode, line, deadline)
                .await?
        } else {
            ops.wait_turn(session, queue, key, rev, req.mode, line, deadline)
                .await?
        };
        Ok(match turn_came {
            Turn::Mine { at, sent, own } => Waited::Turn {
                ours,
                at,
                sent,
                own,
            },
            Turn::Deadline => {
                // Out of the line before the call returns: its caller may
                // exit at once. On an error the delete goes on in the
                // background.
                if let Err(e) = ours.remove().await {
                    tracing::debug!(name = %req.name, error = %e, "distlock etcd: leaving the line after the deadline goes on in the background");
                }
                Waited::End(Round::Done(None))
            }
            Turn::Requeue(why) => {
                tracing::debug!(name = %req.name, why, "distlock etcd: contender key gone while waiting; queueing again");
                Waited::End(Round::Again(ours.nothing_written()))
            }
        })
    }

    /// The grant of our key, created at `rev` and found free of anything
    /// ahead at revision `at`, with its fencing token.
    ///
    /// The token: a revision above every earlier grant's token of the name,
    /// and unique to this grant.
    ///
    /// - A contender granted by its own put (nothing ahead blocked it
    ///   there) takes its key's create revision: every earlier grant's
    ///   token is a revision from before that put. A mutex and a permit
    ///   take it even after a wait: they are granted in the order of their
    ///   keys, so in create revision order.
    /// - A writer that waited takes the revision at which it found nothing
    ///   ahead (`at`, at least the deletion of the last key ahead): every
    ///   earlier grant of the read-write lock (a downgrade's put, a
    ///   reader's stamp, a writer's `at`) is from before that deletion, and
    ///   no other grant can be shown by the same revision (the writer is
    ///   alone).
    /// - A reader that waited (behind a writer) is stamped: our key is put
    ///   again, if still ours, and the revision of that put is its token.
    ///   Its create revision may be below the writer it waited for (which
    ///   took its `at`), and readers let in by the same deletion would
    ///   share that deletion's revision; a put of its own is above both and
    ///   unique. The stamp is made while our key exists, so a writer
    ///   granted after this reader (once our key is deleted) still has a
    ///   larger token and fenced storage refuses this reader once it is
    ///   stale.
    ///
    /// A leader's term starts once no earlier term's lock-delay runs, with
    /// its own marker if it has a lock-delay ([`crate::election::delay`]).
    /// `waited`: whether this key waited, and whether the acquisition did.
    #[allow(clippy::too_many_arguments)]
    async fn grant_to(
        &self,
        req: &LeaseRequest,
        queue: &Queue,
        deadline: Option<Instant>,
        session: &Arc<Session>,
        ours: OurKey,
        rev: i64,
        mut at: i64,
        mut sent: Sent,
        own: Option<QueueWatch>,
        (waited, contended): (bool, bool),
    ) -> Result<Round> {
        let inner = &self.inner;
        let (mut ours, mut marker) = (ours, None);
        if req.mode == LockMode::Leader {
            let (client, watcher) = (&inner.client, &inner.ops.watcher);
            let delay = req.lock_delay;
            match delay::clear(client, watcher, queue, session, ours, rev, delay, deadline).await? {
                Cleared::Term {
                    ours: o,
                    at: cleared,
                    sent: s,
                    marker: m,
                } => (ours, at, sent, marker) = (o, at.max(cleared), s.unwrap_or(sent), m),
                Cleared::Deadline(o) => {
                    if let Err(e) = o.remove().await {
                        tracing::debug!(name = %req.name, error = %e, "distlock etcd: leaving the line goes on in the background");
                    }
                    return Ok(Round::Done(None));
                }
                Cleared::Gone(o) => return Ok(Round::Again(o.nothing_written())),
            }
        }
        let token = match req.mode {
            LockMode::Write => at.max(rev),
            LockMode::Read if waited => {
                match inner
                    .ops
                    .stamp(&ours.key, rev, session.id(), req.mode)
                    .await?
                {
                    Some(stamped) => {
                        at = stamped;
                        stamped
                    }
                    None => {
                        tracing::debug!(name = %req.name, "distlock etcd: contender key gone before its grant was stamped; queueing again");
                        return Ok(Round::Again(ours.nothing_written()));
                    }
                }
            }
            _ => rev,
        };
        let confirmed = Confirmed {
            token,
            at,
            sent,
            marker,
        };
        grant(
            ours,
            &inner.ops.watcher,
            own,
            req.mode,
            confirmed,
            req.ttl,
            contended,
        )
        .map(|lease| Round::Done(Some(lease)))
    }

    /// The holder (oldest contender) of a mutex queue and the number of
    /// contenders, from one ascending read of at most 1,000 keys (with
    /// their values: the holder's is its description).
    async fn holder(&self, queue: &Queue) -> Result<(Option<etcd_client::KeyValue>, usize)> {
        let contenders =
            crate::force::contenders(&self.inner.client, queue, "inspect", 1000).await?;
        Ok((contenders.first().cloned(), contenders.len()))
    }
}

#[async_trait]
impl LockBackend for EtcdLock {
    fn backend_capabilities(&self) -> Capabilities {
        Capabilities::new("etcd")
            .with_fencing(Fencing::Durable)
            .with_fifo(true)
            .with_loss_events(true)
            .with_notified_wait(true)
            .with_remote(true)
            .with_read_write(true)
            .with_semaphore(true)
            .with_describes_holder(true)
            .with_election(true)
            .with_fault_tolerance(FAULT_TOLERANCE)
    }

    async fn try_lock(&self, req: &LeaseRequest) -> Result<Option<Lease>> {
        self.acquire(req, None).await
    }

    async fn lock(&self, req: &LeaseRequest, deadline: Instant) -> Result<Option<Lease>> {
        self.acquire(req, Some(deadline)).await
    }

    async fn inspect(&self, name: &LockName) -> Result<LockStatus> {
        let queue = Queue::new(&self.config().key_prefix, name, Kind::Mutex);
        let (holder, contenders) = self.holder(&queue).await?;
        let Some(owner) = holder else {
            return Ok(LockStatus::new(false).with_waiters(Some(0)));
        };
        let token = u64::try_from(owner.create_revision())
            .ok()
            .map(FencingToken::new);
        let lease = owner.lease();
        let ttl = if lease == 0 {
            None
        } else {
            let r = self
                .inner
                .client
                .call("read the holder's lease TTL", |mut c| async move {
                    c.lease_time_to_live(lease, None).await
                })
                .await?;
            u64::try_from(r.ttl())
                .ok()
                .filter(|s| *s > 0)
                .map(Duration::from_secs)
        };
        Ok(LockStatus::new(true)
            .with_token(token)
            .with_ttl_remaining(ttl)
            .with_waiters(Some(contenders.saturating_sub(1)))
            .with_owner(Some(lease_hex(lease)))
            .with_holder(Holder::from_json(owner.value())))
    }

    /// Deletes the holders' contender keys of the mutex, the read-write
    /// lock and the semaphore of `name`; the waiters
    /// watching them go on as after a release, and the evicted guards see
    /// their keys' deletion. Within one request timeout in all.
    async fn force_release(&self, name: &LockName) -> Result<ForceReleased> {
        let client = &self.inner.client;
        let prefix = self.config().key_prefix.clone();
        let bound = Instant::now() + client.request_timeout();
        bounded_by(bound, async {
            let mut removed = [0usize; 3];
            for (i, kind) in [Kind::Mutex, Kind::ReadWrite, Kind::Semaphore]
                .into_iter()
                .enumerate()
            {
                removed[i] = crate::force::force_release(client, &prefix, name, kind).await?;
            }
            Ok(ForceReleased::none()
                .with_mutex(removed[0])
                .with_read_write(removed[1])
                .with_permits(removed[2]))
        })
        .await
    }

    /// The first contender of the line of `name` (the mutex's, which
    /// elections share, as etcd's own do): its value and the create
    /// revision of its key.
    async fn leader(&self, name: &LockName) -> Result<Option<LeaderInfo>> {
        let queue = Queue::new(&self.config().key_prefix, name, Kind::Mutex);
        crate::election::leader(&self.inner.client, &queue).await
    }

    /// The first contender of the line of `name` as it changes, from a
    /// watch of the line's prefix (see `crate::election`).
    async fn observe(&self, name: &LockName) -> Result<LeaderStream> {
        let queue = Queue::new(&self.config().key_prefix, name, Kind::Mutex);
        let (client, watcher) = (&self.inner.client, &self.inner.ops.watcher);
        crate::election::observe(client, watcher, &queue).await
    }

    /// The mutexes held under `prefix`: one read of the keys under it (at
    /// most 10,000), grouped by name, the oldest contender of each the holder.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<(LockName, LockStatus)>> {
        let key_prefix = self.config().key_prefix.clone();
        let start = format!("{key_prefix}{prefix}");
        let resp = self
            .inner
            .client
            .call("list", |mut c| {
                let start = start.clone();
                async move {
                    c.get(
                        start,
                        Some(
                            GetOptions::new()
                                .with_prefix()
                                .with_sort(SortTarget::Create, SortOrder::Ascend)
                                .with_limit(10_000),
                        ),
                    )
                    .await
                }
            })
            .await?;
        let mut held: std::collections::BTreeMap<LockName, (LockStatus, usize)> =
            std::collections::BTreeMap::new();
        for kv in resp.kvs() {
            let Ok(key) = std::str::from_utf8(kv.key()) else {
                continue;
            };
            let Some(rest) = key.strip_prefix(key_prefix.as_str()) else {
                continue;
            };
            let Some((name, _)) = rest.rsplit_once('/') else {
                continue;
            };
            let Ok(name) = LockName::new(name) else {
                continue;
            };
            let queue = Queue::new(&key_prefix, &name, Kind::Mutex);
            if !queue.is_contender(kv.key()) {
                continue;
            }
            let entry = held.entry(name).or_insert_with(|| {
                let status = LockStatus::new(true)
                    .with_token(
                        u64::try_from(kv.create_revision())
                            .ok()
                            .map(FencingToken::new),
                    )
                    .with_owner(Some(lease_hex(kv.lease())))
                    .with_holder(Holder::from_json(kv.value()));
                (status, 0)
            });
            entry.1 += 1;
        }
        Ok(held
            .into_iter()
            .take(limit)
            .map(|(name, (status, n))| (name, status.with_waiters(Some(n - 1))))
            .collect())
    }
}

/// The fault tolerance, in words.
pub(crate) const FAULT_TOLERANCE: &str =
    "a minority of the 2N+1 etcd members (Raft); a leader change delays lease expiry but never shortens it (etcd 3.4.31, 3.5.13 and later; an older leader frozen past a lease TTL revokes leases when it resumes)";
