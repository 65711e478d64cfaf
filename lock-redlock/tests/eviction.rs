//! The eviction policy of each node at connect, on real servers: a node
//! that may evict lock keys (`maxmemory-policy volatile-ttl`) is warned of
//! by name, or refused with `require_noeviction`; nodes with `noeviction`
//! pass.

use lock_core::LockErrorKind;
use lock_redlock::{RedlockConfig, RedlockLock};
use lock_testbed::{LogCapture, RedisOptions, RedisServer, RedisSet};
use tracing::Level;

/// Four `noeviction` nodes and one `volatile-ttl` node: `connect` works and
/// warns once, naming that node and its policy; with `require_noeviction`
/// it is a non-retryable `InvalidArgument` naming them. Five `noeviction`
/// nodes pass the requirement with no warning.
#[tokio::test]
async fn a_node_that_may_evict_lock_keys_is_warned_of_or_refused() {
    let capture = LogCapture::default();
    let _default = tracing::subscriber::set_default(capture.clone());
    let safe = RedisSet::start(5).unwrap_or_else(|e| panic!("five Redis servers: {e}"));
    let evicting = RedisServer::start_with(RedisOptions {
        maxmemory_policy: Some("volatile-ttl"),
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("redis-server: {e}"));
    let mut urls = safe.urls()[..4].to_vec();
    urls.push(evicting.url());
    let bad = evicting.addr().to_string();

    let lock = RedlockLock::connect(RedlockConfig::new(urls.clone()))
        .await
        .expect("a warning only, by default");
    let warnings = capture.at(Level::WARN);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("volatile-ttl") && warnings[0].contains(&bad),
        "{warnings:?}"
    );
    drop(lock);

    let err = RedlockLock::connect(RedlockConfig::new(urls).require_noeviction(true))
        .await
        .expect_err("refused with require_noeviction");
    assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
    assert!(!err.is_retryable());
    assert!(
        err.message().contains("volatile-ttl") && err.message().contains(&bad),
        "{err}"
    );

    let before = capture.at(Level::WARN).len();
    RedlockLock::connect(RedlockConfig::new(safe.urls()).require_noeviction(true))
        .await
        .expect("noeviction everywhere passes");
    assert_eq!(capture.at(Level::WARN).len(), before, "{}", capture.all());
}
