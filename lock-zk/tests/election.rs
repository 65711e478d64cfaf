//! Leader elections on a real ZooKeeper, beside the conformance cases:
//! the layout of Curator's `LeaderLatch` (nodes created here exactly as
//! Curator creates them: `_c_<uuid>-latch-<seq>`, ephemeral sequential,
//! the participant id as data), both ways; the mutex and the election of
//! one name apart; the lock-delay marker; and a campaign whose create reply
//! is lost; and against the real Curator 5.4 in a JVM, both ways, for
//! `LeaderLatch` and for `LeaderSelector` (`ElectionRecipe::LeaderSelector`:
//! the path's mutex, shared with our mutex of the name).
//!
//! On the testbed's standalone server (tickTime 200 ms).

use std::time::Duration;

use futures::StreamExt;
use lock_core::{
    AcquireOptions, CampaignOptions, DistributedLock, FencingToken, LeaderElection, LockErrorKind,
    LockName,
};
use lock_testbed::{CuratorLatch, Proxy};
use lock_zk::{ElectionRecipe, ZkConfig, ZkLock};
use tokio::time::{sleep, timeout, Instant};
use zookeeper_client as zk;

mod support;
use support::{
    admin, children, ephemeral_sequential, granted_once_deleted, interop, server, Interop,
};

/// Curator's `StandardLockInternalsDriver.fixForSorting(name, "latch-")`:
/// the text after the last `latch-`, or the whole name.
fn latch_sort_key(child: &str) -> &str {
    match child.rfind("latch-") {
        Some(i) => &child[i + "latch-".len()..],
        None => child,
    }
}

/// Curator's `LeaderLatch.getLeader()`: every child of the latch path
/// sorted by [`latch_sort_key`] (Curator sorts them all), and the data of
/// the first.
async fn curator_leader(admin: &zk::Client, dir: &str) -> Option<(String, String)> {
    let mut all = children(admin, dir).await;
    all.sort_by(|a, b| latch_sort_key(a).cmp(latch_sort_key(b)));
    let first = all.into_iter().next()?;
    let (data, _) = admin
        .get_data(&format!("{dir}/{first}"))
        .await
        .expect("reading the first child");
    Some((first, String::from_utf8(data).unwrap()))
}

/// A Curator `LeaderLatch` participant's node with id `id`: its path and
/// czxid.
async fn curator_latch(admin: &zk::Client, dir: &str, id: &str) -> (String, i64) {
    let prefix = format!("{dir}/_c_{}-latch-", uuid::Uuid::new_v4().hyphenated());
    let (stat, seq) = admin
        .create(&prefix, id.as_bytes(), &ephemeral_sequential())
        .await
        .expect("creating a LeaderLatch node");
    (format!("{prefix}{seq}"), stat.czxid)
}

/// Curator's `getLeader` and ours both name the foreign node `theirs`
/// (published "them") as the leader.
async fn they_lead(t: &Interop, theirs: &str) {
    let (first, id) = curator_leader(&t.admin, &t.dir).await.unwrap();
    assert_eq!(
        (format!("{}/{first}", t.dir), id.as_str()),
        (theirs.to_string(), "them")
    );
    assert_eq!(
        t.locks.leader(&t.lock).await.unwrap().unwrap().value,
        "them"
    );
}

fn opts() -> CampaignOptions {
    CampaignOptions::new()
        .ttl(Duration::from_secs(4))
        .wait(Duration::from_secs(20))
}

