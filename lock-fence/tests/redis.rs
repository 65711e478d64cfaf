//! RedisFence against a real Redis started by the testbed.

mod support;

use std::time::Duration;

use lock_core::{async_trait, LockErrorKind};
use lock_fence::{FenceError, FencedWrite, RedisFence};
use lock_testbed::{shared_redis, unique_name, Proxy, RedisServer, RespValue};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use support::{assert_stale, fenced, token, Store};

async fn connect(url: String) -> ConnectionManager {
    let client = redis::Client::open(url).unwrap();
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(Duration::from_millis(500)))
        .set_connection_timeout(Some(Duration::from_millis(500)))
        .set_number_of_retries(0);
    ConnectionManager::new_with_config(client, config)
        .await
        .unwrap()
}

/// The shared cases' adapter: a fenced SET of the key named like the resource.
struct Redis(ConnectionManager);

#[async_trait]
impl Store for Redis {
    async fn write(&self, write: &FencedWrite, value: &str) -> Result<(), FenceError> {
        let mut conn = self.0.clone();
        RedisFence::new()
            .set(&mut conn, write, write.resource(), value)
            .await
    }
    async fn read(&self, resource: &str) -> Option<String> {
        let mut conn = self.0.clone();
        redis::cmd("GET")
            .arg(resource)
            .query_async(&mut conn)
            .await
            .unwrap()
    }
}

async fn store() -> Redis {
    Redis(connect(shared_redis().unwrap().url()).await)
}

support::store_cases!(store().await, (1 << 53) + 1, u64::MAX);

/// A fenced hash field update shares the resource's fence with SET; a hash
/// write to a key of another type records no token.
#[tokio::test]
async fn hash_fields_are_fenced_too() {
    let Redis(mut conn) = store().await;
    let fence = RedisFence::new();
    let (r, key) = (unique_name("hash"), unique_name("hash-key"));
    fence
        .hset(&mut conn, &fenced(&r, 4), &key, "balance", "100")
        .await
        .unwrap();
    fence
        .set(&mut conn, &fenced(&r, 5), &format!("{key}:note"), "x")
        .await
        .unwrap();
    assert_stale(
        fence
            .hset(&mut conn, &fenced(&r, 4), &key, "balance", "90")
            .await,
        &r,
        4,
        5,
    );
    fence
        .hset(&mut conn, &fenced(&r, 5), &key, "balance", "80")
        .await
        .unwrap();
    let balance: String = redis::cmd("HGET")
        .arg(&key)
        .arg("balance")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(balance, "80");

    let wrong = unique_name("string-key");
    let other = unique_name("other");
    let _: () = redis::cmd("SET")
        .arg(&wrong)
        .arg("s")
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = fence
        .hset(&mut conn, &fenced(&other, 9), &wrong, "f", "v")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), LockErrorKind::Protocol, "{err}");
    assert_eq!(fence.highest(&mut conn, &other).await.unwrap(), None);
    assert_eq!(fence.highest(&mut conn, &r).await.unwrap(), Some(token(5)));
}

/// The connection breaks while the script runs or its reply travels: the
/// outcome is unknown (a retryable error); the holder's retry with the same
/// token is admitted and leaves the same value (a SET is idempotent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_loss_mid_write() {
    let redis = RedisServer::start().unwrap();
    let proxy = Proxy::start(redis.addr()).unwrap();
    let mut lossy = connect(proxy.redis_url()).await;
    let fence = RedisFence::new();
    let r = unique_name("conn-loss");
    let write = fenced(&r, 30);
    // Load the script first (EVALSHA would otherwise answer NOSCRIPT and never run).
    let warm = unique_name("warm");
    fence
        .set(&mut lossy, &fenced(&warm, 1), &warm, "w")
        .await
        .unwrap();
    proxy.set_reply_delay(Duration::from_secs(30));
    let err = fence.set(&mut lossy, &write, &r, "v").await.unwrap_err();
    assert!(err.is_retryable() && !err.is_stale(), "{err}");
    proxy.reset_all();
    proxy.heal();
    // It did reach the server.
    assert_eq!(
        redis.cmd(&["GET", &r]).unwrap(),
        RespValue::Bulk(Some(b"v".to_vec()))
    );
    let mut conn = connect(redis.url()).await;
    fence.set(&mut conn, &write, &r, "v").await.unwrap();
    assert_eq!(fence.highest(&mut conn, &r).await.unwrap(), Some(token(30)));
    assert_stale(
        fence.set(&mut conn, &fenced(&r, 29), &r, "w").await,
        &r,
        29,
        30,
    );
}

/// Idempotency keys are PostgreSQL's: asking Redis for one is an error, not a silent no-op.
#[tokio::test]
async fn idempotency_keys_are_refused() {
    let Redis(mut conn) = store().await;
    let write = fenced("r", 1).idempotency_key("k").unwrap();
    let err = RedisFence::new()
        .set(&mut conn, &write, "k", "v")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), LockErrorKind::Unsupported, "{err}");
}
