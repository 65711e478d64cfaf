//! What the workloads drive: a client that acquires and releases named locks.
//! Our backends, the raw protocols and the peers all implement it, so every
//! figure comes from the same loop.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{AcquireOptions, LockErrorKind, LockGuard, LockName, LockService};
use serde::Serialize;

/// A failure of one operation, in words (the benchmark reports, never panics).
pub type BenchResult<T> = Result<T, String>;

/// What kind of thing is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// One of our backends, through `lock_core::DistributedLock`.
    Ours,
    /// The bare protocol round trips with the same client crate: the limit.
    Raw,
    /// Another lock library on the same servers.
    Peer,
    /// The raw protocol plus a fencing token counted in the same atomic
    /// step: what fencing alone costs, against which the raw limit of a
    /// fenced lock can be read.
    Fenced,
    /// The raw protocol whose release deletes only the key it created
    /// (compared in the same transaction): what a release that a late copy
    /// cannot turn against the client's next key costs.
    Checked,
    /// One of our backends on another deployment of the same servers (Redis
    /// behind Sentinel, with its replicas): reported beside ours, measured
    /// the same way, not part of the targets.
    Deployment,
}

/// Makes independent clients (own connection or session, like another process).
#[async_trait]
pub trait Connector: Send + Sync {
    /// A new client.
    async fn connect(&self) -> BenchResult<Arc<dyn Locker>>;
}

/// A side of a read-write lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Shared with other readers.
    Read,
    /// Alone.
    Write,
}

/// One client.
#[async_trait]
pub trait Locker: Send + Sync {
    /// Acquires `name`, waiting up to `wait`; `Ok(None)` when the wait ran out.
    async fn acquire(&self, name: &str, wait: Duration) -> BenchResult<Option<Box<dyn Held>>>;

    /// Acquires a side of the read-write lock `name`, waiting up to `wait`;
    /// an error if the client has no read-write locks.
    async fn acquire_side(
        &self,
        name: &str,
        side: Side,
        wait: Duration,
    ) -> BenchResult<Option<Box<dyn Held>>> {
        let _ = (name, side, wait);
        Err("no read-write locks".into())
    }
}

/// A held lock.
#[async_trait]
pub trait Held: Send {
    /// Whether the holder still believes it holds the lock (keep-alive check).
    fn is_held(&self) -> bool {
        true
    }

    /// Releases it; an error if the release failed or the lock was no longer ours.
    async fn release(self: Box<Self>) -> BenchResult<()>;
}

/// Options every distlock acquire in the benchmark uses.
#[derive(Clone, Debug)]
pub struct DistOptions {
    /// Lease TTL.
    pub ttl: Duration,
    /// Keep-alive on (renews every TTL/3).
    pub keep_alive: bool,
    /// The client's session length on the session-based backends (etcd lease
    /// TTL, ZooKeeper session timeout); `None` = the backend's default.
    pub session_ttl: Option<Duration>,
    /// Redis and Redlock: batch the renewals of a client's guards (the
    /// default); `false` sends each renewal on its own (a zero batching
    /// window), as every renewal was sent before batching existed.
    pub batch_renewals: bool,
}

/// A client of one of our backends.
pub struct DistLocker {
    lock: Arc<dyn LockService>,
    opts: DistOptions,
}

impl DistLocker {
    /// Wraps a backend client.
    pub fn new(lock: Arc<dyn LockService>, opts: DistOptions) -> Self {
        Self { lock, opts }
    }

    fn options(&self, wait: Duration) -> AcquireOptions {
        AcquireOptions::new()
            .ttl(self.opts.ttl)
            .wait(wait)
            .keep_alive(self.opts.keep_alive)
    }
}

/// A guard, `None` for a wait that ran out, or the error in words.
fn granted(
    name: &LockName,
    got: lock_core::Result<LockGuard>,
) -> BenchResult<Option<Box<dyn Held>>> {
    match got {
        Ok(guard) => Ok(Some(Box::new(DistHeld(guard)))),
        Err(e) if e.kind() == LockErrorKind::Timeout => Ok(None),
        Err(e) => Err(format!("acquire {name}: {e}")),
    }
}

#[async_trait]
impl Locker for DistLocker {
    async fn acquire(&self, name: &str, wait: Duration) -> BenchResult<Option<Box<dyn Held>>> {
        let name = LockName::new(name).map_err(|e| e.to_string())?;
        granted(&name, self.lock.acquire(&name, &self.options(wait)).await)
    }

    async fn acquire_side(
        &self,
        name: &str,
        side: Side,
        wait: Duration,
    ) -> BenchResult<Option<Box<dyn Held>>> {
        let name = LockName::new(name).map_err(|e| e.to_string())?;
        let opts = self.options(wait);
        let got = match side {
            Side::Read => self.lock.acquire_read(&name, &opts).await,
            Side::Write => self.lock.acquire_write(&name, &opts).await,
        };
        granted(&name, got)
    }
}

struct DistHeld(LockGuard);

#[async_trait]
impl Held for DistHeld {
    fn is_held(&self) -> bool {
        self.0.is_held()
    }

    async fn release(self: Box<Self>) -> BenchResult<()> {
        let name = self.0.name().clone();
        match self.0.release().await {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!("release {name}: the lock was no longer ours")),
            Err(e) => Err(format!("release {name}: {e}")),
        }
    }
}
