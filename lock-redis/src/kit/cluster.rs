//! Redis Cluster: what a `redis+cluster://` URL names, and a connection
//! that carries requests to the owner of their slot (see CLUSTER-DESIGN.md
//! at the root of the workspace for the evidence behind every choice).
//!
//! [`ClusterConn`] wraps redis-rs's `cluster_async::ClusterConnection`,
//! built with **no retries of its own**: redis-rs resends a command that
//! timed out or whose connection dropped — to the same node, or after a
//! failover to the new primary — and a script that ran once but whose
//! reply was lost then runs twice. Instead [`ClusterConn`] follows only the
//! answers that prove the command was NOT executed:
//!
//! - `MOVED slot node`: the slot lives elsewhere (redis-rs refreshes its
//!   slot map on it); sent again to the named node;
//! - `ASK slot node`: the slot is being migrated and the keys are not here;
//!   sent again to the named node as `ASKING` + the command, one pipeline;
//! - `TRYAGAIN` (a multi-key command during a migration, some keys
//!   present, some not), `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`, and
//!   `READONLY` (a demoted primary): sent again after a short backoff;
//! - no connection to the node yet: sent again by slot after a backoff;
//! - a transaction (`MULTI` ... `EXEC`) whose every command was refused
//!   the same way when queued (`MOVED` to one node, or `TRYAGAIN` & co.):
//!   the server aborted it (`EXECABORT`: nothing ran), so it follows that
//!   refusal (not `ASK`, which would need `ASKING` before each command).
//!
//! Anything else (a timeout, a dropped connection, any other error) goes
//! back to the caller, as with one server; the caller bounds the whole
//! call with its own timeout (lock-redis's request timeout), which also
//! ends a redirection loop (at most [`MAX_REDIRECTIONS`] anyway).

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use lock_core::{LockError, TlsConfig};
use redis::aio::ConnectionLike;
use redis::cluster::{ClusterClientBuilder, NodeAddress};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{
    Cmd, ErrorKind, FromRedisValue, Pipeline, RedisError, RedisFuture, RedisResult,
    ServerErrorKind, Value,
};

use crate::kit::host_list::HostListKind;

/// The nodes' port when the URL gives none.
pub const DEFAULT_PORT: u16 = 6379;

/// How many redirections one call follows at most.
pub const MAX_REDIRECTIONS: usize = 64;

/// The first backoff before a command is sent again after `TRYAGAIN` & co.
const MIN_BACKOFF: Duration = Duration::from_millis(10);
/// ...doubling up to this.
const MAX_BACKOFF: Duration = Duration::from_millis(100);

/// What a `redis+cluster://` URL looks like.
const CLUSTER_URL: HostListKind = HostListKind {
    plain: "redis+cluster",
    tls: "rediss+cluster",
    what: "Redis Cluster",
    host: "node",
    path: "[/0]",
    default_port: DEFAULT_PORT,
};

/// `redis+cluster://` (and `rediss+cluster://`), parsed.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterTarget {
    /// The seed nodes, `host:port`, in the URL's order.
    pub seeds: Vec<String>,
    /// `user:password@` as written (percent-encoded), or empty. Never shown.
    userinfo: String,
    /// TLS to every node (`rediss+cluster://`).
    pub tls: bool,
}

impl fmt::Debug for ClusterTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterTarget")
            .field("seeds", &self.seeds)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl ClusterTarget {
    /// The target of `url`, `None` if it is no Cluster URL. A Cluster URL
    /// that is malformed is an `InvalidArgument` error that never shows
    /// the password.
    pub fn parse(url: &str) -> Result<Option<Self>, LockError> {
        let Some(url) = CLUSTER_URL.split(url)? else {
            return Ok(None);
        };
        match url.path.trim_matches('/') {
            "" | "0" => {}
            db => {
                return Err(url.invalid(&format!("a cluster has database 0 only, not {db:?}")));
            }
        }
        Ok(Some(Self {
            seeds: url.hosts,
            userinfo: url.userinfo.to_string(),
            tls: url.tls,
        }))
    }

    /// The URL of the node at `addr` (`host:port`), with the credentials.
    pub fn node_url(&self, addr: &str) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://{}{addr}/", self.userinfo)
    }
}

