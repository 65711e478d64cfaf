//! PostgreSQL as the protected resource: the fence check runs inside the
//! caller's own transaction, in one statement, next to the caller's write.

use std::time::Duration;

use lock_core::{FencingToken, LockError, LockErrorKind};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, GenericClient, Transaction};

use crate::{metrics, Admission, FenceError, FencedWrite, Storage};

/// The schema [`PgFence::migrate`] creates, as plain SQL for users who run
/// their own migrations: two tables and one PL/pgSQL function, every statement
/// safe to run again.
pub const SCHEMA_SQL: &str = include_str!("postgres.sql");

/// The SQLSTATE `distlock_fence_admit` raises for a stale token.
pub const STALE_TOKEN_SQLSTATE: &str = "DL001";

/// Serializes concurrent migrations (a `pg_advisory_xact_lock` key: "distlock").
const MIGRATION_LOCK: i64 = 0x6469_7374_6c6f_636b;

/// Fenced writes into PostgreSQL.
///
/// [`PgFence::admit`] takes the caller's [`Transaction`]: the token check and
/// the caller's write commit or roll back together (pools' transactions, such
/// as deadpool-postgres's, dereference to it: pass `&*tx`). Build it once and
/// share it; it holds no connection. Called in a savepoint (a nested
/// transaction), a stale token fails that savepoint.
///
/// Deadlines: a holder's `admit` waits while another transaction holds the
/// same resource's fence row (that is the serialization). Bound it the
/// PostgreSQL way, e.g. `SET LOCAL lock_timeout = '2s'` or a
/// `statement_timeout`: the wait then ends with a
/// [`Timeout`](LockErrorKind::Timeout) error and the transaction rolls back.
#[derive(Clone, Debug, Default)]
pub struct PgFence {
    _private: (),
}

impl PgFence {
    /// A fence using the tables of [`SCHEMA_SQL`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates or updates the schema ([`SCHEMA_SQL`]) in one transaction,
    /// serialized against concurrent migrations by an advisory lock.
    pub async fn migrate(&self, client: &mut Client) -> Result<(), FenceError> {
        let tx = client
            .transaction()
            .await
            .map_err(|e| map_error("starting the migration", e))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(|e| map_error("locking the migration", e))?;
        tx.batch_execute(SCHEMA_SQL)
            .await
            .map_err(|e| map_error("creating the fence schema", e))?;
        tx.commit()
            .await
            .map_err(|e| map_error("committing the migration", e))?;
        Ok(())
    }

    /// Admits `write` inside `tx` if its token is at least the highest token
    /// the resource has admitted, and records it; with an idempotency key,
    /// records the key too.
    ///
    /// - `Ok(Admission::Admitted)`: perform the write in `tx`, then commit.
    /// - `Ok(Admission::Duplicate { .. })`: the key was recorded before (the
    ///   write is done): skip it.
    /// - `Err(FenceError::StaleToken { .. })`: a newer holder wrote; the
    ///   transaction has failed in the server and can only roll back (even a
    ///   `COMMIT` rolls it back), so nothing written in it before this call
    ///   survives either.
    ///
    /// The token is checked before the key: a retry of a write that was done,
    /// arriving after a newer holder wrote, is refused as stale (its holder
    /// has lost the lock), not reported as a duplicate.
    pub async fn admit(
        &self,
        tx: &Transaction<'_>,
        write: &FencedWrite,
    ) -> Result<Admission, FenceError> {
        let outcome = self.try_admit(tx, write).await;
        metrics::record(Storage::Postgres, &outcome);
        outcome
    }

    async fn try_admit(
        &self,
        tx: &Transaction<'_>,
        write: &FencedWrite,
    ) -> Result<Admission, FenceError> {
        let token = bigint(write.token())?;
        let resource = write.resource();
        let key = write.key();
        let rows = tx
            .query_typed(
                "SELECT distlock_fence_admit($1, $2, $3)",
                &[
                    (&resource, Type::TEXT),
                    (&token, Type::INT8),
                    (&key, Type::TEXT),
                ],
            )
            .await;
        let rows = match rows {
            Ok(rows) => rows,
            Err(e) if e.code().map(SqlState::code) == Some(STALE_TOKEN_SQLSTATE) => {
                return Err(stale(write, &e));
            }
            Err(e) => return Err(map_error("admitting a fenced write", e).into()),
        };
        let first: Option<i64> = rows
            .first()
            .ok_or_else(|| {
                LockError::new(
                    LockErrorKind::Protocol,
                    "postgres: no row from distlock_fence_admit",
                )
            })?
            .try_get(0)
            .map_err(|e| map_error("reading distlock_fence_admit", e))?;
        Ok(match first {
            None => Admission::Admitted,
            Some(t) => Admission::Duplicate {
                token: FencingToken::new(t as u64),
            },
        })
    }

