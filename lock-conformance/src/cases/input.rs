//! What a backend refuses: bad names and options, and the primitives it does
//! not offer.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockErrorKind, LockName, MAX_TTL};

use super::helpers::{client, opts};
use crate::{unique_name, Harness};

/// Bad names and zero or oversized TTLs give `InvalidArgument`, never a panic.
pub(super) async fn bad_input_is_invalid_argument(h: Arc<dyn Harness>) {
    for bad in [
        "",
        "a b",
        "x\0y",
        "/lead",
        "trail/",
        "a//b",
        &"n".repeat(500),
    ] {
        let err = LockName::new(bad).expect_err(bad);
        assert_eq!(err.kind(), LockErrorKind::InvalidArgument);
        assert!(!err.is_retryable());
    }
    let a = client(&*h).await;
    let name = unique_name("badinput");
    for o in [
        opts(&*h).ttl(Duration::ZERO),
        opts(&*h).ttl(MAX_TTL + Duration::from_secs(1)),
        opts(&*h).wait(Duration::from_secs(400 * 86_400)),
    ] {
        let err = a
            .acquire(&name, &o)
            .await
            .expect_err("bad options accepted");
        assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
        let err = a
            .try_acquire(&name, &o)
            .await
            .expect_err("bad options accepted");
        assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
    }
    assert!(h.leftovers(&name).await.is_empty());
}

/// A backend without read-write locks or semaphores says so with
/// `Unsupported`, and leaves nothing behind.
pub(super) async fn missing_primitives_are_unsupported(h: Arc<dyn Harness>) {
    let name = unique_name("unsupported");
    let a = client(&*h).await;
    let caps = a.capabilities();
    let o = opts(&*h);
    if !caps.read_write {
        for err in [
            a.try_acquire_read(&name, &o).await.err(),
            a.try_acquire_write(&name, &o).await.err(),
            a.acquire_read(&name, &o).await.err(),
            a.acquire_write(&name, &o).await.err(),
        ] {
            let err = err.expect("a read-write lock from a backend without them");
            assert_eq!(err.kind(), LockErrorKind::Unsupported, "{err}");
            assert!(!err.is_retryable());
        }
    }
    if !caps.semaphore {
        for err in [
            a.try_acquire_permit(&name, 2, &o).await.err(),
            a.acquire_permit(&name, 2, &o).await.err(),
        ] {
            let err = err.expect("a permit from a backend without semaphores");
            assert_eq!(err.kind(), LockErrorKind::Unsupported, "{err}");
        }
    }
    if !caps.election {
        let campaign = lock_core::CampaignOptions::new().wait(std::time::Duration::ZERO);
        for err in [
            a.campaign(&name, "v", &campaign).await.err(),
            a.leader(&name).await.err(),
            a.observe(&name).await.err(),
        ] {
            let err = err.expect("an election from a backend without them");
            assert_eq!(err.kind(), LockErrorKind::Unsupported, "{err}");
            assert!(!err.is_retryable());
        }
    }
    assert!(h.leftovers(&name).await.is_empty());
}
