//! PgFence against a real PostgreSQL server started by the testbed.

mod support;

use std::sync::OnceLock;
use std::time::Duration;

use lock_core::{async_trait, LockErrorKind};
use lock_fence::{Admission, FenceError, FencedWrite, PgFence};
use lock_testbed::{unique_name, PostgresServer, Proxy};
use support::{assert_stale, fenced, token, Store};
use tokio_postgres::{Client, NoTls};

/// One server for this test binary (stopped at exit), the schema migrated once per test.
fn server() -> &'static PostgresServer {
    static SERVER: OnceLock<PostgresServer> = OnceLock::new();
    SERVER.get_or_init(|| PostgresServer::start().expect("start PostgreSQL"))
}

async fn connect_to(url: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

/// A client with the fence schema and the test table in place (created once:
/// concurrent `CREATE TABLE IF NOT EXISTS` can collide in PostgreSQL).
async fn client() -> Client {
    static SCHEMA: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    let mut client = connect_to(&server().url()).await;
    SCHEMA
        .get_or_init(|| async {
            PgFence::new().migrate(&mut client).await.unwrap();
            client
                .batch_execute("CREATE TABLE kv (resource text PRIMARY KEY, value text NOT NULL)")
                .await
                .unwrap();
        })
        .await;
    client
}

/// Writes `value` to `kv` in the same transaction as the fence check.
async fn fenced_upsert(
    client: &mut Client,
    write: &FencedWrite,
    value: &str,
) -> Result<Admission, FenceError> {
    let tx = client.transaction().await.unwrap();
    let admission = PgFence::new().admit(&tx, write).await?;
    if admission == Admission::Admitted {
        tx.execute(
            "INSERT INTO kv VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET value = $2",
            &[&write.resource(), &value],
        )
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    Ok(admission)
}

async fn read(client: &Client, resource: &str) -> Option<String> {
    client
        .query_opt("SELECT value FROM kv WHERE resource = $1", &[&resource])
        .await
        .unwrap()
        .map(|row| row.get(0))
}

/// The shared cases' adapter: a fresh connection per write, like separate holders.
struct Pg;

#[async_trait]
impl Store for Pg {
    async fn write(&self, write: &FencedWrite, value: &str) -> Result<(), FenceError> {
        fenced_upsert(&mut client().await, write, value)
            .await
            .map(drop)
    }
    async fn read(&self, resource: &str) -> Option<String> {
        read(&client().await, resource).await
    }
}

support::store_cases!(Pg, i64::MAX as u64);

/// A stale token fails the whole transaction in the server: what it wrote
/// before the check is gone even if the caller commits anyway.
#[tokio::test]
async fn a_stale_token_fails_the_transaction() {
    let mut c = client().await;
    let r = unique_name("fails-tx");
    fenced_upsert(&mut c, &fenced(&r, 7), "seven")
        .await
        .unwrap();
    let tx = c.transaction().await.unwrap();
    tx.execute("UPDATE kv SET value = 'sneaked' WHERE resource = $1", &[&r])
        .await
        .unwrap();
    let err = PgFence::new().admit(&tx, &fenced(&r, 6)).await.unwrap_err();
    assert!(err.is_stale() && !err.is_retryable(), "{err}");
    assert_eq!(err.kind(), LockErrorKind::Lost);
    let next = tx.execute("SELECT 1", &[]).await.unwrap_err();
    assert_eq!(
        next.code().unwrap().code(),
        "25P02",
        "the transaction is failed"
    );
    tx.commit().await.unwrap(); // COMMIT of a failed transaction rolls it back
    assert_eq!(read(&c, &r).await.as_deref(), Some("seven"));
    assert_eq!(
        PgFence::new().highest(&c, &r).await.unwrap(),
        Some(token(7))
    );
}

/// Idempotency: the same key is admitted once, later tries are duplicates; a
/// key whose transaction rolled back was never recorded.
#[tokio::test]
async fn an_idempotency_key_is_admitted_once() {
    let mut c = client().await;
    let r = unique_name("idem");
    let once = fenced(&r, 3).idempotency_key("debit-1").unwrap();
    assert_eq!(
        fenced_upsert(&mut c, &once, "a").await.unwrap(),
        Admission::Admitted
    );
    for _ in 0..2 {
        assert_eq!(
            fenced_upsert(&mut c, &once, "b").await.unwrap(),
            Admission::Duplicate { token: token(3) }
        );
    }
    // The same operation under a newer holder is still the same operation.
    let newer = fenced(&r, 4).idempotency_key("debit-1").unwrap();
    assert_eq!(
        fenced_upsert(&mut c, &newer, "c").await.unwrap(),
        Admission::Duplicate { token: token(3) }
    );
    assert_eq!(read(&c, &r).await.as_deref(), Some("a"));

    let rolled_back = fenced(&r, 4).idempotency_key("debit-2").unwrap();
    let tx = c.transaction().await.unwrap();
    assert_eq!(
        PgFence::new().admit(&tx, &rolled_back).await.unwrap(),
        Admission::Admitted
    );
    tx.rollback().await.unwrap();
    assert_eq!(
        fenced_upsert(&mut c, &rolled_back, "d").await.unwrap(),
        Admission::Admitted
    );
    assert_eq!(read(&c, &r).await.as_deref(), Some("d"));

    // Forgotten keys are admitted again.
    let fence = PgFence::new();
    assert!(
        fence
            .forget_keys_older_than(&c, Duration::from_secs(3600))
            .await
            .unwrap()
            < 2
    );
    assert!(
        fence
            .forget_keys_older_than(&c, Duration::ZERO)
            .await
            .unwrap()
            >= 2
    );
    assert_eq!(
        fenced_upsert(&mut c, &newer, "e").await.unwrap(),
        Admission::Admitted
    );
}

/// Two open transactions with different tokens: the second waits on the
/// first's fence row (no check-then-write race); the older token loses
/// whichever order they started in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transactions_are_serialized_by_the_fence_row() {
    for (first, second) in [(10u64, 11u64), (11, 10)] {
        let (mut c1, mut c2) = (client().await, client().await);
        let r = unique_name("two-tx");
        fenced_upsert(&mut c1, &fenced(&r, 1), "start")
            .await
            .unwrap();

        let tx1 = c1.transaction().await.unwrap();
        assert_eq!(
            PgFence::new()
                .admit(&tx1, &fenced(&r, first))
                .await
                .unwrap(),
            Admission::Admitted
        );
        let r2 = r.clone();
        let waiter = tokio::spawn(async move {
            let tx2 = c2.transaction().await.unwrap();
            let got = PgFence::new().admit(&tx2, &fenced(&r2, second)).await;
            if got.is_ok() {
                tx2.commit().await.unwrap();
            }
            got
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !waiter.is_finished(),
            "the second transaction passed a held fence row"
        );
        tx1.commit().await.unwrap();
        let got = waiter.await.unwrap();
        if second > first {
            assert_eq!(got.unwrap(), Admission::Admitted);
        } else {
            assert_stale(got.map(drop), &r, second, first);
        }
        let highest = PgFence::new().highest(&c1, &r).await.unwrap();
        assert_eq!(highest, Some(token(first.max(second))));
    }
}

/// The connection dies between the check and COMMIT: the server rolls the
/// transaction back (token, key and write), the fence row is free at once,
/// and the holder's retry (same token, same key) is admitted exactly once,
/// even when the retry's COMMIT reply is lost too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_loss_mid_transaction() {
    let c = client().await;
    let r = unique_name("conn-loss");
    let write = fenced(&r, 20).idempotency_key("op-1").unwrap();
    let proxy = Proxy::start(server().addr()).unwrap();
    let url = format!("postgres://distlock@{}/postgres", proxy.addr());

    // Lost before COMMIT.
    let mut lossy = connect_to(&url).await;
    let tx = lossy.transaction().await.unwrap();
    assert_eq!(
        PgFence::new().admit(&tx, &write).await.unwrap(),
        Admission::Admitted
    );
    tx.execute("INSERT INTO kv VALUES ($1, 'lost')", &[&r])
        .await
        .unwrap();
    proxy.reset_all();
    let err = tx.commit().await.unwrap_err();
    assert!(err.is_closed(), "{err}");
    // The server noticed: the fence row is free and nothing was recorded.
    let fence = PgFence::new();
    let free = tokio::time::timeout(Duration::from_secs(5), fence.highest(&c, &r));
    assert_eq!(free.await.unwrap().unwrap(), None);
    assert_eq!(read(&c, &r).await, None);

    // The retry commits, but its reply is lost: the caller cannot tell.
    let mut lossy = connect_to(&url).await;
    let tx = lossy.transaction().await.unwrap();
    assert_eq!(
        PgFence::new().admit(&tx, &write).await.unwrap(),
        Admission::Admitted
    );
    tx.execute("INSERT INTO kv VALUES ($1, 'once')", &[&r])
        .await
        .unwrap();
    proxy.set_reply_delay(Duration::from_secs(30));
    let commit = tokio::time::timeout(Duration::from_millis(500), tx.commit()).await;
    assert!(commit.is_err(), "the COMMIT reply was held back");
    proxy.reset_all();
    proxy.heal();

    // The next retry learns it was done.
    let mut again = client().await;
    assert_eq!(
        fenced_upsert(&mut again, &write, "twice").await.unwrap(),
        Admission::Duplicate { token: token(20) }
    );
    assert_eq!(read(&c, &r).await.as_deref(), Some("once"));
}

/// The store's errors say what to do: no schema -> migrate; a token beyond
/// bigint -> invalid; a server-side lock timeout -> Timeout.
#[tokio::test]
async fn errors_name_the_fix() {
    let mut bare = connect_to(&server().url()).await;
    bare.batch_execute("CREATE SCHEMA IF NOT EXISTS empty; SET search_path TO empty")
        .await
        .unwrap();
    let tx = bare.transaction().await.unwrap();
    let err = PgFence::new()
        .admit(&tx, &fenced("r", 1))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("PgFence::migrate"), "{err}");
    drop(tx);

    let mut c = client().await;
    let tx = c.transaction().await.unwrap();
    let err = PgFence::new()
        .admit(&tx, &fenced("r", i64::MAX as u64 + 1))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
    drop(tx);

    let r = unique_name("lock-timeout");
    let (mut holder, mut waiter) = (client().await, client().await);
    let held = holder.transaction().await.unwrap();
    PgFence::new().admit(&held, &fenced(&r, 5)).await.unwrap();
    let tx = waiter.transaction().await.unwrap();
    tx.batch_execute("SET LOCAL lock_timeout = '200ms'")
        .await
        .unwrap();
    let err = PgFence::new().admit(&tx, &fenced(&r, 6)).await.unwrap_err();
    assert_eq!(err.kind(), LockErrorKind::Timeout, "{err}");
    assert!(err.is_retryable());
}

/// Admitted, duplicate and stale writes are counted with a `storage` label
/// and no resource label.
#[tokio::test]
async fn outcomes_are_counted_by_storage() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let mut c = client().await;
    let r = unique_name("metrics");
    let keyed = fenced(&r, 2).idempotency_key("k").unwrap();
    fenced_upsert(&mut c, &keyed, "v").await.unwrap();
    fenced_upsert(&mut c, &keyed, "v").await.unwrap();
    assert!(fenced_upsert(&mut c, &fenced(&r, 1), "old").await.is_err());

    let mut seen = Vec::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let labels: Vec<String> = key
            .key()
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        assert!(
            labels.iter().all(|l| !l.starts_with("resource")),
            "{labels:?}"
        );
        if let DebugValue::Counter(n) = value {
            seen.push((key.key().name().to_string(), labels.join(","), n));
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        vec![
            (
                "distlock_fenced_writes_total".into(),
                "storage=postgres,outcome=admitted".into(),
                1
            ),
            (
                "distlock_fenced_writes_total".into(),
                "storage=postgres,outcome=duplicate".into(),
                1
            ),
            (
                "distlock_fencing_rejects_total".into(),
                "storage=postgres".into(),
                1
            ),
        ]
    );
}