/// A `host:port` as redis-rs's [`NodeAddress`].
fn node_address(addr: &str) -> Option<NodeAddress> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some(NodeAddress::new(host.to_string(), port.parse().ok()?))
}

/// How a [`ClusterConn`] connects and how long its requests may take.
#[derive(Clone, Debug)]
pub struct ClusterSettings {
    /// Each connection to a node.
    pub connect_timeout: Duration,
    /// Each request to a node (redis-rs's response timeout and overall
    /// timeout alike: it never retries, see the module docs).
    pub request_timeout: Duration,
    /// Where to connect instead of an address the nodes announce (`host:port`
    /// to `host:port`): proxies, NAT.
    pub address_map: Vec<(String, String)>,
}

/// The redis-rs client builder of a [`ClusterConn`] for `target`: no
/// retries, the timeouts and address map of `settings`, TLS files from `tls`.
pub fn client_builder(
    target: &ClusterTarget,
    tls: &TlsConfig,
    settings: &ClusterSettings,
) -> Result<ClusterClientBuilder, LockError> {
    let seeds: Vec<String> = target.seeds.iter().map(|a| target.node_url(a)).collect();
    let mut map = HashMap::new();
    for (from, to) in &settings.address_map {
        match (node_address(from), node_address(to)) {
            (Some(from), Some(to)) => {
                map.insert(from, to);
            }
            _ => {
                return Err(LockError::invalid(format!(
                    "address map entry {from:?} -> {to:?}: expected host:port on both sides"
                )))
            }
        }
    }
    let mut builder = ClusterClientBuilder::new(seeds)
        .retries(0)
        .connection_timeout(settings.connect_timeout)
        .response_timeout(settings.request_timeout)
        .overall_response_timeout(Some(settings.request_timeout));
    if !map.is_empty() {
        builder = builder.node_address_map(map);
    }
    if *tls != TlsConfig::default() {
        if !target.tls {
            return Err(LockError::invalid(
                "TLS files are given for a redis+cluster:// URL: use rediss+cluster://",
            ));
        }
        let material = tls.load()?;
        let client_tls = match (material.cert, material.key) {
            (Some(client_cert), Some(client_key)) => Some(redis::ClientTlsConfig {
                client_cert,
                client_key,
            }),
            _ => None,
        };
        builder = builder.certs(redis::TlsCertificates {
            client_tls,
            root_cert: material.ca,
        });
    }
    Ok(builder)
}

/// Requests to a Redis Cluster, each to the owner of its slot, following
/// only the redirections that prove it was not executed (see the module
/// docs). Cheap to clone: clones share the connections.
#[derive(Clone)]
pub struct ClusterConn {
    conn: ClusterConnection,
}

impl fmt::Debug for ClusterConn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterConn").finish_non_exhaustive()
    }
}

/// Where the next try of a call goes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Next {
    /// Where redis-rs routes the command (its keys' slot).
    BySlot,
    /// The node a `MOVED` named.
    Moved(String),
    /// The node an `ASK` named, with `ASKING` first.
    Asked(String),
}

/// What to do about one refusal.
enum Verdict {
    /// Hand it to the caller: the request may have run.
    Done,
    /// Send the request again, to `next`, after a pause if `pause`.
    Again { next: Next, pause: bool },
}

