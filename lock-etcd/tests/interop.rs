//! Interoperability with etcd's own lock: `etcdctl lock NAME` (etcd's Go
//! `concurrency.Mutex`) and `EtcdLock` exclude each other on the same name,
//! in both directions, with the same key layout. On the testbed's shared
//! etcd; a missing `etcdctl` fails the test.

use std::process::Stdio;
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockErrorKind, LockName};
use lock_testbed::{etcdctl_path, shared_etcd};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::{timeout, Instant};

mod support;
use support::{config, connect, eventually, keys_under, name};

/// Reads stdout lines of a child into a channel.
fn lines_of(child: &mut Child) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn etcdctl_lock(endpoint: &str, name: &LockName) -> Child {
    let bin = etcdctl_path().unwrap_or_else(|e| panic!("{e}"));
    Command::new(bin)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .arg("lock")
        .arg(name.as_str())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn etcdctl lock")
}

/// Stops an etcdctl child by its PID with SIGTERM (it then closes its session,
/// which deletes its key) and waits for it to exit.
async fn stop(mut child: Child) {
    let pid = child.id().expect("child still running");
    // SAFETY: plain kill(2) on the PID of a child we spawned and have not reaped.
    let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0, "kill -TERM {pid}");
    timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("etcdctl did not exit")
        .expect("wait");
}

/// `etcdctl lock NAME` (etcd's own `concurrency.Mutex`) and `EtcdLock` exclude
/// each other on the same name, in both directions, with the same key layout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_lock_and_ours_exclude_each_other() {
    let etcd = shared_etcd().expect("shared etcd");
    let eps = etcd.endpoints();
    let lease = Duration::from_secs(2);
    let ours = connect(config(eps.clone(), lease)).await;
    let n = name("etcdctl");
    let prefix = ours.key_prefix(&n);
    let opts = AcquireOptions::new()
        .ttl(lease)
        .wait(Duration::from_millis(500));

    // 1. etcdctl holds: we do not get it.
    let mut ctl = etcdctl_lock(&eps[0], &n);
    let mut out = lines_of(&mut ctl);
    let ctl_key = timeout(Duration::from_secs(10), out.recv())
        .await
        .expect("etcdctl never got the lock")
        .expect("etcdctl output");
    let hex = ctl_key
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("etcdctl key {ctl_key:?} is not under {prefix:?}"));
    assert!(
        !hex.is_empty()
            && hex
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
        "{ctl_key}"
    );
    assert!(
        ours.try_acquire(&n, &opts).await.unwrap().is_none(),
        "try_acquire got a lock etcdctl holds"
    );
    let err = ours
        .acquire(&n, &opts)
        .await
        .expect_err("acquire got a lock etcdctl holds");
    assert_eq!(err.kind(), LockErrorKind::Timeout, "{err}");
    let st = ours.inspect(&n).await.unwrap();
    assert!(st.held);
    // etcdctl's key has an empty value: no holder's description, no error.
    assert_eq!(st.holder, None);
    let listed = ours.list(n.as_str(), 10).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].1.holder, None);
    stop(ctl).await;
    let g = ours
        .acquire(&n, &opts.clone().wait(Duration::from_secs(5)))
        .await
        .expect("acquire after etcdctl let go");
    let (our_lease, _) = ours.session_lease().await.expect("session");
    assert_eq!(
        keys_under(&eps, &prefix).await,
        vec![format!("{prefix}{our_lease:x}")],
        "our key layout"
    );

    // 2. We hold: etcdctl blocks until we release.
    let mut ctl = etcdctl_lock(&eps[0], &n);
    let mut out = lines_of(&mut ctl);
    let early = timeout(Duration::from_millis(1500), out.recv()).await;
    assert!(
        early.is_err(),
        "etcdctl got the lock while we held it: {early:?}"
    );
    assert_eq!(
        keys_under(&eps, &prefix).await.len(),
        2,
        "etcdctl should be queued behind us"
    );
    let released_at = Instant::now();
    assert!(g.release().await.unwrap());
    let line = timeout(Duration::from_secs(5), out.recv())
        .await
        .expect("etcdctl did not get the lock after our release");
    println!(
        "etcdctl got the lock {:?} after our release: {line:?}",
        released_at.elapsed()
    );
    assert!(
        ours.try_acquire(&n, &opts).await.unwrap().is_none(),
        "we got it while etcdctl holds it"
    );
    stop(ctl).await;
    eventually(Duration::from_secs(3), "etcdctl's key removed", || async {
        keys_under(&eps, &prefix).await.is_empty()
    })
    .await;
}
