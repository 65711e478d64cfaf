//! Tokens from every fencing backend fence a store; a Redlock guard, which
//! has none, is refused with a message that names the backends to use.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, DistributedLockExt, LockErrorKind, LockName};
use lock_etcd::{EtcdConfig, EtcdLock};
use lock_fence::{FencedWrite, RedisFence};
use lock_redis::{RedisLock, RedisLockConfig};
use lock_redlock::{RedlockConfig, RedlockLock};
use lock_testbed::{shared_etcd, shared_redis, shared_redis_set, shared_zk, unique_name};
use lock_zk::{ZkConfig, ZkLock};

async fn locks() -> Vec<(&'static str, Arc<dyn DistributedLock>)> {
    let redis = RedisLock::connect(RedisLockConfig::new(shared_redis().unwrap().url()));
    let etcd = EtcdLock::connect(EtcdConfig::new(shared_etcd().unwrap().endpoints()));
    let zk = ZkLock::connect(ZkConfig::new(shared_zk().unwrap().connect_string()));
    vec![
        ("redis", Arc::new(redis.await.unwrap())),
        ("etcd", Arc::new(etcd.await.unwrap())),
        ("zookeeper", Arc::new(zk.await.unwrap())),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_of_every_fencing_backend_fence_writes() {
    let mut conn = redis::Client::open(shared_redis().unwrap().url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let fence = RedisFence::new();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(5));
    for (backend, lock) in locks().await {
        let name = LockName::new(unique_name(backend)).unwrap();
        let first = lock.acquire(&name, &opts).await.unwrap();
        let old = FencedWrite::for_guard(&first).unwrap();
        assert_eq!(old.resource(), name.as_str());
        first.release().await.unwrap();
        let second = lock.acquire(&name, &opts).await.unwrap();
        let new = FencedWrite::for_guard(&second).unwrap();
        fence
            .set(&mut conn, &new, name.as_str(), "second")
            .await
            .unwrap();
        let err = fence
            .set(&mut conn, &old, name.as_str(), "first")
            .await
            .unwrap_err();
        assert!(err.is_stale(), "{backend}: {err}");
        second.release().await.unwrap();
    }
}

/// The view `with_lock` hands the critical section fences writes as the
/// guard itself does: same resource, same token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_critical_section_fences_with_its_view() {
    let opts = AcquireOptions::new().ttl(Duration::from_secs(5));
    for (backend, lock) in locks().await {
        let name = LockName::new(unique_name(backend)).unwrap();
        let (write, token) = lock
            .with_lock(&name, &opts, |view| async move {
                (FencedWrite::for_guard(&view), view.fencing_token())
            })
            .await
            .unwrap();
        let write = write.unwrap();
        assert_eq!(write.resource(), name.as_str(), "{backend}");
        assert_eq!(Some(write.token()), token, "{backend}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_guard_cannot_fence() {
    let urls = shared_redis_set().unwrap().urls();
    let lock = RedlockLock::connect(RedlockConfig::new(urls))
        .await
        .unwrap();
    let name = LockName::new(unique_name("redlock")).unwrap();
    let guard = lock.acquire(&name, &AcquireOptions::new()).await.unwrap();
    let err = FencedWrite::for_guard(&guard).unwrap_err();
    assert_eq!(err.kind(), LockErrorKind::InvalidArgument);
    let msg = err.to_string();
    assert!(
        msg.contains("Redlock") && msg.contains("redis, etcd or zookeeper"),
        "{msg}"
    );
    guard.release().await.unwrap();
}

/// After an operator's force release, the evicted holder is still running:
/// once the next holder (handed the lock as a waiter) has written, the
/// evicted holder's fenced write is refused as stale, on every fencing
/// backend; before that, nothing but the token order stands between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_holders_late_write_is_refused_after_a_force_release() {
    let mut conn = redis::Client::open(shared_redis().unwrap().url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let fence = RedisFence::new();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(30));
    for ((backend, holder), (_, waiter)) in locks().await.into_iter().zip(locks().await) {
        let operator = locks()
            .await
            .into_iter()
            .find(|(b, _)| *b == backend)
            .map(|(_, l)| l)
            .unwrap();
        let name = LockName::new(unique_name(backend)).unwrap();
        let evicted = holder.acquire(&name, &opts).await.unwrap();
        // The data lives beside the lock (on Redis, the lock name is the lock's key).
        let data = format!("{name}-data");
        let late = FencedWrite::with_token(&data, evicted.fencing_token()).unwrap();
        let next = {
            let (waiter, name, opts) = (waiter.clone(), name.clone(), opts.clone());
            tokio::spawn(async move { waiter.acquire(&name, &opts).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let removed = operator.force_release(&name).await.unwrap();
        assert_eq!(removed.mutex, 1, "{backend}: {removed:?}");
        let next = tokio::time::timeout(Duration::from_secs(5), next)
            .await
            .unwrap_or_else(|_| panic!("{backend}: the waiter was not handed the lock"))
            .unwrap()
            .unwrap();
        let new = FencedWrite::with_token(&data, next.fencing_token()).unwrap();
        assert!(new.token() > late.token(), "{backend}");
        fence
            .set(&mut conn, &new, &data, "next holder")
            .await
            .unwrap();
        let err = fence
            .set(&mut conn, &late, &data, "evicted holder")
            .await
            .unwrap_err();
        assert!(err.is_stale(), "{backend}: {err}");
        let value: String = redis::cmd("GET")
            .arg(&data)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(value, "next holder", "{backend}");
        assert!(!evicted.release().await.unwrap(), "{backend}");
        assert!(next.release().await.unwrap(), "{backend}");
    }
}
