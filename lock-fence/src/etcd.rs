//! etcd as the protected resource: one transaction compares the resource's
//! token key and puts, atomically.

use etcd_client::{Compare, CompareOp, KvClient, Txn, TxnOp, TxnOpResponse};
use lock_core::{FencingToken, LockError, LockErrorKind};

use crate::{metrics, Admission, FenceError, FencedWrite, Storage};

/// The default prefix of token keys: `distlock/fence/<resource>`.
pub const DEFAULT_PREFIX: &str = "distlock/fence/";

/// Fenced writes into etcd: a put that the cluster refuses when the
/// resource's token key holds a newer token.
///
/// One transaction: `if value(token key) > token then get(token key) else
/// put(token key, token), put(key, value)`. etcd compares values as bytes, so
/// tokens are stored as 20-digit zero-padded decimals, whose byte order is
/// their numeric order; a missing token key fails the comparison, which admits
/// the first write. The token key never expires. Calls take as long as the
/// client allows: set `ConnectOptions::with_timeout`.
#[derive(Clone, Debug)]
pub struct EtcdFence {
    prefix: String,
}

impl Default for EtcdFence {
    fn default() -> Self {
        Self::with_prefix(DEFAULT_PREFIX)
    }
}

impl EtcdFence {
    /// Token keys under [`DEFAULT_PREFIX`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Token keys under `prefix`.
    pub fn with_prefix(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    /// The key holding `resource`'s highest admitted token.
    pub fn token_key(&self, resource: &str) -> String {
        format!("{}{resource}", self.prefix)
    }

    /// `put(key, value)` if `write`'s token is not older than the resource's
    /// (`kv` from `Client::kv_client()`).
    pub async fn put(
        &self,
        kv: &mut KvClient,
        write: &FencedWrite,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> Result<(), FenceError> {
        let outcome = self.try_put(kv, write, key.into(), value.into()).await;
        metrics::record(Storage::Etcd, &outcome);
        outcome.map(drop)
    }

    async fn try_put(
        &self,
        kv: &mut KvClient,
        write: &FencedWrite,
        key: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<Admission, FenceError> {
        if write.key().is_some() {
            return Err(LockError::new(
                LockErrorKind::Unsupported,
                "idempotency keys are recorded by PgFence only: a fenced etcd put writes the \
                 same value again on a retry, which is idempotent by itself",
            )
            .into());
        }
        let token_key = self.token_key(write.resource());
        let token = padded(write.token());
        let txn = Txn::new()
            .when([Compare::value(
                token_key.clone(),
                CompareOp::Greater,
                token.clone(),
            )])
            .and_then([TxnOp::get(token_key.clone(), None)])
            .or_else([
                TxnOp::put(token_key, token, None),
                TxnOp::put(key, value, None),
            ]);
        let resp = kv.txn(txn).await.map_err(|e| map_error("fenced put", e))?;
        if !resp.succeeded() {
            return Ok(Admission::Admitted);
        }
        let newer = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        });
        match newer {
            Some(v) => Err(write.stale(parse_token(&v)?)),
            None => Err(LockError::new(
                LockErrorKind::Protocol,
                "etcd: a stale fenced put did not return the newer token",
            )
            .into()),
        }
    }

    /// The highest token `resource` has admitted, if any.
    pub async fn highest(
        &self,
        kv: &mut KvClient,
        resource: &str,
    ) -> Result<Option<FencingToken>, FenceError> {
        let resp = kv
            .get(self.token_key(resource), None)
            .await
            .map_err(|e| map_error("reading a token key", e))?;
        resp.kvs()
            .first()
            .map(|kv| parse_token(kv.value()))
            .transpose()
    }
}

/// A token as 20 zero-padded decimal digits (u64::MAX has 20).
fn padded(token: FencingToken) -> String {
    format!("{:020}", token.get())
}

fn parse_token(bytes: &[u8]) -> Result<FencingToken, FenceError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(FencingToken::new)
        .ok_or_else(|| {
            LockError::new(
                LockErrorKind::Protocol,
                format!(
                    "etcd: a token key holds {:?}, not a token",
                    String::from_utf8_lossy(bytes)
                ),
            )
            .into()
        })
}

/// An etcd failure as a [`LockError`], with `lock-etcd`'s kinds.
fn map_error(what: &str, err: etcd_client::Error) -> LockError {
    LockError::new(lock_etcd::error_kind(&err), format!("etcd: {what}")).with_source(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_tokens_sort_like_numbers() {
        let mut tokens = [0u64, 9, 10, 99, 100, 1 << 40, u64::MAX];
        let mut texts: Vec<String> = tokens
            .iter()
            .map(|&t| padded(FencingToken::new(t)))
            .collect();
        texts.sort();
        tokens.sort();
        let back: Vec<u64> = texts
            .iter()
            .map(|t| parse_token(t.as_bytes()).unwrap().get())
            .collect();
        assert_eq!(back, tokens);
        assert!(texts.iter().all(|t| t.len() == 20));
    }
}
