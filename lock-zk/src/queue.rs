//! The queue protocol every recipe shares: our contender node (its create,
//! the look-up after a lost reply, its clean-up) and the wait for our turn,
//! with a small [`Recipe`] saying which contenders ahead block us (as
//! Curator's `LockInternalsDriver` does).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::backend::{line, CleanupOnDrop};
use lock_core::{Holder, LockError, LockErrorKind, LockMode, Result};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{lock_error, Failure};
use crate::node::{self, Contender as Child, Marker};
use crate::session::{locked, Session};

/// How often a contender node is created again when its parent vanished
/// between the `mkdir` and the `create` (an empty container node removed by
/// the server), and after a lost create reply that left no node.
const CREATE_ATTEMPTS: usize = 4;

/// How many times clean-up retries the removal of a contender node whose
/// deletion failed (the session stays alive, so the node would otherwise stay).
const CLEANUP_ATTEMPTS: u32 = 30;

/// Which queue a contender stands in, and which contenders ahead block it
/// (Curator's `LockInternalsDriver`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Recipe {
    /// A mutex (Curator's `InterProcessMutex`, kazoo's `Lock`): the first
    /// holds, each other waits for the one just ahead.
    Mutex,
    /// The read side of a read-write lock (Curator's
    /// `InterProcessReadWriteLock`): holds unless a write node is ahead, and
    /// waits for the nearest one.
    Read,
    /// Its write side: holds when first, waits for the node just ahead.
    Write,
    /// An election's line (Curator's `LeaderLatch`): the first leads, each
    /// other waits for the one just ahead, as in a mutex.
    Leader,
    /// An election's line as Curator's `LeaderSelector` keeps it: the
    /// line of the path's mutex (`InterProcessMutex`), whose holder leads.
    Selector,
}

impl Recipe {
    /// The line of an election in the layout of `recipe`.
    pub(crate) fn election(recipe: crate::ElectionRecipe) -> Self {
        match recipe {
            crate::ElectionRecipe::LeaderLatch => Self::Leader,
            crate::ElectionRecipe::LeaderSelector => Self::Selector,
        }
    }

    /// Whether it is an election's line.
    pub(crate) fn is_election(self) -> bool {
        matches!(self, Self::Leader | Self::Selector)
    }

    /// The marker of our own nodes.
    pub(crate) fn marker(self) -> Marker {
        match self {
            Self::Mutex => Marker::CuratorLock,
            Self::Read => Marker::CuratorRead,
            Self::Write => Marker::CuratorWrite,
            Self::Leader => Marker::CuratorLatch,
            Self::Selector => Marker::CuratorLock,
        }
    }

    /// Whether a child with `marker` stands in this queue.
    pub(crate) fn counts(self, marker: Marker) -> bool {
        match self {
            Self::Mutex | Self::Selector => node::is_mutex(marker),
            Self::Read | Self::Write => node::is_read_write(marker),
            Self::Leader => node::is_latch(marker),
        }
    }

    /// The contender ahead of `order[pos]` to wait for, `None` when it
    /// holds. Looks only at `order[..pos]`, so `pos = order.len()` asks
    /// about a newcomer.
    pub(crate) fn blocker(self, order: &[Child], pos: usize) -> Option<usize> {
        let ahead = order.get(..pos)?;
        let writers = ahead.iter().rev().map(|c| node::is_write(c.marker));
        line::blocker(self.mode(), writers).map(|nearest| pos - 1 - nearest)
    }

    /// The lock mode whose line this recipe keeps.
    fn mode(self) -> LockMode {
        match self {
            Self::Mutex | Self::Leader | Self::Selector => LockMode::Exclusive,
            Self::Read => LockMode::Read,
            Self::Write => LockMode::Write,
        }
    }

