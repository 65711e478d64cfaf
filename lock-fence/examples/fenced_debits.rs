//! Workers in separate processes debit bank accounts in PostgreSQL under an
//! etcd lock per account. One worker stops itself (SIGSTOP, like a long GC
//! pause) between reading a balance and writing it, for longer than its
//! lease; another worker takes the lock and debits the account meanwhile.
//! When the paused worker wakes up and writes, PostgreSQL refuses its stale
//! token and no debit is lost.
//!
//! ```text
//! cargo run -p lock-fence --example fenced_debits
//! ```
//!
//! It starts its own etcd and PostgreSQL on loopback (lock-testbed) and runs
//! itself again as the workers.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockName};
use lock_etcd::{EtcdConfig, EtcdLock};
use lock_fence::{Admission, FenceError, FencedWrite, PgFence};
use lock_testbed::{EtcdCluster, PostgresServer};
use tokio_postgres::{Client, NoTls};

const WORKERS: usize = 3;
const ACCOUNTS: i64 = 3;
const DEBITS_PER_WORKER: i64 = 12;
const OPENING_BALANCE: i64 = 1_000;
/// The lease of every worker's etcd session; the pause lasts longer.
const LEASE_TTL: Duration = Duration::from_secs(2);
const PAUSE: Duration = Duration::from_secs(5);

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match args.as_slice() {
        [mode, id, etcd, pg] if mode == "worker" => runtime.block_on(worker(id.parse()?, etcd, pg)),
        [] => coordinator(&runtime),
        _ => Err("usage: fenced_debits (the workers are started by the example itself)".into()),
    }
}

