//! The queue protocol on etcd: put our contender key, find what blocks it,
//! and wait for that to go, herd-free.
//!
//! Waiting never starts a watch in the past (a watch whose start revision is
//! already behind the store is caught up by etcd's unsynced-watcher loop,
//! which runs every 100 ms): a waiter joins its queue's shared watch
//! ([`Watcher::queue_watch`]), which covers everything after a known
//! revision, and the queue is read again only if the store moved on
//! between the last read and that revision. A deletion after it arrives on
//! the watch; one before it is seen by the read.
//!
//! Where every contender ahead blocks (a mutex, a writer), the wait is a line
//! ([`QueueOps::wait_in_line`]): we wait for the deletion of our own key, of
//! the contender just ahead (the blocker) or of the one ahead of it; the
//! others' are ignored. That nothing is ahead of the
//! blocker is a fact that stays true (a key created later is behind us), so
//! once a read has shown it, the blocker's deletion alone tells us that the
//! lock is ours: the hand-off costs the releaser's delete and no read. The
//! read that learns it happens when the key ahead of the blocker goes, while
//! the blocker holds the lock, off the hand-off's path.
//!
//! Reads while waiting are served by the member we talk to (serializable),
//! and used only if that member's revision is at least the revision the
//! facts must cover (the watches' creation, the event that triggered the
//! read); else they are read again through the leader. Everything they can
//! tell (nothing ahead of a key, our key still there since a watch on it was
//! created) stays true or is watched, so an older consistent revision is as
//! good as the newest one.

use std::sync::Arc;

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, TxnResponse,
};
use lock_core::backend::session::Sent;
use lock_core::{LockError, LockErrorKind, LockMode, Result};
use tokio::time::Instant;

use crate::client::{EtcdClient, Outcome};
use crate::event::WatchEvent;
use crate::layout::{blocker, value_of, Contender, Kind, Queue, WRITE};
use crate::session::Session;
use crate::watcher::{QueueWatch, Watcher};

/// How many keys ahead one read looks at before it pages further.
const PAGE: i64 = 64;

/// Where our key stands.
#[derive(Debug)]
pub(crate) enum Position {
    /// Nothing ahead blocks it, as of revision `at`.
    Held { at: i64 },
    /// Something ahead blocks it, as of revision `line.at`.
    Blocked(Line),
    /// Our key is not there (deleted, or gone with an expired lease).
    Gone,
}

/// What blocks our key, as one read saw it.
#[derive(Clone, Debug)]
pub(crate) struct Line {
    /// The contender to watch: its deletion (a reader: also its downgrade)
    /// is what we wait for.
    pub(crate) blocker: Contender,
    /// In a line (mutex, writer): the contender just ahead of `blocker`, if
    /// the read saw one.
    pub(crate) next: Option<Contender>,
    /// In a line: nothing is ahead of `blocker` (it holds the lock).
    pub(crate) blocker_first: bool,
    /// The revision of the read.
    pub(crate) at: i64,
}

/// What putting our key found.
#[derive(Debug)]
pub(crate) enum Placed {
    /// Put at `rev`, standing at `position`.
    At { rev: i64, position: Position },
    /// Our key was already there, created at `rev` (a put whose answer we
    /// never saw): delete it and place again.
    Stale { rev: i64 },
    /// The put's outcome is unknown (it timed out, or its connection
    /// failed): it may have been applied, or may still be, later, until
    /// the session's fence moves on ([`Session::bump`]).
    Unknown(LockError),
    /// Nothing was put: the session's fence key had moved on (a bump of
    /// ours applied late, or one that raced this put); the session now
    /// knows it as it is: place again.
    Fenced,
}