    /// Whether `order[pos]` holds as soon as `order[blocker]` is gone,
    /// without looking again: nothing else ahead blocks it, and nothing can
    /// come to block it (a later node always has a larger sequence number;
    /// only a write node can be replaced, by the read node of its
    /// downgrade, which a writer has to wait for).
    pub(crate) fn settled(self, order: &[Child], pos: usize, blocker: usize) -> bool {
        match self {
            Self::Mutex | Self::Leader | Self::Selector => blocker == 0 && pos == 1,
            Self::Write => blocker == 0 && pos == 1 && !node::is_write(order[0].marker),
            Self::Read => !order[..blocker].iter().any(|c| node::is_write(c.marker)),
        }
    }

    /// The contender whose departure may leave `order[blocker]` all that
    /// stands ahead of `order[pos]` (watched too, so that the listing that
    /// shows it happens before the blocker goes).
    pub(crate) fn second(self, order: &[Child], pos: usize, blocker: usize) -> Option<usize> {
        let _ = pos;
        // What blocks the blocker: once it goes, the blocker alone stands
        // in our way.
        self.blocker(order, blocker)
    }
}

/// A listing of a lock's znode, and when the request behind it was sent.
pub(crate) struct Listing {
    /// Taken before the request was sent.
    pub looked: Instant,
    /// The children it listed.
    pub children: Vec<String>,
    /// The pzxid of the lock's znode in that listing (the zxid of the last
    /// create or delete of a child), where the request returned it.
    pub pzxid: Option<i64>,
}

/// Our node, as [`Nodes::create`] made (or found) it.
pub(crate) struct Created {
    /// Its full path.
    pub path: String,
    /// Its stat, from the create's reply (none when found after a lost one).
    pub stat: Option<zk::Stat>,
    /// The lock's contenders, listed right after our create, or only our
    /// node when the create's transaction counted no other child (none when
    /// there were others to list, the listing failed, or the node was found
    /// after a lost reply).
    pub listing: Option<Listing>,
}

/// How nodes are created: their ACL and data, whether the server has
/// container nodes for the parents, and whether the create may count them.
pub(crate) struct Nodes {
    /// The ACL of every node created.
    pub acls: Arc<[zk::Acl]>,
    /// [`crate::ZkConfig::identifier`], in every contender node's data.
    pub identifier: Arc<str>,
    /// The server supports container nodes (3.5.3+); parents fall back to
    /// persistent nodes when it does not.
    pub containers: AtomicBool,
    /// Contender nodes are created with [`Look::Count`] where asked; off for
    /// good once a lock's ACL refused the write to its znode's data (while
    /// allowing the create).
    pub counting: AtomicBool,
    /// The last [`Look::Count`] acquisition found other children: the next
    /// one sends the listing right behind its create instead of counting
    /// (one round trip where a count would be followed by a listing), and
    /// goes back to counting once a listing shows it alone.
    pub crowded: AtomicBool,
    /// The last holder's node data: every acquisition of a process without
    /// a note describes the same holder, so its guards share one copy.
    pub last_data: Mutex<Option<(Holder, Arc<[u8]>)>>,
}