/// A `LeaderLatch` participant leads first: our `leader` and `observe` show
/// its id with its node's czxid as the epoch, our campaign waits behind it
/// (our node second, holding our value), and leads once its node goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_leader_first_then_ours() {
    let t = interop("latch-them-first").await;
    let (theirs, czxid) = curator_latch(&t.admin, &t.dir, "them").await;
    let led = t.locks.leader(&t.lock).await.unwrap().expect("a leader");
    assert_eq!(led.value, "them");
    assert_eq!(led.epoch, Some(FencingToken::new(czxid as u64)));
    assert!(led.since.is_some());
    let mut seen = t.locks.observe(&t.lock).await.unwrap();
    let first = seen.next().await.unwrap().unwrap().expect("a leader");
    assert_eq!(first.value, "them");

    let waiting = {
        let (locks, lock) = (t.locks.clone(), t.lock.clone());
        tokio::spawn(async move { locks.campaign(&lock, "us", &opts()).await })
    };
    sleep(Duration::from_millis(300)).await;
    let line = children(&t.admin, &t.dir).await;
    assert_eq!(line.len(), 2, "{line:?}");
    they_lead(&t, &theirs).await;

    let term = granted_once_deleted(&t.admin, &theirs, waiting).await;
    let now = t.locks.leader(&t.lock).await.unwrap().expect("our term");
    assert_eq!((now.value.as_str(), now.epoch), ("us", term.epoch()));
    let next = timeout(Duration::from_secs(2), seen.next())
        .await
        .expect("the follower was not told")
        .unwrap()
        .unwrap();
    assert_eq!(next.map(|l| l.value).as_deref(), Some("us"));
    assert!(term.resign().await.unwrap());
    assert!(children(&t.admin, &t.dir).await.is_empty());
}

/// We lead: a `LeaderLatch` node created after ours is second, and
/// Curator's `getLeader` (the data of the first child in its order) reads
/// our value, also with our lock-delay marker beside the nodes and after a
/// proclaim made before it came; a proclaim while it waits right behind us
/// is refused. Once we resign, their node is first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ours_first_then_a_curator_participant() {
    let t = interop("latch-us-first").await;
    let o = opts().lock_delay(Duration::from_secs(1));
    let term = t.locks.campaign(&t.lock, "us", &o).await.unwrap();
    term.proclaim("us, again").await.unwrap();
    let (theirs, _) = curator_latch(&t.admin, &t.dir, "them").await;
    let line = children(&t.admin, &t.dir).await;
    assert!(
        line.contains(&"lock_delay.distlock".to_string()),
        "{line:?}"
    );
    let (first, id) = curator_leader(&t.admin, &t.dir).await.unwrap();
    assert_ne!(format!("{}/{first}", t.dir), theirs);
    assert_eq!(id, "us, again");
    let refused = term.proclaim("us, once more").await.unwrap_err();
    assert_eq!(refused.kind(), LockErrorKind::Unsupported, "{refused}");
    assert_eq!(
        curator_leader(&t.admin, &t.dir).await.unwrap().1,
        "us, again"
    );
    sleep(Duration::from_millis(100)).await;
    assert!(term.is_leader());
    assert!(term.resign().await.unwrap());
    // The resignation took the marker away: their node leads.
    they_lead(&t, &theirs).await;
    t.admin.delete(&theirs, None).await.unwrap();
    assert_eq!(t.locks.leader(&t.lock).await.unwrap(), None);
}

/// The mutex and the election of one name do not count each other's
/// nodes: both are held at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mutex_and_the_election_of_a_name_are_apart() {
    let t = interop("latch-and-lock").await;
    let guard = t
        .locks
        .acquire(&t.lock, &AcquireOptions::new().ttl(Duration::from_secs(4)))
        .await
        .unwrap();
    let term = t
        .locks
        .campaign(&t.lock, "v", &opts().wait(Duration::from_millis(500)))
        .await
        .expect("the mutex holder's node kept the election from starting");
    assert!(t.locks.inspect(&t.lock).await.unwrap().held);
    assert!(guard.release().await.unwrap());
    assert!(term.resign().await.unwrap());
    let name = LockName::new(format!("{}/lock_delay.distlock", t.lock)).unwrap();
    let err = t
        .locks
        .acquire(&name, &AcquireOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), lock_core::LockErrorKind::InvalidArgument);
}

