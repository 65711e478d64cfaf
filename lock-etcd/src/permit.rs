//! In-process turns per lock name, for the mutex: all acquisitions of one
//! client share one session lease, so two of them on one name would share
//! one etcd key (`NAME/<lease>`, as etcd's own layout has it). They take
//! turns here first, FIFO.

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex, MutexGuard};

use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

/// One lock of turns per name in use.
#[derive(Default)]
pub(crate) struct Turns {
    names: StdMutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Turns {
    fn names(&self) -> MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<()>>>> {
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the turn for `name`: at once, or waiting (FIFO) until `deadline`
    /// (`None`: no waiting). Returns whether it had to wait.
    pub(crate) async fn enter(
        self: &Arc<Self>,
        name: &str,
        deadline: Option<Instant>,
    ) -> Option<(NamePermit, bool)> {
        let interest = Interest {
            turns: self.clone(),
            name: name.to_string(),
            mutex: Some(self.names().entry(name.to_string()).or_default().clone()),
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
    name: String,
    mutex: Option<Arc<tokio::sync::Mutex<()>>>,
}

impl Interest {
    fn into_permit(mut self, guard: OwnedMutexGuard<()>) -> NamePermit {
        self.mutex = None;
        NamePermit {
            guard: Some(guard),
            turns: self.turns.clone(),
            name: std::mem::take(&mut self.name),
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
    name: String,
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
