//! The key layout is the one redis-py `Lock`, redsync and node-redlock use:
//! their locks and ours exclude each other on the same name. The foreign
//! client is played by raw commands (exactly what those libraries send).

use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockName};
use lock_redis::{RedisLock, RedisLockConfig};
use lock_testbed::{shared_redis, unique_name, RedisServer, RespValue};

/// What redis-py / redsync send to release: compare-and-delete, no publish.
const FOREIGN_RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

async fn cmd(server: &'static RedisServer, args: &[&str]) -> RespValue {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        server
            .cmd(&refs)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    })
    .await
    .unwrap()
}

fn opts() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_secs(5))
}

/// A foreign `SET name token NX PX` blocks us; while we hold the lock a
/// foreign `SET NX` fails; the value is a 128-bit token and the key has the
/// requested TTL; a foreign release (no publish) frees a waiter by the TTL re-check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_clients_and_ours_exclude_each_other() {
    let server = shared_redis().expect("shared redis");
    let locks = RedisLock::connect(RedisLockConfig::new(server.url()))
        .await
        .unwrap();
    let name = LockName::new(unique_name("interop")).unwrap();

    // Ours first: a foreign SET NX fails.
    let g = locks
        .try_acquire(&name, &opts())
        .await
        .unwrap()
        .expect("free");
    let value = cmd(server, &["GET", name.as_str()]).await;
    let token = value.as_str().expect("string token").to_string();
    assert_eq!(
        token.len(),
        32,
        "owner token {token:?} is not 128 bits of hex"
    );
    assert!(token.chars().all(|c| c.is_ascii_hexdigit()));
    match cmd(server, &["PTTL", name.as_str()]).await {
        RespValue::Int(ms) => assert!(ms > 4_000 && ms <= 5_000, "PTTL {ms}"),
        other => panic!("PTTL {other:?}"),
    }
    // The description beside it: `<token> <JSON>`, with the same expiry.
    let side = format!("{{{name}}} holder");
    let described = cmd(server, &["GET", &side]).await;
    let described = described.as_str().expect("a description").to_string();
    assert_eq!(
        described,
        format!("{token} {}", lock_core::Holder::this_process().to_json())
    );
    match cmd(server, &["PTTL", &side]).await {
        RespValue::Int(ms) => assert!(ms > 4_000 && ms <= 5_000, "PTTL {ms}"),
        other => panic!("PTTL {other:?}"),
    }
    let foreign = cmd(
        server,
        &["SET", name.as_str(), "foreign-token", "NX", "PX", "5000"],
    )
    .await;
    assert!(
        foreign.is_nil(),
        "a foreign SET NX took our lock: {foreign:?}"
    );
    assert!(g.release().await.unwrap());
    assert!(
        cmd(server, &["GET", &side]).await.is_nil(),
        "the release left the description behind"
    );

    // Foreign first: we are refused, then get it after the foreign release.
    let set = cmd(
        server,
        &["SET", name.as_str(), "foreign-token", "NX", "PX", "1500"],
    )
    .await;
    assert_eq!(set, RespValue::Simple("OK".into()));
    assert!(
        locks.try_acquire(&name, &opts()).await.unwrap().is_none(),
        "we took a foreign lock"
    );
    let waiter = {
        let (locks, name) = (locks.clone(), name.clone());
        tokio::spawn(async move { locks.acquire(&name, &opts()).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());
    let released = cmd(
        server,
        &["EVAL", FOREIGN_RELEASE, "1", name.as_str(), "foreign-token"],
    )
    .await;
    assert_eq!(released, RespValue::Int(1));
    let g = tokio::time::timeout(Duration::from_secs(3), waiter)
        .await
        .expect("waiter not served after a foreign release")
        .unwrap()
        .unwrap();
    assert!(g.release().await.unwrap());

    // Our release is compare-and-delete: it never removes a foreign lock,
    // even one set on the key after ours was deleted behind our back.
    let ours = locks
        .try_acquire(&name, &opts())
        .await
        .unwrap()
        .expect("free");
    assert_eq!(
        cmd(server, &["DEL", name.as_str()]).await,
        RespValue::Int(1)
    );
    let set = cmd(
        server,
        &["SET", name.as_str(), "foreign-token", "NX", "PX", "5000"],
    )
    .await;
    assert_eq!(set, RespValue::Simple("OK".into()));
    assert!(
        !ours.release().await.unwrap(),
        "release reported a foreign lock as ours"
    );
    let value = cmd(server, &["GET", name.as_str()]).await;
    assert_eq!(
        value.as_str(),
        Some("foreign-token"),
        "our release removed a foreign lock"
    );
    // Our description is still there (a foreign DEL does not know it), but
    // it is not the holder's: no holder shown.
    let side = format!("{{{name}}} holder");
    assert!(!cmd(server, &["GET", &side]).await.is_nil());
    let status = locks.inspect(&name).await.unwrap();
    assert!(status.held);
    assert_eq!(status.holder, None);
    cmd(server, &["DEL", name.as_str(), &side]).await;
}

/// A key prefix is prepended to the lock key and its fencing/channel keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_prefix_is_applied() {
    let server = shared_redis().expect("shared redis");
    let locks = RedisLock::connect(RedisLockConfig::new(server.url()).key_prefix("app:locks:"))
        .await
        .unwrap();
    let name = LockName::new(unique_name("prefix")).unwrap();
    let keys = locks.keys(&name).unwrap();
    assert_eq!(keys.lock(), format!("app:locks:{name}"));
    let g = locks.try_acquire(&name, &opts()).await.unwrap().unwrap();
    assert_eq!(
        cmd(server, &["EXISTS", keys.lock()]).await,
        RespValue::Int(1)
    );
    assert_eq!(
        cmd(server, &["EXISTS", name.as_str()]).await,
        RespValue::Int(0)
    );
    let counter = cmd(server, &["GET", keys.fencing()]).await;
    let token = g.fencing_token().unwrap().get().to_string();
    assert_eq!(counter.as_str(), Some(token.as_str()));
    assert!(g.release().await.unwrap());
}