/// A term that ends without a resignation leaves its lock-delay marker:
/// a candidate that tries (no wait) meets it and leaves nothing; a waiting
/// one leads once the delay has passed, and its resignation leaves no
/// marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unresigned_end_leaves_the_marker_for_its_delay() {
    let t = interop("latch-delay").await;
    let delay = Duration::from_millis(1500);
    let o = opts().lock_delay(delay);
    // Its guard gives the term up after its TTL: the core's clean-up
    // deletes its node (`release_after_loss`), not the marker.
    let abandoned = o.clone().ttl(Duration::from_secs(1)).keep_alive(false);
    let term = t.locks.campaign(&t.lock, "old", &abandoned).await.unwrap();
    let marker = format!("{}/lock_delay.distlock", t.dir);
    assert!(t.admin.check_stat(&marker).await.unwrap().is_some());
    let deadline = Instant::now() + Duration::from_secs(3);
    while children(&t.admin, &t.dir).await.len() > 1 {
        assert!(Instant::now() < deadline, "the old term's node stayed");
        sleep(Duration::from_millis(10)).await;
    }
    assert!(!term.is_leader());
    let gone = Instant::now();
    assert!(t.admin.check_stat(&marker).await.unwrap().is_some());
    let tried = t
        .locks
        .campaign(&t.lock, "new", &opts().wait(Duration::ZERO))
        .await;
    assert!(tried.is_err(), "led during another term's lock-delay");
    let next = t.locks.campaign(&t.lock, "new", &opts()).await.unwrap();
    assert!(
        gone.elapsed() >= delay,
        "led {:?} after the end",
        gone.elapsed()
    );
    assert!(gone.elapsed() <= delay + Duration::from_secs(1));
    assert!(t.admin.check_stat(&marker).await.unwrap().is_none());
    assert!(!term.resign().await.unwrap_or(false));
    assert!(next.resign().await.unwrap());
    assert!(children(&t.admin, &t.dir).await.is_empty());
}

/// A campaign whose create reply is held back past its request timeout:
/// the node was created; the campaign finds it by its protection prefix
/// (after a `sync`) and waits with it, creating no second node. When the
/// leader resigns, it leads, alone, and its resignation leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_whose_create_reply_is_lost_leaves_one_node() {
    let server = server().await;
    let connect = server.connect_string();
    let proxy = Proxy::start(server.endpoint(0).parse().unwrap()).unwrap();
    let a = ZkLock::connect(ZkConfig::new(connect.clone()).session_timeout(Duration::from_secs(4)))
        .await
        .unwrap();
    let b = ZkLock::connect(
        ZkConfig::new(proxy.addr().to_string())
            .session_timeout(Duration::from_secs(4))
            .request_timeout(Duration::from_millis(800)),
    )
    .await
    .unwrap();
    let admin = admin(&connect).await;
    let lock = support::name("latch-lost-reply");
    let dir = a.lock_path(&lock).unwrap();
    let leading = a.campaign(&lock, "a", &opts()).await.unwrap();

    proxy.set_reply_delay(Duration::from_millis(1200));
    let waiting = {
        let (b, lock) = (b.clone(), lock.clone());
        tokio::spawn(async move { b.campaign(&lock, "b", &opts()).await })
    };
    let deadline = Instant::now() + Duration::from_millis(700);
    while children(&admin, &dir).await.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "b's create never reached the server"
        );
        sleep(Duration::from_millis(10)).await;
    }
    // The create is applied; its reply is held back past b's request timeout.
    proxy.set_reply_delay(Duration::ZERO);
    sleep(Duration::from_secs(2)).await;
    let line = children(&admin, &dir).await;
    assert_eq!(line.len(), 2, "a second node of b's: {line:?}");
    assert!(!waiting.is_finished(), "b led beside a");
    assert!(leading.resign().await.unwrap());
    let term = timeout(Duration::from_secs(5), waiting)
        .await
        .expect("b did not lead after a resigned")
        .unwrap()
        .expect("b's campaign failed");
    let line = children(&admin, &dir).await;
    assert_eq!(line.len(), 1, "{line:?}");
    let led = a.leader(&lock).await.unwrap().expect("b leads");
    assert_eq!((led.value.as_str(), led.epoch), ("b", term.epoch()));
    assert!(term.resign().await.unwrap());
    assert!(children(&admin, &dir).await.is_empty());
}

