//! The election's requests to one node: the scripts beside this file
//! (`lua/`), each keyed by [`LeaderKeys`] and compared with the term's
//! owner token, so that a request repeated after a dropped connection, or
//! a copy delivered late, changes nothing it should not.

use std::sync::LazyLock;
use std::time::Duration;

use lock_redis::kit::call::{Lua, ScriptCall};
use lock_redis::kit::layout::LeaderKeys;
use redis::{RedisError, RedisResult};

use crate::node::Node;

static BEGIN: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("lua/begin.lua")));
static PROCLAIM: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("lua/proclaim.lua")));
static END: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("lua/end.lua")));
static READ: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("lua/read.lua")));

/// What [`Node::begin_term`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Began {
    /// The term runs on this node (begun now, or before).
    Yes,
    /// An earlier term that ended without a resignation holds new terms
    /// back here for this much longer (its lock-delay marker).
    Delayed(Duration),
    /// The leader key is not ours here.
    NotOurs,
}

/// One node's view of the election ([`Node::read_term`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeTerm {
    /// The leader's owner token.
    pub(crate) owner: String,
    /// How many proclaims the term's value has had here.
    pub(crate) proclaims: u64,
    /// When the term began (the leader's clock, ms since the Unix epoch).
    pub(crate) since_ms: u64,
    /// The leader key's remaining TTL in ms (`-1`: none).
    pub(crate) pttl: i64,
    /// The value the leader publishes.
    pub(crate) value: String,
}

fn unexpected(what: &'static str, reply: impl std::fmt::Debug) -> RedisError {
    RedisError::from((
        redis::ErrorKind::Parse,
        what,
        format!("unexpected reply {reply:?}"),
    ))
}

impl Node {
    /// Begins `token`'s term here ([`BEGIN`]: `begin.lua`), once a round
    /// made it the holder of the leader key: its info (`since_ms`,
    /// `value`) and, for a `delay_ms` > 0, its lock-delay marker.
    pub(crate) async fn begin_term(
        &self,
        keys: &LeaderKeys,
        token: &str,
        delay_ms: u64,
        since_ms: u64,
        value: &str,
    ) -> RedisResult<Began> {
        let reply: Vec<i64> = self
            .call("campaign", |mut c| async move {
                ScriptCall::new(
                    &BEGIN,
                    &[keys.leader(), keys.info(), keys.delay(), keys.changed()],
                )
                .arg(token)
                .arg(delay_ms)
                .arg(since_ms)
                .arg(value)
                .invoke_async(&mut c)
                .await
            })
            .await?;
        match reply.as_slice() {
            [1] => Ok(Began::Yes),
            [0, ms] => Ok(Began::Delayed(Duration::from_millis(
                u64::try_from(*ms).unwrap_or(1).max(1),
            ))),
            [-1] => Ok(Began::NotOurs),
            other => Err(unexpected("campaign", other)),
        }
    }

    /// Publishes `value` as `token`'s proclaim number `number` (`proclaim.lua`):
    /// `true` if that proclaim's value (or a later one's) is stored here.
    pub(crate) async fn proclaim(
        &self,
        keys: &LeaderKeys,
        token: &str,
        number: u64,
        value: &str,
    ) -> RedisResult<bool> {
        let n: i64 = self
            .call("proclaim", |mut c| async move {
                ScriptCall::new(&PROCLAIM, &[keys.leader(), keys.info(), keys.changed()])
                    .arg(token)
                    .arg(number)
                    .arg(value)
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
        Ok(n == 1)
    }

    /// Ends `token`'s term here before its leader key is released
    /// (`end.lua`): its info goes, and on a resignation its lock-delay
    /// marker. `true` if the info was the term's.
    pub(crate) async fn end_term(
        &self,
        keys: &LeaderKeys,
        token: &str,
        resign: bool,
    ) -> RedisResult<bool> {
        let n: i64 = self
            .call("resign", |mut c| async move {
                ScriptCall::new(
                    &END,
                    &[keys.leader(), keys.info(), keys.delay(), keys.changed()],
                )
                .arg(token)
                .arg(if resign { "1" } else { "" })
                .invoke_async(&mut c)
                .await
            })
            .await?;
        Ok(n == 1)
    }

    /// The term this node has, if one has begun here (`read.lua`).
    pub(crate) async fn read_term(&self, keys: &LeaderKeys) -> RedisResult<Option<NodeTerm>> {
        let reply: Vec<String> = self
            .call("leader", |mut c| async move {
                ScriptCall::new(&READ, &[keys.leader(), keys.info()])
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
        let number = |s: &str| s.parse::<i64>().map_err(|_| unexpected("leader", &reply));
        match reply.as_slice() {
            [] => Ok(None),
            [owner, proclaims, since, pttl, value] => Ok(Some(NodeTerm {
                owner: owner.clone(),
                proclaims: number(proclaims)?.unsigned_abs(),
                since_ms: number(since)?.unsigned_abs(),
                pttl: number(pttl)?,
                value: value.clone(),
            })),
            _ => Err(unexpected("leader", &reply)),
        }
    }
}
