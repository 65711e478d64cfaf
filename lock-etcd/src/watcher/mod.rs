//! One gRPC watch stream per client, carrying every watch of the client
//! (waiters watching the key ahead, guards watching their own key), as Go's
//! clientv3 does: a guard costs the client a map entry and a flag (its
//! [`KeyWatch`] keeps only whether the key is gone), not a stream.
//!
//! Each watch has an id of our own and remembers the revision it has seen
//! up to. When the stream fails (the member went away, lost its leader: every
//! request asks for one), the watcher reopens it on the next endpoint after
//! that endpoint's backoff and re-creates every watch from the revision it
//! had reached, so no event is lost and nobody else has to re-read anything.
//! Only a watch whose history was compacted meanwhile is reported lost, to
//! its owner alone.
//!
//! A guard that did not wait watches its own key, but the server hears of
//! that watch only [`KEY_WATCH_DELAY`] after the grant: most locks are
//! released sooner and then cost no watch at all. The watch starts from the
//! revision after the grant, so a deletion before it went out is still
//! reported (from the server's history).
//!
//! Waiters do not create a watch per wait: the waiters and guards of one
//! queue on this client share one watch of the queue's prefix
//! ([`Watcher::queue_watch`]), kept for [`LINGER`](registry::LINGER) after its last user
//! leaves. A watch created "from now" can start in etcd's slow catch-up
//! path: the server turns "now" into the revision it read just before
//! registering the watch, and a write that lands in between leaves the
//! watch behind the store, to be caught up by a loop that runs every
//! 100 ms. Under contention that happens to a fraction of new watches,
//! and each time a hand-off waits up to 100 ms. A shared watch pays that at
//! most once, when it is first created, and then stays in step with the
//! store while the queue is busy.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use lock_core::backend::mailbox::Mailbox;
use lock_core::{LockError, Result};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::client::EtcdClient;
use crate::deletion::Deletion;
use crate::event::WatchEvent;
use registry::{note_key, Cmd, Inner, Registration, Shared, Sink, Spec, State, Sub};
use stream::run;

mod registry;
mod stream;

/// How long after a grant the watch on a held key is sent to the server:
/// a lock released sooner (most are) costs no watch at all. The watch
/// starts from the revision after the grant, so a deletion in between is
/// still reported (from the server's history), only later.
pub(crate) const KEY_WATCH_DELAY: Duration = Duration::from_millis(50);

/// The client's watch stream; see the [module docs](self).
#[derive(Clone)]
pub(crate) struct Watcher {
    inner: Arc<Inner>,
}

