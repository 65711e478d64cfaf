//! The three primitives on one name (mutex, read-write lock, semaphore):
//! which script each operation runs, on which keys. The acquire loop in
//! [`crate::backend`] is the same for all three; only these calls differ.

use std::time::Duration;

use lock_core::{LockError, LockErrorKind, LockMode, Result};
use tokio::time::Instant;

use crate::client::{AcquireReply, Client};
use crate::kit::layout::Keys;
use crate::kit::place::PlaceLife;
use crate::kit::renew::{LeaseKind, RenewItem};

/// Which primitive a lease belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Primitive {
    /// The mutex: the lock key holds the owner token (the peers' layout).
    Mutex,
    /// The read side of the read-write lock (`{key} rw`).
    Read,
    /// The write side of the read-write lock (`{key} rw`).
    Write,
    /// One of this many permits of the semaphore (`{key} permits`).
    Permit(u32),
}

/// A waiter's place in the read-write lock's queue (see
/// [`crate::kit::scripts::ACQUIRE_RW`]): taken at its first failed attempt,
/// renewed by each later one, given up when it stops waiting, lapsed by
/// itself if the waiter vanishes.
#[derive(Clone, Debug)]
pub(crate) struct Intent {
    /// A random id for this wait (not an owner token: it holds nothing).
    pub(crate) id: String,
    /// How long the place lasts unless the waiter tries again.
    pub(crate) place: PlaceLife,
}

impl Primitive {
    /// The primitive a request's mode asks for.
    pub(crate) fn of(mode: LockMode) -> Result<Self> {
        match mode {
            LockMode::Exclusive => Ok(Self::Mutex),
            LockMode::Read => Ok(Self::Read),
            LockMode::Write => Ok(Self::Write),
            LockMode::Permit { permits } => Ok(Self::Permit(permits)),
            other => Err(LockError::new(
                LockErrorKind::Unsupported,
                format!("redis: no {other} locks"),
            )),
        }
    }

    /// The channel its releases are published on.
    pub(crate) fn channel(self, keys: &Keys) -> &str {
        match self {
            Self::Mutex => keys.released(),
            Self::Read | Self::Write => keys.rw_released(),
            Self::Permit(_) => keys.permits_released(),
        }
    }

    /// Whether one release may let in several local waiters at once (a
    /// writer's release admits every reader), so that it must wake them all.
    pub(crate) fn wakes_all(self) -> bool {
        matches!(self, Self::Read | Self::Write)
    }

    /// The key that shows the lease on the server, among the name's `keys`.
    pub(crate) fn server_key(self, keys: &Keys) -> &str {
        match self {
            Self::Mutex => keys.lock(),
            Self::Read | Self::Write => keys.rw(),
            Self::Permit(_) => keys.permits(),
        }
    }

    /// One acquire attempt with owner `token` for `ttl_ms`; a caller of the
    /// read-write lock that will wait passes its place (`intent`). A mutex
    /// stores the holder's description `described` ('' for none) with it;
    /// the other primitives do not store one.
    pub(crate) async fn acquire(
        self,
        client: &Client,
        keys: &Keys,
        token: &str,
        ttl_ms: u64,
        intent: Option<&Intent>,
        described: &str,
    ) -> Result<AcquireReply> {
        let ttl = ttl_ms.to_string();
        let (acquired, value): (i64, i64) = match self {
            Self::Mutex => {
                return Ok(client
                    .acquire(keys, token, ttl_ms, None, described)
                    .await?
                    .0)
            }
            Self::Read | Self::Write => {
                let lasts = intent
                    .map(|i| i.place.lasts_ms().to_string())
                    .unwrap_or_default();
                let id = intent.map(|i| i.id.as_str()).unwrap_or("");
                let side = if self == Self::Write { "w" } else { "r" };
                client
                    .eval_acquire(
                        "acquire",
                        |s| &s.acquire_rw,
                        &[keys.rw(), keys.rw_queue(), keys.fencing(), keys.rw_lapse()],
                        &[token, &ttl, side, id, &lasts],
                    )
                    .await?
            }
            Self::Permit(permits) => {
                client
                    .eval_acquire(
                        "acquire",
                        |s| &s.acquire_permit,
                        &[keys.permits(), keys.fencing()],
                        &[token, &ttl, &permits.to_string()],
                    )
                    .await?
            }
        };
        match (acquired, u64::try_from(value)) {
            (1, Ok(fence)) if fence > 0 => Ok(AcquireReply::Acquired(fence)),
            (0, _) => Ok(AcquireReply::Held(value)),
            _ => Err(LockError::new(
                LockErrorKind::Protocol,
                format!(
                    "acquire: unexpected reply [{acquired}, {value}] (is {} changed by someone else?)",
                    keys.fencing()
                ),
            )),
        }
    }