/// Starts the servers and the worker processes, resumes the paused one after
/// its lease has expired, then checks every balance against the ledger.
fn coordinator(runtime: &tokio::runtime::Runtime) -> Result<()> {
    let etcd = EtcdCluster::start(1)?;
    let pg = PostgresServer::start()?;
    runtime.block_on(setup(&pg.url()))?;
    println!(
        "etcd on {}, PostgreSQL on {}",
        etcd.endpoints()[0],
        pg.addr()
    );

    let exe = std::env::current_exe()?;
    let mut workers: Vec<Child> = (0..WORKERS)
        .map(|id| {
            Command::new(&exe)
                .args(["worker", &id.to_string(), &etcd.endpoints()[0], &pg.url()])
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<std::io::Result<_>>()?;
    let readers: Vec<_> = workers
        .iter_mut()
        .map(|w| {
            let pid = w.id();
            let out = BufReader::new(w.stdout.take().expect("piped stdout"));
            std::thread::spawn(move || relay(pid, out))
        })
        .collect();
    let mut refused = 0;
    for (worker, reader) in workers.iter_mut().zip(readers) {
        refused += reader
            .join()
            .map_err(|_| "a worker's output reader panicked")?;
        let status = worker.wait()?;
        if !status.success() {
            return Err(format!("worker {} failed: {status}", worker.id()).into());
        }
    }
    runtime.block_on(check(&pg.url(), refused))
}

/// Prints a worker's lines; when it says it stopped itself, waits until the
/// lease must have expired and sends SIGCONT. Returns how many of its writes
/// were refused.
fn relay(pid: u32, out: impl BufRead) -> usize {
    let mut refused = 0;
    for line in out.lines().map_while(std::io::Result::ok) {
        println!("{line}");
        if line.contains("stopping itself") {
            std::thread::sleep(PAUSE);
            println!("-- resuming worker pid {pid} after {PAUSE:?} (its lease was {LEASE_TTL:?})");
            // SAFETY: plain syscall to a child process we started and have not reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
        }
        refused += usize::from(line.contains("REFUSED"));
    }
    refused
}

async fn connect(url: &str) -> Result<Client> {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(conn);
    Ok(client)
}

async fn setup(url: &str) -> Result<()> {
    let mut db = connect(url).await?;
    PgFence::new().migrate(&mut db).await?;
    db.batch_execute(
        "CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL);
         CREATE TABLE ledger (id bigserial PRIMARY KEY, account bigint NOT NULL,
                              amount bigint NOT NULL, worker int NOT NULL, token bigint NOT NULL);",
    )
    .await?;
    for id in 0..ACCOUNTS {
        db.execute(
            "INSERT INTO accounts VALUES ($1, $2)",
            &[&id, &OPENING_BALANCE],
        )
        .await?;
    }
    Ok(())
}

/// One worker: lock an account, read its balance, write balance - 1 and a
/// ledger row in one fenced transaction, release; worker 0 stops itself once
/// between its read and its write.
async fn worker(id: i32, etcd: &str, pg: &str) -> Result<()> {
    let lock = EtcdLock::connect(EtcdConfig::new([etcd]).lease_ttl(LEASE_TTL)).await?;
    let mut db = connect(pg).await?;
    let fence = PgFence::new();
    let opts = AcquireOptions::new()
        .ttl(LEASE_TTL)
        .wait(Duration::from_secs(30));
    for i in 0..DEBITS_PER_WORKER {
        let account = (i + i64::from(id)) % ACCOUNTS;
        let name = LockName::new(format!("account-{account}"))?;
        let guard = lock.acquire(&name, &opts).await?;
        let row = db
            .query_one("SELECT balance FROM accounts WHERE id = $1", &[&account])
            .await?;
        let balance: i64 = row.get(0);
        if id == 0 && i == 1 {
            println!(
                "worker {id}: read balance {balance} of account {account} under token {}; stopping itself",
                guard.fencing_token().map_or(0, |t| t.get())
            );
            // A pause the process cannot see coming: GC, swap, a stopped VM.
            // SAFETY: plain syscall on our own process.
            unsafe { libc::raise(libc::SIGSTOP) };
            println!(
                "worker {id}: woke up, guard says {:?}; writing anyway",
                guard.state()
            );
        }
        let write = FencedWrite::for_guard(&guard)?.idempotency_key(format!("w{id}-debit-{i}"))?;
        let tx = db.transaction().await?;
        match fence.admit(&tx, &write).await {
            Ok(Admission::Admitted) => {
                tx.execute(
                    "UPDATE accounts SET balance = $2 WHERE id = $1",
                    &[&account, &(balance - 1)],
                )
                .await?;
                tx.execute(
                    "INSERT INTO ledger (account, amount, worker, token) VALUES ($1, 1, $2, $3)",
                    &[&account, &id, &(write.token().get() as i64)],
                )
                .await?;
                tx.commit().await?;
            }
            Ok(Admission::Duplicate { .. }) => {}
            Err(FenceError::StaleToken { token, newer, .. }) => println!(
                "worker {id}: REFUSED debit of account {account}: token {token} is stale, \
                 PostgreSQL already admitted {newer}"
            ),
            Err(e) => return Err(e.into()),
        }
        drop(guard);
    }
    println!("worker {id}: done");
    Ok(())
}

/// Every account's balance must equal the opening balance minus its ledger.
async fn check(url: &str, refused: usize) -> Result<()> {
    let db = connect(url).await?;
    let rows = db
        .query(
            "SELECT a.id, a.balance, count(l.id) FROM accounts a \
             LEFT JOIN ledger l ON l.account = a.id GROUP BY a.id, a.balance ORDER BY a.id",
            &[],
        )
        .await?;
    println!("\naccount | balance | debits in the ledger | lost debits");
    let mut lost = 0;
    for row in rows {
        let (id, balance, debits): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
        let missing = OPENING_BALANCE - debits - balance;
        lost += missing.abs();
        println!("{id:>7} | {balance:>7} | {debits:>20} | {missing:>11}");
    }
    println!("stale writes refused by PostgreSQL: {refused}");
    if lost != 0 || refused == 0 {
        return Err(format!(
            "expected 0 lost debits and a refused stale write; got {lost} lost, {refused} refused"
        )
        .into());
    }
    println!("no debit lost: the paused worker's late write was refused");
    Ok(())
}
