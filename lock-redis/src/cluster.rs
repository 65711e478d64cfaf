//! The Redis Cluster side of a [`Route`](crate::route::Route)
//! (`redis+cluster://`): joining the cluster (its slot map, every
//! primary's eviction policy, the scripts loaded on every primary), and
//! the slot map, read again after a failure that a topology change may
//! explain. Requests themselves go through a [`ClusterConn`], which finds
//! each slot's owner on its own.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use lock_core::{LockError, LockErrorKind, Result};
use redis::RedisError;
use tokio::sync::MutexGuard;
use tokio::time::Instant;

use crate::config::{mapped_address, RedisLockConfig};
use crate::conn::Conn;
use crate::failure::{map_error, Failure};
use crate::kit::cluster::{client_builder, key_slot, ClusterConn, ClusterSettings, ClusterTarget};
use crate::kit::connect::open_client;
use crate::kit::notify::{NotifyCluster, NotifyNode};
use crate::kit::scripts::Scripts;
use crate::route::Endpoint;

/// The shortest time between two reads of the slot map prompted by
/// failed requests, after one that succeeded...
const MIN_REFRESH_INTERVAL: Duration = Duration::from_millis(200);
/// ...and after one that failed: a fault that reset every connection
/// leaves each dead until a request on it fails (which makes it anew), so
/// a read that failed at once may succeed a moment later.
const FAILED_READ_PAUSE: Duration = Duration::from_millis(50);

/// Slot ranges and their primaries: `(first, last, "host:port")`, as the
/// nodes announce them, sorted.
pub(crate) type SlotMap = Vec<(u16, u16, String)>;

/// What a route to a Redis Cluster keeps besides its connections.
pub(crate) struct ClusterRoute {
    /// The connection the slot map is read through.
    conn: ClusterConn,
    /// The cluster's URL, parsed (the notifier connects to its nodes).
    target: ClusterTarget,
    slots: RwLock<Arc<SlotMap>>,
    /// The last read of the slot map; held while one runs.
    refreshing: tokio::sync::Mutex<Option<Read>>,
    request_timeout: Duration,
}

/// A cluster joined: the endpoint requests go through, the route's own
/// state, and every primary's `maxmemory-policy` (address, policy if it
/// answered).
pub(crate) struct Joined {
    pub(crate) endpoint: Endpoint,
    pub(crate) route: ClusterRoute,
    pub(crate) policies: Vec<(String, Option<String>)>,
}

/// Joins the cluster of `target`: connects, reads the slot map, loads the
/// scripts on every primary and reads its eviction policy, and opens the
/// acquisitions' own connection with [`RedisLockConfig::sync_replicas`].
/// The caller bounds it with the connect timeout.
pub(crate) async fn join(
    target: &ClusterTarget,
    config: &RedisLockConfig,
    scripts: &Scripts,
) -> Result<Joined> {
    let shown = config.redacted_url();
    let what = format!("connecting to {shown}");
    let redis_err = |e: RedisError| map_error(&what, Failure::Redis(e));
    let settings = ClusterSettings {
        connect_timeout: config.connect_timeout,
        request_timeout: config.request_timeout,
        address_map: config.address_map.clone(),
    };
    let mut conn = ClusterConn::connect(client_builder(target, &config.tls, &settings)?)
        .await
        .map_err(redis_err)?;
    let slots = conn.slots().await.map_err(redis_err)?;
    let primaries: BTreeSet<String> = slots.iter().map(|(_, _, addr)| addr.clone()).collect();
    let Some(first) = primaries.first().cloned() else {
        return Err(LockError::new(
            LockErrorKind::Unavailable,
            format!("{what}: the cluster serves no slot yet (CLUSTER SLOTS is empty)"),
        ));
    };
    let mut policies = Vec::with_capacity(primaries.len());
    for addr in &primaries {
        let mut node = conn.node(addr).ok_or_else(|| {
            LockError::new(
                LockErrorKind::Protocol,
                format!("{what}: CLUSTER SLOTS names {addr:?}, which is no host:port"),
            )
        })?;
        let mut load = redis::pipe();
        for script in scripts.preloaded() {
            load.cmd("SCRIPT").arg("LOAD").arg(script.source());
        }
        load.query_async::<()>(&mut node).await.map_err(redis_err)?;
        let policy = crate::kit::eviction::read_policy(&mut node, addr).await;
        policies.push((addr.clone(), policy));
    }
    let acquire_conn = match config.sync_replicas {
        Some(_) => Some(Conn::Cluster(
            ClusterConn::connect(client_builder(target, &config.tls, &settings)?)
                .await
                .map_err(redis_err)?,
        )),
        None => None,
    };
    // A client of one primary, the endpoint's (the notifier keeps
    // connections of its own to every primary: `ClusterRoute::notify_node`).
    let client = open_client(
        &target.node_url(&mapped_address(&config.address_map, first)),
        &config.tls,
    )?;
    Ok(Joined {
        endpoint: Endpoint {
            addr: shown,
            client,
            conn: Conn::Cluster(conn.clone()),
            acquire_conn,
        },
        route: ClusterRoute {
            conn,
            target: target.clone(),
            slots: RwLock::new(Arc::new(slots)),
            refreshing: tokio::sync::Mutex::new(None),
            request_timeout: config.request_timeout,
        },
        policies,
    })
}

