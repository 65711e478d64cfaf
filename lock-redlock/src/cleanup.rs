//! The clean-up after a round that did not win, or that was dropped: the
//! compare-and-delete of its token on the nodes it may have reached
//! ([`Delete`], each a task of its own, in the call's order on each node),
//! what a waiting call keeps of those still going on ([`Released`],
//! [`Deletes`]), and leaving the nodes' line.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};
use lock_core::backend::add_saturating;
use lock_core::NodeFailure;
use tokio::time::Instant;

use crate::fan_out::next_by;
use crate::inner::Inner;
use crate::node::{NameKeys, Place, SetReply};
use crate::order::{NodeOrder, SetOnDrop};
use crate::tally::node_bit;

/// A compare-and-delete of one token, as a clean-up or a release in the
/// background sends it to each node ([`Inner::start_release`]).
#[derive(Clone)]
pub(crate) struct Delete {
    pub(crate) keys: Arc<NameKeys>,
    pub(crate) token: Arc<str>,
    /// Announced to the waiters (see [`lock_redis::kit::scripts::RELEASE`]).
    pub(crate) announce: bool,
    /// A waiter's place that goes back into the lines where the token was.
    pub(crate) rejoin: Option<Arc<Place>>,
}

impl Delete {
    /// The release of `token`, announced, putting no place back.
    pub(crate) fn of(keys: Arc<NameKeys>, token: Arc<str>) -> Self {
        Self {
            keys,
            token,
            announce: true,
            rejoin: None,
        }
    }
}

impl Inner {
    /// Starts `delete` (a compare-and-delete of a round's token) on the
    /// nodes `which`, each a task of its own that is running when this
    /// returns. Each is bounded by [`Inner::background_bound`]; wait on the
    /// returned [`Released`] as long as the caller may. Outcomes are only
    /// logged: a key that could not be deleted expires with its TTL. With
    /// `order` (a waiting call's), each request goes to its node after the
    /// call's earlier clean-ups there, and the call's later requests to the
    /// node go after it.
    pub(crate) fn start_release(
        self: &Arc<Self>,
        which: &[usize],
        delete: &Delete,
        order: Option<&Arc<NodeOrder>>,
    ) -> Released {
        let unconfirmed = Arc::new(AtomicUsize::new(which.len()));
        Released {
            tasks: which
                .iter()
                .map(|&i| {
                    let (earlier, done) = order.map(|o| o.enter(i)).unzip();
                    let earlier = async move {
                        if let Some(earlier) = earlier {
                            earlier.await;
                        }
                    };
                    self.spawn_release_on(i, delete.clone(), earlier, done, unconfirmed.clone())
                })
                .collect(),
            unconfirmed,
        }
    }

    /// The nodes `late` that a round was decided without: their requests
    /// (in `pending`) are still on their way. Each node's reply decides, in
    /// the background: a refused `SET` needs nothing (the usual case: the
    /// round lost to a holder everywhere); one that won or failed gets
    /// `delete`, as [`start_release`](Self::start_release) sends it, after
    /// it on the node's connection. The nodes that refused it are added to
    /// `taken_late.0` (bit `i`: node `i`), with the turn sequence each read
    /// in `taken_late.1`. With `order`, the call's later requests to those
    /// nodes go after this.
    pub(crate) fn settle_late<F>(
        self: &Arc<Self>,
        mut pending: FuturesUnordered<F>,
        late: &[usize],
        delete: &Delete,
        order: Option<&Arc<NodeOrder>>,
        taken_late: (Arc<AtomicU64>, Arc<[AtomicU64]>),
    ) -> Released
    where
        F: Future<Output = (usize, std::result::Result<SetReply, NodeFailure>)> + Send + 'static,
    {
        let unconfirmed = Arc::new(AtomicUsize::new(late.len()));
        // The requests were sent after the call's earlier clean-ups there:
        // only the later requests need ordering.
        let mut done: Vec<Option<SetOnDrop>> = (0..self.nodes.len()).map(|_| None).collect();
        if let Some(order) = order {
            for &i in late {
                done[i] = Some(order.enter(i).1);
            }
        }
        let (inner, delete, confirmed) = (self.clone(), delete.clone(), unconfirmed.clone());
        let task = tokio::spawn(async move {
            let deletes = FuturesUnordered::new();
            while let Some((i, r)) = pending.next().await {
                let done = done.get_mut(i).and_then(Option::take);
                if let Ok(SetReply::Taken { seen, .. }) = &r {
                    if let Some(slot) = taken_late.1.get(i) {
                        slot.store(seen.unwrap_or(0), Ordering::Relaxed);
                    }
                }
                if matches!(r, Ok(SetReply::Taken { .. } | SetReply::TakenUnread)) {
                    taken_late.0.fetch_or(node_bit(i), Ordering::Relaxed);
                    confirmed.fetch_sub(1, Ordering::Relaxed);
                    continue;
                }
                let earlier = std::future::ready(());
                deletes.push(inner.spawn_release_on(
                    i,
                    delete.clone(),
                    earlier,
                    done,
                    confirmed.clone(),
                ));
            }
            deletes.collect::<Vec<_>>().await;
        });
        Released {
            tasks: std::iter::once(task).collect(),
            unconfirmed,
        }
    }