/// The redirection `err` asks for, if it proves the command did not run.
fn verdict_of(err: &RedisError, pipeline: bool) -> Verdict {
    let named = err.redirect_node().map(|(addr, _)| addr.to_string());
    match err.kind() {
        ErrorKind::Server(ServerErrorKind::Moved) => match named {
            Some(addr) => Verdict::Again {
                next: Next::Moved(addr),
                pause: false,
            },
            None => Verdict::Done,
        },
        // An ASK for a transaction would need ASKING before each queued
        // command: the caller gets it (its request fails as retryable).
        ErrorKind::Server(ServerErrorKind::Ask) if !pipeline => match named {
            Some(addr) => Verdict::Again {
                next: Next::Asked(addr),
                pause: false,
            },
            None => Verdict::Done,
        },
        ErrorKind::Server(
            ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::BusyLoading
            | ServerErrorKind::ReadOnly,
        )
        | ErrorKind::ClusterConnectionNotFound => Verdict::Again {
            next: Next::BySlot,
            pause: true,
        },
        _ => Verdict::Done,
    }
}

/// An answer that is a server error needing a redirection, as an `Err`
/// (redis-rs hands some server errors back as values).
fn as_error(value: RedisResult<Value>) -> RedisResult<Value> {
    match value {
        Ok(Value::ServerError(e)) => {
            let err = RedisError::from(e.clone());
            if matches!(verdict_of(&err, false), Verdict::Again { .. }) {
                Err(err)
            } else {
                Ok(Value::ServerError(e))
            }
        }
        other => other,
    }
}

/// A transaction that `EXEC` aborted because every queued command was
/// refused the same way (all `MOVED` to one node, all `TRYAGAIN` & co.), as
/// that one refusal: the server discards a transaction with a command
/// refused at queueing (`EXECABORT`), so nothing of it ran and it may be
/// sent again where the refusal says. Any other error is returned as is.
fn refusal_of_aborted(err: RedisError) -> RedisError {
    if err.kind() != ErrorKind::Server(ServerErrorKind::ExecAbort) {
        return err;
    }
    let Some(refused) = err.clone().into_server_errors() else {
        return err;
    };
    let mut refusals = refused.iter().map(|(_, e)| RedisError::from(e.clone()));
    let Some(first) = refusals.next() else {
        return err;
    };
    let Verdict::Again { next, pause } = verdict_of(&first, true) else {
        return err;
    };
    let same = |e: &RedisError| match verdict_of(e, true) {
        Verdict::Again { next: n, pause: p } => n == next && p == pause,
        Verdict::Done => false,
    };
    if refusals.all(|e| same(&e)) {
        first
    } else {
        err
    }
}

fn by_address(addr: &str) -> Option<SingleNodeRoutingInfo> {
    let node = node_address(addr)?;
    Some(SingleNodeRoutingInfo::ByAddress {
        host: node.host().to_string(),
        port: node.port(),
    })
}

impl ClusterConn {
    /// Connects to the cluster of `builder` (see [`client_builder`]).
    pub async fn connect(builder: ClusterClientBuilder) -> RedisResult<Self> {
        let conn = builder.build()?.get_async_connection().await?;
        Ok(Self { conn })
    }

    /// redis-rs's connection, for what needs its routing API (a command
    /// to one node: `route_command`). It does not retry either.
    pub fn raw(&mut self) -> &mut ClusterConnection {
        &mut self.conn
    }

