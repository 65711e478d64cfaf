//! Node compatibility with the peer clients on a real ZooKeeper: the node
//! layout is Curator's (nested names too); contenders, read-write lock nodes
//! and semaphore leases made here as Curator makes them and ours exclude
//! each other by Curator's own rules; kazoo (Python) and lock-zk exclude
//! each other both ways, with the mutex and the read-write lock.
//!
//! On the testbed's standalone server (tickTime 200 ms). A missing Python or
//! kazoo fails the kazoo tests.

use std::process::Stdio;
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockName, ReadWriteLock, Semaphore};
use lock_testbed::unique_name;
use lock_zk::ZkLock;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::time::{sleep, timeout, Instant};
use zookeeper_client as zk;

mod support;
use support::{
    admin, children, config, ephemeral_sequential, granted_once_deleted, interop, server, Interop,
};

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

/// Runs `tests/support/kazoo_lock.py`; fails (never skips) without Python or kazoo.
fn kazoo(args: &[&str]) -> tokio::process::Child {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/kazoo_lock.py");
    let python = lock_testbed::python_path().unwrap_or_else(|e| panic!("{e}"));
    tokio::process::Command::new(python)
        .arg(script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run Python ({e}): the kazoo interop test needs Python with kazoo (Debian: `apt-get install python3-kazoo`, or set DISTLOCK_PYTHON)"))
}

async fn kazoo_line(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) -> String {
    let line = timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("the kazoo script did not answer within 20 s")
        .expect("reading the kazoo script's output")
        .unwrap_or_default();
    assert!(
        !line.starts_with("NO_KAZOO") && !line.is_empty(),
        "the kazoo interop test needs the Python package kazoo (Debian: `apt-get install python3-kazoo`, or set DISTLOCK_PYTHON to a Python that has it; script said {line:?})"
    );
    line
}

/// kazoo's `Lock` (with `extra_lock_patterns=("-lock-",)`, its documented
/// Curator interop) and lock-zk exclude each other on the same path, both
/// ways, and a waiter of ours is woken by kazoo's release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_and_lock_zk_exclude_each_other() {
    let Interop {
        connect,
        locks: ours,
        lock,
        dir: path,
        ..
    } = interop("kazoo").await;
    let opts = AcquireOptions::new().ttl(Duration::from_secs(4));

    // kazoo holds: we are refused, and our waiter gets it when kazoo releases.
    let mut holder = kazoo(&["hold", "lock", &connect, &path]);
    let mut stdin = holder.stdin.take().unwrap();
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    let held = kazoo_line(&mut lines).await;
    let node = held
        .strip_prefix("HELD ")
        .unwrap_or_else(|| panic!("kazoo said {held:?}"));
    assert!(node.contains("__lock__"), "kazoo's node {node}");
    assert!(
        ours.try_acquire(&lock, &opts).await.unwrap().is_none(),
        "granted while kazoo holds it"
    );
    let status = ours.inspect(&lock).await.unwrap();
    assert!(status.held);
    // kazoo's node data (its identifier) describes no holder, and fails nothing.
    assert_eq!(status.holder, None);
    let listed = ours.list(lock.as_str(), 10).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].1.holder, None);
    let waiting = {
        let (ours, lock, opts) = (
            ours.clone(),
            lock.clone(),
            opts.clone().wait(Duration::from_secs(20)),
        );
        tokio::spawn(async move { ours.acquire(&lock, &opts).await })
    };
    sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "our waiter got the lock while kazoo holds it"
    );
    let released_at = Instant::now();
    stdin.write_all(b"release\n").await.unwrap();
    stdin.flush().await.unwrap();
    assert_eq!(kazoo_line(&mut lines).await, "RELEASED");
    let guard = waiting
        .await
        .unwrap()
        .expect("our waiter after kazoo released");
    assert!(
        released_at.elapsed() < Duration::from_secs(2),
        "woken {:?} after kazoo's release",
        released_at.elapsed()
    );
    assert!(holder.wait().await.unwrap().success());

    // We hold: kazoo's acquire(timeout=1) fails; after our release it succeeds.
    let mut refused = kazoo(&["try", "lock", &connect, &path, "1"]);
    let mut lines = BufReader::new(refused.stdout.take().unwrap()).lines();
    assert_eq!(
        kazoo_line(&mut lines).await,
        "TIMEOUT",
        "kazoo got the lock while lock-zk held it"
    );
    assert!(refused.wait().await.unwrap().success());
    assert!(guard.release().await.unwrap());
    let mut granted = kazoo(&["try", "lock", &connect, &path, "5"]);
    let mut lines = BufReader::new(granted.stdout.take().unwrap()).lines();
    assert_eq!(kazoo_line(&mut lines).await, "ACQUIRED");
    assert!(granted.wait().await.unwrap().success());
}

