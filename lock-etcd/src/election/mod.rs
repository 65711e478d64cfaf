//! Leader election on etcd, key-compatible with etcd's own
//! `concurrency.Election` (and `etcdctl elect`): a campaign on `N` is a
//! mutex acquisition on `N` (the same line `P N/<lease hex>`) whose key
//! holds the candidate's proposal; the leader is the contender with the
//! lowest create revision, and that revision is the term's epoch.
//!
//! Followers ([`leader`], [`observe`]) read the line, and [`observe`]
//! follows it through a watch of the prefix (with puts: a proclaim is a
//! put of the leader's key), from the revision of its first read, keeping
//! the line in memory: each change of its first contender (a new term, a
//! proclaimed value, nobody) is passed on as it happens, without reads and
//! without polling. The lock-delay is in [`delay`].

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
};
use futures::StreamExt;
use lock_core::backend::LeaderStream;
use lock_core::{FencingToken, LeaderInfo, LockError, LockErrorKind, Result};
use tokio::time::Instant;

use crate::client::{EtcdClient, Outcome};
use crate::event::WatchEvent;
use crate::layout::Queue;
use crate::queue::{gets, header_revision, txn_call};
use crate::watcher::{QueueWatch, Watcher};

pub(crate) mod delay;

/// How many keys under a name's prefix a follower reads at most.
const LIMIT: i64 = 10_000;

/// Who leads the election of `queue` now: its first contender.
pub(crate) async fn leader(client: &EtcdClient, queue: &Queue) -> Result<Option<LeaderInfo>> {
    // The first few keys nearly always hold the first contender (other
    // keys under the prefix belong to read-write locks, semaphores and
    // child names); all of them if they do not.
    for limit in [16, LIMIT] {
        let (_, kvs, more) = read(client, queue, limit).await?;
        if let Some(first) = kvs.first() {
            return Ok(Some(info(first.create_revision(), first.value())));
        }
        if !more {
            break;
        }
    }
    Ok(None)
}

/// Who leads the election of `queue`, as it changes: who leads now, then
/// every change, from a watch of the prefix. An error item (the watch was
/// lost: its history compacted, or the server cancelled it) ends it.
pub(crate) async fn observe(
    client: &EtcdClient,
    watcher: &Watcher,
    queue: &Queue,
) -> Result<LeaderStream> {
    let mut watch = watcher.queue_watch(queue.prefix.as_bytes(), true);
    watch
        .created(Instant::now() + client.request_timeout())
        .await?;
    // Every event after the watch's creation reaches us, and this read is
    // later: events at or before its revision are in it already.
    let (at, kvs, more) = read(client, queue, LIMIT).await?;
    if more {
        return Err(LockError::new(
            LockErrorKind::Unsupported,
            format!(
                "etcd: more than {LIMIT} keys under {}: too many to follow",
                queue.prefix
            ),
        ));
    }
    let mut line = Line {
        queue: queue.clone(),
        at,
        by_create: BTreeMap::new(),
        by_key: HashMap::new(),
        shown: None,
    };
    for kv in kvs {
        line.put(kv.key().to_vec(), kv.value().to_vec(), kv.create_revision());
    }
    let first = line.leader();
    line.shown = line.first();
    let follower = Follower { watch, line };
    let rest = futures::stream::unfold(Some(follower), |state| async move {
        let mut follower = state?;
        let item = follower.next().await;
        let keep = item.is_ok();
        Some((item, keep.then_some(follower)))
    });
    Ok(futures::stream::once(async move { Ok(first) })
        .chain(rest)
        .boxed())
}

/// A leader as followers see it: its value, and its key's create revision
/// as the epoch. etcd keeps no time with a key: no `since`.
fn info(create: i64, value: &[u8]) -> LeaderInfo {
    let epoch = u64::try_from(create).ok().map(FencingToken::new);
    LeaderInfo::new(String::from_utf8_lossy(value).into_owned(), epoch)
}

