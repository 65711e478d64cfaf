//! The cases every fenced store must pass, written once and called by each
//! store's test file with a small adapter ([`Store`]) over real servers.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{async_trait, AcquireOptions, DistributedLock, FencingToken, LockName};
use lock_fence::{FenceError, FencedWrite};
use lock_redis::{RedisLock, RedisLockConfig};
use lock_testbed::{shared_redis, unique_name, Proxy};

/// The shared cases as `#[tokio::test]`s for one store: `$store` builds the
/// [`Store`] (evaluated in each test), `$big` are tokens near the top of the
/// range the store holds.
macro_rules! store_cases {
    ($store:expr, $($big:expr),+) => {
        #[tokio::test]
        async fn admits_newer_refuses_older() {
            support::admits_newer_refuses_older(&$store).await;
        }

        #[tokio::test]
        async fn equal_token_is_admitted_again() {
            support::equal_token_is_admitted_again(&$store).await;
        }

        #[tokio::test]
        async fn large_tokens_compare_exactly() {
            $(support::large_tokens_compare_exactly(&$store, $big).await;)+
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn concurrent_writers_keep_the_highest_token() {
            support::concurrent_writers_keep_the_highest_token(std::sync::Arc::new($store)).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn crash_between_lock_and_write() {
            support::crash_between_lock_and_write(&$store).await;
        }
    };
}
pub(crate) use store_cases;

/// A fenced store under test: write a value to a resource, read it back.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// One fenced write of `value` (a whole transaction for PostgreSQL).
    async fn write(&self, write: &FencedWrite, value: &str) -> Result<(), FenceError>;
    /// The value last written to `resource`.
    async fn read(&self, resource: &str) -> Option<String>;
}

pub fn token(t: u64) -> FencingToken {
    FencingToken::new(t)
}

pub fn fenced(resource: &str, t: u64) -> FencedWrite {
    FencedWrite::new(resource, token(t)).unwrap()
}

/// Asserts a stale-token refusal naming this resource, token and newer token.
pub fn assert_stale(result: Result<(), FenceError>, resource: &str, t: u64, newer: u64) {
    match result {
        Err(FenceError::StaleToken {
            resource: r,
            token: got,
            newer: n,
        }) => {
            assert_eq!((r.as_str(), got, n), (resource, token(t), token(newer)));
        }
        other => panic!("expected a stale token {t} < {newer} on {resource}, got {other:?}"),
    }
}

/// A newer token is admitted, an older one refused with the newer named; the
/// refused write leaves the value alone.
pub async fn admits_newer_refuses_older(store: &dyn Store) {
    let r = unique_name("newer-older");
    store.write(&fenced(&r, 5), "a").await.unwrap();
    store.write(&fenced(&r, 7), "b").await.unwrap();
    assert_stale(store.write(&fenced(&r, 6), "c").await, &r, 6, 7);
    assert_stale(store.write(&fenced(&r, 5), "d").await, &r, 5, 7);
    assert_eq!(store.read(&r).await.as_deref(), Some("b"));
}

/// The same token again is the same holder: admitted every time.
pub async fn equal_token_is_admitted_again(store: &dyn Store) {
    let r = unique_name("equal");
    store.write(&fenced(&r, 9), "x").await.unwrap();
    store.write(&fenced(&r, 9), "y").await.unwrap();
    store.write(&fenced(&r, 9), "y").await.unwrap();
    assert_eq!(store.read(&r).await.as_deref(), Some("y"));
    assert_stale(store.write(&fenced(&r, 8), "z").await, &r, 8, 9);
}

/// Tokens compare exactly over the whole range the store holds: `big` and
/// `big - 1` differ in the last place of a double.
pub async fn large_tokens_compare_exactly(store: &dyn Store, big: u64) {
    let r = unique_name("large");
    store.write(&fenced(&r, big), "big").await.unwrap();
    assert_stale(
        store.write(&fenced(&r, big - 1), "less").await,
        &r,
        big - 1,
        big,
    );
    assert_eq!(store.read(&r).await.as_deref(), Some("big"));
}

/// Writers with different tokens race on one resource: every write is either
/// admitted or refused with a newer token, the highest token always wins and
/// its value is the one left.
pub async fn concurrent_writers_keep_the_highest_token(store: Arc<dyn Store>) {
    const WRITERS: u64 = 16;
    let r = unique_name("race");
    // Interleaved order: high and low tokens start together.
    let order: Vec<u64> = (1..=WRITERS / 2)
        .flat_map(|i| [i, WRITERS + 1 - i])
        .collect();
    let tasks: Vec<_> = order
        .into_iter()
        .map(|t| {
            let (store, r) = (store.clone(), r.clone());
            tokio::spawn(async move { (t, store.write(&fenced(&r, t), &t.to_string()).await) })
        })
        .collect();
    let mut admitted = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            (t, Ok(())) => admitted.push(t),
            (
                t,
                Err(FenceError::StaleToken {
                    token: got, newer, ..
                }),
            ) => {
                assert_eq!(got, token(t));
                assert!(newer > got, "{t} refused for {newer}");
            }
            (t, Err(e)) => panic!("writer {t}: {e}"),
        }
    }
    assert!(admitted.contains(&WRITERS), "the highest token was refused");
    assert_eq!(store.read(&r).await, Some(WRITERS.to_string()));
}

/// Holder A takes the lock and crashes before writing (its network gone, its
/// guard never released); B gets the lock after the TTL, writes and is
/// admitted; A's write, delivered late, is refused.
pub async fn crash_between_lock_and_write(store: &dyn Store) {
    let redis = shared_redis().unwrap();
    let proxy = Proxy::start(redis.addr()).unwrap();
    let config = |url: String| {
        RedisLockConfig::new(url)
            .request_timeout(Duration::from_millis(200))
            .connect_timeout(Duration::from_millis(500))
    };
    let a = RedisLock::connect(config(proxy.redis_url())).await.unwrap();
    let b = RedisLock::connect(config(redis.url())).await.unwrap();
    let name = LockName::new(unique_name("crash")).unwrap();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_millis(400))
        .wait(Duration::from_secs(5));
    let ga = a.acquire(&name, &opts).await.unwrap();
    let late = FencedWrite::for_guard(&ga).unwrap();
    proxy.cut();
    std::mem::forget(ga);

    let gb = b.acquire(&name, &opts).await.unwrap();
    assert!(gb.fencing_token().unwrap() > late.token());
    let write = FencedWrite::for_guard(&gb).unwrap();
    store.write(&write, "from B").await.unwrap();
    gb.release().await.unwrap();

    let refused = store.write(&late, "from A").await;
    assert_stale(
        refused,
        name.as_str(),
        late.token().get(),
        write.token().get(),
    );
    assert_eq!(store.read(name.as_str()).await.as_deref(), Some("from B"));
}