/// How a wait for our turn ended.
pub(crate) enum Turn {
    /// Nothing blocks us any more, as of revision `at`, learnt by a request
    /// sent (or an event received) at `sent`; `own` is the queue's watch,
    /// which has covered our key since before `at`, if the wait had one.
    Mine {
        at: i64,
        sent: Sent,
        own: Option<QueueWatch>,
    },
    /// The deadline passed first.
    Deadline,
    /// Our key is gone (session expired, or deleted by someone): queue again.
    Requeue(&'static str),
}

/// The queue operations of one client.
pub(crate) struct QueueOps {
    pub(crate) client: Arc<EtcdClient>,
    pub(crate) watcher: Watcher,
}

impl QueueOps {
    /// Puts `key` with the session's lease if it does not exist and the
    /// session's fence key is as we know it, and reads, in the same
    /// transaction, the keys just ahead of it; pages further if needed.
    pub(crate) async fn place(
        &self,
        queue: &Queue,
        key: &str,
        session: &Session,
        mode: LockMode,
        value: String,
    ) -> Result<Placed> {
        let lease = session.id();
        let fence = queue.fence_key(lease);
        // Our put is the newest key under the prefix: the first of a
        // descending read.
        let page = first_page(mode).saturating_add(1);
        let txn = Txn::new()
            .when([
                Compare::create_revision(key, CompareOp::Equal, 0),
                session.fence(&fence),
            ])
            .and_then([
                TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease))),
                TxnOp::get(queue.prefix.as_str(), Some(ahead_query(queue, None, page))),
            ])
            .or_else([
                TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
                TxnOp::get(fence.as_str(), Some(GetOptions::new().with_keys_only())),
            ]);
        // A put is sent once: a copy sent elsewhere after a timeout could
        // be applied after the acquisition gave up (see `crate::key`).
        let within = self.client.request_timeout();
        let resp = match self
            .client
            .call_once("acquire", within, txn_call(&txn))
            .await
        {
            Outcome::Done(resp) => resp,
            Outcome::Refused(e) => return Err(e),
            Outcome::Unknown(e) => return Ok(Placed::Unknown(e)),
        };
        let at = header_revision(&resp)?;
        let gets = gets(&resp);
        if !resp.succeeded() {
            let seen = gets.get(1).and_then(|kvs| kvs.first());
            session.saw_fence(&fence, seen);
            return match gets.first().and_then(|kvs| kvs.first()) {
                Some(ours) => Ok(Placed::Stale {
                    rev: ours.create_revision(),
                }),
                None => Ok(Placed::Fenced),
            };
        }
        let rev = at;
        let kvs = gets.first().cloned().unwrap_or_default();
        match kvs.first() {
            Some(first) if first.key() == key.as_bytes() && first.create_revision() == rev => {}
            _ => {
                return Err(LockError::new(
                    LockErrorKind::Protocol,
                    "etcd: our contender key is not the newest one right after its put",
                ))
            }
        }
        let full = i64::try_from(kvs.len()).unwrap_or(i64::MAX) >= page;
        let position = self.decide(queue, mode, at, rev, &kvs[1..], full).await?;
        Ok(Placed::At { rev, position })
    }

    /// Stamps the grant of a reader that waited: puts our key again (the
    /// same value, the same lease) if it is still the key created at `rev`,
    /// and returns the revision of that put, the grant's fencing token, or
    /// `None` if the key is gone. Why: the comment on the token in
    /// `EtcdLock::acquire`.
    pub(crate) async fn stamp(
        &self,
        key: &str,
        rev: i64,
        lease: i64,
        mode: LockMode,
    ) -> Result<Option<i64>> {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, rev)])
            .and_then([TxnOp::put(
                key,
                value_of(mode, None),
                Some(PutOptions::new().with_lease(lease)),
            )]);
        // Sent once, like every put of our key: a copy sent elsewhere after
        // a timeout could be applied later. An unknown outcome fails the
        // acquisition (its key is removed on the way out, comparing its
        // create revision, so a late copy finds nothing to put).
        let within = self.client.request_timeout();
        let resp = match self
            .client
            .call_once("acquire", within, txn_call(&txn))
            .await
        {
            Outcome::Done(resp) => resp,
            Outcome::Refused(e) | Outcome::Unknown(e) => return Err(e),
        };
        if !resp.succeeded() {
            return Ok(None);
        }
        header_revision(&resp).map(Some)
    }

    /// Reads whether our key (created at `rev`) still exists and what is
    /// ahead of it, in one range read (our key is the newest key created at
    /// or before `rev`). With `fresh: Some(r)` the member we talk to answers
    /// if its revision is at least `r`, else the leader does (see the module
    /// docs); with `None`, the leader.
    pub(crate) async fn position(
        &self,
        queue: &Queue,
        key: &str,
        rev: i64,
        mode: LockMode,
        fresh: Option<i64>,
    ) -> Result<Position> {
        let page = first_page(mode).saturating_add(1);
        let opts = ahead_query(queue, Some(rev), page);
        let mut answer = None;
        if let Some(need) = fresh {
            let resp = self.range(queue, opts.clone().with_serializable()).await?;
            if resp.header().is_some_and(|h| h.revision() >= need) {
                answer = Some(resp);
            }
        }
        let mut resp = match answer {
            Some(r) => r,
            None => self.range(queue, opts).await?,
        };
        let at = resp.header().map(|h| h.revision()).ok_or_else(|| {
            LockError::new(LockErrorKind::Protocol, "etcd: answer without a header")
        })?;
        let kvs = resp.take_kvs();
        let ours = kvs
            .first()
            .is_some_and(|kv| kv.key() == key.as_bytes() && kv.create_revision() == rev);
        if !ours {
            return Ok(Position::Gone);
        }
        let full = i64::try_from(kvs.len()).unwrap_or(i64::MAX) >= page;
        self.decide(queue, mode, at, rev, &kvs[1..], full).await
    }

    /// One range read under the queue's prefix.
    async fn range(&self, queue: &Queue, opts: GetOptions) -> Result<etcd_client::GetResponse> {
        let prefix = queue.prefix.clone();
        self.client
            .call("read the queue", |mut c| {
                let (prefix, opts) = (prefix.clone(), opts.clone());
                async move { c.get(prefix, Some(opts)).await }
            })
            .await
    }

    /// Decides from the keys ahead (nearest first, `full` if the read may
    /// have stopped short), paging further back while undecided.
    async fn decide(
        &self,
        queue: &Queue,
        mode: LockMode,
        at: i64,
        rev: i64,
        first: &[KeyValue],
        mut full: bool,
    ) -> Result<Position> {
        let mut ahead: Vec<Contender> = Vec::new();
        let mut lowest = rev;
        let mut page: Vec<KeyValue> = first.to_vec();
        loop {
            for kv in &page {
                lowest = lowest.min(kv.create_revision());
                if queue.is_contender(kv.key()) {
                    ahead.push(Contender {
                        key: kv.key().to_vec(),
                        create_revision: kv.create_revision(),
                        writes: queue.kind == Kind::ReadWrite && kv.value() == WRITE.as_bytes(),
                    });
                }
            }
            if let Some(b) = blocker(mode, &ahead) {
                if !in_line(mode) {
                    return Ok(Position::Blocked(Line {
                        blocker: b.clone(),
                        next: None,
                        blocker_first: false,
                        at,
                    }));
                }
                // A line: also what is ahead of the blocker, if that is known.
                if ahead.len() >= 2 || !full {
                    return Ok(Position::Blocked(Line {
                        blocker: ahead[0].clone(),
                        next: ahead.get(1).cloned(),
                        blocker_first: ahead.len() == 1,
                        at,
                    }));
                }
            } else if !full {
                return Ok(Position::Held { at });
            }
            // Undecided and there may be more: the next page, as of the
            // same revision.
            let opts = ahead_query(queue, Some(lowest - 1), PAGE).with_revision(at);
            let mut resp = self.range(queue, opts).await?;
            page = resp.take_kvs();
            full = i64::try_from(page.len()).unwrap_or(i64::MAX) >= PAGE;
        }
    }

    /// Waits in a line (mutex, writer: every contender ahead blocks) until
    /// nothing is ahead of our key (created at `rev`), or `deadline`. `line`
    /// is what the last read saw. See the module docs: a hand-off to us is
    /// the blocker's deletion, seen on its watch, with no request of ours
    /// once a read has shown that nothing is ahead of the blocker.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn wait_in_line(
        &self,
        session: &Session,
        queue: &Queue,
        key: &str,
        rev: i64,
        mode: LockMode,
        mut line: Line,
        deadline: Instant,
    ) -> Result<Turn> {
        debug_assert!(in_line(mode));
        let mut watch = self.watcher.queue_watch(queue.prefix.as_bytes(), false);
        loop {
            if session.is_ended() {
                return Ok(Turn::Requeue("the session lease expired"));
            }
            // The revision after which every event reaches us (known at
            // once after the first time).
            let limit = deadline.min(Instant::now() + self.client.request_timeout());
            let from = match watch.created(limit).await {
                Ok(c) => c,
                Err(_) if Instant::now() >= deadline => return Ok(Turn::Deadline),
                Err(e) => return Err(e),
            };
            let trigger = if from > line.at {
                // The store moved on between the read and what the watch
                // covers: read again.
                from
            } else {
                match sleep(&mut watch, key.as_bytes(), &line, deadline).await? {
                    Woken::Deadline => return Ok(Turn::Deadline),
                    Woken::OursGone => return Ok(Turn::Requeue("our contender key disappeared")),
                    Woken::BlockerGone { revision } if line.blocker_first => {
                        // Nothing was ahead of the blocker, nothing can be
                        // put ahead of us, and our key is there: a deletion
                        // of it would have come first, since one watch
                        // passes on its events in revision order.
                        return Ok(Turn::Mine {
                            at: revision,
                            sent: Sent::now(),
                            own: Some(watch),
                        });
                    }
                    Woken::BlockerGone { revision } | Woken::NextGone { revision } => revision,
                    Woken::Lost => {
                        // Events may have been missed: join anew, read again.
                        watch = self.watcher.queue_watch(queue.prefix.as_bytes(), false);
                        continue;
                    }
                }
            };
            let sent = Sent::now();
            let position = match self
                .bounded(
                    deadline,
                    self.position(queue, key, rev, mode, Some(trigger)),
                )
                .await?
            {
                Some(p) => p,
                None => return Ok(Turn::Deadline),
            };
            match position {
                Position::Gone => return Ok(Turn::Requeue("our contender key disappeared")),
                Position::Held { at } => {
                    return Ok(Turn::Mine {
                        at,
                        sent,
                        own: Some(watch),
                    })
                }
                Position::Blocked(l) => line = l,
            }
        }
    }

    /// Waits, herd-free, until nothing ahead blocks our key (created at
    /// `rev`), or `deadline`. `line` is what the last read saw.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn wait_turn(
        &self,
        session: &Session,
        queue: &Queue,
        key: &str,
        rev: i64,
        mode: LockMode,
        line: Line,
        deadline: Instant,
    ) -> Result<Turn> {
        debug_assert!(!in_line(mode));
        // What must change before we can hold: the blocker's deletion (a
        // reader: also its downgrade to read, a put; a permit: any deletion
        // in the queue).
        let permit = matches!(mode, LockMode::Permit { .. });
        let with_puts = mode == LockMode::Read;
        let prefix = queue.prefix.as_bytes();
        let mut watch = self.watcher.queue_watch(prefix, with_puts);
        let (mut blocked, mut at) = (line.blocker, line.at);
        loop {
            if session.is_ended() {
                return Ok(Turn::Requeue("the session lease expired"));
            }
            let watch_limit = deadline.min(Instant::now() + self.client.request_timeout());
            let covers = match watch.created(watch_limit).await {
                Ok(c) => c,
                Err(_) if Instant::now() >= deadline => return Ok(Turn::Deadline),
                Err(e) => return Err(e),
            };
            // The revision the next read must be at least as recent as
            // (`None`: the leader's, for a put whose revision is unknown).
            let fresh = if covers > at {
                // The store moved on between the read and what the watch
                // covers: read again.
                Some(covers)
            } else {
                let event = tokio::select! {
                    event = watch.next() => event,
                    _ = tokio::time::sleep_until(deadline) => return Ok(Turn::Deadline),
                };
                match event {
                    None => return Err(LockError::unavailable("etcd: the client is gone")),
                    Some(WatchEvent::Lost { reason }) => {
                        tracing::debug!(%reason, "distlock etcd: the queue watch of a waiter was lost; watching again");
                        watch = self.watcher.queue_watch(prefix, with_puts);
                        continue;
                    }
                    Some(WatchEvent::Deleted { key: k, revision })
                        if revision > at && (permit || k == blocked.key) =>
                    {
                        Some(revision)
                    }
                    Some(WatchEvent::Put { key: k, value, .. })
                        if k == blocked.key && value != WRITE.as_bytes() =>
                    {
                        None
                    }
                    // Older news, other contenders, creations.
                    Some(_) => continue,
                }
            };
            let sent = Sent::now();
            let position = match self
                .bounded(deadline, self.position(queue, key, rev, mode, fresh))
                .await?
            {
                Some(p) => p,
                None => return Ok(Turn::Deadline),
            };
            match position {
                Position::Gone => return Ok(Turn::Requeue("our contender key disappeared")),
                Position::Held { at } => {
                    return Ok(Turn::Mine {
                        at,
                        sent,
                        own: None,
                    })
                }
                Position::Blocked(line) => (blocked, at) = (line.blocker, line.at),
            }
        }
    }

    /// Runs `fut` (a request, bounded by the request timeout itself) if the
    /// deadline has not passed yet; `None` if it has.
    async fn bounded<T>(
        &self,
        deadline: Instant,
        fut: impl std::future::Future<Output = Result<T>>,
    ) -> Result<Option<T>> {
        if Instant::now() >= deadline {
            return Ok(None);
        }
        fut.await.map(Some)
    }
}