impl Watcher {
    /// Starts the stream's task (it connects with the first watch).
    pub(crate) fn start(client: Arc<EtcdClient>) -> Self {
        let (cmds, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            state: StdMutex::new(State::default()),
            cmds,
        });
        tokio::spawn(run(Arc::downgrade(&inner), client, rx));
        Self { inner }
    }

    /// Joins the shared watch of the deletions (and, `with_puts`, the
    /// puts) of every key under `prefix`, creating it if this client has
    /// none. The first event is [`WatchEvent::Created`] with the revision
    /// after which every event reaches this user: the watch's creation, or,
    /// for a watch already there, the last revision it had passed on.
    pub(crate) fn queue_watch(&self, prefix: &[u8], with_puts: bool) -> QueueWatch {
        let mail = Arc::new(Mailbox::new());
        let mut st = self.inner.state();
        st.next_sub += 1;
        let sub = st.next_sub;
        let key: Arc<[u8]> = prefix.into();
        let existing = st.shared.get(&(key.clone(), with_puts)).copied();
        let joined = existing.and_then(|id| {
            let reg = st.watches.get_mut(&id)?;
            let Sink::Shared(shared) = &mut reg.sink else {
                return None;
            };
            shared.subs.push((sub, Sub::Mail(mail.clone())));
            shared.idle_since = None;
            if reg.announced {
                let _ = mail.post(WatchEvent::Created {
                    revision: reg.resume_from - 1,
                });
            }
            Some(id)
        });
        let id = match joined {
            Some(id) => id,
            None => {
                st.next_id += 1;
                let id = st.next_id;
                st.watches.insert(
                    id,
                    Registration {
                        spec: Spec {
                            key: key.clone(),
                            prefix: true,
                            with_puts,
                        },
                        resume_from: 0,
                        announced: false,
                        sent: false,
                        due: None,
                        sink: Sink::Shared(Shared {
                            subs: vec![(sub, Sub::Mail(mail.clone()))],
                            idle_since: None,
                        }),
                    },
                );
                st.shared.insert((key, with_puts), id);
                let _ = self.inner.cmds.send(Cmd::Create(id));
                id
            }
        };
        drop(st);
        QueueWatch {
            member: Member {
                watcher: self.clone(),
                id,
                sub,
            },
            mail,
            covers: None,
        }
    }

    /// Leaves shared watch `id` as user `sub`.
    fn leave(&self, id: i64, sub: u64) {
        let mut st = self.inner.state();
        let Some(Registration {
            sink: Sink::Shared(shared),
            ..
        }) = st.watches.get_mut(&id)
        else {
            return;
        };
        let before = shared.subs.len();
        shared.subs.retain(|(s, _)| *s != sub);
        if shared.subs.len() < before && shared.subs.is_empty() {
            shared.idle_since = Some(Instant::now());
            let _ = self.inner.cmds.send(Cmd::Idle);
        }
    }

    /// Watches the deletion of a held key, created at revision `created`,
    /// from revision `from` on: a [`KeyWatch`], which keeps only whether
    /// the key is gone. The server hears of it [`KEY_WATCH_DELAY`] later,
    /// if the key is still held then.
    pub(crate) fn watch_key(&self, key: impl Into<Arc<[u8]>>, created: i64, from: i64) -> KeyWatch {
        let gone = Arc::new(Deletion::new(created));
        let spec = Spec {
            key: key.into(),
            prefix: false,
            with_puts: false,
        };
        let ticket = self.register(spec, from, Sink::Deletion(gone.clone()));
        KeyWatch {
            place: Place::Own(ticket),
            gone,
        }
    }

    /// A watch of its own, created [`KEY_WATCH_DELAY`] from now.
    fn register(&self, spec: Spec, from: i64, sink: Sink) -> Ticket {
        let due = Instant::now() + KEY_WATCH_DELAY;
        let id = {
            let mut st = self.inner.state();
            st.next_id += 1;
            let id = st.next_id;
            st.watches.insert(
                id,
                Registration {
                    spec,
                    resume_from: from,
                    announced: false,
                    sent: false,
                    due: Some(due),
                    sink,
                },
            );
            id
        };
        let _ = self.inner.cmds.send(Cmd::CreateAt(id, due));
        Ticket {
            id,
            watcher: self.clone(),
        }
    }
}

impl Watcher {
    /// Ends watch `id` now (its owner's next event is `None`), as dropping
    /// its handle would: for an owner about to delete the watched key
    /// itself, so that the server does not send that deletion back.
    pub(crate) fn cancel(&self, id: i64) {
        let removed = self.inner.state().watches.remove(&id);
        // A watch not yet sent to the server ends here.
        if removed.is_some_and(|reg| reg.sent) {
            let _ = self.inner.cmds.send(Cmd::Cancel(id));
        }
    }
}

/// A watch's place in its [`Watcher`]; dropping it cancels the watch.
struct Ticket {
    id: i64,
    watcher: Watcher,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.watcher.cancel(self.id);
    }
}

/// One user's place in a shared queue watch; dropping it leaves the watch.
struct Member {
    watcher: Watcher,
    id: i64,
    sub: u64,
}

impl Drop for Member {
    fn drop(&mut self) {
        self.watcher.leave(self.id, self.sub);
    }
}