/// A follower whose session is cut off is told so: its stream yields a
/// retryable error within about the session timeout, then ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_cut_off_gets_a_retryable_error_and_the_end() {
    let server = server().await;
    let proxy = Proxy::start(server.endpoint(0).parse().unwrap()).unwrap();
    let session = Duration::from_secs(2);
    let follower = ZkLock::connect(
        ZkConfig::new(proxy.addr().to_string())
            .session_timeout(session)
            .request_timeout(Duration::from_secs(1)),
    )
    .await
    .unwrap();
    let lock = support::name("latch-cut-follower");
    let mut seen = follower.observe(&lock).await.unwrap();
    assert_eq!(seen.next().await.unwrap().unwrap(), None);
    proxy.blackhole();
    let err = timeout(session + Duration::from_secs(3), seen.next())
        .await
        .expect("the cut-off follower was told nothing")
        .expect("the stream ended without an error")
        .expect_err("an item after the cut");
    assert!(err.is_retryable(), "{err}");
    let end = timeout(Duration::from_secs(1), seen.next()).await;
    assert!(
        matches!(end, Ok(None)),
        "the stream went on after its error"
    );
}

/// How long the real Curator participant may take for a step on a busy
/// machine (its JVM is another process).
const CURATOR_STEP: Duration = Duration::from_secs(30);

/// A real Curator 5.4 `LeaderLatch` participant (another process) leads
/// first: our `leader` shows its id, our campaign waits behind it, and once
/// it closes its latch we lead and Curator's `getLeader` names our value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_curator_leads_first_then_ours() {
    let t = interop("curator-first").await;
    let mut curator = blocking_curator(&t, "them").await;
    tokio::task::block_in_place(|| curator.wait_until_leader(CURATOR_STEP))
        .expect("Curator leads an empty election");
    let led = t.locks.leader(&t.lock).await.unwrap().expect("a leader");
    assert_eq!(led.value, "them");

    let waiting = {
        let (locks, lock) = (t.locks.clone(), t.lock.clone());
        tokio::spawn(async move { locks.campaign(&lock, "us", &opts()).await })
    };
    sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "we led beside Curator's leader");
    assert_eq!(
        tokio::task::block_in_place(|| curator.leader(CURATOR_STEP)).unwrap(),
        "them"
    );
    tokio::task::block_in_place(|| curator.close(CURATOR_STEP)).expect("closing Curator's latch");
    let term = timeout(CURATOR_STEP, waiting)
        .await
        .expect("we did not lead after Curator closed its latch")
        .unwrap()
        .unwrap();
    assert!(term.is_leader());
    let (_, id) = curator_leader(&t.admin, &t.dir).await.expect("a leader");
    assert_eq!(id, "us");
    assert!(term.resign().await.unwrap());
}

/// We lead first: a real Curator `LeaderLatch` participant started after us
/// does not lead, its `getLeader` names our value (proclaimed before it
/// came), a proclaim while it waits right behind us is refused (a data
/// change would use up its watch: `LeaderLatch` looks again only when the
/// node ahead is deleted, and it would never lead), and it leads once we
/// resign.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ours_leads_first_then_the_real_curator() {
    let t = interop("curator-second").await;
    let term = t.locks.campaign(&t.lock, "us", &opts()).await.unwrap();
    term.proclaim("us, moved").await.unwrap();
    let mut curator = blocking_curator(&t, "them").await;
    assert_eq!(
        tokio::task::block_in_place(|| curator.leader(CURATOR_STEP)).unwrap(),
        "us, moved"
    );
    // Curator creates its node in the background after its latch started.
    until_children(&t, 2, CURATOR_STEP).await;
    let refused = term.proclaim("us again").await.unwrap_err();
    assert_eq!(refused.kind(), LockErrorKind::Unsupported, "{refused}");
    assert_eq!(term.value(), "us, moved");
    assert!(
        !tokio::task::block_in_place(|| curator.says_leader()),
        "Curator led beside our leader"
    );
    assert!(term.resign().await.unwrap());
    tokio::task::block_in_place(|| curator.wait_until_leader(CURATOR_STEP))
        .expect("Curator did not lead after our resignation");
    let led = t.locks.leader(&t.lock).await.unwrap().expect("a leader");
    assert_eq!(led.value, "them");
    drop(curator);
}

