//! Where a client's requests go: one server (`redis://`), the primary
//! of a Sentinel-managed deployment (`redis+sentinel://`), followed across
//! failovers, or a Redis Cluster (`redis+cluster://`, each request to its
//! slot's owner; see [`crate::cluster`]).
//!
//! A [`Route`] holds the connection to the server requests go to now (an
//! [`Endpoint`]). With Sentinel it looks again where the primary is (asks
//! the sentinels, checks the answer with `ROLE`) when a request fails in
//! a way a failover explains (`READONLY` from a demoted primary, a dropped
//! or refused connection, no reply in time) and whenever a sentinel
//! announces `+switch-master`; a new primary gets a connection of its
//! own, and [`Route::moves`] changes so that the notifier subscribes
//! there. A request is never sent again to the new primary on the route's
//! own initiative: what the failed request may have done is its caller's
//! business, as with one server.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use lock_core::{LockError, LockErrorKind, Result};
use redis::aio::ConnectionManager;
use redis::{ErrorKind, RedisError, ServerErrorKind};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::cluster::ClusterRoute;
use crate::config::RedisLockConfig;
use crate::conn::Conn;
use crate::failure::{map_error, Failure};
use crate::kit::cluster::ClusterTarget;
use crate::kit::connect::open_client;
use crate::kit::notify::MovingNode;
use crate::kit::scripts::Scripts;
use crate::sentinel::{SentinelTarget, Sentinels};

/// Delays of the connection manager's reconnection attempts: from this...
const RECONNECT_MIN_DELAY: Duration = Duration::from_millis(25);
/// ...doubling up to this.
const RECONNECT_MAX_DELAY: Duration = Duration::from_secs(1);
/// Attempts per reconnection round; a later request starts a new round.
const RECONNECT_ATTEMPTS: usize = 8;
/// The shortest time between two looks at the sentinels prompted by
/// failed requests (a `+switch-master` announcement does not wait).
const MIN_LOOK_INTERVAL: Duration = Duration::from_millis(200);
/// How long a waiter whose attempt failed during a failover waits for the
/// route to move before it tries again (at most: a move wakes it).
const RIDE_OUT_PAUSE: Duration = Duration::from_millis(250);
/// How long a waiter whose attempt failed on a cluster that answers (a
/// slot's migration refusing its script, a failover) waits before it
/// tries again.
const CLUSTER_RIDE_OUT_PAUSE: Duration = Duration::from_millis(100);

/// The server requests go to now.
pub(crate) struct Endpoint {
    /// `host:port` (Sentinel) or the redacted URL (one server, a
    /// cluster), for logs and to compare with what the sentinels name.
    pub(crate) addr: String,
    /// A client of it (the notifier opens its pub/sub connection from it;
    /// on a cluster, of one primary).
    pub(crate) client: redis::Client,
    /// The multiplexed connection, re-established by the manager (one
    /// server), or the cluster's connection.
    pub(crate) conn: Conn,
    /// With [`RedisLockConfig::sync_replicas`]: the connection that
    /// acquisitions and their `WAIT` go through (a `WAIT` holds up the
    /// requests behind it on its connection: these are acquisitions
    /// only, never a renewal or a release).
    pub(crate) acquire_conn: Option<Conn>,
}

/// What the probe of a fresh connection read.
pub(crate) struct Probed {
    pub(crate) endpoint: Endpoint,
    /// The server's `maxmemory-policy`, if it answered.
    pub(crate) policy: Option<String>,
}

/// The requests' way to the server (see the module docs).
pub(crate) struct Route {
    current: RwLock<Arc<Endpoint>>,
    moved: watch::Sender<u64>,
    follow: Option<Follow>,
    /// The slot map of a route to a Redis Cluster.
    cluster: Option<ClusterRoute>,
}

/// What a route to a Sentinel-managed primary needs to follow it.
struct Follow {
    sentinels: Sentinels,
    config: RedisLockConfig,
    /// The scripts each new primary loads.
    scripts: Scripts,
    /// When the last look at the sentinels ended; held while one runs.
    looking: tokio::sync::Mutex<Option<Instant>>,
    /// Dropped with the route: ends the `+switch-master` watcher.
    _stop: watch::Sender<()>,
}