/// A waiter's view of its queue's shared watch ([`Watcher::queue_watch`]):
/// the events routed to the watch since it joined, in revision order.
pub(crate) struct QueueWatch {
    member: Member,
    mail: Arc<Mailbox<WatchEvent>>,
    /// The revision after which every event reaches this waiter, once known.
    covers: Option<i64>,
}

impl QueueWatch {
    /// Keeps watching `key`, our key created at revision `created`, as a
    /// [`KeyWatch`], without a gap (every event routed to this waiter so far
    /// counts): for a waiter whose key is now held.
    pub(crate) fn into_key_watch(self, key: &[u8], created: i64) -> KeyWatch {
        let QueueWatch { member, mail, .. } = self;
        let gone = Arc::new(Deletion::new(created));
        let key: Arc<[u8]> = key.into();
        let mut st = member.watcher.inner.state();
        // Events are routed under the state's lock: none is missed.
        while let Some(event) = mail.try_recv() {
            note_key(&gone, &key, &event);
        }
        let place = match st.watches.get_mut(&member.id) {
            Some(Registration {
                sink: Sink::Shared(shared),
                ..
            }) => shared.subs.iter_mut().find(|(s, _)| *s == member.sub),
            _ => None,
        };
        match place {
            Some((_, sub)) => *sub = Sub::Key(key, gone.clone()),
            None => gone.end(),
        }
        drop(st);
        KeyWatch {
            place: Place::Shared(member),
            gone,
        }
    }

    /// The next event; `None` if the client is gone.
    pub(crate) async fn next(&mut self) -> Option<WatchEvent> {
        self.mail.recv().await
    }

    /// Waits for the watch's creation until `deadline` (at once after the
    /// first time): the revision after which every event reaches this
    /// waiter. An `Unavailable` error if it is not created in time.
    pub(crate) async fn created(&mut self, deadline: Instant) -> Result<i64> {
        if let Some(c) = self.covers {
            return Ok(c);
        }
        loop {
            match tokio::time::timeout_at(deadline, self.mail.recv()).await {
                Ok(Some(WatchEvent::Created { revision })) => {
                    self.covers = Some(revision);
                    return Ok(revision);
                }
                Ok(Some(WatchEvent::Lost { reason })) => {
                    return Err(LockError::unavailable(format!(
                        "etcd: a watch failed: {reason}"
                    )))
                }
                Ok(Some(_)) => continue,
                Ok(None) => return Err(LockError::unavailable("etcd: the client is gone")),
                Err(_) => {
                    return Err(LockError::unavailable(
                        "etcd: a watch was not created within the request timeout",
                    ))
                }
            }
        }
    }
}

/// Where a [`KeyWatch`] gets its events.
enum Place {
    /// A watch of the key alone.
    Own(Ticket),
    /// The key's queue watch, shared.
    Shared(Member),
}

/// The watch of a held key; dropping it ends it.
pub(crate) struct KeyWatch {
    place: Place,
    gone: Arc<Deletion>,
}

impl KeyWatch {
    /// Whether the key is gone, shared with whoever waits for it.
    pub(crate) fn deletion(&self) -> &Arc<Deletion> {
        &self.gone
    }

    /// The watcher it is on.
    pub(crate) fn watcher(&self) -> &Watcher {
        match &self.place {
            Place::Own(ticket) => &ticket.watcher,
            Place::Shared(member) => &member.watcher,
        }
    }

    /// Stops listening now, as dropping it would: for an owner about to
    /// delete the key itself. A watch of the key alone is cancelled, so
    /// that the server does not send that deletion back; a shared one goes
    /// on for the queue's waiters.
    pub(crate) fn cancel(&self) {
        match &self.place {
            Place::Own(ticket) => ticket.watcher.cancel(ticket.id),
            Place::Shared(member) => member.watcher.leave(member.id, member.sub),
        }
    }
}