/// Why a waiter in a line woke up.
enum Woken {
    Deadline,
    OursGone,
    BlockerGone {
        revision: i64,
    },
    NextGone {
        revision: i64,
    },
    /// The watch was lost: events may have been missed.
    Lost,
}

/// Sleeps until our key (`own`), the blocker or the contender ahead of it
/// is deleted after the read at `line.at` (or the watch is lost, or the
/// deadline).
async fn sleep(
    watch: &mut QueueWatch,
    own: &[u8],
    line: &Line,
    deadline: Instant,
) -> Result<Woken> {
    let next = line.next.as_ref().map(|c| c.key.as_slice());
    loop {
        let event = tokio::select! {
            biased;
            e = watch.next() => e,
            _ = tokio::time::sleep_until(deadline) => return Ok(Woken::Deadline),
        };
        match event {
            None => return Err(LockError::unavailable("etcd: the client is gone")),
            Some(WatchEvent::Lost { reason }) => {
                tracing::debug!(%reason, "distlock etcd: the queue watch of a waiter was lost; watching again");
                return Ok(Woken::Lost);
            }
            Some(WatchEvent::Deleted { key, revision }) if revision > line.at => {
                if key == own {
                    return Ok(Woken::OursGone);
                }
                if key == line.blocker.key {
                    return Ok(Woken::BlockerGone { revision });
                }
                if Some(key.as_slice()) == next {
                    return Ok(Woken::NextGone { revision });
                }
            }
            // Older news (the read already saw it), other contenders,
            // creations, puts.
            Some(_) => {}
        }
    }
}

