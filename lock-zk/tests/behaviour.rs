//! What lock-zk does on a real ZooKeeper beyond the shared suite: the node
//! layout (Curator's, nested names, chroot), exclusion with Curator-named
//! contenders, guards sharing one session, validity bounded by the session
//! (and by the guard's own TTL with keep-alive off), and keep-alive traffic
//! that grows with sessions, not guards.
//!
//! All on the testbed's standalone server (tickTime 200 ms).

use std::time::Duration;

use lock_core::{
    AcquireOptions, DistributedLock, GuardState, LockErrorKind, LockName, LossCause, ReadWriteLock,
    Semaphore,
};
use lock_testbed::{unique_name, Proxy, ZkEnsemble};
use lock_zk::{ZkConfig, ZkLock};
use tokio::time::{sleep, Instant};
use zookeeper_client as zk;

mod support;
use support::{
    admin, children, ephemeral_sequential, granted_once_deleted, interop, name, received,
    requests_per_cycle, server, Interop,
};

fn config(connect: &str, session: Duration) -> ZkConfig {
    ZkConfig::new(connect).session_timeout(session)
}

/// Whether `child` is named exactly as Curator's protected `InterProcessMutex`
/// names contenders: `_c_` + a hyphenated uuid + `-lock-` + 10 digits.
fn is_curator_name(child: &str) -> bool {
    let Some(rest) = child.strip_prefix("_c_") else {
        return false;
    };
    let Some((uuid, seq)) = rest.rsplit_once("-lock-") else {
        return false;
    };
    uuid.len() == 36
        && uuid.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
        && seq.len() == 10
        && seq.chars().all(|c| c.is_ascii_digit())
}

/// Curator's `StandardLockInternalsDriver.fixForSorting`: the text after the
/// last `lock-`, or the whole name.
fn curator_sort_key(child: &str) -> &str {
    match child.rfind("lock-") {
        Some(i) => &child[i + "lock-".len()..],
        None => child,
    }
}

