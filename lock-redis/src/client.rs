//! The Redis client wrapper: every request goes through here, with its
//! timeout, and every failure is mapped to a [`LockErrorKind`] in ONE
//! function, [`map_error`] (in [`crate::failure`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{Holder, LockError, LockErrorKind, Result};
use redis::RedisResult;

use tokio::time::Instant;

use crate::config::RedisLockConfig;
use crate::conn::Conn;
pub(crate) use crate::failure::{map_error, Failure};
use crate::kit::call::{Lua, ScriptCall};
use crate::kit::cluster::ClusterTarget;
use crate::kit::layout::{Keys, Layout, HOLDER};
use crate::kit::list::Listed;
use crate::kit::notify::Notifier;
use crate::kit::renew::{KeyOutcome, RenewItem, Renewed};
use crate::kit::scripts::Scripts;
use crate::renewals::Renewals;
use crate::route::Route;

/// What every handle of one `RedisLock` shares: the client and its
/// notifier (the pub/sub connection that wakes waiters and followers).
pub(crate) struct Inner {
    pub(crate) client: Arc<Client>,
    pub(crate) notifier: Notifier,
}

/// The connection and the scripts, shared by a client, its clones and its guards.
pub(crate) struct Client {
    pub(crate) config: RedisLockConfig,
    /// Where requests go: the server, or the primary the sentinels name
    /// (the notifier follows it too).
    pub(crate) route: Arc<Route>,
    /// The scripts: [`Scripts::cluster`] on a Redis Cluster.
    pub(crate) scripts: Scripts,
    /// How a name's keys are laid out: [`Layout::Cluster`] on a Redis Cluster.
    pub(crate) layout: Layout,
    /// This client's renewals, one request per batch (per primary on a
    /// cluster; see [`crate::kit::renew`]).
    renewals: Renewals,
}

/// What the acquire script answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Ours, with this fencing token.
    Acquired(u64),
    /// Held by someone else for this many more ms (-1: no expiry).
    Held(i64),
}

/// What `inspect` read, atomically.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Inspection {
    /// `PTTL` of the lock key: -2 absent, -1 no expiry, else ms left.
    pub(crate) pttl: i64,
    /// The fencing counter, if it exists.
    pub(crate) counter: Option<u64>,
    /// The holder's description, if the lock key's owner stored one.
    pub(crate) holder: Option<Holder>,
}

/// The description in `stored` (the value of [`Keys::holder`]) if it is
/// that of the owner `token` (the lock key's value): `<token> <JSON>`.
pub(crate) fn description_of(token: &[u8], stored: &[u8]) -> Option<Holder> {
    let rest = stored.strip_prefix(token)?.strip_prefix(b" ")?;
    Holder::from_json(rest)
}

impl Client {
    /// Connects within `config.connect_timeout` and loads the scripts.
    pub(crate) async fn connect(config: RedisLockConfig) -> Result<Arc<Self>> {
        config.validate()?;
        let (scripts, layout) = match ClusterTarget::parse(&config.url)? {
            Some(_) => (Scripts::cluster(), Layout::Cluster),
            None => (Scripts::default(), Layout::Standalone),
        };
        let (route, policies) = Route::connect(&config, &scripts).await?;
        for (addr, policy) in &policies {
            crate::kit::eviction::check_policy(
                policy.as_deref(),
                config.require_noeviction,
                addr,
                "distlock redis",
            )?;
        }
        Ok(Arc::new_cyclic(|this| {
            let renewals = Renewals::new(
                this.clone(),
                layout == Layout::Cluster,
                config.renew_batching,
            );
            Self {
                config,
                route,
                scripts,
                layout,
                renewals,
            }
        }))
    }

    /// Runs `script` (picked from the loaded scripts) with `keys` and
    /// `args` as one request; `idempotent` ones are retried once after a
    /// dropped connection (see [`Client::request_idempotent`]).
    pub(crate) async fn eval<T: redis::FromRedisValue>(
        &self,
        what: &'static str,
        pick: fn(&Scripts) -> &Lua,
        keys: &[&str],
        args: &[&str],
        idempotent: bool,
    ) -> Result<T> {
        let make = || {
            let mut conn = self.route.conn();
            let call = self.script_call(pick, keys, args);
            async move { call.invoke_async(&mut conn).await }
        };
        if idempotent {
            self.request_idempotent(what, make).await
        } else {
            self.request(what, make()).await
        }
    }