/// In `LeaderLatch`'s layout, a proclaim with only our own candidates
/// behind the leader goes through (they look again on any event) and the
/// next one still leads after the resignation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proclaim_with_our_own_candidate_behind_goes_through() {
    let t = interop("proclaim-ours-behind").await;
    let term = t.locks.campaign(&t.lock, "us", &opts()).await.unwrap();
    let waiting = {
        let (locks, lock) = (t.locks.clone(), t.lock.clone());
        tokio::spawn(async move { locks.campaign(&lock, "next", &opts()).await })
    };
    until_children(&t, 2, Duration::from_secs(10)).await;
    term.proclaim("us, moved").await.unwrap();
    assert!(term.resign().await.unwrap());
    let next = timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the next candidate did not lead")
        .unwrap()
        .unwrap();
    assert_eq!(next.value(), "next");
    assert!(next.resign().await.unwrap());
}

/// Waits until the election's znode has `n` children, within `within`.
async fn until_children(t: &Interop, n: usize, within: Duration) {
    let deadline = Instant::now() + within;
    while children(&t.admin, &t.dir).await.len() < n {
        assert!(Instant::now() < deadline, "{n} children of {}", t.dir);
        sleep(Duration::from_millis(10)).await;
    }
}

/// A Curator participant on the election's znode, with a session timeout
/// of 4 s (as our client's).
async fn blocking_curator(t: &Interop, id: &str) -> CuratorLatch {
    let (connect, dir, id) = (t.connect.clone(), t.dir.clone(), id.to_string());
    tokio::task::spawn_blocking(move || {
        CuratorLatch::start(&connect, &dir, &id, Duration::from_secs(4))
    })
    .await
    .unwrap()
    .expect("starting Curator's LeaderLatch (needs libcurator-recipes-java and a JDK)")
}

/// A lock-zk client of the shared server whose elections speak
/// `LeaderSelector`'s nodes.
async fn selector_client(t: &Interop) -> ZkLock {
    let config = ZkConfig::new(t.connect.clone())
        .session_timeout(Duration::from_secs(4))
        .election(ElectionRecipe::LeaderSelector);
    ZkLock::connect(config).await.expect("connecting lock-zk")
}

/// A Curator participant running a `LeaderSelector` on the election's
/// znode.
async fn blocking_selector(t: &Interop, id: &str) -> CuratorLatch {
    let (connect, dir, id) = (t.connect.clone(), t.dir.clone(), id.to_string());
    tokio::task::spawn_blocking(move || {
        let mut c = CuratorLatch::connect(&connect, Duration::from_secs(4))?;
        c.start_selector(&dir, &id, CURATOR_STEP)?;
        Ok::<_, lock_testbed::TestbedError>(c)
    })
    .await
    .unwrap()
    .expect("starting Curator's LeaderSelector (needs libcurator-recipes-java and a JDK)")
}