/// Lock `team/a/b` is the znode `/distlock/team/a/b`; its contender is an
/// ephemeral child named as Curator names them, holding the holder's
/// description with the identifier as its `id`, and
/// the fencing token is that node's czxid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_layout_is_curators_with_nested_names() {
    let server = server().await;
    let connect = server.connect_string();
    let admin = admin(&connect).await;
    let locks = ZkLock::connect(config(&connect, Duration::from_secs(4)).identifier("layout-test"))
        .await
        .unwrap();
    let lock = LockName::new(format!("team/{}/b", unique_name("layout"))).unwrap();
    let dir = locks.lock_path(&lock).unwrap();
    assert_eq!(dir, format!("/distlock/{lock}"));
    let guard = locks.acquire(&lock, &AcquireOptions::new()).await.unwrap();
    let kids = children(&admin, &dir).await;
    assert_eq!(kids.len(), 1, "{kids:?}");
    assert!(
        is_curator_name(&kids[0]),
        "not Curator's layout: {}",
        kids[0]
    );
    let (data, stat) = admin.get_data(&format!("{dir}/{}", kids[0])).await.unwrap();
    // The holder's description as JSON, with the identifier as `id`.
    let text = String::from_utf8(data).unwrap();
    let expected = lock_core::Holder::this_process().to_json_with(&[("id", "layout-test")]);
    assert_eq!(text, expected);
    assert!(text.contains(r#""id":"layout-test""#), "{text}");
    assert_ne!(
        stat.ephemeral_owner, 0,
        "the contender node is not ephemeral"
    );
    assert_eq!(
        Some(stat.czxid as u64),
        guard.fencing_token().map(|t| t.get())
    );
    let (_, parent) = admin.get_data(&dir).await.unwrap();
    assert_eq!(
        parent.ephemeral_owner, 0,
        "the lock node must not be ephemeral"
    );
    assert!(guard.release().await.unwrap());
    assert!(children(&admin, &dir).await.is_empty());
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

/// A contender node created the way Curator creates one (`_c_<uuid>-lock-`,
/// ephemeral sequential) excludes us, is reported by `inspect` with its
/// czxid (and no holder's description: its data is not one), and wakes our waiter when deleted; our node, created first, sorts
/// first by Curator's own rule, so Curator would wait for us.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_named_contenders_exclude_both_ways() {
    let Interop {
        admin,
        locks,
        lock,
        dir,
        ..
    } = interop("curator").await;
    let ephemeral_seq = ephemeral_sequential();
    let curator_prefix = format!("{dir}/_c_{}-lock-", "0b0f9a54-9c1d-4bb0-a3f5-21c9a4f2d7e1");

    // Curator holds.
    let (stat, seq) = admin
        .create(&curator_prefix, b"127.0.0.7", &ephemeral_seq)
        .await
        .unwrap();
    let curator_node = format!("{curator_prefix}{seq}");
    let opts = AcquireOptions::new().ttl(Duration::from_secs(4));
    assert!(locks.try_acquire(&lock, &opts).await.unwrap().is_none());
    let status = locks.inspect(&lock).await.unwrap();
    assert!(status.held);
    assert_eq!(status.token.map(|t| t.get()), Some(stat.czxid as u64));
    assert_eq!(status.waiters, Some(0));
    // Curator's node data (an IP address) describes no holder.
    assert_eq!(status.holder, None);
    let waiting = {
        let (locks, lock, opts) = (
            locks.clone(),
            lock.clone(),
            opts.clone().wait(Duration::from_secs(10)),
        );
        tokio::spawn(async move { locks.acquire(&lock, &opts).await })
    };
    sleep(Duration::from_millis(300)).await;
    assert_eq!(locks.inspect(&lock).await.unwrap().waiters, Some(1));
    let guard = granted_once_deleted(&admin, &curator_node, waiting).await;

    // We hold; a Curator contender arriving now sorts after us by Curator's rule.
    let (_, seq) = admin
        .create(&curator_prefix, b"127.0.0.7", &ephemeral_seq)
        .await
        .unwrap();
    let late = format!("_c_0b0f9a54-9c1d-4bb0-a3f5-21c9a4f2d7e1-lock-{seq}");
    let mut kids = children(&admin, &dir).await;
    kids.sort_by(|a, b| curator_sort_key(a).cmp(curator_sort_key(b)));
    assert_eq!(kids.len(), 2);
    assert_eq!(
        kids[1], late,
        "Curator would not wait for our node: {kids:?}"
    );
    assert!(is_curator_name(&kids[0]), "{kids:?}");
    assert!(guard.release().await.unwrap());
    admin.delete(&format!("{dir}/{late}"), None).await.unwrap();
}

/// Guards taken through one `ZkLock` (one session) on one name exclude each
/// other: each acquisition has its own node, and waiters of one session are
/// served in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_of_one_session_exclude_each_other() {
    let server = server().await;
    let locks = ZkLock::connect(config(&server.connect_string(), Duration::from_secs(4)))
        .await
        .unwrap();
    let lock = name("one-session");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(4))
        .wait(Duration::from_secs(10));
    let first = locks.acquire(&lock, &opts).await.unwrap();
    assert!(
        locks.try_acquire(&lock, &opts).await.unwrap().is_none(),
        "same session took it twice"
    );
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..3 {
        let (locks, lock, opts, order) = (locks.clone(), lock.clone(), opts.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let g = locks.acquire(&lock, &opts).await.unwrap();
            order.lock().unwrap().push(i);
            sleep(Duration::from_millis(20)).await;
            assert!(g.release().await.unwrap());
        }));
        sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(locks.inspect(&lock).await.unwrap().waiters, Some(3));
    assert!(first.release().await.unwrap());
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
}

/// With keep-alive on and a TTL far beyond the session timeout, a guard stays
/// held over many session timeouts, and its validity never promises more than
/// the session: at most one session timeout ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validity_is_bounded_by_the_session_and_keeps_up() {
    let server = server().await;
    let session = Duration::from_secs(2);
    let locks = ZkLock::connect(config(&server.connect_string(), session))
        .await
        .unwrap();
    let lock = name("bounded");
    let guard = locks
        .acquire(&lock, &AcquireOptions::new().ttl(Duration::from_secs(60)))
        .await
        .unwrap();
    let started = Instant::now();
    while started.elapsed() < session * 4 {
        match guard.state() {
            GuardState::Held { valid_until } => {
                assert!(
                    valid_until <= Instant::now() + session,
                    "validity beyond the session timeout"
                );
            }
            other => panic!("a kept-alive guard left the held state: {other:?}"),
        }
        sleep(Duration::from_millis(25)).await;
    }
    assert!(guard.release().await.unwrap());
}