impl Nodes {
    /// The data of a contender node of an acquisition by `holder`: the
    /// holder's description as JSON ([`Holder::to_json_with`]) with the
    /// identifier as its `id` field, or the identifier alone without a
    /// description.
    pub(crate) fn data_for(&self, holder: Option<&Holder>) -> Arc<[u8]> {
        let Some(h) = holder else {
            return self.identifier.as_bytes().into();
        };
        let mut last = self.last_data.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, data)) = last.as_ref() {
            if seen == h {
                return data.clone();
            }
        }
        let data = self.encode(h);
        *last = Some((h.clone(), data.clone()));
        data
    }

    fn encode(&self, holder: &Holder) -> Arc<[u8]> {
        if self.identifier.is_empty() {
            holder.to_json().into_bytes().into()
        } else {
            holder
                .to_json_with(&[("id", &self.identifier)])
                .into_bytes()
                .into()
        }
    }

    /// Creates `dir` and its missing ancestors, as container nodes where the
    /// server has them (removed by the server once empty, as Curator's
    /// `creatingParentContainersIfNeeded` does).
    pub(crate) async fn make_parents(
        &self,
        session: &Session,
        dir: &str,
        until: Instant,
    ) -> Result<()> {
        let what = || format!("creating the lock node {dir}");
        if self.containers.load(Ordering::Relaxed) {
            match session
                .mkdir(dir, zk::CreateMode::Container, &self.acls, until)
                .await
            {
                Ok(()) => return Ok(()),
                Err(Failure::Zk(zk::Error::Unimplemented)) => {
                    tracing::info!(
                        "lock-zk: the server has no container nodes; creating persistent parents"
                    );
                    self.containers.store(false, Ordering::Relaxed);
                }
                Err(f) => return Err(lock_error(&what(), f)),
            }
        }
        session
            .mkdir(dir, zk::CreateMode::Persistent, &self.acls, until)
            .await
            .map_err(|f| lock_error(&what(), f))
    }

    /// Creates our contender node `<dir>/<prefix><seq>`, learning who else
    /// is under `dir` as `look` says. After a reply that never came (or a
    /// connection that failed under it) it looks for the node by its uuid,
    /// as Curator's protection mode does, and creates it again only if it
    /// is certainly not there.
    pub(crate) async fn create(
        &self,
        c: &Contender,
        look: Look,
        until: Instant,
    ) -> Result<Created> {
        let prefix = format!("{}/{}", c.dir, c.prefix);
        let what = || format!("creating a contender node under {}", c.dir);
        let mut last = None;
        // A `NoAuth` from the counting create: the ACL refuses either the
        // create or the write to the znode's data; a create without
        // counting tells which.
        let mut refused = false;
        for _ in 0..CREATE_ATTEMPTS {
            let count = look == Look::Count
                && !refused
                && self.counting.load(Ordering::Relaxed)
                && !self.crowded.load(Ordering::Relaxed);
            c.update(|st| st.in_flight = true);
            let looked = Instant::now();
            let (created, listed) = if count {
                match c
                    .session
                    .create_counted(&prefix, &c.data, &self.acls, &c.dir, until)
                    .await
                {
                    // Alone under `dir`: the listing would name only us,
                    // and our create was its last change of children.
                    Ok((path, stat, 1)) => {
                        let ours = path.rsplit('/').next().unwrap_or_default().to_string();
                        let pzxid = stat.czxid;
                        (Ok((path, stat)), Some((vec![ours], Some(pzxid))))
                    }
                    Ok((path, stat, _)) => {
                        self.crowded.store(true, Ordering::Relaxed);
                        (Ok((path, stat)), None)
                    }
                    Err(Failure::Zk(zk::Error::NoAuth)) => {
                        refused = true;
                        c.update(|st| st.in_flight = false);
                        continue;
                    }
                    Err(f) => (Err(f), None),
                }
            } else {
                let (created, listed) = c
                    .session
                    .create_and_list(&prefix, &c.data, &self.acls, &c.dir, until)
                    .await;
                if let (Ok(_), Ok((children, _)), Look::Count) = (&created, &listed, look) {
                    self.crowded.store(children.len() > 1, Ordering::Relaxed);
                }
                (created, listed.ok().map(|(c, pzxid)| (c, Some(pzxid))))
            };
            c.update(|st| st.in_flight = false);
            match created {
                Ok((path, stat)) => {
                    if refused && self.counting.swap(false, Ordering::Relaxed) {
                        tracing::info!(dir = %c.dir, "lock-zk: a lock's ACL refuses writes to its znode's data; contender nodes are created without counting its children from now on");
                    }
                    c.update(|st| st.node = Some(path.clone()));
                    return Ok(Created {
                        path,
                        stat: Some(stat),
                        listing: listed.map(|(children, pzxid)| Listing {
                            looked,
                            children,
                            pzxid,
                        }),
                    });
                }
                Err(f) if f.is_no_node() => self.make_parents(&c.session, &c.dir, until).await?,
                Err(f) if f.may_have_applied() => {
                    c.update(|st| st.lost_reply = true);
                    if let Some(path) = c.find(until).await? {
                        c.update(|st| st.node = Some(path.clone()));
                        return Ok(Created {
                            path,
                            stat: None,
                            listing: None,
                        });
                    }
                    last = Some(f);
                }
                Err(f) => return Err(lock_error(&what(), f)),
            }
        }
        Err(match last {
            Some(f) => lock_error(&what(), f),
            None => LockError::unavailable(format!("{}: its parent kept disappearing", what())),
        })
    }
}