impl Route {
    /// Connects to the server of `config` (one server, the primary the
    /// sentinels name, or every primary of a cluster) within
    /// `config.connect_timeout`; the `maxmemory-policy` each primary
    /// answered comes along with its address.
    pub(crate) async fn connect(
        config: &RedisLockConfig,
        scripts: &Scripts,
    ) -> Result<(Arc<Self>, Vec<(String, Option<String>)>)> {
        let deadline = lock_core::backend::add_saturating(Instant::now(), config.connect_timeout);
        let what = format!("connecting to {}", config.redacted_url());
        if let Some(target) = ClusterTarget::parse(&config.url)? {
            let joined =
                tokio::time::timeout_at(deadline, crate::cluster::join(&target, config, scripts))
                    .await
                    .map_err(|_| map_error(&what, Failure::TimedOut(config.connect_timeout)))??;
            let route = Self::new(joined.endpoint, None, Some(joined.route));
            return Ok((route, joined.policies));
        }
        let Some(target) = SentinelTarget::parse(&config.url)? else {
            let client = open_client(&config.url, &config.tls)?;
            let probed = tokio::time::timeout_at(
                deadline,
                probe(client, config.redacted_url(), config, scripts, false),
            )
            .await
            .map_err(|_| map_error(&what, Failure::TimedOut(config.connect_timeout)))??;
            let addr = probed.endpoint.addr.clone();
            let route = Self::new(probed.endpoint, None, None);
            return Ok((route, vec![(addr, probed.policy)]));
        };
        let sentinels = Sentinels::new(
            target,
            config.tls.clone(),
            config.address_map.clone(),
            config.request_timeout.max(config.connect_timeout / 4),
        );
        let probed = locate(&sentinels, config, scripts, deadline).await?;
        let addr = probed.endpoint.addr.clone();
        let (stop, stopped) = watch::channel(());
        let route = Self::new(
            probed.endpoint,
            Some(Follow {
                sentinels,
                config: config.clone(),
                scripts: scripts.clone(),
                looking: tokio::sync::Mutex::new(None),
                _stop: stop,
            }),
            None,
        );
        crate::sentinel::watch::spawn(Arc::downgrade(&route), stopped);
        Ok((route, vec![(addr, probed.policy)]))
    }

    fn new(endpoint: Endpoint, follow: Option<Follow>, cluster: Option<ClusterRoute>) -> Arc<Self> {
        Arc::new(Self {
            current: RwLock::new(Arc::new(endpoint)),
            moved: watch::channel(0).0,
            follow,
            cluster,
        })
    }

    /// The server requests go to now.
    pub(crate) fn endpoint(&self) -> Arc<Endpoint> {
        match self.current.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The connection to the server requests go to now.
    pub(crate) fn conn(&self) -> Conn {
        match self.current.read() {
            Ok(current) => current.conn.clone(),
            Err(poisoned) => poisoned.into_inner().conn.clone(),
        }
    }

    /// How long connecting may take (the configuration's connect timeout
    /// on a route that follows a primary; one second otherwise).
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.follow
            .as_ref()
            .map_or(Duration::from_secs(1), |f| f.config.connect_timeout)
    }

    /// The connection acquisitions go through (see [`Endpoint::acquire_conn`]).
    pub(crate) fn acquire_conn(&self) -> Conn {
        let endpoint = self.endpoint();
        endpoint
            .acquire_conn
            .clone()
            .unwrap_or_else(|| endpoint.conn.clone())
    }

    /// Whether requests go to a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// The slot map of a route to a Redis Cluster.
    pub(crate) fn cluster(&self) -> Option<&ClusterRoute> {
        self.cluster.as_ref()
    }

    /// Whether this route follows a primary across failovers.
    pub(crate) fn follows_failovers(&self) -> bool {
        self.follow.is_some()
    }