/// With keep-alive off and a TTL longer than the session timeout (5 s on a
/// 2 s session), a guard is held for its own TTL while the session is
/// confirmed, its validity never more than one session timeout ahead; then it
/// is lost and its node deleted, so another client gets the lock at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_off_guard_lasts_its_ttl_while_the_session_is_confirmed() {
    let server = server().await;
    let session = Duration::from_secs(2);
    let a = ZkLock::connect(config(&server.connect_string(), session))
        .await
        .unwrap();
    let b = ZkLock::connect(config(&server.connect_string(), session))
        .await
        .unwrap();
    let lock = name("no-keepalive");
    let ttl = Duration::from_secs(5);
    let opts = AcquireOptions::new().ttl(ttl).keep_alive(false);
    let started = Instant::now();
    let guard = a.acquire(&lock, &opts).await.unwrap();
    while started.elapsed() < ttl - Duration::from_millis(400) {
        match guard.state() {
            GuardState::Held { valid_until } => assert!(
                valid_until <= Instant::now() + session,
                "validity beyond the session timeout"
            ),
            other => panic!(
                "an unrenewed guard left the held state after {:?}: {other:?}",
                started.elapsed()
            ),
        }
        sleep(Duration::from_millis(50)).await;
    }
    let cause = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("an unrenewed guard outlived its TTL");
    let lost_after = started.elapsed();
    assert_eq!(cause, LossCause::Expired);
    assert!(
        lost_after >= ttl - Duration::from_millis(200),
        "lost after {lost_after:?}, before its TTL of {ttl:?}"
    );
    let next = b
        .acquire(&lock, &opts.clone().wait(Duration::from_secs(2)))
        .await
        .expect("the lapsed guard's node was not deleted");
    let took = started.elapsed();
    println!("keep-alive off, ttl {ttl:?}, session {session:?}: lost after {lost_after:?}, next holder after {took:?}");
    assert!(took < ttl + Duration::from_secs(1), "took {took:?}");
    assert!(next.extend(Duration::from_secs(60)).await.unwrap() <= Instant::now() + session);
    assert!(next.release().await.unwrap());
}

/// With keep-alive off, a guard whose TTL (30 s) is far beyond the session
/// timeout outlives several session timeouts while connected, but once its
/// client is cut off (blackholed), its validity never passes the cut + one
/// session timeout and it is lost within about that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_off_guard_cut_off_is_lost_within_the_session_timeout() {
    let server = server().await;
    let proxy = Proxy::start(server.endpoint(0).parse().unwrap()).expect("proxy");
    let session = Duration::from_secs(2);
    let a = ZkLock::connect(
        ZkConfig::new(proxy.addr().to_string())
            .session_timeout(session)
            .request_timeout(Duration::from_secs(1))
            .connect_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap();
    let lock = name("no-keepalive-cut");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .keep_alive(false);
    let guard = a.acquire(&lock, &opts).await.unwrap();
    let started = Instant::now();
    while started.elapsed() < session * 2 {
        assert!(
            matches!(guard.state(), GuardState::Held { .. }),
            "after {:?}: {:?}",
            started.elapsed(),
            guard.state()
        );
        sleep(Duration::from_millis(50)).await;
    }
    let cut = Instant::now();
    proxy.blackhole();
    let lost_after = loop {
        let now = Instant::now();
        match guard.valid_until() {
            Some(v) => {
                assert!(
                    v <= cut + session,
                    "valid {:?} past the cut; session timeout {session:?}",
                    v - cut
                );
                assert!(
                    now - cut <= session + Duration::from_millis(250),
                    "still held {:?} after the cut",
                    now - cut
                );
            }
            None => break now - cut,
        }
        sleep(Duration::from_millis(10)).await;
    };
    let mut states = guard.subscribe();
    let lost = tokio::time::timeout(
        Duration::from_secs(1),
        states.wait_for(|s| matches!(s, GuardState::Lost { .. })),
    )
    .await
    .expect("the loss was not reported")
    .expect("keeper gone")
    .clone();
    println!("keep-alive off, ttl 30 s, session {session:?}: lost {lost_after:?} after the cut ({lost:?})");
    assert!(
        matches!(
            lost,
            GuardState::Lost {
                cause: LossCause::SessionExpired | LossCause::Expired
            }
        ),
        "{lost:?}"
    );
}

