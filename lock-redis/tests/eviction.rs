//! The eviction policy at connect, on real servers: a server that may evict
//! lock keys (`maxmemory-policy volatile-ttl`, which evicts the keys closest
//! to expiry first: every lock key has a TTL) is warned of, or refused with
//! `require_noeviction`; the policy is read from `INFO memory` when `CONFIG`
//! is denied; a server that tells neither is connected to, with a debug
//! line. Passwords never show in what is logged.

use lock_core::LockErrorKind;
use lock_redis::{RedisLock, RedisLockConfig};
use lock_testbed::{LogCapture, RedisOptions, RedisServer};
use tracing::Level;

fn start(policy: Option<&'static str>) -> RedisServer {
    RedisServer::start_with(RedisOptions {
        maxmemory_policy: policy,
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("redis-server did not start: {e}"))
}

fn cmd(server: &RedisServer, args: &[&str]) {
    let reply = server.cmd(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert_eq!(reply.as_str(), Some("OK"), "{args:?}");
}

/// `volatile-ttl`: connecting works and logs one warning naming the policy;
/// with `require_noeviction` it is a non-retryable `InvalidArgument` that
/// names it. A `noeviction` server passes the requirement, with no warning.
#[tokio::test]
async fn a_server_that_may_evict_lock_keys_is_warned_of_or_refused() {
    let capture = LogCapture::default();
    let _default = tracing::subscriber::set_default(capture.clone());
    let evicting = start(Some("volatile-ttl"));

    let lock = RedisLock::connect(RedisLockConfig::new(evicting.url()))
        .await
        .expect("a warning only, by default");
    let warnings = capture.at(Level::WARN);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("volatile-ttl") && warnings[0].contains("noeviction"),
        "{warnings:?}"
    );
    drop(lock);

    let err = RedisLock::connect(RedisLockConfig::new(evicting.url()).require_noeviction(true))
        .await
        .expect_err("refused with require_noeviction");
    assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
    assert!(!err.is_retryable());
    assert!(err.message().contains("volatile-ttl"), "{err}");

    let safe = start(None);
    let before = capture.at(Level::WARN).len();
    RedisLock::connect(RedisLockConfig::new(safe.url()).require_noeviction(true))
        .await
        .expect("noeviction passes");
    assert_eq!(capture.at(Level::WARN).len(), before, "{}", capture.all());
}

/// A user denied `CONFIG` (as on most managed services) still has the
/// policy checked, through `INFO memory`; a user denied both is connected
/// to, the check skipped with a debug line. No password is ever logged.
#[tokio::test]
async fn the_policy_is_read_from_info_when_config_is_denied() {
    let capture = LogCapture::default();
    let _default = tracing::subscriber::set_default(capture.clone());
    let evicting = start(Some("volatile-ttl"));
    let addr = evicting.addr();
    cmd(
        &evicting,
        &[
            "ACL",
            "SETUSER",
            "noconfig",
            "on",
            ">s3cret-a",
            "~*",
            "&*",
            "+@all",
            "-config",
        ],
    );
    cmd(
        &evicting,
        &[
            "ACL",
            "SETUSER",
            "blind",
            "on",
            ">s3cret-b",
            "~*",
            "&*",
            "+@all",
            "-config",
            "-info",
        ],
    );

    let err = RedisLock::connect(
        RedisLockConfig::new(format!("redis://noconfig:s3cret-a@{addr}/")).require_noeviction(true),
    )
    .await
    .expect_err("the policy read from INFO is refused");
    assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
    assert!(err.message().contains("volatile-ttl"), "{err}");
    assert!(!err.message().contains("s3cret"), "{err}");

    RedisLock::connect(
        RedisLockConfig::new(format!("redis://blind:s3cret-b@{addr}/")).require_noeviction(true),
    )
    .await
    .expect("a policy that cannot be read is not refused");
    let debug = capture.at(Level::DEBUG);
    assert!(
        debug
            .iter()
            .any(|d| d.contains("neither CONFIG GET nor INFO memory answered")),
        "{debug:?}"
    );
    assert!(capture.at(Level::WARN).is_empty(), "{}", capture.all());
    assert!(!capture.all().contains("s3cret"), "{}", capture.all());
}
