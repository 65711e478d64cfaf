//! Helpers shared by the lock-zk integration tests.
// Each test binary uses a subset of them.
#![allow(dead_code)]

pub mod conformance;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use lock_core::LockName;
use lock_testbed::{shared_zk, unique_name, ZkEnsemble};
use lock_zk::{ZkConfig, ZkLock};
use zookeeper_client as zk;

/// A lock name unique to this test run.
pub fn name(prefix: &str) -> LockName {
    LockName::new(unique_name(prefix)).expect("valid name")
}

/// A configuration for `connect` with this session timeout.
pub fn config(connect: &str, session: Duration) -> ZkConfig {
    ZkConfig::new(connect).session_timeout(session)
}

/// The testbed's shared standalone ZooKeeper (started on first use; a
/// failure to start it fails the test).
pub async fn server() -> &'static ZkEnsemble {
    tokio::task::spawn_blocking(shared_zk)
        .await
        .expect("start-up task")
        .unwrap_or_else(|e| panic!("the testbed could not start ZooKeeper: {e}"))
}

/// The test's own ZooKeeper session, for looking behind the backend's back.
pub async fn admin(connect: &str) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(4))
        .connect(connect)
        .await
        .expect("the test's own ZooKeeper session")
}

/// The children of `path` (none when it does not exist).
pub async fn children(admin: &zk::Client, path: &str) -> Vec<String> {
    match admin.list_children(path).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("listing {path}: {e}"),
    }
}

/// The set-up of a test that plays another library's part on the same
/// nodes: a lock-zk client of the shared server (4 s session), a fresh lock
/// name whose znode exists, and the test's own session.
pub struct Interop {
    /// The connect string of the shared server.
    pub connect: String,
    /// The test's own session.
    pub admin: zk::Client,
    /// The lock-zk client.
    pub locks: ZkLock,
    /// The lock name.
    pub lock: LockName,
    /// Its znode.
    pub dir: String,
}

/// [`Interop`] for a name starting with `prefix`.
pub async fn interop(prefix: &str) -> Interop {
    let connect = server().await.connect_string();
    let admin = admin(&connect).await;
    let locks =
        ZkLock::connect(ZkConfig::new(connect.clone()).session_timeout(Duration::from_secs(4)))
            .await
            .expect("connecting lock-zk to the shared server");
    let lock = name(prefix);
    let dir = locks.lock_path(&lock).expect("a valid lock path");
    admin
        .mkdir(
            &dir,
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap_or_else(|e| panic!("creating {dir}: {e}"));
    Interop {
        connect,
        admin,
        locks,
        lock,
        dir,
    }
}

/// How Curator and kazoo create their contender nodes: ephemeral
/// sequential, open ACL.
pub fn ephemeral_sequential() -> zk::CreateOptions<'static> {
    zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all())
}

/// The end of an interop test's wait: `waiting` (an acquire spawned a
/// while ago) is still blocked by another library's node `node`; the node is
/// deleted, and the acquire returns its guard within a second.
pub async fn granted_once_deleted<T>(
    admin: &zk::Client,
    node: &str,
    waiting: tokio::task::JoinHandle<Result<T, lock_core::LockError>>,
) -> T {
    assert!(
        !waiting.is_finished(),
        "granted while {node} holds the lock"
    );
    let deleted = tokio::time::Instant::now();
    admin
        .delete(node, None)
        .await
        .unwrap_or_else(|e| panic!("deleting {node}: {e}"));
    let granted = waiting
        .await
        .expect("the acquire task")
        .unwrap_or_else(|e| panic!("not granted after {node} went: {e}"));
    assert!(
        deleted.elapsed() < Duration::from_secs(1),
        "woken {:?} after {node} went",
        deleted.elapsed()
    );
    granted
}

/// The number of requests the server received on session `sid`, from the
/// four-letter word `cons`.
pub fn received(server: &ZkEnsemble, sid: &str) -> u64 {
    let mut s = TcpStream::connect(server.endpoint(0)).expect("connecting for `cons`");
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.write_all(b"cons").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).expect("reading `cons`");
    let line = out
        .lines()
        .find(|l| l.contains(&format!("sid={sid},")))
        .unwrap_or_else(|| panic!("session {sid} not in `cons`:\n{out}"));
    let n = line
        .split("recved=")
        .nth(1)
        .and_then(|r| r.split(',').next());
    n.and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no recved= in {line}"))
}

/// The requests the server received on `locks`' session for each of three
/// uncontended acquire+release cycles of `lock`, fewest first (a heartbeat
/// may fall into one of them).
pub async fn requests_per_cycle(
    server: &'static ZkEnsemble,
    locks: &ZkLock,
    lock: &LockName,
    opts: &lock_core::AcquireOptions,
) -> Vec<u64> {
    use lock_core::DistributedLock;
    let sid = locks.session_id().expect("a connected session");
    let count = |sid: String| async move {
        tokio::task::spawn_blocking(move || received(server, &sid))
            .await
            .expect("counting task")
    };
    let mut per_cycle = Vec::new();
    for _ in 0..3 {
        let before = count(sid.clone()).await;
        let guard = locks.acquire(lock, opts).await.expect("a free lock");
        assert!(guard.release().await.expect("release"));
        per_cycle.push(count(sid.clone()).await - before);
    }
    per_cycle.sort();
    per_cycle
}
