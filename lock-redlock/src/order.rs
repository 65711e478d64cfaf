//! The order of one waiting call's requests to each node ([`NodeOrder`]):
//! a round or a line request goes to a node only after the call's
//! clean-ups there; and [`SetOnDrop`], the flag a task sets when it ends,
//! which later requests (and a lease's release) wait on.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::SetOnce;

/// The order of one waiting call's requests to each node. Requests to one
/// node reach it in the order they are sent, but a clean-up is a task of
/// its own, which may start only after the call's next round: its delete,
/// which puts the call's place back into the node's line, could then land
/// after the call left that line holding the lock, and the node would keep
/// the lock reserved for a waiter that is gone (until its place lapses).
/// So each of the call's requests to a node waits for its clean-ups there
/// that are still going on (each bounded by the background bound).
pub(crate) struct NodeOrder {
    /// Per node: the call's latest clean-up there, set once it is done.
    last: std::sync::Mutex<Vec<Option<Arc<SetOnce<()>>>>>,
}

impl NodeOrder {
    /// No clean-up yet on any of `nodes` nodes.
    pub(crate) fn new(nodes: usize) -> Arc<Self> {
        Arc::new(Self {
            last: std::sync::Mutex::new(vec![None; nodes]),
        })
    }

    /// Done once the call's clean-ups on node `i` started so far are.
    pub(crate) fn after(&self, i: usize) -> impl Future<Output = ()> + Send + 'static {
        let last = self.lock()[i].clone();
        async move {
            if let Some(last) = last {
                last.wait().await;
            }
        }
    }

    /// A clean-up on node `i` starts: what it waits for first, and what
    /// marks it done when dropped (later requests to the node wait for it).
    pub(crate) fn enter(&self, i: usize) -> (impl Future<Output = ()> + Send + 'static, SetOnDrop) {
        let mine = Arc::new(SetOnce::new());
        let last = self.lock()[i].replace(mine.clone());
        let earlier = async move {
            if let Some(last) = last {
                last.wait().await;
            }
        };
        (earlier, SetOnDrop(mine))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<Arc<SetOnce<()>>>>> {
        self.last.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Sets its flag when dropped: when the task that owns it finishes, or is
/// cancelled with its runtime (a waiter must not wait for ever then).
pub(crate) struct SetOnDrop(pub(crate) Arc<SetOnce<()>>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        let _ = self.0.set(());
    }
}
