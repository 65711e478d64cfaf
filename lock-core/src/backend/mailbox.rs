//! [`Mailbox`]: a queue with one consumer that waits for it, a few dozen
//! bytes while empty.
//!
//! Every held guard keeps a keeper task with a command queue and, on
//! session-based backends, a queue of session events; etcd keeps one per
//! watch. A tokio `mpsc` channel allocates a block of 32 slots up front
//! (more than a kilobyte for these items), which at 10,000 guards is most of
//! a client's memory. A mailbox keeps one item in place and allocates only
//! while more than one is queued.

use std::collections::VecDeque;
use std::fmt;
use std::future::poll_fn;
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures::task::AtomicWaker;

/// A queue of `T` with one consumer ([`recv`](Mailbox::recv) or
/// [`poll_recv`](Mailbox::poll_recv)) and any number of producers
/// ([`post`](Mailbox::post)), shared through an `Arc`. Once
/// [closed](Mailbox::close) it takes nothing more; the consumer still gets
/// what was queued before, then `None`.
pub struct Mailbox<T> {
    mail: Mutex<Mail<T>>,
    waker: AtomicWaker,
}

struct Mail<T> {
    /// The next item: most mailboxes never hold more than one at a time,
    /// and this one costs no allocation.
    first: Option<T>,
    /// The items after it, in order, only while there are any (a pointer
    /// rather than a queue's 32 bytes in every idle mailbox: bursts are
    /// rare, idle mailboxes are one or two per held guard).
    #[allow(
        clippy::box_collection,
        reason = "the box keeps an idle mailbox one pointer wide; the extra allocation happens only in a burst"
    )]
    rest: Option<Box<VecDeque<T>>>,
    closed: bool,
}

impl<T> Mail<T> {
    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.as_ref().map_or(0, |r| r.len())
    }

    fn push(&mut self, item: T) {
        if self.first.is_none() {
            self.first = Some(item);
        } else {
            self.rest.get_or_insert_default().push_back(item);
        }
    }

    fn pop(&mut self) -> Option<T> {
        let next = self.first.take()?;
        if let Some(rest) = self.rest.as_mut() {
            self.first = rest.pop_front();
            if rest.is_empty() {
                // Give back what a burst made it grow to.
                self.rest = None;
            }
        }
        Some(next)
    }
}

impl<T> Default for Mailbox<T> {
    fn default() -> Self {
        Self {
            mail: Mutex::new(Mail {
                first: None,
                rest: None,
                closed: false,
            }),
            waker: AtomicWaker::new(),
        }
    }
}

impl<T> fmt::Debug for Mailbox<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mail = self.mail();
        f.debug_struct("Mailbox")
            .field("queued", &mail.len())
            .field("closed", &mail.closed)
            .finish()
    }
}

impl<T> Mailbox<T> {
    /// An empty, open mailbox.
    pub fn new() -> Self {
        Self::default()
    }

    fn mail(&self) -> MutexGuard<'_, Mail<T>> {
        self.mail.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `item` and wakes the consumer; gives it back if the mailbox
    /// is closed.
    pub fn post(&self, item: T) -> Result<(), T> {
        {
            let mut mail = self.mail();
            if mail.closed {
                return Err(item);
            }
            mail.push(item);
        }
        self.waker.wake();
        Ok(())
    }

    /// Takes nothing more from now on; the consumer gets what is queued,
    /// then `None`.
    pub fn close(&self) {
        self.mail().closed = true;
        self.waker.wake();
    }

    /// Closes and drops what is still queued (items that carry a reply
    /// channel answer their sender with a closed channel).
    pub fn close_and_clear(&self) {
        let dropped = {
            let mut mail = self.mail();
            mail.closed = true;
            (mail.first.take(), mail.rest.take())
        };
        drop(dropped);
        self.waker.wake();
    }

    /// Whether it is closed.
    pub fn is_closed(&self) -> bool {
        self.mail().closed
    }

    /// The next item, or `None` once closed and empty. One consumer only: a
    /// second one polling at the same time takes the wake-ups of the first.
    pub fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        if let Some(next) = self.take() {
            return Poll::Ready(next);
        }
        self.waker.register(cx.waker());
        // An item posted between the first look and the registration.
        match self.take() {
            Some(next) => Poll::Ready(next),
            None => Poll::Pending,
        }
    }

    /// The next item if one is queued, without waiting.
    pub fn try_recv(&self) -> Option<T> {
        self.take().flatten()
    }

    /// Waits for the next item; `None` once closed and empty.
    pub async fn recv(&self) -> Option<T> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// `Some(item)`, `Some(None)` once closed and empty, `None` if empty.
    fn take(&self) -> Option<Option<T>> {
        let mut mail = self.mail();
        match mail.pop() {
            Some(item) => Some(Some(item)),
            None if mail.closed => Some(None),
            None => None,
        }
    }
}

/// A mailbox's items as a [`futures::Stream`] (a lease's events, from a
/// session or an in-process holder): ends once the mailbox is closed and
/// emptied.
#[derive(Debug)]
pub(crate) struct MailboxStream<T>(pub(crate) std::sync::Arc<Mailbox<T>>);

impl<T> futures::Stream for MailboxStream<T> {
    type Item = T;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn delivers_in_order_then_none_after_close() {
        let mb = Arc::new(Mailbox::new());
        assert!(mb.post(1).is_ok());
        assert!(mb.post(2).is_ok());
        mb.close();
        assert_eq!(mb.post(3), Err(3));
        assert_eq!(mb.recv().await, Some(1));
        assert_eq!(mb.recv().await, Some(2));
        assert_eq!(mb.recv().await, None);
    }

    #[tokio::test]
    async fn wakes_a_waiting_consumer() {
        let mb = Arc::new(Mailbox::new());
        let consumer = {
            let mb = mb.clone();
            tokio::spawn(async move { mb.recv().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(mb.post("x").is_ok());
        let got = tokio::time::timeout(Duration::from_secs(2), consumer)
            .await
            .expect("woken")
            .unwrap();
        assert_eq!(got, Some("x"));
    }

    #[tokio::test]
    async fn keeps_order_across_the_slot_and_the_rest() {
        let mb = Mailbox::new();
        for i in 0..3 {
            assert!(mb.post(i).is_ok());
        }
        assert_eq!(mb.try_recv(), Some(0));
        assert!(mb.post(3).is_ok());
        for i in 1..4 {
            assert_eq!(mb.try_recv(), Some(i));
        }
        assert_eq!(mb.try_recv(), None);
        assert!(mb.post(4).is_ok());
        assert_eq!(mb.try_recv(), Some(4));
    }

    #[tokio::test]
    async fn close_and_clear_drops_what_is_queued() {
        let mb = Mailbox::new();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        assert!(mb.post(tx).is_ok());
        mb.close_and_clear();
        assert!(rx.await.is_err(), "the queued reply channel was dropped");
        assert!(mb.recv().await.is_none());
        assert!(mb.is_closed());
    }
}
