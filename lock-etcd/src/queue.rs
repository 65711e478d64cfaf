//! The queue protocol on etcd: put our contender key, find what blocks it,
//! and wait for that to go, herd-free.
//!
//! Waiting never starts a watch in the past (a watch whose start revision is
//! already behind the store is caught up by etcd's unsynced-watcher loop,
//! which runs every 100 ms): the watch on the blocker is created at the
//! current revision, and only then is the blocker read again. A deletion
//! after the watch's revision arrives on the watch; one before it is seen by
//! the read.

use std::sync::Arc;

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, TxnResponse,
};
use lock_core::session::Sent;
use lock_core::{LockError, LockErrorKind, LockMode, Result};
use tokio::time::Instant;

use crate::client::EtcdClient;
use crate::layout::{blocker, value_of, Contender, Kind, Queue, WRITE};
use crate::session::Session;
use crate::watcher::{WatchEvent, Watcher};

/// How many keys ahead one read looks at before it pages further.
const PAGE: i64 = 64;

/// Where our key stands.
#[derive(Debug)]
pub(crate) enum Position {
    /// Nothing ahead blocks it, as of revision `at`.
    Held { at: i64 },
    /// `blocker` is ahead and blocks it.
    Blocked { blocker: Contender },
    /// Our key is not there (deleted, or gone with an expired lease).
    Gone,
}

/// What putting our key found.
#[derive(Debug)]
pub(crate) enum Placed {
    /// Put at `rev`, standing at `position`.
    At { rev: i64, position: Position },
    /// Our key was already there, created at `rev` (a put whose answer we
    /// never saw): delete it and place again.
    Stale { rev: i64 },
}