impl ClusterRoute {
    /// The notifier's node for this cluster: each release channel
    /// subscribed (`SSUBSCRIBE`) at the primary that owns its slot, with
    /// the client's TLS files and address map.
    pub(crate) fn notify_node(&self, config: &RedisLockConfig) -> NotifyNode {
        NotifyNode::cluster(NotifyCluster::new(
            self.conn.clone(),
            self.target.clone(),
            config.tls.clone(),
            &config.address_map,
        ))
    }

    /// The slot map as last read.
    fn map(&self) -> Arc<SlotMap> {
        match self.slots.read() {
            Ok(slots) => slots.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The primary (`host:port`, as announced) that owns `key`'s slot in
    /// the slot map as last read; `None` if no range holds it.
    pub(crate) fn owner_of(&self, key: &str) -> Option<String> {
        let slot = key_slot(key.as_bytes());
        let slots = self.map();
        let i = slots.partition_point(|(_, last, _)| *last < slot);
        slots
            .get(i)
            .filter(|(first, _, _)| *first <= slot)
            .map(|(_, _, addr)| addr.clone())
    }

    /// The request timeout, which bounds a read of the slot map.
    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Every primary of the slot map as last read (`host:port`, as
    /// announced), sorted.
    pub(crate) fn primaries(&self) -> Vec<String> {
        let slots = self.map();
        let all: BTreeSet<&String> = slots.iter().map(|(_, _, addr)| addr).collect();
        all.into_iter().cloned().collect()
    }

    /// Reads the slot map again (within the request timeout), unless
    /// another read runs or one ended less than [`MIN_REFRESH_INTERVAL`]
    /// ago ([`FAILED_READ_PAUSE`] if it failed). A failed read keeps the
    /// map as it was.
    pub(crate) async fn refresh(&self) {
        if let Ok(last) = self.refreshing.try_lock() {
            self.read_map(last).await;
        }
    }

    /// Whether the cluster answers `CLUSTER SLOTS` within `budget`: reads
    /// the slot map again (or takes a recent read, see [`Self::refresh`]),
    /// waiting for a read that runs, and after a failed read, reads again
    /// every [`FAILED_READ_PAUSE`] while the budget lasts.
    pub(crate) async fn answers(&self, budget: Duration) -> bool {
        let reads = async {
            loop {
                let last = self.refreshing.lock().await;
                if self.read_map(last).await {
                    return;
                }
                tokio::time::sleep(FAILED_READ_PAUSE).await;
            }
        };
        tokio::time::timeout(budget, reads).await.is_ok()
    }

    /// Reads the slot map again unless `last` is recent (it succeeded less
    /// than [`MIN_REFRESH_INTERVAL`] ago, or failed less than
    /// [`FAILED_READ_PAUSE`] ago); whether the read (or the recent one)
    /// succeeded.
    async fn read_map(&self, mut last: MutexGuard<'_, Option<Read>>) -> bool {
        if let Some(read) = *last {
            let reuse_for = if read.ok {
                MIN_REFRESH_INTERVAL
            } else {
                FAILED_READ_PAUSE
            };
            if read.at.elapsed() < reuse_for {
                return read.ok;
            }
        }
        let ok = match tokio::time::timeout(self.request_timeout, self.read_slots()).await {
            Ok(Ok(slots)) => {
                let mut current = match self.slots.write() {
                    Ok(current) => current,
                    Err(poisoned) => poisoned.into_inner(),
                };
                if **current != slots {
                    tracing::debug!(?slots, "distlock redis cluster: the slot map changed");
                    *current = Arc::new(slots);
                }
                true
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "distlock redis cluster: reading the slot map failed");
                false
            }
            Err(_) => {
                tracing::debug!("distlock redis cluster: reading the slot map timed out");
                false
            }
        };
        *last = Some(Read {
            at: Instant::now(),
            ok,
        });
        ok
    }

    /// `CLUSTER SLOTS` from every primary of the map as last read and from
    /// a node of redis-rs's choice, all asked at once: the first answer.
    /// One node's failure says little of the cluster (a primary that
    /// failed over, a connection a fault left dead).
    async fn read_slots(&self) -> std::result::Result<SlotMap, RedisError> {
        let primaries = self.primaries();
        let mut asks: Vec<BoxFuture<'_, std::result::Result<SlotMap, RedisError>>> =
            Vec::with_capacity(primaries.len() + 1);
        for addr in primaries {
            let mut conn = self.conn.clone();
            asks.push(async move { conn.slots_at(&addr).await }.boxed());
        }
        let mut conn = self.conn.clone();
        asks.push(async move { conn.slots().await }.boxed());
        futures::future::select_ok(asks)
            .await
            .map(|(slots, _)| slots)
    }
}

/// One read of the slot map: when it ended, and whether it succeeded.
#[derive(Clone, Copy)]
struct Read {
    at: Instant,
    ok: bool,
}
