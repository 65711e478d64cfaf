//! The fenced register kept in a real PostgreSQL: every write is a
//! transaction that passes [`PgFence::admit`] before it updates the row.
//!
//! The checker's claim rule in PostgreSQL: a holder's claim counts once the
//! store has decided on its claim write (admitted and committed, or refused).
//! Both that decision and the check of an older holder's write ("was a later
//! holder already writing?") happen while the transaction holds the
//! resource's fence row, so they are ordered: the checker counts an accepted
//! stale write exactly when PostgreSQL admitted a write after a later holder's
//! claim was decided, never for a write that merely raced a claim in flight.

use std::sync::Mutex;

use lock_core::FencingToken;
use lock_fence::{Admission, FenceError, FencedWrite, PgFence};
use tokio_postgres::{Client, NoTls};

const REGISTERS: &str = "CREATE TABLE IF NOT EXISTS distlock_safety_registers (
    name text PRIMARY KEY, value bigint NOT NULL DEFAULT 0)";

/// A connection pool to one PostgreSQL database holding the fenced registers.
#[derive(Debug)]
pub struct PgRegisters {
    url: String,
    fence: PgFence,
    idle: Mutex<Vec<Client>>,
}

impl PgRegisters {
    /// Connects to `url`, creates the fence schema and the registers table.
    pub async fn connect(url: impl Into<String>) -> Result<Self, tokio_postgres::Error> {
        let registers = Self {
            url: url.into(),
            fence: PgFence::new(),
            idle: Mutex::new(Vec::new()),
        };
        let mut client = registers.client().await?;
        registers
            .fence
            .migrate(&mut client)
            .await
            .expect("create the fence schema");
        client.batch_execute(REGISTERS).await?;
        registers.put_back(client);
        Ok(registers)
    }

    async fn client(&self) -> Result<Client, tokio_postgres::Error> {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        if let Some(client) = idle.filter(|c| !c.is_closed()) {
            return Ok(client);
        }
        let (client, conn) = tokio_postgres::connect(&self.url, NoTls).await?;
        tokio::spawn(conn);
        Ok(client)
    }

    fn put_back(&self, client: Client) {
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(client);
    }

    /// The register's value (0 before the first write).
    pub async fn read(&self, name: &str) -> u64 {
        let client = self.client().await.expect("connect to PostgreSQL");
        let row = client
            .query_opt(
                "SELECT value FROM distlock_safety_registers WHERE name = $1",
                &[&name],
            )
            .await
            .expect("read a register");
        self.put_back(client);
        row.map_or(0, |r| r.get::<_, i64>(0) as u64)
    }

    /// One fenced transaction on register `name` under `token`: admit, call
    /// `admitted` (the checker, while the fence row is held), set the value
    /// when `value` is given, commit. `true` when admitted, `false` when
    /// refused as stale (the transaction rolled back).
    pub async fn write(
        &self,
        name: &str,
        token: FencingToken,
        value: Option<u64>,
        admitted: impl FnOnce(),
    ) -> bool {
        let mut client = self.client().await.expect("connect to PostgreSQL");
        let write = FencedWrite::new(name, token).expect("a register name is a valid resource");
        let outcome = {
            let tx = client.transaction().await.expect("begin");
            match self.fence.admit(&tx, &write).await {
                Ok(Admission::Admitted) => {
                    admitted();
                    if let Some(v) = value {
                        tx.execute(
                            "INSERT INTO distlock_safety_registers (name, value) VALUES ($1, $2) \
                         ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                            &[&name, &(v as i64)],
                        )
                        .await
                        .expect("write a register");
                    }
                    tx.commit().await.expect("commit");
                    true
                }
                Ok(Admission::Duplicate { .. }) => unreachable!("no idempotency key was given"),
                Err(FenceError::StaleToken { .. }) => false,
                Err(e) => panic!("fenced write to {name}: {e}"),
            }
        };
        self.put_back(client);
        outcome
    }
}
