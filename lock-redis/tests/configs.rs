//! No configuration makes the Redis backend panic: any durations and
//! prefixes are either refused by `validate` with `InvalidArgument` or work
//! (here: a connect to a loopback port where nothing listens, refused fast).

use lock_conformance::{any_duration, closed_port};
use lock_core::LockErrorKind;
use lock_redis::{RedisLock, RedisLockConfig};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_config_is_refused_or_connects_without_panic(
        connect in any_duration(),
        request in any_duration(),
        recheck in any_duration(),
        prefix in "[a-z: \\t]{0,6}",
    ) {
        let config = RedisLockConfig::new(format!("redis://{}/", closed_port()))
            .connect_timeout(connect)
            .request_timeout(request)
            .max_recheck(recheck)
            .key_prefix(prefix);
        let valid = config.validate();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let outcome = rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(10), RedisLock::connect(config)).await
        });
        let err = outcome
            .expect("a connect to a closed port answers at once")
            .expect_err("nothing listens there");
        match valid {
            Err(e) => {
                prop_assert_eq!(e.kind(), LockErrorKind::InvalidArgument);
                prop_assert_eq!(err.kind(), LockErrorKind::InvalidArgument);
            }
            Ok(()) => prop_assert_eq!(err.kind(), LockErrorKind::Unavailable, "{}", err),
        }
    }
}

/// URLs with a password, well-formed or not: neither the configuration's
/// `Debug` nor the error of a connect shows the password.
#[test]
fn no_password_in_debug_or_errors() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let port = closed_port();
    for url in [
        format!("redis://:hunter2@{port}/"),
        format!("redis://user:hunter2@{port}/0"),
        "redis://:hunter2@127.0.0.1:notaport/".to_string(),
        "redis://u:hunter2@[::1/".to_string(),
        "redis://:hunter2@127.0.0.1:1/x".to_string(),
        "hunter2@127.0.0.1:x".to_string(),
        "redis://:hun/ter2@127.0.0.1:1/".to_string(),
    ] {
        let config = RedisLockConfig::new(url.as_str());
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("ter2"),
            "{shown}"
        );
        let err = rt
            .block_on(RedisLock::connect(config))
            .expect_err("nothing listens there");
        for shown in [err.to_string(), format!("{err:?}")] {
            assert!(
                !shown.contains("hunter2") && !shown.contains("ter2"),
                "{url}: {shown}"
            );
        }
    }
}
