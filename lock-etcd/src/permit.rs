//! In-process turns per lock name, for the mutex: all acquisitions of one
//! client share one session lease, so two of them on one name would share
//! one etcd key (`NAME/<lease>`, as etcd's own layout has it). They take
//! turns here first, FIFO.

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex, MutexGuard};

use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

/// The turns of one name: who holds it, who waits, in order.
type NameTurns = Arc<tokio::sync::Mutex<()>>;

/// One lock of turns per name in use. A name is kept once, shared by its
/// entry and by whoever holds or waits for its turn (a held guard keeps its
/// permit for as long as it lives, and there may be many).
#[derive(Default)]
pub(crate) struct Turns {
    names: StdMutex<HashMap<Arc<str>, NameTurns>>,
}

impl Turns {
    fn names(&self) -> MutexGuard<'_, HashMap<Arc<str>, NameTurns>> {
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The name's entry, made if it has none: its shared name and its turns.
    fn entry(&self, name: &str) -> (Arc<str>, NameTurns) {
        let mut names = self.names();
        if let Some((name, turns)) = names.get_key_value(name) {
            return (name.clone(), turns.clone());
        }
        let (name, turns): (Arc<str>, NameTurns) = (name.into(), NameTurns::default());
        names.insert(name.clone(), turns.clone());
        (name, turns)
    }

    /// Takes the turn for `name`: at once, or waiting (FIFO) until `deadline`
    /// (`None`: no waiting). Returns whether it had to wait.
    pub(crate) async fn enter(
        self: &Arc<Self>,
        name: &str,
        deadline: Option<Instant>,
    ) -> Option<(NamePermit, bool)> {
        let (name, mutex) = self.entry(name);
        let interest = Interest {
            turns: self.clone(),
            name,
            mutex: Some(mutex),
        };
        let mutex = interest.mutex.clone()?;
        if let Ok(guard) = mutex.clone().try_lock_owned() {
            return Some((interest.into_permit(guard), false));
        }
        let deadline = deadline?;
        match tokio::time::timeout_at(deadline, mutex.lock_owned()).await {
            Ok(guard) => Some((interest.into_permit(guard), true)),
            Err(_) => None,
        }
    }

    /// Forgets `name` when nobody holds or waits for it.
    fn tidy(&self, name: &str) {
        let mut names = self.names();
        if names.get(name).is_some_and(|m| Arc::strong_count(m) == 1) {
            names.remove(name);
        }
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.names().is_empty()
    }
}

/// A reference to a name's turns that tidies up when dropped.
struct Interest {
    turns: Arc<Turns>,
    name: Arc<str>,
    mutex: Option<Arc<tokio::sync::Mutex<()>>>,
}

impl Interest {
    fn into_permit(mut self, guard: OwnedMutexGuard<()>) -> NamePermit {
        self.mutex = None;
        NamePermit {
            guard: Some(guard),
            turns: self.turns.clone(),
            name: self.name.clone(),
        }
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        if self.mutex.take().is_some() {
            self.turns.tidy(&self.name);
        }
    }
}

/// This client's turn on one name, until dropped.
pub(crate) struct NamePermit {
    guard: Option<OwnedMutexGuard<()>>,
    turns: Arc<Turns>,
    name: Arc<str>,
}

impl Drop for NamePermit {
    fn drop(&mut self) {
        self.guard.take();
        self.turns.tidy(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn turns_are_fifo_and_tidy_up() {
        let q = Arc::new(Turns::default());
        let (first, waited) = q.enter("n", None).await.unwrap();
        assert!(!waited);
        assert!(
            q.enter("n", None).await.is_none(),
            "a single attempt must not wait"
        );
        let order = Arc::new(StdMutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..3 {
            let (q, order) = (q.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let (p, waited) = q
                    .enter("n", Some(Instant::now() + Duration::from_secs(5)))
                    .await
                    .unwrap();
                assert!(waited);
                order.lock().unwrap().push(i);
                drop(p);
            }));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let timed_out = q
            .enter("n", Some(Instant::now() + Duration::from_millis(10)))
            .await;
        assert!(timed_out.is_none());
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
        assert!(q.is_empty(), "an entry was left behind");
    }
}
