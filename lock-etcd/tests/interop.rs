//! Interoperability with etcd's own lock and election: `etcdctl lock NAME`
//! (etcd's Go `concurrency.Mutex`) and `EtcdLock` exclude each other on the
//! same name, in both directions, with the same key layout; so do
//! `etcdctl elect NAME PROPOSAL` (`concurrency.Election`) and our
//! campaigns, and `etcdctl elect -l` and our followers see each other's
//! leaders. On the testbed's shared etcd; a missing `etcdctl` fails the
//! test.

use std::process::Stdio;
use std::time::Duration;

use futures::StreamExt;
use lock_core::{
    AcquireOptions, CampaignOptions, DistributedLock, LeaderElection, LockErrorKind, LockName,
};
use lock_testbed::{etcdctl_path, shared_etcd};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::{sleep, timeout, Instant};

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

/// `etcdctl elect [-l] NAME [PROPOSAL]` as a child whose output is read.
fn etcdctl_elect(endpoint: &str, name: &LockName, args: &[&str]) -> Child {
    let bin = etcdctl_path().unwrap_or_else(|e| panic!("{e}"));
    Command::new(bin)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .arg("elect")
        .args(args.iter().filter(|a| a.starts_with('-')))
        .arg(name.as_str())
        .args(args.iter().filter(|a| !a.starts_with('-')))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn etcdctl elect")
}

/// The next (key, value) pair etcdctl prints, within `limit`.
async fn next_pair(
    out: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    limit: Duration,
) -> Option<(String, String)> {
    let deadline = Instant::now() + limit;
    let key = tokio::time::timeout_at(deadline, out.recv()).await.ok()??;
    let value = tokio::time::timeout_at(deadline, out.recv()).await.ok()??;
    Some((key, value))
}

/// We campaign and lead: `etcdctl elect NAME p2` waits behind us and
/// leads once we resign; `etcdctl elect -l NAME` sees our value, then its.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_elect_waits_for_our_term() {
    let etcd = shared_etcd().expect("shared etcd");
    let eps = etcd.endpoints();
    let lease = Duration::from_secs(2);
    let ours = connect(config(eps.clone(), lease)).await;
    let n = name("elect-ours-first");
    let prefix = ours.key_prefix(&n);
    let opts = CampaignOptions::new().ttl(lease);
    let term = ours.campaign(&n, "ours-1", &opts).await.expect("campaign");
    let (our_lease, _) = ours.session_lease().await.expect("session");
    let our_key = format!("{prefix}{our_lease:x}");

    let mut watcher = etcdctl_elect(&eps[0], &n, &["-l"]);
    let mut seen = lines_of(&mut watcher);
    let first = next_pair(&mut seen, Duration::from_secs(10)).await;
    assert_eq!(first, Some((our_key.clone(), "ours-1".to_string())));

    let mut ctl = etcdctl_elect(&eps[0], &n, &["p2"]);
    let mut out = lines_of(&mut ctl);
    eventually(
        Duration::from_secs(10),
        "etcdctl's candidate queued",
        || async { keys_under(&eps, &prefix).await.len() == 2 },
    )
    .await;
    let early = next_pair(&mut out, Duration::from_millis(1500)).await;
    assert_eq!(early, None, "etcdctl led while we did");
    assert_eq!(
        keys_under(&eps, &prefix).await[0],
        our_key,
        "we lead the line"
    );

    term.proclaim("ours-2").await.expect("proclaim");
    let proclaimed = next_pair(&mut seen, Duration::from_secs(5)).await;
    assert_eq!(proclaimed, Some((our_key.clone(), "ours-2".to_string())));

    let resigned = Instant::now();
    assert!(term.resign().await.expect("resign"));
    let led = next_pair(&mut out, Duration::from_secs(5))
        .await
        .expect("etcdctl did not lead after our resignation");
    println!(
        "etcdctl led {:?} after our resignation: {led:?}",
        resigned.elapsed()
    );
    assert_eq!(led.1, "p2");
    assert_eq!(
        next_pair(&mut seen, Duration::from_secs(5)).await,
        Some(led.clone()),
        "the observer did not see etcdctl's term"
    );
    let leader = ours.leader(&n).await.unwrap().expect("a leader");
    assert_eq!(leader.value, "p2");
    stop(ctl).await;
    stop(watcher).await;
    eventually(Duration::from_secs(3), "etcdctl's key removed", || async {
        keys_under(&eps, &prefix).await.is_empty()
    })
    .await;
}

/// `etcdctl elect NAME p1` leads: our campaign waits, our followers see
/// p1, and we lead once etcdctl resigns (SIGTERM).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_campaign_waits_for_etcdctl_elect() {
    let etcd = shared_etcd().expect("shared etcd");
    let eps = etcd.endpoints();
    let lease = Duration::from_secs(2);
    let ours = connect(config(eps.clone(), lease)).await;
    let n = name("elect-etcdctl-first");
    let prefix = ours.key_prefix(&n);

    let mut ctl = etcdctl_elect(&eps[0], &n, &["p1"]);
    let mut out = lines_of(&mut ctl);
    let (ctl_key, value) = next_pair(&mut out, Duration::from_secs(10))
        .await
        .expect("etcdctl never led");
    assert_eq!(value, "p1");
    assert!(
        ctl_key.starts_with(&prefix),
        "{ctl_key} is not under {prefix}"
    );

    let mut followers = ours.observe(&n).await.expect("observe");
    let now = timeout(Duration::from_secs(5), followers.next())
        .await
        .expect("observe told nothing")
        .expect("the stream ended")
        .expect("observe failed")
        .expect("a leader");
    assert_eq!(now.value, "p1");
    let leader = ours.leader(&n).await.unwrap().expect("a leader");
    assert_eq!(leader.value, "p1");
    assert_eq!(leader.epoch, now.epoch);

    let campaign = {
        let (ours, n) = (ours.clone(), n.clone());
        let opts = CampaignOptions::new()
            .ttl(lease)
            .wait(Duration::from_secs(30));
        tokio::spawn(async move { ours.campaign(&n, "ours", &opts).await })
    };
    sleep(Duration::from_millis(1500)).await;
    assert!(!campaign.is_finished(), "we led while etcdctl did");
    assert_eq!(keys_under(&eps, &prefix).await.len(), 2);

    let stopped = Instant::now();
    stop(ctl).await;
    let term = timeout(Duration::from_secs(5), campaign)
        .await
        .expect("we did not lead after etcdctl resigned")
        .unwrap()
        .expect("campaign");
    println!("we led {:?} after etcdctl was stopped", stopped.elapsed());
    assert!(
        term.epoch() > leader.epoch,
        "{:?} <= {:?}",
        term.epoch(),
        leader.epoch
    );
    let mut next = None;
    while next
        .as_ref()
        .map(|l: &lock_core::LeaderInfo| l.value.as_str())
        != Some("ours")
    {
        next = timeout(Duration::from_secs(5), followers.next())
            .await
            .expect("the follower was not told of our term")
            .expect("the stream ended")
            .expect("observe failed");
    }
    assert_eq!(next.unwrap().epoch, term.epoch());
    assert!(term.resign().await.unwrap());
    assert!(keys_under(&eps, &prefix).await.is_empty());
}
