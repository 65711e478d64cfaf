//! In-process turns per lock name, for the mutex: all acquisitions of one
//! client share one session lease, so two of them on one name would share
//! one etcd key (`NAME/<lease>`, as etcd's own layout has it). They take
//! turns here first, FIFO.
//!
//! A name whose turn is taken costs one entry, which shares the lock name's
//! allocation with the request and the guard (a held guard keeps its permit
//! for as long as it lives, and there may be many); a queue exists only
//! while someone waits. The turn passes
//! from its holder straight to the first waiter still waiting, so nobody
//! who comes later gets in first.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex as StdMutex, MutexGuard};

use lock_core::LockName;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// The names whose turn is taken, and who waits for them, in order.
#[derive(Default)]
pub(crate) struct Turns {
    state: StdMutex<State>,
}

#[derive(Default)]
struct State {
    taken: HashSet<LockName>,
    /// Only names with someone waiting; each waiter is handed the turn
    /// through its channel.
    waiting: HashMap<LockName, VecDeque<oneshot::Sender<()>>>,
}

impl Turns {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the turn for `name`: at once, or waiting (FIFO) until `deadline`
    /// (`None`: no waiting). Returns whether it had to wait.
    pub(crate) async fn enter(
        self: &Arc<Self>,
        name: &LockName,
        deadline: Option<Instant>,
    ) -> Option<(NamePermit, bool)> {
        let (mut waiter, deadline) = {
            let mut st = self.state();
            let Some(taken) = st.taken.get(name).cloned() else {
                st.taken.insert(name.clone());
                return Some((self.permit(name.clone()), false));
            };
            let deadline = deadline?;
            let (tx, rx) = oneshot::channel();
            st.waiting.entry(taken.clone()).or_default().push_back(tx);
            let waiter = Waiter {
                turns: self.clone(),
                name: taken,
                rx,
            };
            (waiter, deadline)
        };
        match tokio::time::timeout_at(deadline, &mut waiter.rx).await {
            Ok(Ok(())) => {
                let name = waiter.take();
                Some((self.permit(name), true))
            }
            // The deadline passed: a turn handed over meanwhile goes on to
            // the next when the waiter is dropped. (Its channel never closes
            // unsent while it waits.)
            Err(_) | Ok(Err(_)) => None,
        }
    }

    fn permit(self: &Arc<Self>, name: LockName) -> NamePermit {
        NamePermit {
            turns: self.clone(),
            name,
        }
    }

    /// Gives the turn of `name` to the first one still waiting, or frees it.
    fn pass(&self, name: &LockName) {
        let mut st = self.state();
        let st = &mut *st;
        if let Some(queue) = st.waiting.get_mut(name) {
            while let Some(next) = queue.pop_front() {
                if next.send(()).is_ok() {
                    if queue.is_empty() {
                        st.waiting.remove(name);
                    }
                    return;
                }
            }
            st.waiting.remove(name);
        }
        st.taken.remove(name);
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        let st = self.state();
        st.taken.is_empty() && st.waiting.is_empty()
    }
}

/// One waiting for a name's turn. Dropped without the turn (its deadline
/// passed, or its acquisition was dropped), it leaves the queue, and a
/// turn handed to it meanwhile goes on to the next.
struct Waiter {
    turns: Arc<Turns>,
    name: LockName,
    rx: oneshot::Receiver<()>,
}

impl Waiter {
    /// The name, once the turn is ours (nothing left to undo).
    fn take(mut self) -> LockName {
        // A closed, emptied channel: the drop below finds nothing to pass on.
        self.rx.close();
        self.name.clone()
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let handed = {
            // Under the lock the turn is handed over: it either reached us
            // already or will not be handed to us.
            let mut st = self.turns.state();
            self.rx.close();
            let handed = self.rx.try_recv().is_ok();
            if let Some(queue) = st.waiting.get_mut(&self.name) {
                queue.retain(|tx| !tx.is_closed());
                if queue.is_empty() {
                    st.waiting.remove(&self.name);
                }
            }
            handed
        };
        if handed {
            self.turns.pass(&self.name);
        }
    }
}

/// This client's turn on one name, until dropped.
pub(crate) struct NamePermit {
    turns: Arc<Turns>,
    name: LockName,
}

impl Drop for NamePermit {
    fn drop(&mut self) {
        self.turns.pass(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn n() -> LockName {
        LockName::new("n").unwrap()
    }

    #[tokio::test]
    async fn turns_are_fifo_and_tidy_up() {
        let q = Arc::new(Turns::default());
        let (first, waited) = q.enter(&n(), None).await.unwrap();
        assert!(!waited);
        assert!(
            q.enter(&n(), None).await.is_none(),
            "a single attempt must not wait"
        );
        let order = Arc::new(StdMutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..3 {
            let (q, order) = (q.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let (p, waited) = q
                    .enter(&n(), Some(Instant::now() + Duration::from_secs(5)))
                    .await
                    .unwrap();
                assert!(waited);
                order.lock().unwrap().push(i);
                drop(p);
            }));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let timed_out = q
            .enter(&n(), Some(Instant::now() + Duration::from_millis(10)))
            .await;
        assert!(timed_out.is_none());
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
        assert!(q.is_empty(), "an entry was left behind");
    }

    #[tokio::test]
    async fn a_dropped_waiter_passes_on_a_turn_handed_to_it() {
        let q = Arc::new(Turns::default());
        let (first, _) = q.enter(&n(), None).await.unwrap();
        let far = Some(Instant::now() + Duration::from_secs(5));
        // The turn is handed to the first waiter, which never takes it.
        let name = n();
        let mut dropped = Box::pin(q.enter(&name, far));
        assert!(futures::poll!(&mut dropped).is_pending());
        let next = tokio::spawn({
            let q = q.clone();
            async move { q.enter(&n(), far).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        drop(dropped);
        let (p, waited) = next.await.unwrap().expect("the turn went on");
        assert!(waited);
        assert!(q.enter(&n(), None).await.is_none(), "still taken");
        drop(p);
        assert!(q.is_empty(), "an entry was left behind");
    }
}
