//! No configuration makes the Redlock backend panic: any durations and
//! prefixes are either refused by `validate` with `InvalidArgument` or work
//! (here: a connect to loopback ports where nothing listens, refused fast).
//! A node URL with a password never shows in `Debug` or in an error.

use lock_conformance::{any_duration, closed_port};
use lock_core::LockErrorKind;
use lock_redlock::{RedlockConfig, RedlockLock};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_config_is_refused_or_connects_without_panic(
        node in any_duration(),
        connect in any_duration(),
        delay in any_duration(),
        jitter in any_duration(),
        recheck in any_duration(),
        prefix in "[a-z: \\t]{0,6}",
    ) {
        let nodes: Vec<String> = (0..3).map(|_| format!("redis://:hunter2@{}/", closed_port())).collect();
        let config = RedlockConfig::new(nodes)
            .node_timeout(node)
            .connect_timeout(connect)
            .retry_delay(delay, jitter)
            .max_recheck(recheck)
            .key_prefix(prefix);
        let shown = format!("{config:?}");
        prop_assert!(!shown.contains("hunter2"), "{}", shown);
        let valid = config.validate();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let outcome = rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(10), RedlockLock::connect(config)).await
        });
        let err = outcome
            .expect("a connect to closed ports answers at once")
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

/// Node URLs with a password, well-formed or not: neither the
/// configuration's `Debug`, nor `validate`, nor `connect` shows it.
#[test]
fn no_password_in_debug_or_errors() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for url in [
        format!("redis://:hunter2@{}/", closed_port()),
        "redis://:hunter2@127.0.0.1:notaport/".to_string(),
        "redis://u:hunter2@[::1/".to_string(),
        "redis://:hunter2@127.0.0.1:1/x".to_string(),
        "hunter2@127.0.0.1:x".to_string(),
        "redis://:hun/ter2@127.0.0.1:1/".to_string(),
    ] {
        let config = RedlockConfig::new([url.as_str()]);
        let mut shown = vec![format!("{config:?}")];
        if let Err(e) = config.validate() {
            shown.extend([e.to_string(), format!("{e:?}")]);
        }
        let err = rt
            .block_on(RedlockLock::connect(config))
            .expect_err("nothing listens there");
        shown.extend([err.to_string(), format!("{err:?}")]);
        for s in shown {
            assert!(!s.contains("hunter2") && !s.contains("ter2"), "{url}: {s}");
        }
    }
}
