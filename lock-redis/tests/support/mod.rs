//! Helpers shared by the lock-redis integration tests.
// Each test binary uses a subset of them.
#![allow(dead_code)]

pub mod conformance;

use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockName};
use lock_redis::{RedisLock, RedisLockConfig};
use lock_testbed::{unique_name, Proxy, RedisClusterSet, RedisOptions, RedisServer, RespValue};

/// The request timeout of the clients in these tests.
pub const REQUEST_TIMEOUT: Duration = Duration::from_millis(200);

/// Allowance for scheduling on a busy 2-core machine.
pub const SLACK: Duration = Duration::from_millis(700);

pub fn config(url: &str) -> RedisLockConfig {
    RedisLockConfig::new(url)
        .connect_timeout(Duration::from_secs(1))
        .request_timeout(REQUEST_TIMEOUT)
}

pub async fn client(url: &str) -> RedisLock {
    RedisLock::connect(config(url))
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

pub fn name(prefix: &str) -> LockName {
    LockName::new(unique_name(prefix)).expect("valid name")
}

pub fn opts(ttl: Duration) -> AcquireOptions {
    AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(30))
}

/// Runs a synchronous testbed call off the async workers.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

pub async fn start_server(opts: RedisOptions) -> RedisServer {
    blocking(move || RedisServer::start_with(opts))
        .await
        .unwrap_or_else(|e| panic!("starting redis-server: {e}"))
}

pub async fn cmd(server: &RedisServer, args: &[&str]) -> RespValue {
    server
        .cmd_async(args)
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// The fencing counter of `name` on `server`.
pub async fn counter(server: &RedisServer, name: &LockName) -> Option<i64> {
    match cmd(
        server,
        &[
            "GET",
            lock_redis::kit::layout::Keys::new("", name.as_str()).fencing(),
        ],
    )
    .await
    {
        RespValue::Bulk(None) => None,
        v => Some(
            v.as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("counter {v:?}")),
        ),
    }
}

pub async fn key_exists(server: &RedisServer, name: &LockName) -> bool {
    cmd(server, &["EXISTS", name.as_str()]).await != RespValue::Int(0)
}

/// Takes `n` locks of `lock` in turn on `client`; returns the last token.
pub async fn take_tokens(client: &RedisLock, lock: &LockName, n: usize) -> u64 {
    let mut last = 0;
    for _ in 0..n {
        let g = client
            .acquire(lock, &opts(Duration::from_secs(5)))
            .await
            .expect("acquire");
        let t = g.fencing_token().expect("redis has tokens").get();
        assert!(t > last, "token {t} after {last}");
        last = t;
        assert!(g.release().await.unwrap());
    }
    last
}

/// A proxy in front of `server` (started off the async workers).
pub async fn proxy_to(server: &RedisServer) -> Proxy {
    let addr = server.addr();
    blocking(move || Proxy::start(addr)).await.expect("proxy")
}

/// A server, a proxy in front of it, a client behind the proxy and one
/// straight to the server.
pub async fn server_behind_proxy() -> (RedisServer, Proxy, RedisLock, RedisLock) {
    let server = start_server(RedisOptions::default()).await;
    let proxy = proxy_to(&server).await;
    let behind = client(&proxy.redis_url()).await;
    let direct = client(&server.url()).await;
    (server, proxy, behind, direct)
}

/// The primary of a fresh `RedisClusterSet` that owns `slot`.
pub fn initial_owner(slot: u16) -> usize {
    match slot {
        0..=5460 => 0,
        5461..=10922 => 1,
        _ => 2,
    }
}

/// The first name `{prefix}{i}` whose slot belongs to primary `owner` of a
/// fresh `RedisClusterSet`.
pub fn name_on_primary(owner: usize, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|n| initial_owner(RedisClusterSet::slot_of(n)) == owner)
        .expect("some name hashes to every primary")
}
