//! Configurations at and beyond every limit: each is either refused by
//! `ZkConfig::validate` with a clear `InvalidArgument` (and then by
//! `ZkLock::connect` the same way), or accepted and usable; nothing panics,
//! neither while connecting nor in the background tasks of a session.

use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockErrorKind};
use lock_zk::{ZkConfig, ZkLock, MAX_IDENTIFIER_LEN, MAX_TIMEOUT, MIN_TIMEOUT};
use proptest::prelude::*;

mod support;
use support::{name, server};

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        Just(MIN_TIMEOUT),
        Just(MIN_TIMEOUT - Duration::from_nanos(1)),
        Just(MAX_TIMEOUT),
        Just(MAX_TIMEOUT + Duration::from_nanos(1)),
        (0u64..=u64::MAX, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        (0u64..=90_000_000u64).prop_map(Duration::from_millis),
    ]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Against a closed loopback port: a valid configuration fails
    /// `Unavailable` at once, an invalid one `InvalidArgument`, as
    /// `validate` said; never a panic or a hang.
    #[test]
    fn any_config_is_refused_or_fails_cleanly_on_a_closed_port(
        session in duration(),
        connect in duration(),
        request in duration(),
        identifier_len in 0usize..(2 * MAX_IDENTIFIER_LEN),
    ) {
        let port = lock_testbed::free_port();
        let config = ZkConfig::new(format!("127.0.0.1:{port}"))
            .session_timeout(session)
            .connect_timeout(connect)
            .request_timeout(request)
            .identifier("i".repeat(identifier_len));
        let valid = config.validate();
        let outcome = runtime().block_on(async {
            tokio::time::timeout(Duration::from_secs(5), ZkLock::connect(config)).await
        });
        let err = outcome
            .expect("connect to a closed port hung")
            .expect_err("connected to a closed port");
        match valid {
            Ok(()) => prop_assert_eq!(err.kind(), LockErrorKind::Unavailable, "{}", err),
            Err(invalid) => {
                prop_assert_eq!(invalid.kind(), LockErrorKind::InvalidArgument);
                prop_assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{}", err);
                prop_assert!(!err.is_retryable());
            }
        }
    }
}

/// The largest accepted timeouts and identifier work against a real server:
/// the session (its timeout clamped by the server) is kept alive, a lock is
/// taken and released, and the background tasks do their arithmetic
/// without overflow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn largest_accepted_config_works() {
    let server = server().await;
    let config = ZkConfig::new(server.connect_string())
        .session_timeout(MAX_TIMEOUT)
        .connect_timeout(MAX_TIMEOUT)
        .request_timeout(MAX_TIMEOUT)
        .identifier("i".repeat(MAX_IDENTIFIER_LEN));
    config.validate().unwrap();
    let locks = ZkLock::connect(config).await.unwrap();
    let negotiated = locks.session_timeout().expect("a session");
    assert!(negotiated <= Duration::from_secs(60), "{negotiated:?}");
    let lock = name("largest-config");
    let guard = locks
        .acquire(&lock, &AcquireOptions::new().ttl(lock_core::MAX_TTL))
        .await
        .unwrap();
    // A few heartbeats of the server-clamped session.
    tokio::time::sleep(negotiated / 2).await;
    assert!(guard.is_held());
    assert!(guard.release().await.unwrap());
}