/// How a wait for our turn ended.
pub(crate) enum Turn {
    /// Nothing blocks us any more, as of revision `at`, by a read sent at `sent`.
    Mine { at: i64, sent: Sent },
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
    /// Puts `key` with `lease` if it does not exist, and reads, in the same
    /// transaction, the keys just ahead of it; pages further if needed.
    pub(crate) async fn place(
        &self,
        queue: &Queue,
        key: &str,
        lease: i64,
        mode: LockMode,
    ) -> Result<Placed> {
        // Our put is the newest key under the prefix: the first of a
        // descending read.
        let page = first_page(mode).saturating_add(1);
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(
                    key,
                    value_of(mode),
                    Some(PutOptions::new().with_lease(lease)),
                ),
                TxnOp::get(queue.prefix.as_str(), Some(ahead_query(queue, None, page))),
            ])
            .or_else([TxnOp::get(key, Some(GetOptions::new().with_keys_only()))]);
        let resp = self.client.call("acquire", txn_call(&txn)).await?;
        let at = header_revision(&resp)?;
        let gets = gets(&resp);
        if !resp.succeeded() {
            return match gets.first().and_then(|kvs| kvs.first()) {
                Some(ours) => Ok(Placed::Stale {
                    rev: ours.create_revision(),
                }),
                None => Err(LockError::new(
                    LockErrorKind::Protocol,
                    "etcd: put-if-absent failed but the key is not there",
                )),
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

    /// Reads, in one linearizable transaction, whether our key (created at
    /// `rev`) still exists and what is ahead of it.
    pub(crate) async fn position(
        &self,
        queue: &Queue,
        key: &str,
        rev: i64,
        mode: LockMode,
    ) -> Result<Position> {
        let page = first_page(mode);
        let txn = Txn::new().and_then([
            TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
            TxnOp::get(
                queue.prefix.as_str(),
                Some(ahead_query(queue, Some(rev - 1), page)),
            ),
        ]);
        let resp = self.client.call("read the queue", txn_call(&txn)).await?;
        let at = header_revision(&resp)?;
        let gets = gets(&resp);
        let ours = gets
            .first()
            .and_then(|kvs| kvs.first())
            .is_some_and(|kv| kv.create_revision() == rev);
        if !ours {
            return Ok(Position::Gone);
        }
        let kvs = gets.get(1).cloned().unwrap_or_default();
        let full = i64::try_from(kvs.len()).unwrap_or(i64::MAX) >= page;
        self.decide(queue, mode, at, rev, &kvs, full).await
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
                return Ok(Position::Blocked { blocker: b.clone() });
            }
            if !full {
                return Ok(Position::Held { at });
            }
            // Undecided and there may be more: the next page, as of the
            // same revision.
            let opts = ahead_query(queue, Some(lowest - 1), PAGE).with_revision(at);
            let prefix = queue.prefix.clone();
            let resp = self
                .client
                .call("read the queue", |mut c| {
                    let (prefix, opts) = (prefix.clone(), opts.clone());
                    async move { c.get(prefix, Some(opts)).await }
                })
                .await?;
            page = resp.kvs().to_vec();
            full = i64::try_from(page.len()).unwrap_or(i64::MAX) >= PAGE;
        }
    }

    /// Waits, herd-free, until nothing ahead blocks our key (created at
    /// `rev`), or `deadline`. `blocked` is what blocked it last.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn wait_turn(
        &self,
        session: &Session,
        queue: &Queue,
        key: &str,
        rev: i64,
        mode: LockMode,
        mut blocked: Contender,
        deadline: Instant,
    ) -> Result<Turn> {
        loop {
            if session.is_ended() {
                return Ok(Turn::Requeue("the session lease expired"));
            }
            // Watch, from now, what must change before we can hold: the
            // blocker's deletion (a reader also its downgrade to read; a
            // permit any deletion in the queue).
            let (watched, prefix, with_puts) = match mode {
                LockMode::Permit { .. } => (queue.prefix.as_bytes().to_vec(), true, false),
                LockMode::Read => (blocked.key.clone(), false, true),
                _ => (blocked.key.clone(), false, false),
            };
            let mut watch = self.watcher.watch(&watched, prefix, with_puts, None);
            let watch_limit = deadline.min(Instant::now() + self.client.request_timeout());
            match watch.created(watch_limit).await {
                Ok(_) => {}
                Err(_) if Instant::now() >= deadline => return Ok(Turn::Deadline),
                Err(e) => return Err(e),
            }
            // Read again now that the watch covers everything after its
            // creation.
            let sent = Sent::now();
            let position = match self
                .bounded(deadline, self.position(queue, key, rev, mode))
                .await?
            {
                Some(p) => p,
                None => return Ok(Turn::Deadline),
            };
            match position {
                Position::Gone => return Ok(Turn::Requeue("our contender key disappeared")),
                Position::Held { at } => return Ok(Turn::Mine { at, sent }),
                Position::Blocked { blocker }
                    if !matches!(mode, LockMode::Permit { .. }) && blocker.key != blocked.key =>
                {
                    // Something else blocks us now: watch that instead.
                    blocked = blocker;
                    continue;
                }
                Position::Blocked { .. } => {}
            }
            // Sleep until the watched thing changes (or the watch is lost, or
            // the session ends, or the deadline).
            loop {
                let event = tokio::select! {
                    event = watch.next() => event,
                    _ = tokio::time::sleep_until(deadline) => return Ok(Turn::Deadline),
                };
                match event {
                    Some(WatchEvent::Deleted { .. }) | Some(WatchEvent::Lost { .. }) | None => {
                        break
                    }
                    Some(WatchEvent::Put { value, .. }) if value != WRITE.as_bytes() => break,
                    Some(_) => {}
                }
            }
            let sent = Sent::now();
            let position = match self
                .bounded(deadline, self.position(queue, key, rev, mode))
                .await?
            {
                Some(p) => p,
                None => return Ok(Turn::Deadline),
            };
            match position {
                Position::Gone => return Ok(Turn::Requeue("our contender key disappeared")),
                Position::Held { at } => return Ok(Turn::Mine { at, sent }),
                Position::Blocked { blocker } => blocked = blocker,
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

/// The keys to read first for `mode`: enough to decide in the usual case.
fn first_page(mode: LockMode) -> i64 {
    match mode {
        LockMode::Permit { permits } => i64::from(permits).saturating_add(1).min(PAGE),
        LockMode::Read => 16,
        _ => 1,
    }
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