/// How [`Nodes::create`] learns who else stands under the lock's znode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Look {
    /// Counts the znode's children in the create's own transaction
    /// ([`Session::create_counted`]) and hands back a listing only when our
    /// node is alone; the caller lists otherwise. For queues, which are
    /// usually empty: an uncontended acquisition sends one request. While
    /// the client's last such acquisition found company ([`Nodes::crowded`]),
    /// as [`Look::List`].
    Count,
    /// Lists the children right behind the create, in the same round trip
    /// ([`Session::create_and_list`]). For a semaphore's leases, which
    /// usually have company.
    List,
}

/// What we know about our contender node.
#[derive(Default)]
pub(crate) struct NodeState {
    /// Its full path, once the create reply (or the search) told us.
    node: Option<String>,
    /// A create was sent and has no answer yet (the acquire may be dropped
    /// right now): the node may exist.
    in_flight: bool,
    /// A create's reply was lost: a node we do not know of may exist.
    lost_reply: bool,
}

/// One acquisition's contender node.
pub(crate) struct Contender {
    pub session: Arc<Session>,
    /// The lock's znode.
    pub dir: String,
    /// `_c_<uuid>-<marker>`, unique to this acquisition.
    pub prefix: String,
    /// The node's data ([`Nodes::data_for`]).
    pub data: Arc<[u8]>,
    state: Mutex<NodeState>,
}

impl Contender {
    /// A new acquisition's node with `marker` and `data` under `dir`.
    pub(crate) fn new(session: Arc<Session>, dir: String, marker: Marker, data: Arc<[u8]>) -> Self {
        Self {
            session,
            dir,
            prefix: node::our_prefix(&node::our_uuid(), marker),
            data,
            state: Mutex::new(NodeState::default()),
        }
    }

    /// The node at the known `path` (for the clean-up of a release).
    pub(crate) fn known(session: Arc<Session>, path: &str) -> Self {
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        Self {
            session,
            dir: dir.to_string(),
            prefix: name.to_string(),
            data: Arc::from(&[][..]),
            state: Mutex::new(NodeState {
                node: Some(path.to_string()),
                ..NodeState::default()
            }),
        }
    }

    fn update(&self, f: impl FnOnce(&mut NodeState)) {
        f(&mut locked(&self.state));
    }

    /// Brings the server we read from up to date with the leader for our
    /// directory.
    async fn sync(&self, until: Instant) -> Result<()> {
        match self.session.sync(&self.dir, until).await {
            Ok(()) | Err(Failure::Zk(zk::Error::NoNode)) => Ok(()),
            Err(f) => Err(lock_error(
                &format!("syncing with the leader before looking under {}", self.dir),
                f,
            )),
        }
    }

    /// Our node, found by its uuid among the children, after a `sync`: the
    /// server we read from may be another than the one the create went
    /// through (after a reconnection) and lag behind the leader; the sync
    /// makes it apply every write the leader committed first. A failed sync
    /// is an error: without it, "not there" proves nothing.
    async fn find(&self, until: Instant) -> Result<Option<String>> {
        self.sync(until).await?;
        match self.session.list(&self.dir, until).await {
            Ok(children) => Ok(children
                .into_iter()
                .find(|child| child.starts_with(&self.prefix))
                .map(|child| format!("{}/{child}", self.dir))),
            Err(f) if f.is_no_node() => Ok(None),
            Err(f) => Err(lock_error(
                &format!("looking for our contender node under {}", self.dir),
                f,
            )),
        }
    }

