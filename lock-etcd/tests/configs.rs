//! No configuration makes the etcd backend panic: any durations and
//! prefixes are either refused by `validate` with `InvalidArgument` or work
//! (here: a connect to a loopback port where nothing listens, refused fast).
//! A password never shows in `Debug` or in an error.

use lock_conformance::{any_duration, closed_port};
use lock_core::LockErrorKind;
use lock_etcd::{EtcdConfig, EtcdLock};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn any_config_is_refused_or_connects_without_panic(
        lease in any_duration(),
        connect in any_duration(),
        request in any_duration(),
        prefix in "[a-z/ \\t]{0,6}",
    ) {
        let config = EtcdConfig::new([closed_port().to_string()])
            .lease_ttl(lease)
            .connect_timeout(connect)
            .request_timeout(request)
            .key_prefix(prefix)
            .user("root", "hunter2");
        let shown = format!("{config:?}");
        prop_assert!(!shown.contains("hunter2"), "{}", shown);
        let valid = config.validate();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let outcome = rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(10), EtcdLock::connect(config)).await
        });
        let err = outcome
            .expect("a connect to a closed port answers in time")
            .expect_err("nothing listens there");
        prop_assert!(!err.to_string().contains("hunter2"), "{}", err);
        match valid {
            Err(e) => {
                prop_assert_eq!(e.kind(), LockErrorKind::InvalidArgument);
                prop_assert_eq!(err.kind(), LockErrorKind::InvalidArgument);
            }
            Ok(()) => prop_assert_eq!(err.kind(), LockErrorKind::Unavailable, "{}", err),
        }
    }
}
