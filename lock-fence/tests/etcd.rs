//! EtcdFence against a real etcd started by the testbed.

mod support;

use std::time::Duration;

use etcd_client::{Client, ConnectOptions, KvClient};
use lock_core::{async_trait, LockErrorKind};
use lock_fence::{EtcdFence, FenceError, FencedWrite};
use lock_testbed::{shared_etcd, unique_name, EtcdCluster, Proxy};
use support::{assert_stale, fenced, token, Store};

async fn connect(endpoints: Vec<String>) -> KvClient {
    let options = ConnectOptions::new()
        .with_timeout(Duration::from_millis(500))
        .with_connect_timeout(Duration::from_secs(2));
    Client::connect(endpoints, Some(options))
        .await
        .unwrap()
        .kv_client()
}

/// The shared cases' adapter: a fenced put of the key named like the resource.
struct Etcd(KvClient);

#[async_trait]
impl Store for Etcd {
    async fn write(&self, write: &FencedWrite, value: &str) -> Result<(), FenceError> {
        let mut kv = self.0.clone();
        EtcdFence::new()
            .put(&mut kv, write, write.resource(), value)
            .await
    }
    async fn read(&self, resource: &str) -> Option<String> {
        let mut kv = self.0.clone();
        let resp = kv.get(resource, None).await.unwrap();
        resp.kvs()
            .first()
            .map(|kv| kv.value_str().unwrap().to_string())
    }
}

async fn store() -> Etcd {
    Etcd(connect(shared_etcd().unwrap().endpoints()).await)
}

support::store_cases!(store().await, (1 << 53) + 1, u64::MAX);

/// Tokens of different lengths compare as numbers, not as text (9 < 10).
#[tokio::test]
async fn tokens_compare_as_numbers() {
    let Etcd(mut kv) = store().await;
    let fence = EtcdFence::new();
    let r = unique_name("digits");
    fence
        .put(&mut kv, &fenced(&r, 10), r.as_str(), "ten")
        .await
        .unwrap();
    assert_stale(
        fence.put(&mut kv, &fenced(&r, 9), r.as_str(), "nine").await,
        &r,
        9,
        10,
    );
    assert_eq!(fence.highest(&mut kv, &r).await.unwrap(), Some(token(10)));
}

/// The connection breaks while the transaction's reply travels: the outcome
/// is unknown (a retryable error); the retry with the same token is admitted
/// and leaves the same value (a put is idempotent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_loss_mid_write() {
    let cluster = EtcdCluster::start(1).unwrap();
    let endpoint = cluster.endpoints()[0].clone();
    let proxy = Proxy::start(endpoint.parse().unwrap()).unwrap();
    let mut lossy = connect(vec![proxy.addr().to_string()]).await;
    let fence = EtcdFence::new();
    let r = unique_name("conn-loss");
    let write = fenced(&r, 40);
    proxy.set_reply_delay(Duration::from_secs(30));
    let err = fence
        .put(&mut lossy, &write, r.as_str(), "v")
        .await
        .unwrap_err();
    assert!(err.is_retryable() && !err.is_stale(), "{err}");
    proxy.reset_all();
    proxy.heal();
    let mut kv = connect(vec![endpoint]).await;
    let done = kv.get(r.as_str(), None).await.unwrap();
    assert_eq!(done.kvs()[0].value(), b"v", "the put reached the server");
    fence.put(&mut kv, &write, r.as_str(), "v").await.unwrap();
    assert_eq!(fence.highest(&mut kv, &r).await.unwrap(), Some(token(40)));
    assert_stale(
        fence.put(&mut kv, &fenced(&r, 39), r.as_str(), "w").await,
        &r,
        39,
        40,
    );
}

#[tokio::test]
async fn idempotency_keys_are_refused() {
    let Etcd(mut kv) = store().await;
    let write = fenced("r", 1).idempotency_key("k").unwrap();
    let err = EtcdFence::new()
        .put(&mut kv, &write, "k", "v")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), LockErrorKind::Unsupported, "{err}");
}
