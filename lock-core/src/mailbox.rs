//! [`Mailbox`]: a queue with one consumer that waits for it, a few dozen
//! bytes while empty.
//!
//! Every held guard keeps a keeper task with a command queue and, on
//! session-based backends, a queue of session events; etcd keeps one per
//! watch. A tokio `mpsc` channel allocates a block of 32 slots up front
//! (more than a kilobyte for these items), which at 10,000 guards is most of
//! a client's memory. A mailbox allocates only while items are queued.

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
    items: VecDeque<T>,
    closed: bool,
}

impl<T> Default for Mailbox<T> {
    fn default() -> Self {
        Self {
            mail: Mutex::new(Mail {
                items: VecDeque::new(),
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
            .field("queued", &mail.items.len())
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
            mail.items.push_back(item);
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
            std::mem::take(&mut mail.items)
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
        match mail.items.pop_front() {
            Some(item) => {
                if mail.items.is_empty() && mail.items.capacity() > 4 {
                    // Give back what a burst made it grow to.
                    mail.items.shrink_to_fit();
                }
                Some(Some(item))
            }
            None if mail.closed => Some(None),
            None => None,
        }
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
