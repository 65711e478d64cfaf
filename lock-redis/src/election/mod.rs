//! Leader elections on one Redis server: the mutex's queue machinery on
//! the election's keys ([`LeaderKeys`]), with the leader's value, its
//! epoch (a token of the name's fencing counter), the lock-delay marker
//! and the change channel that followers hear ([`observe`]).

pub(crate) mod observe;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use lock_core::backend::{validity, LeaseHandle, Renewal};
use lock_core::{FencingToken, LeaderInfo, LockError, LockErrorKind, Result};

use crate::client::{AcquireReply, Client};
use crate::kit::layout::LeaderKeys;
use crate::kit::renew::{LeaseKind, RenewItem};

/// One attempt at a term ([`ACQUIRE_LEADER`](crate::kit::scripts::ACQUIRE_LEADER)),
/// taking (or renewing) a place in line lasting `lasts_ms`: the term with
/// its epoch, or how long until the next check (the leader's or the
/// lock-delay's ms left) and a bound at least the last token issued (as
/// [`Client::acquire`]).
pub(crate) async fn acquire(
    client: &Client,
    keys: &LeaderKeys,
    token: &str,
    ttl_ms: u64,
    lasts_ms: u64,
    delay_ms: u64,
    value: &str,
) -> Result<(AcquireReply, u64)> {
    let (ttl, lasts, delay) = (
        ttl_ms.to_string(),
        lasts_ms.to_string(),
        delay_ms.to_string(),
    );
    let reply: Vec<i64> = client
        .eval_acquire(
            "campaign",
            |s| &s.acquire_leader,
            &keys.all(),
            &[token, &ttl, "1", &lasts, &delay, value],
        )
        .await?;
    match reply.as_slice() {
        [1, fence] if *fence > 0 => Ok((AcquireReply::Acquired(fence.unsigned_abs()), 0)),
        [0, pttl, last] => Ok((AcquireReply::Held(*pttl), u64::try_from(*last).unwrap_or(0))),
        other => Err(LockError::new(
            LockErrorKind::Protocol,
            format!("campaign: unexpected script reply {other:?}"),
        )),
    }
}

/// Ends `token`'s term ([`RELEASE_LEADER`](crate::kit::scripts::RELEASE_LEADER)):
/// a resignation (`resign`: its lock-delay marker goes too) or the
/// clean-up of a term that ended without one (the marker runs out). A
/// candidate that gives up passes its queue member as `leaving`. `true` if
/// the term was `token`'s.
pub(crate) async fn release(
    client: &Client,
    keys: &LeaderKeys,
    token: &str,
    leaving: Option<&str>,
    resign: bool,
) -> Result<bool> {
    let n: i64 = client
        .eval(
            "resign",
            |s| &s.release_leader,
            &keys.all(),
            &[token, leaving.unwrap_or(""), if resign { "1" } else { "" }],
            false,
        )
        .await?;
    Ok(n == 1)
}

/// What [`read`] saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Read {
    /// The server's clock in µs when it read: every change announced with
    /// a larger version happened after the read.
    pub(crate) version: u64,
    /// The leader and its term's ms left, if a term runs.
    pub(crate) leader: Option<(LeaderInfo, i64)>,
}

/// Who leads now ([`READ_LEADER`](crate::kit::scripts::READ_LEADER)).
pub(crate) async fn read(client: &Client, keys: &LeaderKeys) -> Result<Read> {
    let reply: Vec<String> = client
        .eval(
            "leader",
            |s| &s.read_leader,
            &[keys.leader(), keys.info()],
            &[],
            true,
        )
        .await?;
    let bad = || {
        LockError::new(
            LockErrorKind::Protocol,
            format!("leader: unexpected script reply {reply:?}"),
        )
    };
    let number = |s: &String| s.parse::<u64>().map_err(|_| bad());
    match reply.as_slice() {
        [version] => Ok(Read {
            version: number(version)?,
            leader: None,
        }),
        [version, epoch, since, pttl, value] => Ok(Read {
            version: number(version)?,
            leader: Some((
                info(value, number(epoch)?, number(since)?),
                pttl.parse().map_err(|_| bad())?,
            )),
        }),
        _ => Err(bad()),
    }
}

/// The leader of the term `epoch` that began at `since_ms` (server clock,
/// ms since the Unix epoch), publishing `value`.
pub(crate) fn info(value: &str, epoch: u64, since_ms: u64) -> LeaderInfo {
    LeaderInfo::new(value, Some(FencingToken::new(epoch)))
        .with_since(SystemTime::UNIX_EPOCH + Duration::from_millis(since_ms))
}

/// A leader's term: its owner token on the election's keys, with the
/// shared connection.
pub(crate) struct LeaderLease {
    pub(crate) client: Arc<Client>,
    pub(crate) keys: Arc<LeaderKeys>,
    pub(crate) token: Box<str>,
}

#[async_trait]
impl LeaseHandle for LeaderLease {
    /// Batched with the client's other renewals: the leader key, its info
    /// and its lock-delay marker, announced to followers.
    async fn renew(&self, ttl: Duration) -> Result<Renewal> {
        let item = RenewItem {
            kind: LeaseKind::Leader,
            key: self.keys.leader().to_string(),
            token: self.token.to_string(),
            ttl,
            described: None,
        };
        match self.client.renew(item).await? {
            Some(sent) => Ok(Renewal::Renewed {
                valid_until: validity(sent, ttl),
            }),
            None => Ok(Renewal::Gone),
        }
    }

    /// A resignation: the next candidate leads at once.
    async fn release(&self) -> Result<bool> {
        release(&self.client, &self.keys, &self.token, None, true).await
    }

    /// The term ends, its lock-delay left to run out.
    async fn release_after_loss(&self) -> Result<bool> {
        release(&self.client, &self.keys, &self.token, None, false).await
    }

    /// [`PROCLAIM`](crate::kit::scripts::PROCLAIM): compared with the owner
    /// token, so repeating it (after a dropped connection) is safe.
    async fn proclaim(&self, value: &str) -> Result<bool> {
        let keys = &self.keys;
        let n: i64 = self
            .client
            .eval(
                "proclaim",
                |s| &s.proclaim,
                &[keys.leader(), keys.info(), keys.changed()],
                &[&self.token, value],
                true,
            )
            .await?;
        Ok(n == 1)
    }
}