/// The keys to read first for `mode`: enough to decide in the usual case.
fn first_page(mode: LockMode) -> i64 {
    match mode {
        LockMode::Permit { permits } => i64::from(permits).saturating_add(1).min(PAGE),
        LockMode::Read => 16,
        // The contender ahead and the one ahead of it.
        _ => 2,
    }
}

/// Whether every contender ahead blocks `mode` (a mutex, a writer): the
/// modes that wait in a line.
pub(crate) fn in_line(mode: LockMode) -> bool {
    !matches!(mode, LockMode::Read | LockMode::Permit { .. })
}

/// Keys under the queue's prefix, newest first, created at or before
/// `max_create` (all if `None`), at most `limit`; values only for a
/// read-write lock (its keys say read or write).
fn ahead_query(queue: &Queue, max_create: Option<i64>, limit: i64) -> GetOptions {
    let mut opts = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_limit(limit);
    if let Some(max) = max_create {
        opts = opts.with_max_create_revision(max);
    }
    if queue.kind != Kind::ReadWrite {
        opts = opts.with_keys_only();
    }
    opts
}

pub(crate) fn header_revision(resp: &TxnResponse) -> Result<i64> {
    resp.header()
        .map(|h| h.revision())
        .ok_or_else(|| LockError::new(LockErrorKind::Protocol, "etcd: answer without a header"))
}

/// The key-values of every range operation in a transaction answer, in order.
pub(crate) fn gets(resp: &TxnResponse) -> Vec<Vec<KeyValue>> {
    resp.op_responses()
        .into_iter()
        .filter_map(|r| match r {
            TxnOpResponse::Get(mut g) => Some(g.take_kvs()),
            _ => None,
        })
        .collect()
}

type TxnFuture =
    futures::future::BoxFuture<'static, std::result::Result<TxnResponse, etcd_client::Error>>;

/// A request closure for [`EtcdClient::call`] that runs `txn` (cloned per attempt).
pub(crate) fn txn_call(txn: &Txn) -> impl FnMut(etcd_client::Client) -> TxnFuture {
    let txn = txn.clone();
    move |mut c| {
        let txn = txn.clone();
        Box::pin(async move { c.txn(txn).await })
    }
}
