//! The watches of one client and where their events go: shared by the
//! client's [`super::Watcher`] (which registers them) and its stream task
//! (which creates them on the server and routes their events).

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex, MutexGuard};
use std::time::Duration;

use lock_core::backend::mailbox::Mailbox;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::deletion::Deletion;
use crate::event::WatchEvent;

/// How long a shared queue watch is kept after its last waiter or guard
/// left: a contender that comes back within it (as the contenders of a busy
/// lock do) finds the watch created and in step with the store.
pub(crate) const LINGER: Duration = Duration::from_secs(2);

/// What to watch.
#[derive(Clone, Debug)]
pub(super) struct Spec {
    /// Shared with the owner where it has one (a held key's name).
    pub(super) key: Arc<[u8]>,
    pub(super) prefix: bool,
    pub(super) with_puts: bool,
}

/// Where a watch's events go.
pub(super) enum Sink {
    /// Only whether the key is gone, for a [`KeyWatch`](super::KeyWatch) of its own.
    Deletion(Arc<Deletion>),
    /// The waiters and guards of one queue ([`Watcher::queue_watch`](super::Watcher::queue_watch)).
    Shared(Shared),
}

/// The users of a shared queue watch.
pub(super) struct Shared {
    pub(super) subs: Vec<(u64, Sub)>,
    /// When the last user left: the watch ends [`LINGER`] later unless
    /// another comes.
    pub(super) idle_since: Option<Instant>,
}

/// One user of a shared queue watch.
pub(super) enum Sub {
    /// A waiter: every event.
    Mail(Arc<Mailbox<WatchEvent>>),
    /// A guard that waited for its lock: whether its key is gone.
    Key(Arc<[u8]>, Arc<Deletion>),
}

impl Sub {
    pub(super) fn post(&self, event: &WatchEvent) {
        match self {
            Sub::Mail(mail) => {
                let _ = mail.post(event.clone());
            }
            Sub::Key(key, gone) => note_key(gone, key, event),
        }
    }
}

/// Takes in `event` of a queue's watch for the guard of `key`.
pub(super) fn note_key(gone: &Deletion, key: &[u8], event: &WatchEvent) {
    match event {
        WatchEvent::Deleted { key: k, .. } if k.as_slice() == key => gone.note(key, event),
        WatchEvent::Lost { .. } => gone.note(key, event),
        _ => {}
    }
}

impl Sink {
    pub(super) fn post(&self, key: &[u8], event: WatchEvent) {
        match self {
            Sink::Deletion(gone) => gone.note(key, &event),
            Sink::Shared(shared) => {
                for (_, sub) in &shared.subs {
                    sub.post(&event);
                }
            }
        }
    }
}

pub(super) struct Registration {
    pub(super) spec: Spec,
    /// 0: from whenever it is created; else the first revision not yet seen.
    pub(super) resume_from: i64,
    /// Whether [`WatchEvent::Created`] was sent.
    pub(super) announced: bool,
    /// Whether its create request went out on the current stream (else
    /// ending it needs no cancel request).
    pub(super) sent: bool,
    /// When a held key's watch goes to the server ([`KEY_WATCH_DELAY`](super::KEY_WATCH_DELAY)
    /// after its grant); `None`: at once.
    pub(super) due: Option<Instant>,
    pub(super) sink: Sink,
}

impl Drop for Registration {
    fn drop(&mut self) {
        match &self.sink {
            Sink::Deletion(gone) => gone.end(),
            Sink::Shared(shared) => {
                for (_, sub) in &shared.subs {
                    match sub {
                        Sub::Mail(mail) => mail.close(),
                        Sub::Key(_, gone) => gone.end(),
                    }
                }
            }
        }
    }
}

#[derive(Default)]
pub(super) struct State {
    pub(super) next_id: i64,
    pub(super) watches: HashMap<i64, Registration>,
    /// The shared watch of each queue prefix (and whether it wants puts).
    pub(super) shared: HashMap<(Arc<[u8]>, bool), i64>,
    pub(super) next_sub: u64,
}

impl State {
    /// Ends the shared watches idle for [`LINGER`] at `now`; returns the
    /// ids to cancel on the stream and when the next one is due.
    pub(super) fn expire_idle(&mut self, now: Instant) -> (Vec<i64>, Option<Instant>) {
        let mut expired = Vec::new();
        let mut next: Option<Instant> = None;
        for (id, reg) in &self.watches {
            if let Sink::Shared(Shared {
                idle_since: Some(since),
                ..
            }) = &reg.sink
            {
                let due = *since + LINGER;
                if due <= now {
                    expired.push(*id);
                } else {
                    next = Some(next.map_or(due, |n| n.min(due)));
                }
            }
        }
        self.shared.retain(|_, id| !expired.contains(id));
        // Only a watch the server knows needs its cancel.
        expired.retain(|id| self.watches.remove(id).is_some_and(|reg| reg.sent));
        (expired, next)
    }
}

pub(super) enum Cmd {
    Create(i64),
    /// Create it at that time, if it is still wanted then.
    CreateAt(i64, Instant),
    Cancel(i64),
    /// A shared watch lost its last user.
    Idle,
}

pub(super) struct Inner {
    pub(super) state: StdMutex<State>,
    pub(super) cmds: mpsc::UnboundedSender<Cmd>,
}

impl Inner {
    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}