    /// Spawns `delete` on node `i`, after `earlier` (the call's earlier
    /// clean-up there), given up [`Inner::background_bound`] after it
    /// starts; `done` marks it finished for the call's later requests to
    /// the node, and `unconfirmed` counts it off once the node answered.
    fn spawn_release_on(
        self: &Arc<Self>,
        i: usize,
        delete: Delete,
        earlier: impl Future<Output = ()> + Send + 'static,
        done: Option<SetOnDrop>,
        unconfirmed: Arc<AtomicUsize>,
    ) -> tokio::task::JoinHandle<()> {
        let inner = self.clone();
        tokio::spawn(async move {
            let _done = done;
            let by = add_saturating(Instant::now(), inner.background_bound());
            let _ = tokio::time::timeout_at(by, earlier).await;
            let node = &inner.nodes[i];
            let Delete {
                keys,
                token,
                announce,
                rejoin,
            } = &delete;
            let release = node.release(&inner.scripts, keys, token, *announce, rejoin.as_deref());
            match tokio::time::timeout_at(by, release).await {
                Ok(Ok(_)) => {
                    unconfirmed.fetch_sub(1, Ordering::Relaxed);
                }
                Ok(Err(e)) => {
                    tracing::debug!(node = %node.addr, error = %e, "redlock: clean-up release failed; the key expires with its TTL")
                }
                Err(_) => {
                    tracing::debug!(node = %node.addr, "redlock: clean-up release timed out; it runs when the node answers, else the key expires")
                }
            }
        })
    }

    /// Takes `place` out of the line on the nodes `which`, in parallel,
    /// each request bounded by [`Inner::background_bound`] (with `order`,
    /// after the call's clean-ups on that node). A place that cannot be
    /// removed lapses by itself. `holding`: we leave because the lock is
    /// ours (a turn we pass on there wakes nobody).
    pub(crate) async fn leave_line(
        self: Arc<Self>,
        which: Vec<usize>,
        keys: Arc<NameKeys>,
        place: Arc<Place>,
        holding: bool,
        order: Option<Arc<NodeOrder>>,
    ) {
        let limit = self.background_bound();
        let pending: FuturesUnordered<_> = which
            .into_iter()
            .map(|i| {
                let node = &self.nodes[i];
                let earlier = order.as_ref().map(|o| o.after(i));
                let leave = node.leave_line(&self.scripts, &keys, &place.id, holding);
                let leave = async move {
                    if let Some(earlier) = earlier {
                        earlier.await;
                    }
                    leave.await
                };
                async move {
                    match tokio::time::timeout(limit, leave).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => tracing::debug!(node = %node.addr, error = %e, "redlock: could not leave the line; the place lapses by itself"),
                        Err(_) => tracing::debug!(node = %node.addr, "redlock: leaving the line timed out; the place lapses by itself"),
                    }
                }
            })
            .collect();
        pending.collect::<()>().await;
    }
}

/// Compare-and-delete of `token` on every node; the background clean-up of
/// a round whose future was dropped.
pub(crate) async fn release_everywhere(inner: Arc<Inner>, keys: Arc<NameKeys>, token: Arc<str>) {
    let all: Vec<usize> = (0..inner.nodes.len()).collect();
    let by = add_saturating(Instant::now(), inner.background_bound());
    inner
        .start_release(&all, &Delete::of(keys, token), None)
        .wait(by)
        .await;
}

/// A background delete of our key on some nodes, after a round that did
/// not win: one task per node.
pub(crate) struct Released {
    tasks: FuturesUnordered<tokio::task::JoinHandle<()>>,
    /// How many of the deletes have not been answered by their node (yet).
    unconfirmed: Arc<AtomicUsize>,
}

impl Released {
    /// Whether every node answered its delete.
    fn confirmed(&self) -> bool {
        self.unconfirmed.load(Ordering::Relaxed) == 0
    }

    /// Waits for it, but not past `deadline`.
    pub(crate) async fn wait(mut self, deadline: Instant) {
        self.wait_by(deadline).await;
    }

    /// Waits for it, but not past `deadline`: whether every node's delete
    /// is done. What is not goes on in the background.
    pub(crate) async fn wait_by(&mut self, deadline: Instant) -> bool {
        while !self.tasks.is_empty() {
            if next_by(&mut self.tasks, deadline).await.is_none() {
                return false;
            }
        }
        true
    }
}

/// Our deletes still going on after rounds that did not win.
#[derive(Default)]
pub(crate) struct Deletes {
    /// On the nodes the last round won: the next round waits for them.
    pub(crate) won: Option<Released>,
    /// On nodes that had not answered when a round was decided: nobody
    /// waits for them but a wait that gives up, which leaves the line only
    /// after them (a delete puts the waiter's place back where its key
    /// stood).
    pub(crate) unanswered: Vec<Released>,
    /// One of those ended unanswered (timed out or failed): the round's
    /// request to that node may still run there, later.
    pub(crate) doubtful: bool,
}

impl Deletes {
    /// Takes in the deletes of the latest round.
    pub(crate) fn add(&mut self, round: Deletes) {
        self.won = round.won;
        let doubtful = &mut self.doubtful;
        self.unanswered.retain(|r| {
            let running = r.tasks.iter().any(|task| !task.is_finished());
            *doubtful |= !running && !r.confirmed();
            running
        });
        self.unanswered.extend(round.unanswered);
    }

    /// Whether every request our rounds sent to a node that had not
    /// answered when its round was decided is known to have run: the node
    /// answered the delete that followed it on the same connection. Only
    /// then can no late request of ours still change a key.
    pub(crate) fn all_answered(&self) -> bool {
        !self.doubtful && self.unanswered.iter().all(Released::confirmed)
    }

    /// Waits for every one of them, but not past `deadline`.
    pub(crate) async fn wait_all(&mut self, deadline: Instant) {
        if let Some(won) = self.won.take() {
            won.wait(deadline).await;
        }
        for r in self.unanswered.drain(..) {
            r.wait(deadline).await;
        }
    }
}