/// Keep-alive sends no request per guard: a session with 20 kept-alive guards
/// (renewed every 500 ms each) gets as few requests as a session with one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_traffic_grows_with_sessions_not_guards() {
    let server = server().await;
    let connect = server.connect_string();
    let session = Duration::from_secs(4);
    let one = ZkLock::connect(config(&connect, session)).await.unwrap();
    let many = ZkLock::connect(config(&connect, session)).await.unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_millis(1500));
    let single = one.acquire(&name("traffic-one"), &opts).await.unwrap();
    let mut guards = Vec::new();
    for _ in 0..20 {
        guards.push(many.acquire(&name("traffic-many"), &opts).await.unwrap());
    }
    // Each guard sets the watch on its node once, shortly after its grant:
    // not keep-alive traffic, and done before the counting starts.
    sleep(Duration::from_millis(300)).await;
    let (sid_one, sid_many) = (one.session_id().unwrap(), many.session_id().unwrap());
    let server_ref: &'static ZkEnsemble = server;
    let count = |sid: String| tokio::task::spawn_blocking(move || received(server_ref, &sid));
    let (one_before, many_before) = (
        count(sid_one.clone()).await.unwrap(),
        count(sid_many.clone()).await.unwrap(),
    );
    sleep(Duration::from_secs(3)).await;
    let one_sent = count(sid_one).await.unwrap() - one_before;
    let many_sent = count(sid_many).await.unwrap() - many_before;
    println!("requests in 3 s: one guard {one_sent}, 20 guards {many_sent} (per-guard renewals would be about 120)");
    for g in &guards {
        assert!(
            matches!(g.state(), GuardState::Held { .. }),
            "{:?}",
            g.state()
        );
    }
    assert!(
        many_sent <= one_sent + 3,
        "20 guards cost {many_sent} requests, one guard {one_sent}"
    );
    assert!(many_sent < 30, "{many_sent} requests in 3 s");
    for g in guards {
        assert!(g.release().await.unwrap());
    }
    assert!(single.release().await.unwrap());
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