    /// Deletes our node(s): the known path, and any child carrying our uuid
    /// when a create's outcome was unknown (found after a `sync`, see
    /// [`Contender::find`]). A retired session counts as done: its nodes go
    /// away with it.
    pub(crate) async fn remove(&self, until: Instant) -> Result<()> {
        let (node, uncertain) = {
            let st = locked(&self.state);
            (st.node.clone(), st.in_flight || st.lost_reply)
        };
        let done = |r: std::result::Result<(), Failure>, what: &str| match r {
            Ok(()) | Err(Failure::Zk(zk::Error::NoNode)) | Err(Failure::Retired(_)) => Ok(()),
            Err(f) => Err(lock_error(what, f)),
        };
        if let Some(path) = &node {
            done(
                self.session.delete(path, until).await,
                &format!("deleting {path}"),
            )?;
        }
        if uncertain {
            match self.sync(until).await {
                Err(err) if self.session.is_live() => return Err(err),
                _ => {}
            }
            let children = match self.session.list(&self.dir, until).await {
                Ok(children) => children,
                Err(f) => return done(Err(f), &format!("listing {}", self.dir)),
            };
            for child in children.iter().filter(|c| c.starts_with(&self.prefix)) {
                let path = format!("{}/{child}", self.dir);
                done(
                    self.session.delete(&path, until).await,
                    &format!("deleting {path}"),
                )?;
            }
        }
        Ok(())
    }

