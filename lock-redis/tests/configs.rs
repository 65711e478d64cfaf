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