/// kazoo's `try` of `kind` on `path` with a timeout: whether it got the lock.
async fn kazoo_tries(kind: &str, connect: &str, path: &str, secs: &str) -> bool {
    let mut child = kazoo(&["try", kind, connect, path, secs]);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let said = kazoo_line(&mut lines).await;
    assert!(child.wait().await.unwrap().success());
    match said.as_str() {
        "ACQUIRED" => true,
        "TIMEOUT" => false,
        other => panic!("kazoo said {other:?}"),
    }
}

/// kazoo's `ReadLock` and `WriteLock` (told about Curator's node names with
/// `extra_lock_patterns`, as kazoo documents) and lock-zk's read-write lock
/// on the same path: readers share, a writer excludes everyone, both ways.
/// (kazoo's `WriteLock` nodes are its `Lock` nodes: a kazoo `Lock` on the
/// path is a writer to lock-zk's read-write lock too.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_read_write_locks_and_lock_zk_share_the_path() {
    let Interop {
        connect,
        locks: ours,
        lock,
        dir: path,
        ..
    } = interop("kazoo-rw").await;
    let opts = AcquireOptions::new().ttl(Duration::from_secs(4));

    for (kind, marker) in [("write", "__lock__"), ("read", "__rlock__")] {
        let mut holder = kazoo(&["hold", kind, &connect, &path]);
        let mut stdin = holder.stdin.take().unwrap();
        let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
        let held = kazoo_line(&mut lines).await;
        assert!(
            held.starts_with("HELD") && held.contains(marker),
            "kazoo said {held:?}"
        );
        assert!(
            ours.try_acquire_write(&lock, &opts)
                .await
                .unwrap()
                .is_none(),
            "our writer beside a kazoo {kind} lock"
        );
        let reader = ours.try_acquire_read(&lock, &opts).await.unwrap();
        assert_eq!(
            reader.is_some(),
            kind == "read",
            "our reader beside a kazoo {kind} lock"
        );
        if let Some(r) = reader {
            assert!(r.release().await.unwrap());
        }
        stdin.write_all(b"release\n").await.unwrap();
        stdin.flush().await.unwrap();
        assert_eq!(kazoo_line(&mut lines).await, "RELEASED");
        assert!(holder.wait().await.unwrap().success());
    }

    let w = ours.acquire_write(&lock, &opts).await.unwrap();
    assert!(
        !kazoo_tries("read", &connect, &path, "1").await,
        "kazoo reader beside our writer"
    );
    assert!(
        !kazoo_tries("write", &connect, &path, "1").await,
        "kazoo writer beside our writer"
    );
    assert!(w.release().await.unwrap());
    let r = ours.acquire_read(&lock, &opts).await.unwrap();
    assert!(
        !kazoo_tries("write", &connect, &path, "1").await,
        "kazoo writer beside our reader"
    );
    assert!(
        kazoo_tries("read", &connect, &path, "5").await,
        "kazoo reader refused beside our reader"
    );
    assert!(r.release().await.unwrap());
    assert!(kazoo_tries("write", &connect, &path, "5").await);
}