    /// The highest token `resource` has admitted (committed), if any.
    pub async fn highest(
        &self,
        client: &impl GenericClient,
        resource: &str,
    ) -> Result<Option<FencingToken>, FenceError> {
        let row = client
            .query_opt(
                "SELECT token FROM distlock_fence WHERE resource = $1",
                &[&resource],
            )
            .await
            .map_err(|e| map_error("reading a fence", e))?;
        let token: Option<i64> = match row {
            Some(row) => row
                .try_get(0)
                .map_err(|e| map_error("reading a fence", e))?,
            None => None,
        };
        Ok(token.map(|t| FencingToken::new(t as u64)))
    }

    /// Deletes the idempotency keys recorded more than `age` ago; returns how
    /// many. A retry older than that is no longer recognised as a duplicate.
    pub async fn forget_keys_older_than(
        &self,
        client: &impl GenericClient,
        age: Duration,
    ) -> Result<u64, FenceError> {
        let seconds = age.as_secs_f64();
        client
            .execute(
                "DELETE FROM distlock_fence_writes \
                 WHERE recorded_at < now() - make_interval(secs => $1)",
                &[&seconds],
            )
            .await
            .map_err(|e| map_error("forgetting idempotency keys", e).into())
    }
}

/// PostgreSQL's `bigint` is signed: tokens above `i64::MAX` cannot be stored.
fn bigint(token: FencingToken) -> Result<i64, FenceError> {
    i64::try_from(token.get()).map_err(|_| {
        LockError::invalid(format!(
            "fencing token {token} does not fit PostgreSQL's bigint (at most {})",
            i64::MAX
        ))
        .into()
    })
}

/// The stale-token error from `distlock_fence_admit`'s exception, whose
/// DETAIL ends with the newer token.
fn stale(write: &FencedWrite, e: &tokio_postgres::Error) -> FenceError {
    let newer = e
        .as_db_error()
        .and_then(|db| db.detail())
        .and_then(|d| d.rsplit(' ').next())
        .and_then(|n| n.parse::<u64>().ok());
    match newer {
        Some(newer) => write.stale(FencingToken::new(newer)),
        None => LockError::new(
            LockErrorKind::Protocol,
            "postgres: distlock_fence_admit refused a stale token without naming the newer one",
        )
        .into(),
    }
}

/// The one place where `tokio_postgres` errors become [`LockError`]s.
///
/// - a closed connection, I/O errors, SQLSTATE class 08 (connection), 57P01-03
///   (shutdown, cannot connect now), 40001/40P01 (serialization failure,
///   deadlock: retry the transaction) -> [`LockErrorKind::Unavailable`];
/// - 57014 (statement timeout, cancel), 55P03 (lock timeout) -> [`LockErrorKind::Timeout`];
/// - class 28 (authentication), 42501 (privilege) -> [`LockErrorKind::Unauthorized`];
/// - 42P01/42883 (the schema is missing: run [`PgFence::migrate`]), 25P02 (the
///   transaction had already failed), class 22 (data) -> [`LockErrorKind::InvalidArgument`];
/// - anything else -> [`LockErrorKind::Protocol`].
pub(crate) fn map_error(what: &str, err: tokio_postgres::Error) -> LockError {
    let code = err.code().map(SqlState::code).unwrap_or("");
    let is_io = std::error::Error::source(&err).is_some_and(|s| s.is::<std::io::Error>());
    let (kind, hint) = match code {
        "" if err.is_closed() || is_io => (LockErrorKind::Unavailable, ""),
        "" => (LockErrorKind::Protocol, ""),
        "40001" | "40P01" => (LockErrorKind::Unavailable, " (retry the transaction)"),
        "57P01" | "57P02" | "57P03" => (LockErrorKind::Unavailable, ""),
        c if c.starts_with("08") => (LockErrorKind::Unavailable, ""),
        "57014" | "55P03" => (LockErrorKind::Timeout, ""),
        "42501" => (LockErrorKind::Unauthorized, ""),
        c if c.starts_with("28") => (LockErrorKind::Unauthorized, ""),
        "42P01" | "42883" => (
            LockErrorKind::InvalidArgument,
            " (create the fence schema first: PgFence::migrate or SCHEMA_SQL)",
        ),
        "25P02" => (
            LockErrorKind::InvalidArgument,
            " (the transaction had already failed: roll it back)",
        ),
        c if c.starts_with("22") => (LockErrorKind::InvalidArgument, ""),
        _ => (LockErrorKind::Protocol, ""),
    };
    LockError::new(kind, format!("postgres: {what}{hint}")).with_source(err)
}