    /// [`Contender::remove`], retried with backoff until it succeeds or the
    /// session is retired (which removes the node too).
    pub(crate) async fn remove_eventually(self: Arc<Self>) {
        let mut delay = Duration::from_millis(20);
        for attempt in 1..=CLEANUP_ATTEMPTS {
            match self.remove(self.session.bound()).await {
                Ok(()) => return,
                Err(err) if attempt == CLEANUP_ATTEMPTS => {
                    tracing::error!(dir = %self.dir, error = %err, "lock-zk: giving up removing a contender node; it stays until the session ends");
                }
                Err(err) => {
                    tracing::debug!(dir = %self.dir, error = %err, attempt, "lock-zk: removing a contender node failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// The contenders under our directory now, with its pzxid.
    async fn list(&self, until: Instant) -> Result<Listing> {
        let looked = Instant::now();
        match self.session.list_with_pzxid(&self.dir, until).await {
            Ok((children, pzxid)) => Ok(Listing {
                looked,
                children,
                pzxid: Some(pzxid),
            }),
            Err(f) if f.is_no_node() => Ok(Listing {
                looked,
                children: Vec::new(),
                pzxid: None,
            }),
            Err(f) => Err(lock_error(&format!("listing {}", self.dir), f)),
        }
    }

    /// Waits until our node `path` holds in `recipe`'s queue, or `None`
    /// once `deadline` has passed (at once for `None`: one look), starting
    /// from `listing` (taken after our create) if there is one.
    ///
    /// Watches only the contender the recipe says blocks us and, while that
    /// one is not known to be all that stands ahead, the one the recipe
    /// names second (at most two waiters wake on any deletion: no herd).
    /// When the second goes we list again, usually while the blocker holds
    /// the lock; so when the blocker goes and it was all that stood ahead,
    /// we hold without another request. Otherwise we list again (an earlier
    /// contender may still be there).
    pub(crate) async fn wait_turn(
        &self,
        path: &str,
        recipe: Recipe,
        mut listing: Option<Listing>,
        deadline: Option<Instant>,
        until: Instant,
    ) -> Result<Turn> {
        let ours = path.rsplit('/').next().unwrap_or_default();
        let mut contended = None;
        let mut armed: Vec<Armed> = Vec::new();
        loop {
            let Listing {
                looked,
                children,
                pzxid,
            } = match listing.take() {
                Some(listing) => listing,
                None => self.list(until).await?,
            };
            let order = node::contenders(children, |m| recipe.counts(m));
            let Some(pos) = order.iter().position(|n| n.name == ours) else {
                return Err(vanished(path));
            };
            let Some(ahead) = recipe.blocker(&order, pos) else {
                return Ok(Turn::Granted {
                    looked,
                    contended: *contended.get_or_insert(false),
                    pzxid,
                });
            };
            contended.get_or_insert(true);
            let Some(deadline) = deadline else {
                return Ok(Turn::Held);
            };
            if Instant::now() >= deadline {
                return Ok(Turn::Held);
            }
            let settled = recipe.settled(&order, pos, ahead);
            let blocker = format!("{}/{}", self.dir, order[ahead].name);
            let second = recipe
                .second(&order, pos, ahead)
                .filter(|_| !settled)
                .map(|i| format!("{}/{}", self.dir, order[i].name));
            // Keep the watches that still apply; set the missing ones.
            armed.retain(|a| a.path == blocker || Some(&a.path) == second.as_ref());
            let mut wanted = vec![&blocker];
            wanted.extend(second.as_ref());
            let mut gone = None;
            for path in wanted {
                if armed.iter().any(|a| &a.path == path) {
                    continue;
                }
                match self.session.watch(path, until).await {
                    Ok(Some((_, watcher))) => armed.push(Armed::new(path, watcher)),
                    Ok(None) => {
                        gone = Some(path.clone());
                        break;
                    }
                    Err(f) => return Err(lock_error(&format!("watching {path}"), f)),
                }
            }
            let gone = match gone {
                Some(gone) => gone,
                None => {
                    let fired = tokio::select! {
                        fired = Armed::first(&mut armed) => fired,
                        _ = tokio::time::sleep_until(deadline) => return Ok(Turn::Held),
                        cause = self.session.ended() => {
                            return Err(lock_error(&format!("waiting for {}", self.dir), Failure::Retired(cause)));
                        }
                    };
                    let (path, event) = fired;
                    if event.event_type != zk::EventType::NodeDeleted {
                        continue;
                    }
                    path
                }
            };
            if gone == blocker && settled {
                return Ok(Turn::Granted {
                    looked: Instant::now(),
                    contended: true,
                    pzxid: None,
                });
            }
        }
    }
}

/// A watch set on a contender ahead of us, awaited across listings.
struct Armed {
    path: String,
    fired: std::pin::Pin<Box<dyn std::future::Future<Output = zk::WatchedEvent> + Send>>,
}

impl Armed {
    fn new(path: &str, watcher: zk::OneshotWatcher) -> Self {
        Self {
            path: path.to_string(),
            fired: Box::pin(watcher.changed()),
        }
    }

    /// The first of `armed` to fire (removed from it), with its path.
    async fn first(armed: &mut Vec<Armed>) -> (String, zk::WatchedEvent) {
        std::future::poll_fn(|cx| {
            for i in 0..armed.len() {
                if let std::task::Poll::Ready(event) = armed[i].fired.as_mut().poll(cx) {
                    let fired = armed.swap_remove(i);
                    return std::task::Poll::Ready((fired.path, event));
                }
            }
            std::task::Poll::Pending
        })
        .await
    }
}

/// Our node until a lease owns it: removed unless [`Pending::keep`] is
/// called, also when the acquire is dropped (the clean-up is armed before
/// the create is sent, so it also covers a create whose reply never came).
pub(crate) struct Pending {
    contender: Arc<Contender>,
    cleanup: CleanupOnDrop,
}

impl Pending {
    /// Arms the clean-up of `contender`'s node.
    pub(crate) fn new(contender: Arc<Contender>) -> Self {
        Self {
            cleanup: CleanupOnDrop::new(contender.clone().remove_eventually()),
            contender,
        }
    }

    /// The node now belongs to a lease.
    pub(crate) fn keep(self) {
        self.cleanup.disarm();
    }

    /// Removes the node before answering (so that the caller's next step,
    /// or another client's, does not see it), or in the background when
    /// that fails within `until`.
    pub(crate) async fn remove(self, until: Instant) {
        match self.contender.remove(until).await {
            Ok(()) => self.cleanup.disarm(),
            Err(err) => {
                tracing::warn!(dir = %self.contender.dir, error = %err, "lock-zk: removing a contender node failed; retrying in the background");
                drop(self.cleanup);
            }
        }
    }
}

/// The outcome of [`Contender::wait_turn`].
pub(crate) enum Turn {
    /// Our node holds the lock, as a listing taken after `looked` showed.
    Granted {
        /// Taken before the request that showed it.
        looked: Instant,
        /// Whether someone held it when we first looked.
        contended: bool,
        /// The pzxid of the lock's znode in the listing that showed it
        /// (`None`: shown by a watch event, or the listing had none).
        pzxid: Option<i64>,
    },
    /// Someone else still holds it (the wait ran out, or none was asked for).
    Held,
}

/// Our node disappeared while we waited.
pub(crate) fn vanished(path: &str) -> LockError {
    LockError::new(
        LockErrorKind::Lost,
        format!(
            "our contender node {path} was deleted while acquiring (by someone else, or with its expired session)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue of contenders from short tags: `r`/`w` Curator read/write
    /// nodes, `k` a kazoo write (lock) node, `m` a mutex node, in sequence order.
    fn queue(tags: &str) -> Vec<Child> {
        let uuid = "4e1b9a3c-2f5d-4d8e-9a43-0c6f2b1e7d55";
        let names: Vec<String> = tags
            .chars()
            .enumerate()
            .map(|(i, t)| match t {
                'r' => format!("_c_{uuid}-__READ__{i:010}"),
                'w' => format!("_c_{uuid}-__WRIT__{i:010}"),
                'k' => format!("8a1f0f8cb6a54f6e9d6f2c1f0a3b4c5d__lock__{i:010}"),
                _ => format!("_c_{uuid}-lock-{i:010}"),
            })
            .collect();
        node::contenders(names, |_| true)
    }

    #[test]
    fn a_reader_waits_for_the_nearest_write_ahead_only() {
        let q = queue("rwrrwr");
        assert_eq!(Recipe::Read.blocker(&q, 0), None);
        assert_eq!(Recipe::Read.blocker(&q, 2), Some(1));
        assert_eq!(Recipe::Read.blocker(&q, 5), Some(4));
        // Once the nearest write goes, the next one ahead blocks.
        assert!(!Recipe::Read.settled(&q, 5, 4));
        assert_eq!(Recipe::Read.second(&q, 5, 4), Some(1));
        assert!(Recipe::Read.settled(&q, 2, 1));
        assert_eq!(Recipe::Read.second(&q, 2, 1), None);
        // A newcomer: blocked while any write is queued (writer preference).
        assert_eq!(Recipe::Read.blocker(&q, q.len()), Some(4));
        assert_eq!(Recipe::Read.blocker(&queue("rr"), 2), None);
        // kazoo's write nodes count as writes.
        assert_eq!(Recipe::Read.blocker(&queue("kr"), 1), Some(0));
    }

    #[test]
    fn a_writer_waits_for_whatever_is_just_ahead() {
        let q = queue("rrw");
        assert_eq!(Recipe::Write.blocker(&q, 0), None);
        assert_eq!(Recipe::Write.blocker(&q, 2), Some(1));
        assert!(!Recipe::Write.settled(&q, 2, 1));
        assert_eq!(Recipe::Write.second(&q, 2, 1), Some(0));
        // Behind a single reader: settled. Behind a single writer: not, its
        // downgrade puts a read node in its place.
        assert!(Recipe::Write.settled(&queue("rw"), 1, 0));
        assert!(!Recipe::Write.settled(&queue("ww"), 1, 0));
    }

    #[test]
    fn a_mutex_waits_for_the_one_just_ahead() {
        let q = queue("mmm");
        assert_eq!(Recipe::Mutex.blocker(&q, 0), None);
        assert_eq!(Recipe::Mutex.blocker(&q, 2), Some(1));
        assert!(Recipe::Mutex.settled(&q, 1, 0));
        assert!(!Recipe::Mutex.settled(&q, 2, 1));
        assert_eq!(Recipe::Mutex.second(&q, 2, 1), Some(0));
        assert!(Recipe::Mutex.counts(Marker::KazooLock));
        assert!(!Recipe::Mutex.counts(Marker::CuratorRead));
        assert!(!Recipe::Write.counts(Marker::CuratorLock));
    }
}
