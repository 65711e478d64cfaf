//! An operator's force release: the holders' contender keys of a name are
//! deleted, whoever owns them, and the waiters, which already watch the
//! keys ahead of theirs, go on as after their holders' releases.
//!
//! Which contenders hold follows the blocking rule of the queue
//! ([`crate::layout::blocker`]): the oldest contender of the mutex; every
//! contender of the read-write lock that nothing ahead blocks (the readers
//! before the first writer, or that writer alone); the oldest N contenders
//! of a semaphore of N, N being the permit count its keys carry.

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp};
use lock_core::{LockError, LockErrorKind, LockMode, LockName, Result};

use crate::client::EtcdClient;
use crate::layout::{blocker, Contender, Kind, Queue, WRITE};

/// How many contenders of one kind a force release reads at most.
const PAGE: i64 = 10_000;

/// How often the holders of one kind are read again when a holder key
/// changed between the read and the delete.
const ROUNDS: u32 = 5;

/// Deletes the holders of `name`'s lock of `kind` under `key_prefix`; how
/// many there were. Each round reads the queue and deletes its holders in
/// one transaction that compares each key's create revision (a key put
/// again since the read is not removed), repeated after a change.
pub(crate) async fn force_release(
    client: &EtcdClient,
    key_prefix: &str,
    name: &LockName,
    kind: Kind,
) -> Result<usize> {
    let queue = Queue::new(key_prefix, name, kind);
    for _ in 0..ROUNDS {
        let kvs = contenders(client, &queue, "force release: read the holders", PAGE).await?;
        let holders = holders(kind, &kvs)?;
        if holders.is_empty() {
            return Ok(0);
        }
        let compares: Vec<Compare> = holders
            .iter()
            .map(|kv| Compare::create_revision(kv.key(), CompareOp::Equal, kv.create_revision()))
            .collect();
        let deletes: Vec<TxnOp> = holders
            .iter()
            .map(|kv| TxnOp::delete(kv.key(), None))
            .collect();
        let txn = Txn::new().when(compares).and_then(deletes);
        // Safe to send again: every delete compares the key's create revision.
        let resp = client
            .call("force release", |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?;
        if resp.succeeded() {
            return Ok(holders.len());
        }
    }
    Err(LockError::unavailable(format!(
        "etcd: the holders of {name} kept changing during the force release ({ROUNDS} reads); try again"
    )))
}

/// The contender keys of `queue`, oldest first, with their values: one
/// ascending read of at most `limit` keys, for the call named `what`
/// (also what `inspect` reads).
pub(crate) async fn contenders(
    client: &EtcdClient,
    queue: &Queue,
    what: &'static str,
    limit: i64,
) -> Result<Vec<KeyValue>> {
    let prefix = queue.prefix.clone();
    let resp = client
        .call(what, |mut c| {
            let prefix = prefix.clone();
            async move {
                c.get(
                    prefix,
                    Some(
                        GetOptions::new()
                            .with_prefix()
                            .with_sort(SortTarget::Create, SortOrder::Ascend)
                            .with_limit(limit),
                    ),
                )
                .await
            }
        })
        .await?;
    Ok(resp
        .kvs()
        .iter()
        .filter(|kv| queue.is_contender(kv.key()))
        .cloned()
        .collect())
}

/// The contenders of `kvs` (one queue of `kind`, oldest first) that hold.
fn holders(kind: Kind, kvs: &[KeyValue]) -> Result<Vec<KeyValue>> {
    let mut ahead: Vec<Contender> = Vec::new();
    let mut held = Vec::new();
    for kv in kvs {
        let writes = kind == Kind::ReadWrite && kv.value() == WRITE.as_bytes();
        let mode = match kind {
            Kind::Mutex => LockMode::Exclusive,
            Kind::ReadWrite if writes => LockMode::Write,
            Kind::ReadWrite => LockMode::Read,
            Kind::Semaphore => LockMode::Permit {
                permits: permit_count(kv)?,
            },
        };
        // `blocker` takes the contenders ahead nearest first.
        let nearest_first: Vec<Contender> = ahead.iter().rev().cloned().collect();
        if blocker(mode, &nearest_first).is_some() {
            // Everyone behind a blocked contender is blocked too.
            break;
        }
        held.push(kv.clone());
        ahead.push(Contender {
            key: kv.key().to_vec(),
            create_revision: kv.create_revision(),
            writes,
        });
    }
    Ok(held)
}

/// The permit count a semaphore contender key carries: its value's
/// `permits` field (a decimal string), or a bare decimal value.
fn permit_count(kv: &KeyValue) -> Result<u32> {
    let from_json = || {
        let value: serde_json::Value = serde_json::from_slice(kv.value()).ok()?;
        match value.get("permits")? {
            serde_json::Value::String(s) => s.parse::<u32>().ok(),
            serde_json::Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
            _ => None,
        }
    };
    std::str::from_utf8(kv.value())
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .or_else(from_json)
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            LockError::new(
                LockErrorKind::Unsupported,
                format!(
                    "etcd: the semaphore key {} does not say how many permits its semaphore has, so its holders \
                     cannot be told from its waiters; it is removed when its holder releases or its session ends",
                    String::from_utf8_lossy(kv.key())
                ),
            )
        })
}