    /// The node at `addr` (`host:port` as announced, see
    /// [`ClusterConn::slots`]): a connection whose commands all go there,
    /// following no redirection (a `MOVED` comes back as an error). `None`
    /// for an address that is no `host:port`.
    pub fn node(&mut self, addr: &str) -> Option<NodeConn<'_>> {
        Some(NodeConn {
            conn: &mut self.conn,
            route: by_address(addr)?,
        })
    }

    /// `cmd` (a command without keys, such as `WAIT`) to the primary that
    /// owns `key`'s slot, where redis-rs's own routing would send it to
    /// every primary. No redirection is followed.
    pub async fn on_owner_of<T: FromRedisValue>(&mut self, key: &str, cmd: &Cmd) -> RedisResult<T> {
        let owner = SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master));
        let value = self
            .conn
            .route_command(cmd.clone(), RoutingInfo::SingleNode(owner))
            .await?
            .extract_error()?;
        Ok(redis::from_redis_value(value)?)
    }

    /// The slot ranges and the address (`host:port`, as announced) of their
    /// primaries, from `CLUSTER SLOTS` (to a node of redis-rs's choice),
    /// sorted.
    pub async fn slots(&mut self) -> RedisResult<Vec<(u16, u16, String)>> {
        self.slots_from(SingleNodeRoutingInfo::Random).await
    }

    /// [`ClusterConn::slots`], from the node at `addr` (`host:port`, as
    /// announced).
    pub async fn slots_at(&mut self, addr: &str) -> RedisResult<Vec<(u16, u16, String)>> {
        let node = by_address(addr)
            .ok_or_else(|| RedisError::from((ErrorKind::Parse, "no host:port", addr.to_owned())))?;
        self.slots_from(node).await
    }

    async fn slots_from(
        &mut self,
        node: SingleNodeRoutingInfo,
    ) -> RedisResult<Vec<(u16, u16, String)>> {
        let reply = self
            .conn
            .route_command(
                redis::cmd("CLUSTER").arg("SLOTS").clone(),
                RoutingInfo::SingleNode(node),
            )
            .await?
            .extract_error()?;
        parse_cluster_slots(&reply).ok_or_else(|| {
            RedisError::from((
                ErrorKind::Parse,
                "unexpected CLUSTER SLOTS reply",
                format!("{reply:?}"),
            ))
        })
    }

    /// One try of `cmd` to `next`.
    async fn try_cmd(&mut self, cmd: &Cmd, next: &Next) -> RedisResult<Value> {
        match next {
            Next::BySlot => self.conn.req_packed_command(cmd).await,
            Next::Moved(addr) => match by_address(addr) {
                Some(route) => {
                    self.conn
                        .route_command(cmd.clone(), RoutingInfo::SingleNode(route))
                        .await
                }
                None => self.conn.req_packed_command(cmd).await,
            },
            Next::Asked(addr) => {
                let route = by_address(addr).ok_or_else(|| {
                    RedisError::from((ErrorKind::Parse, "bad ASK address", addr.clone()))
                })?;
                let mut pipe = redis::pipe();
                pipe.cmd("ASKING").add_command(cmd.clone());
                let mut values = self.conn.route_pipeline(pipe, 1, 1, route).await?;
                values
                    .pop()
                    .ok_or_else(|| RedisError::from((ErrorKind::Parse, "no reply after ASKING")))
            }
        }
    }

    /// One try of `pipeline` to `next` (never `Asked`).
    async fn try_pipeline(
        &mut self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
        next: &Next,
    ) -> RedisResult<Vec<Value>> {
        match next.clone() {
            Next::Moved(addr) => match by_address(&addr) {
                Some(route) => {
                    self.conn
                        .route_pipeline(pipeline.clone(), offset, count, route)
                        .await
                }
                None => self.conn.req_packed_commands(pipeline, offset, count).await,
            },
            Next::BySlot | Next::Asked(_) => {
                self.conn.req_packed_commands(pipeline, offset, count).await
            }
        }
    }

    /// `cmd`, following the redirections of the module docs.
    async fn send(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        let mut redirects = Redirects::new(false);
        loop {
            match as_error(self.try_cmd(cmd, &redirects.next).await) {
                Ok(value) => return Ok(value),
                Err(err) => redirects.follow(err).await?,
            }
        }
    }

    /// `pipeline`, following MOVED and the errors that ask to try again
    /// (not ASK: see [`verdict_of`]).
    async fn send_pipeline(
        &mut self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let mut redirects = Redirects::new(true);
        loop {
            let err = match self
                .try_pipeline(pipeline, offset, count, &redirects.next)
                .await
            {
                Ok(values) => match values.iter().find_map(|v| as_error(Ok(v.clone())).err()) {
                    None => return Ok(values),
                    Some(e) => e,
                },
                Err(e) => refusal_of_aborted(e),
            };
            redirects.follow(err).await?;
        }
    }
}