/// A real Curator 5.4 `LeaderSelector` leads first: our `leader` shows its
/// id, our campaign (in `LeaderSelector`'s layout) waits behind it, and
/// once it gives up its leadership we lead and its `getLeader` names us.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_curator_selector_leads_first_then_ours() {
    let t = interop("selector-first").await;
    let locks = selector_client(&t).await;
    let mut curator = blocking_selector(&t, "them").await;
    tokio::task::block_in_place(|| curator.wait_until_leader(CURATOR_STEP))
        .expect("Curator's selector leads an empty election");
    let led = locks.leader(&t.lock).await.unwrap().expect("a leader");
    assert_eq!(led.value, "them");
    let children = children(&t.admin, &t.dir).await;
    assert!(
        children.iter().all(|c| c.contains("-lock-")),
        "a selector's node is a mutex node: {children:?}"
    );

    let waiting = {
        let (locks, lock) = (locks.clone(), t.lock.clone());
        tokio::spawn(async move { locks.campaign(&lock, "us", &opts()).await })
    };
    sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "we led beside Curator's leader");
    tokio::task::block_in_place(|| curator.resign(CURATOR_STEP)).expect("Curator resigns");
    let term = timeout(CURATOR_STEP, waiting)
        .await
        .expect("we did not lead after Curator resigned")
        .unwrap()
        .unwrap();
    assert!(term.is_leader());
    assert_eq!(
        tokio::task::block_in_place(|| curator.leader(CURATOR_STEP)).unwrap(),
        "us"
    );
    assert!(term.resign().await.unwrap());
}

/// We lead first (in `LeaderSelector`'s layout): a real Curator
/// `LeaderSelector` started after us does not lead, its `getLeader` names
/// our value (also after a proclaim), and it leads once we resign.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ours_leads_first_then_the_real_curator_selector() {
    let t = interop("selector-second").await;
    let locks = selector_client(&t).await;
    let term = locks.campaign(&t.lock, "us", &opts()).await.unwrap();
    let mut curator = blocking_selector(&t, "them").await;
    assert_eq!(
        tokio::task::block_in_place(|| curator.leader(CURATOR_STEP)).unwrap(),
        "us"
    );
    term.proclaim("us, moved").await.unwrap();
    assert_eq!(
        tokio::task::block_in_place(|| curator.leader(CURATOR_STEP)).unwrap(),
        "us, moved"
    );
    assert!(
        !tokio::task::block_in_place(|| curator.says_leader()),
        "Curator led beside our leader"
    );
    assert!(term.resign().await.unwrap());
    tokio::task::block_in_place(|| curator.wait_until_leader(CURATOR_STEP))
        .expect("Curator did not lead after our resignation");
    let led = locks.leader(&t.lock).await.unwrap().expect("a leader");
    assert_eq!(led.value, "them");
    // Curator deletes its mutex node after `takeLeadership` returns:
    // followers see nobody lead then.
    let mut seen = locks.observe(&t.lock).await.unwrap();
    tokio::task::block_in_place(|| curator.resign(CURATOR_STEP)).expect("Curator resigns");
    timeout(CURATOR_STEP, async {
        while let Some(now) = seen.next().await {
            if now.unwrap().is_none() {
                return;
            }
        }
        panic!("the follower's stream ended");
    })
    .await
    .expect("nobody leads once Curator resigned");
}

/// In `LeaderSelector`'s layout, as in Curator, an election and the mutex
/// of one name stand in one line: a term waits for the mutex's holder, and
/// the mutex for the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_election_shares_the_line_of_the_names_mutex() {
    let t = interop("selector-mutex").await;
    let locks = selector_client(&t).await;
    let guard = locks
        .acquire(&t.lock, &AcquireOptions::new().ttl(Duration::from_secs(4)))
        .await
        .unwrap();
    let waiting = {
        let (locks, lock) = (locks.clone(), t.lock.clone());
        tokio::spawn(async move { locks.campaign(&lock, "us", &opts()).await })
    };
    sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "a term began beside the mutex's holder"
    );
    assert!(guard.release().await.unwrap());
    let term = timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the campaign did not lead after the release")
        .unwrap()
        .unwrap();
    let tried = locks
        .try_acquire(&t.lock, &AcquireOptions::new().ttl(Duration::from_secs(4)))
        .await
        .unwrap();
    assert!(tried.is_none(), "the mutex was taken beside the leader");
    assert!(term.resign().await.unwrap());
}