/// An uncontended acquire + release costs two requests (the create, which
/// counts the lock znode's children in its transaction, then the delete);
/// a waiter right behind the holder also lists and watches the holder's
/// node, and gets the lock when the holder's node goes, without listing
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_per_acquisition() {
    let server = server().await;
    let connect = server.connect_string();
    let session = Duration::from_secs(4);
    let holder = ZkLock::connect(config(&connect, session)).await.unwrap();
    let waiter = ZkLock::connect(config(&connect, session)).await.unwrap();
    let lock = name("requests");
    let opts = AcquireOptions::new().ttl(Duration::from_secs(4));
    // The lock's znode exists, and no heartbeat falls into the counts (one
    // per second: the counts are taken well within one).
    holder
        .acquire(&lock, &opts)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let server_ref: &'static ZkEnsemble = server;
    let count = |sid: String| tokio::task::spawn_blocking(move || received(server_ref, &sid));

    // A heartbeat may fall into one cycle; the others cost exactly two: the
    // create (counting the children in its transaction) and the delete.
    let per_cycle = requests_per_cycle(server, &holder, &lock, &opts).await;
    assert_eq!(
        per_cycle[0], 2,
        "requests per uncontended cycle: {per_cycle:?}"
    );

    let held = holder.acquire(&lock, &opts).await.unwrap();
    let wsid = waiter.session_id().unwrap();
    let before = count(wsid.clone()).await.unwrap();
    let waiting = {
        let (waiter, lock) = (waiter.clone(), lock.clone());
        let opts = opts.clone().wait(Duration::from_secs(10));
        tokio::spawn(async move { waiter.acquire(&lock, &opts).await })
    };
    sleep(Duration::from_millis(200)).await;
    assert!(held.release().await.unwrap());
    let g = waiting.await.unwrap().unwrap();
    let waited = count(wsid.clone()).await.unwrap() - before;
    assert!(g.release().await.unwrap());
    // the create (counting two children), the listing, the watch on the
    // holder's node, then the delete; and at most one heartbeat (one a
    // second) in either window, before the grant or before the release.
    let released = count(wsid).await.unwrap() - before;
    assert!(
        (3..=4).contains(&waited) && (4..=5).contains(&released) && released > waited,
        "waiter: {waited} requests until granted, {released} with its release"
    );
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

/// Curator's `InterProcessReadWriteLock` sorts the children of the lock's
/// znode by the text after `__READ__` or `__WRIT__` (the whole name when
/// neither is there).
fn curator_rw_sort_key(child: &str) -> &str {
    ["__READ__", "__WRIT__"]
        .iter()
        .find_map(|m| child.rfind(m).map(|i| &child[i + m.len()..]))
        .unwrap_or(child)
}

/// Whether Curator would grant the lock to its node `ours` among
/// `children`: a reader when no write node sorts before it
/// (`ReadLock.getsTheLock`), a writer when it sorts first.
fn curator_grants(mut children: Vec<String>, ours: &str) -> bool {
    children.sort_by(|a, b| curator_rw_sort_key(a).cmp(curator_rw_sort_key(b)));
    let at = children
        .iter()
        .position(|c| c == ours)
        .expect("our node listed");
    if ours.contains("__READ__") {
        !children[..at].iter().any(|c| c.contains("__WRIT__"))
    } else {
        at == 0
    }
}

/// The read-write lock shares Curator's `InterProcessReadWriteLock` nodes:
/// ours are named as Curator names them; a Curator-layout read node (made
/// here as Curator makes it) admits our readers, blocks our writer and
/// wakes it when deleted; our write node blocks a Curator reader and our
/// read node a Curator writer, by Curator's own rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_lock_shares_curators_nodes() {
    let Interop {
        admin,
        locks,
        lock,
        dir,
        ..
    } = interop("curator-rw").await;
    let ephemeral_seq = ephemeral_sequential();
    let uuid = "0b0f9a54-9c1d-4bb0-a3f5-21c9a4f2d7e1";
    let opts = AcquireOptions::new().ttl(Duration::from_secs(4));

    // A Curator reader holds.
    let read_prefix = format!("{dir}/_c_{uuid}-__READ__");
    let (_, seq) = admin
        .create(&read_prefix, b"", &ephemeral_seq)
        .await
        .unwrap();
    let curator_reader = format!("{read_prefix}{seq}");
    let r = locks
        .try_acquire_read(&lock, &opts)
        .await
        .unwrap()
        .expect("our reader beside a Curator reader");
    let ours = r
        .server_key()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    assert!(
        ours.starts_with("_c_") && ours.contains("-__READ__") && ours.len() == 3 + 36 + 9 + 10,
        "{ours}"
    );
    assert!(r.release().await.unwrap());
    assert!(locks
        .try_acquire_write(&lock, &opts)
        .await
        .unwrap()
        .is_none());
    let waiting = {
        let (locks, lock, opts) = (
            locks.clone(),
            lock.clone(),
            opts.clone().wait(Duration::from_secs(10)),
        );
        tokio::spawn(async move { locks.acquire_write(&lock, &opts).await })
    };
    sleep(Duration::from_millis(300)).await;
    let w = granted_once_deleted(&admin, &curator_reader, waiting).await;
    let ours = w
        .server_key()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    assert!(ours.contains("-__WRIT__"), "{ours}");

    // Our writer holds: a Curator reader arriving now waits, by Curator's rule.
    let (_, seq) = admin
        .create(&read_prefix, b"", &ephemeral_seq)
        .await
        .unwrap();
    let late_reader = format!("_c_{uuid}-__READ__{seq}");
    assert!(!curator_grants(children(&admin, &dir).await, &late_reader));
    assert!(w.release().await.unwrap());
    assert!(curator_grants(children(&admin, &dir).await, &late_reader));
    admin
        .delete(&format!("{dir}/{late_reader}"), None)
        .await
        .unwrap();

    // Our reader holds: a Curator writer waits.
    let r = locks.try_acquire_read(&lock, &opts).await.unwrap().unwrap();
    let (_, seq) = admin
        .create(&format!("{dir}/_c_{uuid}-__WRIT__"), b"", &ephemeral_seq)
        .await
        .unwrap();
    let curator_writer = format!("_c_{uuid}-__WRIT__{seq}");
    assert!(!curator_grants(
        children(&admin, &dir).await,
        &curator_writer
    ));
    // ... and so do our new readers (writer preference, as in Curator).
    assert!(locks
        .try_acquire_read(&lock, &opts)
        .await
        .unwrap()
        .is_none());
    assert!(r.release().await.unwrap());
    assert!(curator_grants(
        children(&admin, &dir).await,
        &curator_writer
    ));
    admin
        .delete(&format!("{dir}/{curator_writer}"), None)
        .await
        .unwrap();
}