/// One request's redirections so far: where it goes next, the pause
/// before the next try after `TRYAGAIN` & co., the tries made.
struct Redirects {
    /// Whether the request is a pipeline (see [`verdict_of`]).
    pipeline: bool,
    /// Where the next try goes.
    next: Next,
    /// The pause after the next refusal that asks for one.
    backoff: Duration,
    /// Tries refused so far.
    refused: usize,
}

impl Redirects {
    fn new(pipeline: bool) -> Self {
        Self {
            pipeline,
            next: Next::BySlot,
            backoff: MIN_BACKOFF,
            refused: 0,
        }
    }

    /// After the try that got `err`: `Ok` once the request may go again
    /// (`err` proves it did not run, fewer than [`MAX_REDIRECTIONS`]
    /// tries were made, and the pause it asks for is over); otherwise
    /// `err`, for the caller.
    async fn follow(&mut self, err: RedisError) -> RedisResult<()> {
        let Verdict::Again { next, pause } = verdict_of(&err, self.pipeline) else {
            return Err(err);
        };
        self.refused += 1;
        if self.refused >= MAX_REDIRECTIONS {
            return Err(err);
        }
        tracing::debug!(error = %err, "distlock redis cluster: not executed; sending again");
        if pause {
            tokio::time::sleep(self.backoff).await;
            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        }
        self.next = next;
        Ok(())
    }
}

impl ConnectionLike for ClusterConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let fut: BoxFuture<'a, RedisResult<Value>> = self.send(cmd).boxed();
        fut
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.send_pipeline(pipeline, offset, count).boxed()
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// One node of a cluster (see [`ClusterConn::node`]).
pub struct NodeConn<'a> {
    conn: &'a mut ClusterConnection,
    route: SingleNodeRoutingInfo,
}

impl ConnectionLike for NodeConn<'_> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let routing = RoutingInfo::SingleNode(self.route.clone());
        async move {
            self.conn
                .route_command(cmd.clone(), routing)
                .await?
                .extract_error()
        }
        .boxed()
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.conn
            .route_pipeline(pipeline.clone(), offset, count, self.route.clone())
            .boxed()
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// The number of hash slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// The hash slot of `key`: CRC16 (XMODEM) of its hash tag (the text
/// between its first `{` and the first `}` after it, if not empty), else of
/// the whole key, modulo [`SLOTS`] — as `CLUSTER KEYSLOT` computes it.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let len = rest.iter().position(|b| *b == b'}')?;
            (len > 0).then(|| &rest[..len])
        })
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(hashed) % SLOTS
}