    /// Renews `token`'s lease for `ttl` in the client's next renewal batch
    /// (one script for every primitive, see [`crate::kit::renew::RENEW_BATCH`]):
    /// `Some(sent)` if it still holds, now for `ttl` from `sent`; `None` if
    /// it no longer holds.
    pub(crate) async fn renew(
        self,
        client: &Client,
        keys: &Keys,
        token: &str,
        ttl: Duration,
    ) -> Result<Option<Instant>> {
        let kind = match self {
            Self::Mutex => LeaseKind::DescribedMutex,
            Self::Read | Self::Write => LeaseKind::ReadWrite,
            Self::Permit(_) => LeaseKind::Permit,
        };
        client
            .renew(RenewItem {
                kind,
                key: self.server_key(keys).to_string(),
                token: token.to_string(),
                ttl,
                described: (self == Self::Mutex).then(|| keys.holder().to_string()),
            })
            .await
    }

    /// Removes `token`'s lease and publishes; `false` if it no longer held.
    pub(crate) async fn release(self, client: &Client, keys: &Keys, token: &str) -> Result<bool> {
        let n: i64 = match self {
            Self::Mutex => return client.release(keys, token, None).await,
            Self::Read | Self::Write => {
                client
                    .eval(
                        "release",
                        |s| &s.release_rw,
                        &[keys.rw(), keys.rw_released()],
                        &[token],
                        false,
                    )
                    .await?
            }
            Self::Permit(_) => {
                client
                    .eval(
                        "release",
                        |s| &s.release_permit,
                        &[keys.permits(), keys.permits_released()],
                        &[token],
                        false,
                    )
                    .await?
            }
        };
        Ok(n == 1)
    }
}

/// Turns `token`'s write lease into a read lease for `ttl_ms`, in place;
/// the read lease's new fencing token, or `None` if the write lease is gone.
pub(crate) async fn downgrade(
    client: &Client,
    keys: &Keys,
    token: &str,
    ttl_ms: u64,
) -> Result<Option<u64>> {
    let (done, fence): (i64, i64) = client
        .eval(
            "downgrade",
            |s| &s.downgrade_rw,
            &[keys.rw(), keys.rw_released(), keys.fencing()],
            &[token, &ttl_ms.to_string()],
            false,
        )
        .await?;
    match (done, u64::try_from(fence)) {
        (1, Ok(fence)) if fence > 0 => Ok(Some(fence)),
        (0, _) => Ok(None),
        _ => Err(LockError::new(
            LockErrorKind::Protocol,
            format!("downgrade: unexpected reply [{done}, {fence}]"),
        )),
    }
}

/// A waiter of the read-write lock gives up its place, and the waiters
/// behind it are told.
pub(crate) async fn withdraw(
    client: &Client,
    keys: &Keys,
    side: Primitive,
    intent: &Intent,
) -> Result<()> {
    let member = format!(
        "{}:{}",
        if side == Primitive::Write { "w" } else { "r" },
        intent.id
    );
    let _: i64 = client
        .eval(
            "withdraw a waiter",
            |s| &s.withdraw_waiter,
            &[keys.rw_queue(), keys.rw_lapse(), keys.rw_released()],
            &[&member],
            true,
        )
        .await?;
    Ok(())
}
