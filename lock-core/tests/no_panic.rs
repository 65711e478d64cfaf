//! No configuration panics: any durations in the options, the public
//! `LeaseRequest` and the validity helpers give a value or a clear error.

use std::time::Duration;

use lock_core::backend::{add_saturating, drift, validity, LeaseRequest};
use lock_core::{
    AcquireOptions, DistributedLock, LockErrorKind, LockMode, LockName, MemoryLock, RetryPolicy,
    Semaphore, MAX_TTL, MIN_TTL,
};
use proptest::prelude::*;
use tokio::time::Instant;

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        (0u64..=u64::MAX, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        (0u64..100_000).prop_map(Duration::from_millis),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn helpers_never_overflow(d in any_duration()) {
        let now = Instant::now();
        let v = validity(now, d);
        prop_assert!(v >= now);
        let _ = drift(d);
        prop_assert!(add_saturating(now, d) >= now);
    }

    #[test]
    fn lease_requests_validate_their_ttl(d in any_duration(), permits in 0u32..=u32::MAX) {
        let name = LockName::new("x").unwrap();
        match LeaseRequest::new(name, d) {
            Ok(req) => {
                prop_assert!((MIN_TTL..=MAX_TTL).contains(&d));
                let moded = req.with_mode(LockMode::Permit { permits });
                prop_assert_eq!(moded.is_ok(), (1..=lock_core::MAX_PERMITS).contains(&permits));
            }
            Err(err) => prop_assert_eq!(err.kind(), LockErrorKind::InvalidArgument),
        }
    }

    #[test]
    fn any_options_acquire_or_fail_cleanly(
        ttl in any_duration(),
        wait in any_duration(),
        every in any_duration(),
        min_delay in any_duration(),
        max_delay in any_duration(),
        permits in 0u32..4,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let locks = MemoryLock::new();
            let name = LockName::new("no-panic").unwrap();
            let opts = AcquireOptions::new()
                .ttl(ttl)
                .wait(wait)
                .keep_alive_every(every)
                .retry(RetryPolicy { min_delay, max_delay });
            let valid = opts.validate().is_ok();
            match locks.try_acquire(&name, &opts).await {
                Ok(Some(g)) => {
                    assert!(valid);
                    assert!(g.is_held());
                    let _ = g.extend(ttl).await;
                    g.release().await.unwrap();
                }
                Ok(None) => unreachable!("nobody else holds it"),
                Err(err) => {
                    assert!(!valid);
                    assert_eq!(err.kind(), LockErrorKind::InvalidArgument);
                }
            }
            match locks.try_acquire_permit(&name, permits, &opts).await {
                Ok(g) => {
                    assert!(valid && permits > 0);
                    drop(g);
                }
                Err(err) => assert_eq!(err.kind(), LockErrorKind::InvalidArgument),
            }
        });
    }
}