/// `(first, last, "host:port" of the primary)` of a `CLUSTER SLOTS` reply,
/// sorted; `None` if it is not one.
pub fn parse_cluster_slots(reply: &Value) -> Option<Vec<(u16, u16, String)>> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    let mut out = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(parts) = range else {
            return None;
        };
        let (Value::Int(first), Value::Int(last), Value::Array(primary)) =
            (parts.first()?, parts.get(1)?, parts.get(2)?)
        else {
            return None;
        };
        let host = match primary.first()? {
            Value::BulkString(h) => String::from_utf8_lossy(h).into_owned(),
            Value::SimpleString(h) => h.clone(),
            _ => return None,
        };
        let Value::Int(port) = primary.get(1)? else {
            return None;
        };
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        out.push((
            u16::try_from(*first).ok()?,
            u16::try_from(*last).ok()?,
            format!("{host}:{port}"),
        ));
    }
    out.sort();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cluster_urls() {
        let t = ClusterTarget::parse("redis+cluster://:pw@n1:6380,n2,[::1]:7000")
            .unwrap()
            .unwrap();
        assert_eq!(t.seeds, ["n1:6380", "n2:6379", "[::1]:7000"]);
        assert!(!t.tls);
        assert_eq!(t.node_url("n2:6379"), "redis://:pw@n2:6379/");
        let t = ClusterTarget::parse("rediss+cluster://n1/0")
            .unwrap()
            .unwrap();
        assert!(t.tls);
        assert_eq!(t.node_url("n1:6379"), "rediss://n1:6379/");
        assert_eq!(ClusterTarget::parse("redis://n1").unwrap(), None);
        assert_eq!(ClusterTarget::parse("redis+sentinel://s/m").unwrap(), None);
        for bad in [
            "redis+cluster://:secret@n1/1",
            "redis+cluster://:secret@n1,,n2",
            "redis+cluster://:secret@n1:x",
            "redis+cluster://:secret@n1:0",
            "redis+cluster://:secret@n1?x=1",
        ] {
            let e = ClusterTarget::parse(bad).unwrap_err();
            assert_eq!(e.kind(), lock_core::LockErrorKind::InvalidArgument, "{bad}");
            assert!(!e.to_string().contains("secret"), "{e}");
        }
        assert!(!format!(
            "{:?}",
            ClusterTarget::parse("redis+cluster://:secret@n1").unwrap()
        )
        .contains("secret"));
    }

    #[test]
    fn only_redirections_that_prove_nothing_ran_are_followed() {
        let server = |text: &str| {
            redis::parse_redis_value(format!("-{text}\r\n").as_bytes())
                .unwrap()
                .extract_error()
                .unwrap_err()
        };
        let again = |e: RedisError, pipeline: bool| match verdict_of(&e, pipeline) {
            Verdict::Again { next, pause } => Some((next, pause)),
            Verdict::Done => None,
        };
        assert_eq!(
            again(server("MOVED 12 10.0.0.1:7000"), false),
            Some((Next::Moved("10.0.0.1:7000".into()), false))
        );
        assert_eq!(
            again(server("ASK 12 10.0.0.1:7000"), false),
            Some((Next::Asked("10.0.0.1:7000".into()), false))
        );
        assert_eq!(again(server("ASK 12 10.0.0.1:7000"), true), None);
        for text in [
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "CLUSTERDOWN The cluster is down",
            "MASTERDOWN Link with MASTER is down",
            "LOADING Redis is loading the dataset in memory",
            "READONLY You can't write against a read only replica.",
        ] {
            assert_eq!(
                again(server(text), false),
                Some((Next::BySlot, true)),
                "{text}"
            );
        }
        for text in ["NOSCRIPT No matching script", "ERR boom", "CROSSSLOT Keys"] {
            assert_eq!(again(server(text), false), None, "{text}");
        }
        let timeout = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert_eq!(again(timeout, false), None, "a timeout is never resent");
        let reset = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(again(reset, false), None, "nor a dropped connection");
    }

    #[test]
    fn key_slots_are_redis_clusters() {
        for key in [
            "",
            "a",
            "123456789",
            "{user1}.a",
            "a{b}c",
            "x{}y",
            "{}",
            "}{a}",
            "é{ü}",
        ] {
            assert_eq!(
                Route::new(key_slot(key.as_bytes()), SlotAddr::Master),
                Route::with_key(key, SlotAddr::Master),
                "{key:?}"
            );
        }
        // The check value of CRC16/XMODEM (0x31c3), modulo 16384.
        assert_eq!(key_slot(b"123456789"), 0x31c3 % SLOTS);
        assert_eq!(key_slot(b"{user1}.following"), key_slot(b"user1"));
        // From `CLUSTER KEYSLOT` (Redis 7.0).
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{lock} released"), key_slot(b"lock"));
    }

    #[test]
    fn parses_cluster_slots() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                Value::Array(vec![Value::BulkString(b"::1".to_vec()), Value::Int(7001)]),
            ]),
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Array(vec![
                    Value::BulkString(b"127.0.0.1".to_vec()),
                    Value::Int(7000),
                    Value::BulkString(b"id".to_vec()),
                ]),
                Value::Array(vec![
                    Value::BulkString(b"127.0.0.1".to_vec()),
                    Value::Int(7003),
                ]),
            ]),
        ]);
        assert_eq!(
            parse_cluster_slots(&reply).unwrap(),
            [
                (0, 5460, "127.0.0.1:7000".to_string()),
                (5461, 16383, "[::1]:7001".to_string())
            ]
        );
        assert_eq!(parse_cluster_slots(&Value::Nil), None);
    }
}