/// The contenders under the prefix (in create revision order), at most
/// `limit` keys read, the revision of the read and whether there were more.
async fn read(
    client: &EtcdClient,
    queue: &Queue,
    limit: i64,
) -> Result<(i64, Vec<KeyValue>, bool)> {
    let prefix = queue.prefix.clone();
    let mut resp = client
        .call("read the election's line", |mut c| {
            let prefix = prefix.clone();
            async move {
                let opts = GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Ascend)
                    .with_limit(limit);
                c.get(prefix, Some(opts)).await
            }
        })
        .await?;
    let at = resp
        .header()
        .map(|h| h.revision())
        .ok_or_else(|| LockError::new(LockErrorKind::Protocol, "etcd: answer without a header"))?;
    let more = resp.more();
    let kvs = resp
        .take_kvs()
        .into_iter()
        .filter(|kv| queue.is_contender(kv.key()))
        .collect();
    Ok((at, kvs, more))
}

/// The line of an election as one follower keeps it.
struct Line {
    queue: Queue,
    /// The revision of the first read: the events up to it are in it
    /// (the later ones come in revision order, several for one
    /// transaction).
    at: i64,
    /// Each contender's key and value, by create revision.
    by_create: BTreeMap<i64, (Vec<u8>, Vec<u8>)>,
    /// Each contender's create revision, by key.
    by_key: HashMap<Vec<u8>, i64>,
    /// The first contender (create revision, value) last passed on.
    shown: Option<(i64, Vec<u8>)>,
}

impl Line {
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>, create: i64) {
        if let Some(old) = self.by_key.insert(key.clone(), create) {
            self.by_create.remove(&old);
        }
        self.by_create.insert(create, (key, value));
    }

    fn delete(&mut self, key: &[u8]) {
        if let Some(old) = self.by_key.remove(key) {
            self.by_create.remove(&old);
        }
    }

    /// The first contender: create revision and value.
    fn first(&self) -> Option<(i64, Vec<u8>)> {
        self.by_create
            .iter()
            .next()
            .map(|(create, (_, value))| (*create, value.clone()))
    }

    fn leader(&self) -> Option<LeaderInfo> {
        self.first().map(|(create, value)| info(create, &value))
    }

    /// Takes in one event of the watch: `Some` with the new leader if the
    /// first contender changed.
    fn take(&mut self, event: WatchEvent) -> Option<Option<LeaderInfo>> {
        match event {
            WatchEvent::Put {
                key,
                value,
                create,
                revision,
            } if revision > self.at && self.queue.is_contender(&key) => {
                self.put(key, value, create);
            }
            WatchEvent::Deleted { key, revision } if revision > self.at => {
                self.delete(&key);
            }
            _ => return None,
        }
        let now = self.first();
        if now == self.shown {
            return None;
        }
        self.shown = now;
        Some(self.leader())
    }
}

/// One follower: the prefix's watch and the line it keeps.
struct Follower {
    watch: QueueWatch,
    line: Line,
}

impl Follower {
    /// The next change of leader, or the error that ends the stream.
    async fn next(&mut self) -> Result<Option<LeaderInfo>> {
        loop {
            match self.watch.next().await {
                None => return Err(LockError::unavailable("etcd: the client is gone")),
                Some(WatchEvent::Lost { reason }) => {
                    return Err(LockError::unavailable(format!(
                        "etcd: the watch of the election {} was lost ({reason}): observe again",
                        self.line.queue.prefix
                    )))
                }
                Some(event) => {
                    if let Some(change) = self.line.take(event) {
                        return Ok(change);
                    }
                }
            }
        }
    }
}