    /// The sentinels of a route that follows a primary.
    pub(crate) fn sentinels(&self) -> Option<&Sentinels> {
        self.follow.as_ref().map(|f| &f.sentinels)
    }

    /// A request failed with `failure`: if a failover may explain it,
    /// look at the sentinels in the background (at most every
    /// [`MIN_LOOK_INTERVAL`]), or read a cluster's slot map again (a
    /// `MOVED` that came back to the caller may explain it too).
    pub(crate) fn on_failure(self: &Arc<Self>, failure: &Failure) {
        if self.cluster.is_some() {
            let moved = matches!(failure, Failure::Redis(e) if e.kind() == ErrorKind::Server(ServerErrorKind::Moved));
            if moved || failover_may_explain(failure) {
                let route = self.clone();
                tokio::spawn(async move {
                    if let Some(cluster) = &route.cluster {
                        cluster.refresh().await;
                    }
                });
            }
        }
        if let Some(follow) = &self.follow {
            if failover_may_explain(failure) {
                let (route, budget) = (self.clone(), follow.config.connect_timeout);
                tokio::spawn(async move { route.look(false, budget).await });
            }
        }
    }

    /// Asks the sentinels where the primary is (within `budget`) and moves
    /// there if it is elsewhere; true if a sentinel named one. `now`: at
    /// once (a `+switch-master` announcement, a waiter riding out a
    /// failover), else not within [`MIN_LOOK_INTERVAL`] of the last look.
    /// One look at a time; one that finds another running waits for it
    /// (`now`) or leaves it to it.
    pub(crate) async fn look(&self, now: bool, budget: Duration) -> bool {
        let Some(follow) = &self.follow else {
            return false;
        };
        let started = Instant::now();
        let mut last = if now {
            match tokio::time::timeout(budget, follow.looking.lock()).await {
                Ok(last) => last,
                Err(_) => return false,
            }
        } else {
            match follow.looking.try_lock() {
                Ok(last) => last,
                Err(_) => return false,
            }
        };
        if !now && last.is_some_and(|t| t.elapsed() < MIN_LOOK_INTERVAL) {
            return false;
        }
        let config = &follow.config;
        let deadline = lock_core::backend::add_saturating(started, budget);
        let current = self.endpoint().addr.clone();
        let mut named_one = false;
        match follow.sentinels.primary(deadline).await {
            Ok(named) if named.addr == current => named_one = true,
            Ok(named) => {
                named_one = true;
                let url = follow.sentinels.target.node_url(&named.addr);
                let probed = match open_client(&url, &config.tls) {
                    Ok(client) => {
                        tokio::time::timeout_at(
                            deadline,
                            probe(client, named.addr.clone(), config, &follow.scripts, true),
                        )
                        .await
                    }
                    Err(e) => Ok(Err(e)),
                };
                match probed {
                    Ok(Ok(probed)) => {
                        // Lock keys must never be evicted on the new primary
                        // either: said loudly, and followed all the same (the
                        // sentinels made it the primary; staying on the old
                        // one is no choice).
                        let checked = crate::kit::eviction::check_policy(
                            probed.policy.as_deref(),
                            config.require_noeviction,
                            &named.addr,
                            "distlock redis",
                        );
                        if let Err(e) = checked {
                            tracing::error!(error = %e, "distlock redis: following a failover to a primary that may evict lock keys");
                        }
                        self.move_to(probed.endpoint, &current);
                    }
                    Ok(Err(e)) => {
                        if e.kind() == LockErrorKind::Protocol {
                            follow.sentinels.misled(named.by);
                        }
                        tracing::debug!(master = %follow.sentinels.target.master, named = %named.addr, error = %e, "distlock redis: the primary a sentinel named does not serve yet; looking again at the next failure");
                    }
                    Err(_) => {
                        tracing::debug!(master = %follow.sentinels.target.master, named = %named.addr, "distlock redis: the primary a sentinel named did not answer in time");
                    }
                }
            }
            Err(e) => {
                tracing::debug!(master = %follow.sentinels.target.master, error = %e, "distlock redis: no sentinel named the primary");
            }
        }
        *last = Some(Instant::now());
        named_one
    }

