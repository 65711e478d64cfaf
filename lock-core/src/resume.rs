//! Telling every live keeper that the machine resumed from a suspension.
//!
//! The clock's resume detector ([`crate::clock`]) calls [`machine_resumed`];
//! each keeper registers itself for it ([`Registered`]) while it lives.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Something to tell when the machine resumes from a suspension.
pub(crate) trait Resumable: Send + Sync {
    /// The machine resumed: correct the validity by the time lost and
    /// re-check with the server. Must not block.
    fn machine_resumed(&self);
}

/// Every live keeper, to be told when the machine resumes from a
/// suspension. A slot per keeper in one of a few shards (so that keepers
/// starting and ending on different threads seldom wait for each other),
/// rather than a change notification awaited by each keeper, which would
/// cost every guard a hundred bytes more for an event that rarely comes.
static KEEPERS: [Mutex<Keepers>; SHARDS] = [const { Mutex::new(Keepers::new()) }; SHARDS];
const SHARDS: usize = 8;
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

/// One shard of [`KEEPERS`].
struct Keepers {
    slots: Vec<Option<Weak<dyn Resumable>>>,
    free: Vec<usize>,
}

impl Keepers {
    const fn new() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

/// A keeper's place in [`KEEPERS`]; dropping it gives the place up.
pub(crate) struct Registered {
    shard: usize,
    slot: usize,
}

impl Registered {
    /// Registers `who` until the returned place is dropped.
    pub(crate) fn new<R: Resumable + 'static>(who: &Arc<R>) -> Self {
        let shard = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
        let mut keepers = KEEPERS[shard].lock().unwrap_or_else(|p| p.into_inner());
        let weak: Weak<R> = Arc::downgrade(who);
        let weak: Weak<dyn Resumable> = weak;
        let entry = Some(weak);
        let slot = match keepers.free.pop() {
            Some(slot) => {
                keepers.slots[slot] = entry;
                slot
            }
            None => {
                keepers.slots.push(entry);
                keepers.slots.len() - 1
            }
        };
        Self { shard, slot }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut keepers = KEEPERS[self.shard]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = keepers.slots.get_mut(self.slot) {
            *entry = None;
            keepers.free.push(self.slot);
        }
    }
}

/// How many keepers are registered (unit tests).
#[cfg(test)]
pub(crate) fn registered_keepers() -> usize {
    KEEPERS
        .iter()
        .map(|shard| {
            let keepers = shard.lock().unwrap_or_else(|p| p.into_inner());
            keepers.slots.iter().filter(|s| s.is_some()).count()
        })
        .sum()
}

/// Tells every live keeper that the machine resumed from a suspension: each
/// corrects its validity by the time lost and re-checks with its server.
pub(crate) fn machine_resumed() {
    for shard in &KEEPERS {
        let live: Vec<Arc<dyn Resumable>> = shard
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .slots
            .iter()
            .flatten()
            .filter_map(Weak::upgrade)
            .collect();
        for who in live {
            who.machine_resumed();
        }
    }
}
