//! [`RedisLease`]: what a granted lease of the mutex, the read-write lock or
//! the semaphore holds, and its renewal, release and downgrade.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{validity, Lease, LeaseHandle, Renewal};
use lock_core::{FencingToken, LockError, LockErrorKind, Result};
use tokio::time::Instant;

use crate::client::Client;
use crate::kit::call::ttl_millis;
use crate::kit::layout::Keys;
use crate::primitive::{self, Primitive};

/// A granted lease: the primitive, the owner token and the lock key, with
/// the shared connection. Only the lock key is kept (a guard lives long and
/// there may be many): the other keys derive from it when a release or a
/// downgrade needs them.
pub(crate) struct RedisLease {
    pub(crate) client: Arc<Client>,
    pub(crate) primitive: Primitive,
    pub(crate) lock: Box<str>,
    pub(crate) token: Box<str>,
}

impl RedisLease {
    fn keys(&self) -> Result<Keys> {
        self.client.layout.keys_of_lock(&self.lock)
    }
}

#[async_trait]
impl LeaseHandle for RedisLease {
    async fn renew(&self, ttl: Duration) -> Result<Renewal> {
        // Batched with this client's other renewals; valid from before
        // the request that carried it was sent.
        match self
            .primitive
            .renew(&self.client, &self.keys()?, &self.token, ttl)
            .await?
        {
            Some(sent) => Ok(Renewal::Renewed {
                valid_until: validity(sent, ttl),
            }),
            None => Ok(Renewal::Gone),
        }
    }

    async fn release(&self) -> Result<bool> {
        self.primitive
            .release(&self.client, &self.keys()?, &self.token)
            .await
    }

    /// In place: the holder's entry turns from `w` to `r` in one script, so
    /// the name is never without our lease, and the writers already waiting
    /// keep waiting (they still need every reader gone, and new readers
    /// still queue behind them).
    async fn downgrade(&self, ttl: Duration) -> Result<Lease> {
        if self.primitive != Primitive::Write {
            return Err(LockError::invalid(
                "only a write lease of a read-write lock can be downgraded",
            ));
        }
        let start = Instant::now();
        let keys = self.keys()?;
        match primitive::downgrade(&self.client, &keys, &self.token, ttl_millis(ttl)).await? {
            Some(fence) => {
                let handle = RedisLease {
                    client: self.client.clone(),
                    primitive: Primitive::Read,
                    lock: self.lock.clone(),
                    token: self.token.clone(),
                };
                Ok(Lease::new(Box::new(handle), validity(start, ttl))
                    .with_token(Some(FencingToken::new(fence)))
                    .with_key(keys.rw()))
            }
            None => Err(LockError::new(
                LockErrorKind::Lost,
                format!(
                    "redis: the write lease on {} expired before the downgrade",
                    keys.rw()
                ),
            )),
        }
    }
}
