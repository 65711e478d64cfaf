//! Configurations at and beyond every limit: each is either refused by
//! `ZkConfig::validate` with a clear `InvalidArgument` (and then by
//! `ZkLock::connect` the same way), or accepted and usable; nothing panics,
//! neither while connecting nor in the background tasks of a session.
//!
//! And what the connect string, the name and the lock znode's ACL do on a
//! real ZooKeeper: a chroot is created and holds the locks; names ZooKeeper
//! cannot store are refused as invalid; a lock znode that refuses data
//! writes still works, one that refuses creates is `Unauthorized`.

use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockErrorKind, LockName};
use lock_testbed::unique_name;
use lock_zk::{ZkConfig, ZkLock, MAX_IDENTIFIER_LEN, MAX_TIMEOUT, MIN_TIMEOUT};
use proptest::prelude::*;
use zookeeper_client as zk;

mod support;
use support::{admin, children, config, name, requests_per_cycle, server};

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

/// A chroot in the connect string is created when missing and holds the locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chroot_is_created_and_holds_the_locks() {
    let server = server().await;
    let connect = server.connect_string();
    let admin = admin(&connect).await;
    let chroot = format!("/{}", unique_name("chroot"));
    let locks = ZkLock::connect(
        config(&format!("{connect}{chroot}/apps"), Duration::from_secs(4)).base_path("/locks"),
    )
    .await
    .unwrap();
    let lock = name("in-chroot");
    assert_eq!(
        locks.lock_path(&lock).unwrap(),
        format!("{chroot}/apps/locks/{lock}")
    );
    let guard = locks
        .try_acquire(&lock, &AcquireOptions::new())
        .await
        .unwrap()
        .expect("free lock");
    assert_eq!(
        children(&admin, &format!("{chroot}/apps/locks/{lock}"))
            .await
            .len(),
        1
    );
    assert!(guard.release().await.unwrap());
}

/// Names ZooKeeper cannot store, and names with a segment shaped exactly
/// like a contender node (which the lock one level up would count), are
/// refused as invalid before any request; a look-alike segment is fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_zookeeper_cannot_store_are_invalid() {
    let server = server().await;
    let locks = ZkLock::connect(config(&server.connect_string(), Duration::from_secs(4)))
        .await
        .unwrap();
    let parent = unique_name("shaped");
    for bad in [
        "emoji-\u{1f512}".to_string(),
        format!("{parent}/_c_4e1b9a3c-2f5d-4d8e-9a43-0c6f2b1e7d55-lock-0000000001"),
        format!("{parent}/8a1f0f8cb6a54f6e9d6f2c1f0a3b4c5d__lock__0000000001/x"),
        format!("{parent}/_c_4e1b9a3c-2f5d-4d8e-9a43-0c6f2b1e7d55-__WRIT__0000000001"),
    ] {
        let bad = LockName::new(bad).unwrap();
        let err = locks
            .try_acquire(&bad, &AcquireOptions::new())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{bad}: {err}");
        assert_eq!(
            locks.inspect(&bad).await.unwrap_err().kind(),
            LockErrorKind::InvalidArgument
        );
    }
    let look_alike = LockName::new(format!("{parent}/x-lock-0000000001")).unwrap();
    let g = locks
        .try_acquire(&look_alike, &AcquireOptions::new())
        .await
        .unwrap()
        .expect("a segment that only looks like a contender node");
    assert!(g.release().await.unwrap());
}

/// An acquisition counts the lock znode's children by writing its (unchanged)
/// data in the create's transaction. A lock whose znode's ACL allows
/// creating children but not writing its data still works (without that
/// count, so with a listing), gives the node's czxid as its token and
/// excludes a second client; a lock whose ACL refuses the create is
/// `Unauthorized` and leaves the count on for other locks (an uncontended
/// cycle still costs two requests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_whose_znode_refuses_data_writes_works_without_the_count() {
    let server = server().await;
    let connect = server.connect_string();
    let admin = admin(&connect).await;
    let session = Duration::from_secs(4);
    let base = format!("/distlock/{}", unique_name("acl"));
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    admin.mkdir(&base, &open).await.unwrap();
    // Two lock znodes, each refusing one permission to everyone.
    for (leaf, perms) in [
        (
            "no-write",
            zk::Permission::READ | zk::Permission::CREATE | zk::Permission::DELETE,
        ),
        (
            "no-create",
            zk::Permission::READ | zk::Permission::WRITE | zk::Permission::DELETE,
        ),
    ] {
        let acl = [zk::Acl::new(perms, zk::AuthId::anyone())];
        admin
            .create(
                &format!("{base}/{leaf}"),
                b"",
                &zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl)),
            )
            .await
            .unwrap();
    }
    let base_name = base.trim_start_matches("/distlock/");
    let lock_named = |leaf: &str| LockName::new(format!("{base_name}/{leaf}")).unwrap();
    let opts = AcquireOptions::new().ttl(session);

    // Refused create: Unauthorized, and the count stays on.
    let locks = ZkLock::connect(config(&connect, session)).await.unwrap();
    let err = locks
        .acquire(&lock_named("no-create"), &opts)
        .await
        .expect_err("the ACL refuses the create");
    assert_eq!(err.kind(), LockErrorKind::Unauthorized, "{err}");
    let open_lock = lock_named("open");
    locks
        .acquire(&open_lock, &opts)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let per_cycle = requests_per_cycle(server, &locks, &open_lock, &opts).await;
    assert_eq!(
        per_cycle[0], 2,
        "requests per uncontended cycle: {per_cycle:?}"
    );

    // Refused data write: the lock works, on every later acquisition too.
    let lock = lock_named("no-write");
    let dir = locks.lock_path(&lock).unwrap();
    let other = ZkLock::connect(config(&connect, session)).await.unwrap();
    for _ in 0..2 {
        let guard = locks.acquire(&lock, &opts).await.unwrap();
        let kids = children(&admin, &dir).await;
        assert_eq!(kids.len(), 1, "{kids:?}");
        let (_, stat) = admin.get_data(&format!("{dir}/{}", kids[0])).await.unwrap();
        assert_eq!(
            guard.fencing_token().map(|t| t.get()),
            Some(stat.czxid as u64)
        );
        assert!(
            other.try_acquire(&lock, &opts).await.unwrap().is_none(),
            "a second client got the lock while it was held"
        );
        assert!(guard.release().await.unwrap());
    }
    let (_, stat) = admin.get_data(&dir).await.unwrap();
    assert_eq!(
        stat.version, 0,
        "the znode's data was written despite its ACL"
    );
}