/// `inspect` names the holder's session (the node's ephemeral owner, as
/// ZooKeeper prints session ids) and the guard its node's path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_names_the_holders_session_and_the_guard_its_node() {
    let server = server().await;
    let connect = server.connect_string();
    let (a, b) = (
        ZkLock::connect(config(&connect, Duration::from_secs(4)))
            .await
            .unwrap(),
        ZkLock::connect(config(&connect, Duration::from_secs(4)))
            .await
            .unwrap(),
    );
    let lock = name("owner");
    let g = a.acquire(&lock, &AcquireOptions::new()).await.unwrap();
    let status = b.inspect(&lock).await.unwrap();
    assert_eq!(status.owner, a.session_id(), "{status:?}");
    let key = g.server_key().expect("the node path").to_string();
    assert!(
        key.starts_with(&format!("{}/_c_", a.lock_path(&lock).unwrap())),
        "{key}"
    );
    let admin = admin(&connect).await;
    assert!(admin.check_stat(&key).await.unwrap().is_some());
    assert!(g.release().await.unwrap());
    assert!(admin.check_stat(&key).await.unwrap().is_none());
}

/// The semaphore shares Curator's `InterProcessSemaphoreV2` nodes: leases
/// `<name>/leases/_c_<uuid>-lease-<seq>`, taken under the mutex
/// `<name>/locks`. A Curator lease (made here as Curator makes it) takes a
/// permit; a Curator-layout node in `locks` (a Curator client counting the
/// leases) makes us wait until it goes; our lease is named as Curator's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_shares_curators_nodes() {
    let Interop {
        admin,
        locks,
        lock: sem,
        dir,
        ..
    } = interop("curator-sem").await;
    let opts = AcquireOptions::new().ttl(Duration::from_secs(4));
    let ephemeral_seq = ephemeral_sequential();
    let parents = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    admin
        .mkdir(&format!("{dir}/leases"), &parents)
        .await
        .unwrap();
    admin
        .mkdir(&format!("{dir}/locks"), &parents)
        .await
        .unwrap();
    let uuid = "0b0f9a54-9c1d-4bb0-a3f5-21c9a4f2d7e1";

    // A Curator client holds one of two permits.
    let (_, seq) = admin
        .create(
            &format!("{dir}/leases/_c_{uuid}-lease-"),
            b"",
            &ephemeral_seq,
        )
        .await
        .unwrap();
    let curator_lease = format!("{dir}/leases/_c_{uuid}-lease-{seq}");
    let p = locks
        .try_acquire_permit(&sem, 2, &opts)
        .await
        .unwrap()
        .expect("the second of two permits");
    let key = p.server_key().unwrap().to_string();
    let leaf = key.rsplit('/').next().unwrap();
    assert!(
        key.starts_with(&format!("{dir}/leases/_c_"))
            && leaf.contains("-lease-")
            && leaf.len() == 3 + 36 + 7 + 10,
        "{key}"
    );
    assert!(locks
        .try_acquire_permit(&sem, 2, &opts)
        .await
        .unwrap()
        .is_none());
    assert!(p.release().await.unwrap());

    // A Curator client in the middle of taking a lease (its node in `locks`):
    // we queue behind it and go ahead when it is done.
    let (_, seq) = admin
        .create(&format!("{dir}/locks/_c_{uuid}-lock-"), b"", &ephemeral_seq)
        .await
        .unwrap();
    let curator_gate = format!("{dir}/locks/_c_{uuid}-lock-{seq}");
    let waiting = {
        let (locks, sem, opts) = (
            locks.clone(),
            sem.clone(),
            opts.clone().wait(Duration::from_secs(10)),
        );
        tokio::spawn(async move { locks.acquire_permit(&sem, 2, &opts).await })
    };
    sleep(Duration::from_millis(300)).await;
    let p = granted_once_deleted(&admin, &curator_gate, waiting).await;
    assert!(p.release().await.unwrap());
    admin.delete(&curator_lease, None).await.unwrap();
    assert!(children(&admin, &format!("{dir}/leases")).await.is_empty());
    assert!(children(&admin, &format!("{dir}/locks")).await.is_empty());
}
