//! No configuration makes the etcd backend panic: any durations and
//! prefixes are either refused by `validate` with `InvalidArgument` or work
//! (here: a connect to a loopback port where nothing listens, refused fast).
//! A password never shows in `Debug` or in an error.
//!
//! Credentials against an etcd with authentication enabled (a cluster of its
//! own): missing or wrong credentials and missing permissions are
//! `Unauthorized`; a user with read-write on the lock prefix locks normally.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions, Permission};
use lock_conformance::{any_duration, closed_port};
use lock_core::{AcquireOptions, DistributedLock, LockErrorKind, LockName};
use lock_etcd::{EtcdConfig, EtcdLock};
use lock_testbed::EtcdCluster;
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

async fn enable_auth(endpoints: &[String]) {
    let mut admin = Client::connect(endpoints, None)
        .await
        .expect("admin client");
    admin.role_add("root").await.ok(); // etcd may already have it
    admin
        .user_add("root", "rootpw", None)
        .await
        .expect("add root");
    admin
        .user_grant_role("root", "root")
        .await
        .expect("grant root");
    admin.role_add("locker").await.expect("add role locker");
    admin
        .role_grant_permission("locker", Permission::read_write("authlocks/").with_prefix())
        .await
        .expect("grant locker");
    admin
        .user_add("locker", "lockerpw", None)
        .await
        .expect("add locker");
    admin
        .user_grant_role("locker", "locker")
        .await
        .expect("grant role locker");
    admin.role_add("other").await.expect("add role other");
    admin
        .role_grant_permission("other", Permission::read_write("other/").with_prefix())
        .await
        .expect("grant other");
    admin
        .user_add("outsider", "outsiderpw", None)
        .await
        .expect("add outsider");
    admin
        .user_grant_role("outsider", "other")
        .await
        .expect("grant role other");
    admin.auth_enable().await.expect("enable auth");
    // Authentication is on: anonymous requests now fail.
    let mut root = Client::connect(
        endpoints,
        Some(ConnectOptions::new().with_user("root", "rootpw")),
    )
    .await
    .expect("root client");
    root.get("authlocks/", None).await.expect("root can read");
}

fn config(endpoints: &[String]) -> EtcdConfig {
    EtcdConfig::new(endpoints.to_vec())
        .lease_ttl(Duration::from_secs(2))
        .request_timeout(Duration::from_secs(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_and_permissions() {
    let cluster = tokio::task::spawn_blocking(|| EtcdCluster::start(1))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("starting etcd: {e}"));
    let eps = cluster.endpoints();
    enable_auth(&eps).await;

    let name = LockName::new("authlocks/job").unwrap();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(2))
        .wait(Duration::from_millis(300));
    // etcd grants leases without a user even with authentication on, so an
    // anonymous client connects; its first key access is refused.
    let anonymous = EtcdLock::connect(config(&eps))
        .await
        .expect("anonymous lease grant");
    let err = anonymous
        .try_acquire(&name, &opts)
        .await
        .expect_err("anonymous try_acquire");
    assert_eq!(err.kind(), LockErrorKind::Unauthorized, "{err}");
    let err = anonymous
        .inspect(&name)
        .await
        .expect_err("anonymous inspect");
    assert_eq!(err.kind(), LockErrorKind::Unauthorized, "{err}");
    let err = EtcdLock::connect(config(&eps).user("locker", "wrong"))
        .await
        .expect_err("wrong password");
    assert_eq!(err.kind(), LockErrorKind::Unauthorized, "{err}");
    assert!(!err.is_retryable());

    let a = EtcdLock::connect(config(&eps).user("locker", "lockerpw"))
        .await
        .expect("locker connects");
    let b = EtcdLock::connect(config(&eps).user("locker", "lockerpw"))
        .await
        .expect("locker connects");
    let g = a.acquire(&name, &opts).await.expect("locker acquires");
    assert!(b.try_acquire(&name, &opts).await.unwrap().is_none());
    assert_eq!(
        b.acquire(&name, &opts).await.unwrap_err().kind(),
        LockErrorKind::Timeout
    );
    assert!(a.inspect(&name).await.unwrap().held);
    assert!(g.release().await.unwrap());

    // Authenticated, but without permission on the lock's keys.
    let outsider = EtcdLock::connect(config(&eps).user("outsider", "outsiderpw"))
        .await
        .expect("outsider connects (a lease needs no key permission)");
    let err = outsider
        .try_acquire(&name, &opts)
        .await
        .expect_err("outsider try_acquire");
    assert_eq!(err.kind(), LockErrorKind::Unauthorized, "{err}");
    let err = outsider
        .acquire(&name, &opts)
        .await
        .expect_err("outsider acquire");
    assert_eq!(err.kind(), LockErrorKind::Unauthorized, "{err}");
    let other = LockName::new("other/job").unwrap();
    let g = outsider
        .acquire(&other, &opts)
        .await
        .expect("outsider locks its own prefix");
    assert!(g.release().await.unwrap());
}