    /// Requests go to `endpoint` from now on.
    fn move_to(&self, endpoint: Endpoint, from: &str) {
        let to = endpoint.addr.clone();
        match self.current.write() {
            Ok(mut current) => *current = Arc::new(endpoint),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(endpoint),
        }
        self.moved.send_modify(|n| *n += 1);
        let master = self
            .follow
            .as_ref()
            .map(|f| f.sentinels.target.master.as_str())
            .unwrap_or_default();
        tracing::info!(master, from, to = %to, "distlock redis: following a failover to the new primary");
    }

    /// A waiting acquire whose attempt failed with `err`: on a route that
    /// follows failovers, with time left before `deadline`, a retryable
    /// error, and a sentinel that still names a primary (the deployment
    /// is there, managing a failover), waits until the route moved (at
    /// most [`RIDE_OUT_PAUSE`]) and returns `Ok` to try again, keeping the
    /// waiter's place in line. Otherwise the error: with no sentinel
    /// answering either, the deployment is out of reach, as one server
    /// would be, and the waiter learns it within one request timeout.
    /// On a cluster likewise, while the cluster answers `CLUSTER SLOTS`
    /// (a slot's migration refuses the scripts of its names until it
    /// ends; a failover takes a node timeout): a pause of
    /// [`CLUSTER_RIDE_OUT_PAUSE`], the slot map read again.
    pub(crate) async fn ride_out(&self, err: LockError, deadline: Instant) -> Result<()> {
        let now = Instant::now();
        if !err.is_retryable() || now >= deadline {
            return Err(err);
        }
        if let Some(cluster) = &self.cluster {
            if !cluster
                .answers(cluster.request_timeout().min(deadline - now))
                .await
            {
                return Err(err);
            }
            tracing::debug!(error = %err, "distlock redis cluster: an attempt failed while the cluster answers; trying again");
            tokio::time::sleep_until(deadline.min(Instant::now() + CLUSTER_RIDE_OUT_PAUSE)).await;
            return Ok(());
        }
        let Some(follow) = &self.follow else {
            return Err(err);
        };
        let mut moves = self.moved.subscribe();
        let budget = follow.config.request_timeout.min(deadline - now);
        if !self.look(true, budget).await {
            return Err(err);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(err);
        }
        let until = deadline.min(now + RIDE_OUT_PAUSE);
        tracing::debug!(error = %err, "distlock redis: an attempt failed while the sentinels name a primary; trying again");
        tokio::select! {
            _ = moves.changed() => {}
            () = tokio::time::sleep_until(until) => {}
        }
        Ok(())
    }
}

impl MovingNode for Route {
    fn current(&self) -> (String, redis::Client) {
        let endpoint = self.endpoint();
        (endpoint.addr.clone(), endpoint.client.clone())
    }

    fn moves(&self) -> watch::Receiver<u64> {
        self.moved.subscribe()
    }
}

/// Whether a failover may explain `failure`: a demoted primary's
/// `READONLY`, a dropped, refused or silent connection.
fn failover_may_explain(failure: &Failure) -> bool {
    match failure {
        Failure::TimedOut(_) => true,
        Failure::Abandoned => false,
        Failure::Redis(e) => {
            matches!(
                e.kind(),
                ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
                    | ErrorKind::Io
            ) || e.is_connection_dropped()
                || e.is_connection_refusal()
                || e.is_timeout()
        }
    }
}