/// Replaces the value of our leader key `key` (created at `rev`, on
/// `lease`) with `value`, if it is still that key and unchanged since our
/// last write of it (`mod_rev`, moved on by each write): `Ok(true)` once
/// the value is ours, `Ok(false)` if the key is gone (or is a later
/// term's). See [`LeaseHandle::proclaim`] on `EtcdLease` for why a late
/// copy is harmless. Compare failures from a moved mod revision (an
/// earlier proclaim whose answer was lost was applied) are settled by the
/// read that comes with them, and the put is tried once more.
///
/// [`LeaseHandle::proclaim`]: lock_core::backend::LeaseHandle::proclaim
pub(crate) async fn proclaim(
    client: &EtcdClient,
    key: &str,
    rev: i64,
    mod_rev: &AtomicI64,
    lease: i64,
    value: &str,
) -> Result<bool> {
    for _ in 0..2 {
        let known = mod_rev.load(Ordering::SeqCst);
        let txn = Txn::new()
            .when([
                Compare::create_revision(key, CompareOp::Equal, rev),
                Compare::mod_revision(key, CompareOp::Equal, known),
            ])
            .and_then([TxnOp::put(
                key,
                value,
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else([TxnOp::get(key, None)]);
        // Sent once, like every write of our key: after a timeout the
        // outcome is the caller's error (the value may or may not be
        // there), and a copy that lands late fails its compare if
        // anything was written since.
        let within = client.request_timeout();
        let resp = match client.call_once("proclaim", within, txn_call(&txn)).await {
            Outcome::Done(resp) => resp,
            Outcome::Refused(e) | Outcome::Unknown(e) => return Err(e),
        };
        if resp.succeeded() {
            mod_rev.fetch_max(header_revision(&resp)?, Ordering::SeqCst);
            return Ok(true);
        }
        let found = gets(&resp).into_iter().next().unwrap_or_default();
        match found.first() {
            Some(kv) if kv.create_revision() == rev => {
                mod_rev.fetch_max(kv.mod_revision(), Ordering::SeqCst);
                if kv.value() == value.as_bytes() {
                    return Ok(true);
                }
            }
            _ => return Ok(false),
        }
    }
    Err(LockError::unavailable(format!(
        "etcd: {key} kept changing under the proclaim; its value is unknown"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Kind;
    use lock_core::LockName;

    fn put(key: &str, value: &str, create: i64, revision: i64) -> WatchEvent {
        WatchEvent::Put {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            create,
            revision,
        }
    }

    fn deleted(key: &str, revision: i64) -> WatchEvent {
        WatchEvent::Deleted {
            key: key.as_bytes().to_vec(),
            revision,
        }
    }

    fn shown(change: Option<Option<LeaderInfo>>) -> Option<Option<(String, u64)>> {
        change.map(|l| l.map(|l| (l.value, l.epoch.map_or(0, |e| e.get()))))
    }

    #[test]
    fn a_follower_passes_on_each_change_of_the_first_contender() {
        let name = LockName::new("jobs").unwrap();
        let mut line = Line {
            queue: Queue::new("", &name, Kind::Mutex),
            at: 10,
            by_create: BTreeMap::new(),
            by_key: HashMap::new(),
            shown: None,
        };
        line.put(b"jobs/a".to_vec(), b"A".to_vec(), 5);
        line.shown = line.first();
        // Older news, other kinds, children and followers behind: nothing.
        assert_eq!(shown(line.take(deleted("jobs/a", 10))), None);
        assert_eq!(shown(line.take(put("jobs/ rw/1-1", "write", 11, 11))), None);
        assert_eq!(shown(line.take(put("jobs/x/b", "X", 12, 12))), None);
        assert_eq!(shown(line.take(put("jobs/b", "B", 13, 13))), None);
        assert_eq!(shown(line.take(put("jobs/c", "C", 14, 14))), None);
        // A proclaim: the same term, a new value.
        let a2 = Some(Some(("A2".to_string(), 5)));
        assert_eq!(shown(line.take(put("jobs/a", "A2", 5, 15))), a2);
        // One transaction deleting two keys: two events of one revision.
        assert_eq!(
            shown(line.take(deleted("jobs/a", 16))),
            Some(Some(("B".to_string(), 13)))
        );
        assert_eq!(
            shown(line.take(deleted("jobs/b", 16))),
            Some(Some(("C".to_string(), 14)))
        );
        assert_eq!(shown(line.take(deleted("jobs/c", 17))), Some(None));
        assert_eq!(
            shown(line.take(WatchEvent::Lost {
                reason: "compacted".into()
            })),
            None
        );
    }
}