    /// Runs an acquisition `script` (picked from the loaded scripts) with
    /// `keys` and `args`, once, on the acquisitions' connection (see
    /// [`Client::confirm_replicated`]).
    pub(crate) async fn eval_acquire<T: redis::FromRedisValue>(
        &self,
        what: &'static str,
        pick: fn(&Scripts) -> &Lua,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T> {
        let mut conn = self.route.acquire_conn();
        let call = self.script_call(pick, keys, args);
        self.request(what, call.invoke_async(&mut conn)).await
    }

    /// The call of `script` (picked from the loaded scripts) with `keys`
    /// and `args`.
    fn script_call<'a>(
        &'a self,
        pick: fn(&Scripts) -> &Lua,
        keys: &[&str],
        args: &[&str],
    ) -> ScriptCall<'a> {
        let mut call = ScriptCall::new(pick(&self.scripts), keys);
        for a in args {
            call.arg(*a);
        }
        call
    }

    /// With [`RedisLockConfig::sync_replicas`]: `WAIT` on the acquisitions'
    /// connection until that many replicas have every write sent on it so
    /// far (the acquisition of `key` just made included; on a cluster, the
    /// `WAIT` goes to the owner of `key`'s slot); `Unavailable` if fewer
    /// confirm within its timeout. Without it: nothing.
    pub(crate) async fn confirm_replicated(&self, key: &str) -> Result<()> {
        let Some(sync) = self.config.sync_replicas else {
            return Ok(());
        };
        let mut conn = self.route.acquire_conn();
        let wait_ms = u64::try_from(sync.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let limit = self.config.request_timeout.saturating_add(sync.timeout);
        let mut wait = redis::cmd("WAIT");
        wait.arg(sync.replicas).arg(wait_ms);
        let confirmed: i64 = self
            .request_within("wait replicas", limit, conn.query_for_key(key, &wait))
            .await
            .map_err(|f| map_error("wait replicas", f))?;
        if confirmed < i64::from(sync.replicas) {
            return Err(LockError::new(
                LockErrorKind::Unavailable,
                format!(
                    "acquired, but only {confirmed} of the {} replicas asked for confirmed it within {:?} (sync_replicas); released again",
                    sync.replicas, sync.timeout
                ),
            ));
        }
        Ok(())
    }

    /// Runs one request with the request timeout, mapping its failure;
    /// counts it in [`lock_core::metrics::REQUESTS`] with op `what`.
    async fn request<T>(
        &self,
        what: &'static str,
        fut: impl Future<Output = RedisResult<T>>,
    ) -> Result<T> {
        self.request_raw(what, fut)
            .await
            .map_err(|f| map_error(what, f))
    }

    /// [`Client::request`] without the mapping.
    async fn request_raw<T>(
        &self,
        what: &'static str,
        fut: impl Future<Output = RedisResult<T>>,
    ) -> std::result::Result<T, Failure> {
        self.request_within(what, self.config.request_timeout, fut)
            .await
    }

    /// [`Client::request_raw`] with a time `limit` of its own.
    async fn request_within<T>(
        &self,
        what: &'static str,
        limit: Duration,
        fut: impl Future<Output = RedisResult<T>>,
    ) -> std::result::Result<T, Failure> {
        lock_core::metrics::count_request("redis", what);
        let failure = match tokio::time::timeout(limit, fut).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => Failure::Redis(e),
            Err(_) => Failure::TimedOut(limit),
        };
        self.route.on_failure(&failure);
        Err(failure)
    }

    /// Like [`Client::request`] for an idempotent request: a fast failure on a
    /// broken connection (not a timeout) is retried once, on the connection
    /// the manager is re-establishing meanwhile.
    async fn request_idempotent<T, F, Fut>(&self, what: &'static str, make: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        self.request_idempotent_raw(what, make)
            .await
            .map_err(|f| map_error(what, f))
    }

    /// [`Client::request_idempotent`] without the mapping.
    pub(crate) async fn request_idempotent_raw<T, F, Fut>(
        &self,
        what: &'static str,
        make: F,
    ) -> std::result::Result<T, Failure>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        match self.request_raw(what, make()).await {
            Err(Failure::Redis(e))
                if (e.is_io_error() || e.is_connection_dropped()) && !e.is_timeout() =>
            {
                tracing::debug!(error = %e, "distlock redis: {what} failed on a broken connection; retrying once");
            }
            other => return other,
        }
        self.request_raw(what, make()).await
    }

    /// One mutex attempt ([`ACQUIRE_FENCED`](crate::kit::scripts::ACQUIRE_FENCED)): the lock for `token`, or
    /// who holds it and a bound at least the last token issued, `max(the
    /// counter, the server's clock in µs)` (0 when acquired). A caller
    /// that will wait passes how long its `queued` place lasts (in ms) and
    /// takes that place if the lock is not free. `described` is the
    /// holder's description ('' for none), stored with the lock.
    pub(crate) async fn acquire(
        &self,
        keys: &Keys,
        token: &str,
        ttl_ms: u64,
        queued: Option<u64>,
        described: &str,
    ) -> Result<(AcquireReply, u64)> {
        let mut conn = self.route.acquire_conn();
        let mut call = on_mutex_keys(&self.scripts.acquire_fenced, keys);
        call.arg(token)
            .arg(ttl_ms)
            .arg(if queued.is_some() { "1" } else { "" })
            .arg(queued.unwrap_or(0))
            .arg(described);
        let reply: Vec<i64> = self
            .request("acquire", call.invoke_async(&mut conn))
            .await?;
        match reply.as_slice() {
            [1, fence] => match u64::try_from(*fence) {
                Ok(fence) if fence > 0 => Ok((AcquireReply::Acquired(fence), 0)),
                _ => Err(LockError::new(
                    LockErrorKind::Protocol,
                    format!(
                        "acquire: the fencing counter {} holds {fence}, not a positive count (changed by someone else?)",
                        keys.fencing()
                    ),
                )),
            },
            [0, pttl, last] => Ok((
                AcquireReply::Held(*pttl),
                u64::try_from(*last).unwrap_or(0),
            )),
            other => Err(LockError::new(
                LockErrorKind::Protocol,
                format!("acquire: unexpected script reply {other:?}"),
            )),
        }
    }

    /// Compare-and-release ([`RELEASE_QUEUED`](crate::kit::scripts::RELEASE_QUEUED)): the lock goes to the first
    /// waiter, or is deleted. `true` if the key held `token`. A waiter that
    /// gives up passes its queue member as `leaving`.
    pub(crate) async fn release(
        &self,
        keys: &Keys,
        token: &str,
        leaving: Option<&str>,
    ) -> Result<bool> {
        let mut conn = self.route.conn();
        let mut call = on_mutex_keys(&self.scripts.release_queued, keys);
        call.arg(token).arg(leaving.unwrap_or("")).arg("");
        let n: i64 = self
            .request("release", call.invoke_async(&mut conn))
            .await?;
        Ok(n == 1)
    }

    /// An operator's force release of the mutex ([`RELEASE_QUEUED`](crate::kit::scripts::RELEASE_QUEUED) without
    /// the owner compared): whoever holds it is removed and the lock goes
    /// to the first waiter, as on its holder's release. `true` if it was
    /// held. Not repeated after a failure (a hand-off is not idempotent).
    pub(crate) async fn force_release_mutex(&self, keys: &Keys) -> Result<bool> {
        let mut conn = self.route.conn();
        let mut call = on_mutex_keys(&self.scripts.release_queued, keys);
        call.arg("").arg("").arg("1");
        let n: i64 = self
            .request("force release", call.invoke_async(&mut conn))
            .await?;
        Ok(n == 1)
    }

    /// Renews one lease in this client's next renewal batch (see
    /// [`crate::kit::renew`]): `Some(sent)` if it is still ours, now for `ttl`
    /// from `sent` (taken before the request that carried it was sent),
    /// `None` if it is not. A failed batch is the error this renewal's own
    /// request would have had: mapped as an `extend`, retryable kinds kept.
    pub(crate) async fn renew(&self, item: RenewItem) -> Result<Option<Instant>> {
        match self.renewals.renew(item).await {
            Ok(Renewed {
                sent,
                outcome: KeyOutcome::Extended,
            }) => Ok(Some(sent)),
            Ok(Renewed {
                outcome: KeyOutcome::NotOurs,
                ..
            }) => Ok(None),
            Ok(Renewed {
                outcome: KeyOutcome::Failed(text),
                ..
            }) => Err(map_error(
                "extend",
                Failure::Redis(KeyOutcome::error(&text)),
            )),
            Err(failure) => Err(map_error("extend", failure)),
        }
    }

    /// The held locks whose names start with `name_prefix`, with their
    /// counters; the whole scan within one request timeout (on a cluster,
    /// of every primary: a name whose slot moves meanwhile may show twice,
    /// then once, or not at all, as with `SCAN`).
    pub(crate) async fn list(
        &self,
        name_prefix: &str,
    ) -> Result<Vec<(Listed, Option<u64>, Option<Holder>)>> {
        let mut conn = self.route.conn();
        let prefix = self.config.key_prefix.clone();
        let scripts = &self.scripts;
        let found = self
            .request("list", async {
                let found = match (&conn, self.route.cluster()) {
                    (Conn::Cluster(cluster), Some(route)) => {
                        route.refresh().await;
                        let mut found = Vec::new();
                        for addr in route.primaries() {
                            let mut cluster = cluster.clone();
                            let Some(mut node) = cluster.node(&addr) else {
                                continue;
                            };
                            found.extend(
                                crate::kit::list::list_keys(
                                    &mut node,
                                    &scripts.list_page,
                                    &prefix,
                                    name_prefix,
                                )
                                .await?,
                            );
                        }
                        found.sort_by(|a, b| a.key.cmp(&b.key));
                        found.dedup_by(|a, b| a.key == b.key);
                        found
                    }
                    _ => {
                        crate::kit::list::list_keys(
                            &mut conn,
                            &scripts.list_page,
                            &prefix,
                            name_prefix,
                        )
                        .await?
                    }
                };
                if found.is_empty() {
                    return Ok((found, Vec::new(), Vec::new()));
                }
                let counters: Vec<Option<u64>> = redis::cmd("MGET")
                    .arg(
                        found
                            .iter()
                            .map(|l| self.listed_aux(&l.key, "fencing"))
                            .collect::<Vec<_>>(),
                    )
                    .query_async(&mut conn)
                    .await?;
                let described: Vec<Option<Vec<u8>>> = redis::cmd("MGET")
                    .arg(
                        found
                            .iter()
                            .map(|l| self.listed_aux(&l.key, HOLDER))
                            .collect::<Vec<_>>(),
                    )
                    .query_async(&mut conn)
                    .await?;
                Ok((found, counters, described))
            })
            .await?;
        let (found, counters, described) = found;
        Ok(found
            .into_iter()
            .zip(counters)
            .zip(described)
            .map(|((listed, counter), stored)| {
                let holder =
                    stored.and_then(|s| description_of(listed.token.as_bytes(), s.as_slice()));
                (listed, counter, holder)
            })
            .collect())
    }

    /// The auxiliary key `suffix` of a listed lock key: on a cluster, a
    /// key this client refuses (a `}` and no hash tag) was taken by
    /// another client, and `{key} suffix` is read, which nothing of ours
    /// writes.
    fn listed_aux(&self, key: &str, suffix: &str) -> String {
        self.layout
            .aux(key, suffix)
            .unwrap_or_else(|_| Keys::aux(key, suffix))
    }

    /// `PTTL` of the lock key, `GET` of the counter, of the lock key and of
    /// its holder's description, in one transaction.
    pub(crate) async fn inspect(&self, keys: &Keys) -> Result<Inspection> {
        type Seen = (i64, Option<u64>, Option<Vec<u8>>, Option<Vec<u8>>);
        let (pttl, counter, token, described): Seen = self
            .request_idempotent("inspect", || {
                let mut conn = self.route.conn();
                let mut pipe = redis::pipe();
                pipe.atomic()
                    .cmd("PTTL")
                    .arg(keys.lock())
                    .cmd("GET")
                    .arg(keys.fencing())
                    .cmd("GET")
                    .arg(keys.lock())
                    .cmd("GET")
                    .arg(keys.holder());
                async move { pipe.query_async(&mut conn).await }
            })
            .await?;
        let holder = token.and_then(|t| description_of(&t, described.as_deref()?));
        Ok(Inspection {
            pttl,
            counter,
            holder,
        })
    }
}

/// `script` with the mutex's keys, in the order its scripts
/// ([`ACQUIRE_FENCED`](crate::kit::scripts::ACQUIRE_FENCED), [`RELEASE_QUEUED`](crate::kit::scripts::RELEASE_QUEUED)) take them.
fn on_mutex_keys<'a>(script: &'a Lua, keys: &Keys) -> ScriptCall<'a> {
    ScriptCall::new(
        script,
        &[
            keys.lock(),
            keys.fencing(),
            keys.queue(),
            keys.lapse(),
            keys.released(),
            keys.holder(),
        ],
    )
}