/// The primary the sentinels name, connected and checked, before
/// `deadline`: a sentinel whose answer is no primary goes last and the
/// next is asked.
async fn locate(
    sentinels: &Sentinels,
    config: &RedisLockConfig,
    scripts: &Scripts,
    deadline: Instant,
) -> Result<Probed> {
    let master = &sentinels.target.master;
    let mut last_err = None;
    while Instant::now() < deadline {
        let named = match sentinels.primary(deadline).await {
            Ok(named) => named,
            Err(e) if e.is_retryable() => {
                last_err = Some(e);
                pause_before(deadline).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let url = sentinels.target.node_url(&named.addr);
        let client = open_client(&url, &config.tls)?;
        match tokio::time::timeout_at(
            deadline,
            probe(client, named.addr.clone(), config, scripts, true),
        )
        .await
        {
            Ok(Ok(probed)) => return Ok(probed),
            Ok(Err(e)) if e.is_retryable() || e.kind() == LockErrorKind::Protocol => {
                if e.kind() == LockErrorKind::Protocol {
                    sentinels.misled(named.by);
                }
                last_err = Some(e);
                pause_before(deadline).await;
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                last_err = Some(LockError::new(
                    LockErrorKind::Unavailable,
                    format!(
                        "the primary {master:?} at {} did not answer in time",
                        named.addr
                    ),
                ));
            }
        }
    }
    Err(LockError::new(
        LockErrorKind::Unavailable,
        format!(
            "connecting to the primary {master:?} through its sentinels: nothing within {:?}{}",
            config.connect_timeout,
            last_err
                .map(|e| format!(" (last: {e})"))
                .unwrap_or_default()
        ),
    ))
}

/// A short pause between two tries of [`locate`], ending by `deadline`.
async fn pause_before(deadline: Instant) {
    let until = deadline.min(Instant::now() + Duration::from_millis(100));
    tokio::time::sleep_until(until).await;
}

/// Opens a checked connection to the server of `client` (`addr` for logs):
/// one plain connection first, which fails fast and with the real cause
/// (refused, wrong password) where the connection manager would retry
/// until the timeout; it loads the scripts (proving the server answers
/// commands; `EVALSHA` from then on, `EVAL` on `NOSCRIPT`), reads the
/// eviction policy, and with `primary` checks `ROLE` (a server the
/// sentinels named must be a primary: one that is not yet or no longer is
/// gives a `Protocol` error). Then the connection manager's connection.
pub(crate) async fn probe(
    client: redis::Client,
    addr: String,
    config: &RedisLockConfig,
    scripts: &Scripts,
    primary: bool,
) -> Result<Probed> {
    let what = format!("connecting to {addr}");
    let redis_err = |e: RedisError| map_error(&what, Failure::Redis(e));
    let probe_config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.request_timeout));
    let mut probe = client
        .get_multiplexed_async_connection_with_config(&probe_config)
        .await
        .map_err(redis_err)?;
    if primary {
        let role: Vec<redis::Value> = redis::cmd("ROLE")
            .query_async(&mut probe)
            .await
            .map_err(redis_err)?;
        let role = match role.first() {
            Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(redis::Value::SimpleString(s)) => s.clone(),
            other => format!("{other:?}"),
        };
        if role != "master" {
            return Err(LockError::new(
                LockErrorKind::Protocol,
                format!("{what}: the sentinels named it the primary, and its role is {role:?}"),
            ));
        }
    }
    let mut load = redis::pipe();
    for script in scripts.preloaded() {
        load.cmd("SCRIPT").arg("LOAD").arg(script.source());
    }
    load.query_async::<()>(&mut probe)
        .await
        .map_err(redis_err)?;
    // The eviction policy: lock keys must never be evicted.
    let policy = crate::kit::eviction::read_policy(&mut probe, &addr).await;
    drop(probe);
    let manager_config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.request_timeout))
        .set_min_delay(RECONNECT_MIN_DELAY)
        .set_max_delay(RECONNECT_MAX_DELAY)
        .set_number_of_retries(RECONNECT_ATTEMPTS);
    let conn = ConnectionManager::new_with_config(client.clone(), manager_config.clone())
        .await
        .map_err(redis_err)?;
    let acquire_conn = match config.sync_replicas {
        Some(_) => Some(Conn::Single(
            ConnectionManager::new_with_config(client.clone(), manager_config)
                .await
                .map_err(redis_err)?,
        )),
        None => None,
    };
    Ok(Probed {
        endpoint: Endpoint {
            addr,
            client,
            conn: Conn::Single(conn),
            acquire_conn,
        },
        policy,
    })
}
