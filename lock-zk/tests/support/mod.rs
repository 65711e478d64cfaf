//! Helpers shared by the lock-zk integration tests.
// Each test binary uses a subset of them.
#![allow(dead_code)]

use std::time::Duration;

use lock_core::LockName;
use lock_testbed::{shared_zk, unique_name, ZkEnsemble};
use zookeeper_client as zk;

/// A lock name unique to this test run.
pub fn name(prefix: &str) -> LockName {
    LockName::new(unique_name(prefix)).expect("valid name")
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
