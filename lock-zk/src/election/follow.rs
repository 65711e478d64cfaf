//! What followers see: the first candidate node's data (the leader's
//! value; the first in `LeaderLatch`'s line, or in `LeaderSelector`'s: the
//! path's mutex), czxid (its epoch) and ctime (when its term began), read with
//! `getChildren` and `getData` as Curator's `getLeader` reads them, and
//! watched for [`LockBackend::observe`](lock_core::backend::LockBackend::observe):
//! a children watch on the election's znode (a new first node, the last
//! one gone), a data watch on the leader's node (a proclaim), an existence
//! watch on the znode while it is missing. No polling.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::{select_all, BoxFuture};
use futures::FutureExt;
use lock_core::backend::{leader_stream, LeaderStream};
use lock_core::{FencingToken, LeaderInfo, Result};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{lock_error, Failure};
use crate::node;
use crate::queue::Recipe;
use crate::session::Session;

/// The leader shown by its node's data and stat.
fn info(data: &[u8], stat: &zk::Stat) -> LeaderInfo {
    let epoch = u64::try_from(stat.czxid).ok().map(FencingToken::new);
    let since = SystemTime::UNIX_EPOCH
        + Duration::from_millis(u64::try_from(stat.ctime).unwrap_or_default());
    LeaderInfo::new(String::from_utf8_lossy(data), epoch).with_since(since)
}

/// The first candidate node among `children` of `dir` in `recipe`'s
/// line, as a path.
fn first(dir: &str, children: Vec<String>, recipe: Recipe) -> Option<String> {
    node::contenders(children, |m| recipe.counts(m))
        .into_iter()
        .next()
        .map(|c| format!("{dir}/{}", c.name))
}

/// Who leads the election under `dir` now.
pub(crate) async fn leader(
    session: &Session,
    dir: &str,
    recipe: Recipe,
    until: Instant,
) -> Result<Option<LeaderInfo>> {
    loop {
        let children = match session.list(dir, until).await {
            Ok(children) => children,
            Err(f) if f.is_no_node() => return Ok(None),
            Err(f) => return Err(lock_error(&format!("listing {dir}"), f)),
        };
        let Some(path) = first(dir, children, recipe) else {
            return Ok(None);
        };
        match session.get(&path, until).await {
            Ok(Some((data, stat))) => return Ok(Some(info(&data, &stat))),
            // It went between the two reads: look again.
            Ok(None) => {}
            Err(f) => return Err(lock_error(&format!("reading {path}"), f)),
        }
    }
}

/// A one-shot watch, as a future of its event.
type Fired = BoxFuture<'static, zk::WatchedEvent>;

/// One follower of the election under `dir`.
struct Follower {
    session: Arc<Session>,
    dir: String,
    /// The election's line (`LeaderLatch`'s or `LeaderSelector`'s).
    recipe: Recipe,
    /// What it was told last (`None` before the first item).
    told: Option<Option<LeaderInfo>>,
}

impl Follower {
    /// Who leads now, with the watches that fire on the next change.
    async fn look(&self) -> Result<(Option<LeaderInfo>, Vec<Fired>)> {
        let (session, dir) = (&self.session, self.dir.as_str());
        loop {
            let until = session.bound();
            let (children, on_children) = match session.watch_children(dir, until).await {
                Ok(listed) => listed,
                Err(f) if f.is_no_node() => match session.watch_exists(dir, until).await {
                    Ok((None, created)) => return Ok((None, vec![created.changed().boxed()])),
                    // Created meanwhile: list it.
                    Ok((Some(_), _)) => continue,
                    Err(f) => return Err(lock_error(&format!("watching {dir}"), f)),
                },
                Err(f) => return Err(lock_error(&format!("watching {dir}"), f)),
            };
            let on_children = on_children.changed().boxed();
            let Some(path) = first(dir, children, self.recipe) else {
                return Ok((None, vec![on_children]));
            };
            match session.get_and_watch(&path, until).await {
                Ok(Some((data, stat, on_data))) => {
                    return Ok((
                        Some(info(&data, &stat)),
                        vec![on_children, on_data.changed().boxed()],
                    ))
                }
                Ok(None) => {}
                Err(f) => return Err(lock_error(&format!("watching {path}"), f)),
            }
        }
    }

    /// The next thing to tell: who leads now if that is news, else who
    /// leads after the next change that is.
    async fn next(&mut self) -> Result<Option<LeaderInfo>> {
        loop {
            let (now, watches) = self.look().await?;
            if self.told.as_ref() != Some(&now) {
                self.told = Some(now.clone());
                return Ok(now);
            }
            tokio::select! {
                _ = select_all(watches) => {}
                cause = self.session.ended() => {
                    return Err(lock_error(
                        &format!("following the election {}", self.dir),
                        Failure::Retired(cause),
                    ));
                }
            }
        }
    }
}

/// Who leads the election under `dir`, as it changes, on `session`: an
/// error item (retryable when the session ended) ends the stream.
///
/// A task follows the election for as long as the stream lives and queues
/// every change it sees, so a follower that reads late still reads each
/// term in order (a change the task has not yet looked at when the next
/// one comes is seen with it: ZooKeeper watches tell that something
/// changed, not each step).
pub(crate) fn observe(session: Arc<Session>, dir: String, recipe: Recipe) -> LeaderStream {
    let mut follower = Follower {
        session,
        dir,
        recipe,
        told: None,
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                next = follower.next() => next,
                _ = tx.closed() => return,
            };
            let end = next.is_err();
            if tx.send(next).is_err() || end {
                return;
            }
        }
    });
    leader_stream(rx)
}
