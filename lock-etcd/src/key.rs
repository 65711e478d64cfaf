//! [`OurKey`]: the one owner of a contender key we put, of the in-process
//! turn that goes with it (mutex), and of their clean-up.
//!
//! The rule it keeps: the key is deleted whatever ends its life (a release,
//! a loss, an error, a dropped acquire), the turn is given back only once the
//! key is gone (or goes with its lease), and nobody else's key is ever
//! deleted.
//!
//! The key's name carries our session lease (unique in the cluster), and,
//! but for a mutex, a sequence number unique to the acquisition; a mutex key
//! is one per session and name, and this client's acquisitions of a name
//! take turns, each holding its turn until its key is gone. Yet a name is
//! not enough: a delete that timed out may still be applied later, when
//! our next acquisition of the name has put the key again. So every delete
//! of a key whose create revision we know compares it (a transaction: the
//! key's create revision is ours, then delete), and such a delete is safe
//! to send again to another member. A put whose outcome is unknown (it
//! timed out, [`crate::client::Outcome::Unknown`]) may still be applied
//! later too: the key then carries a doubt until [`doubt_window`] after
//! the put gave up, and whatever ends the key's life keeps looking for it
//! (by name and lease) and removes it until then, holding the turn.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use lock_core::{LockErrorKind, Result};
use tokio::time::Instant;

use crate::client::EtcdClient;
use crate::permit::NamePermit;
use crate::session::Session;

/// A contender key of ours, with its clean-up armed until it is disarmed or
/// done.
pub(crate) struct OurKey {
    pub(crate) client: Arc<EtcdClient>,
    pub(crate) session: Arc<Session>,
    /// Shared with the guard's view and its watch (a guard may live long,
    /// and there may be many).
    pub(crate) key: Arc<str>,
    /// Its create revision, once known.
    pub(crate) rev: Option<i64>,
    permit: Option<NamePermit>,
    /// Until when a put of this key whose outcome is unknown may still be
    /// applied (see the module docs).
    doubt: Option<Instant>,
    armed: bool,
}

/// What an acquisition that goes on keeps of a key of its that is gone:
/// the turn, and the doubt about a put still on its way.
#[derive(Default)]
pub(crate) struct Carry {
    /// The in-process turn of a mutex name, if the acquisition holds one.
    pub(crate) permit: Option<NamePermit>,
    /// Until when a put of the (mutex) key whose outcome is unknown may
    /// still be applied.
    pub(crate) doubt: Option<Instant>,
}

impl From<Option<NamePermit>> for Carry {
    fn from(permit: Option<NamePermit>) -> Self {
        Self {
            permit,
            doubt: None,
        }
    }
}

/// How long after a put gave up with an unknown outcome it may still be
/// applied, as this client assumes: a lease TTL, at least 5 s (a connection silent that
/// long is closed by its keep-alive, and a request it still held is never
/// sent) plus a request timeout (a request that reached a member is applied
/// or fails within etcd's own request timeout, a few seconds).
pub(crate) fn doubt_window(client: &EtcdClient) -> Duration {
    let cfg = client.config();
    cfg.lease_ttl.max(Duration::from_secs(5)) + cfg.request_timeout
}

impl OurKey {
    /// A key about to be put, holding the turn and the doubt `carry`
    /// until it is gone.
    pub(crate) fn new(
        client: Arc<EtcdClient>,
        session: Arc<Session>,
        key: String,
        carry: Carry,
    ) -> Self {
        Self {
            client,
            session,
            key: key.into(),
            rev: None,
            permit: carry.permit,
            doubt: carry.doubt,
            armed: true,
        }
    }

    /// The put of this key has an unknown outcome: it may still be applied
    /// until [`doubt_window`] from now.
    pub(crate) fn doubt(&mut self) {
        let until = Instant::now() + doubt_window(&self.client);
        self.doubt = Some(self.doubt.map_or(until, |d| d.max(until)));
    }

    /// The put did not happen (or the key already went with its lease):
    /// nothing to delete; the turn and the doubt go on with the
    /// acquisition, whose next key of the same name (a mutex) keeps them.
    pub(crate) fn nothing_written(mut self) -> Carry {
        self.armed = false;
        Carry {
            permit: self.permit.take(),
            doubt: self.doubt.take(),
        }
    }

    /// Deletes the key now (comparing its create revision, see the module
    /// docs), for an acquisition that goes on: whether it was still there,
    /// so still ours, the turn and the doubt. On an error the delete goes
    /// on in the background, holding the turn until it is done; so it does
    /// if this future is dropped before the server answered.
    pub(crate) async fn remove_and_carry(mut self) -> Result<(bool, Carry)> {
        let deleted = match self.rev {
            Some(rev) => delete(&self.client, &self.key, rev).await,
            None => Ok(false),
        };
        match deleted {
            Ok(was_there) => {
                self.armed = false;
                Ok((
                    was_there,
                    Carry {
                        permit: self.permit.take(),
                        doubt: self.doubt.take(),
                    },
                ))
            }
            // Dropped armed: the delete goes on in the background.
            Err(e) => Err(e),
        }
    }

    /// Deletes the key (comparing its create revision) for an acquisition
    /// or a lock that ends: whether it was still there. The turn comes back
    /// when the key is surely gone: at once, or, while a put of it may
    /// still be on its way, once that is ruled out (in the background). On
    /// an error the delete goes on in the background.
    pub(crate) async fn remove(mut self) -> Result<bool> {
        let deleted = match self.rev {
            Some(rev) => delete(&self.client, &self.key, rev).await,
            None => Ok(false),
        };
        if deleted.is_ok() {
            self.rev = None;
            if self.doubt.is_none_or(|d| d <= Instant::now()) {
                self.armed = false;
            }
        }
        // Still armed: the drop spawns what is left (the delete, the look-out
        // for a late put).
        deleted
    }
}

impl Drop for OurKey {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let cleanup = delete_until_done(
            self.client.clone(),
            self.session.clone(),
            self.key.clone(),
            self.rev,
            self.doubt,
            self.permit.take(),
        );
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(cleanup);
            }
            Err(_) => {
                tracing::warn!(key = %self.key, "distlock etcd: key dropped outside a runtime; it goes with the session lease")
            }
        }
    }
}

/// Deletes our `key` if its create revision is still `rev` (see the module
/// docs): whether it was. Safe to send again.
async fn delete(client: &EtcdClient, key: &Arc<str>, rev: i64) -> Result<bool> {
    let txn = Txn::new()
        .when([Compare::create_revision(&**key, CompareOp::Equal, rev)])
        .and_then([TxnOp::delete(&**key, None)]);
    let resp = client
        .call("delete a contender key", |mut c: etcd_client::Client| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await?;
    Ok(resp.succeeded())
}

/// Our `key` with our session's `lease`, if it is there: its create
/// revision.
async fn find(client: &EtcdClient, key: &Arc<str>, lease: i64) -> Result<Option<i64>> {
    let resp = client
        .call("look for a contender key", |mut c: etcd_client::Client| {
            let key = key.clone();
            async move { c.get(key.as_bytes(), None).await }
        })
        .await?;
    Ok(resp
        .kvs()
        .first()
        .filter(|kv| kv.lease() == lease)
        .map(|kv| kv.create_revision()))
}

/// Deletes our `key` (created at `rev`, if known), retrying while the
/// server is unreachable and the session lives (after that the key goes
/// with the lease anyway); then, while a put of it may still be applied
/// (until `doubt`), looks for it by name and lease and deletes what it
/// finds. Gives `permit` back at the end.
pub(crate) async fn delete_until_done(
    client: Arc<EtcdClient>,
    session: Arc<Session>,
    key: Arc<str>,
    rev: Option<i64>,
    doubt: Option<Instant>,
    permit: Option<NamePermit>,
) {
    let mut delay = Duration::from_millis(50);
    let mut rev = rev;
    let mut look = doubt.is_some();
    loop {
        if session.is_ended() {
            break;
        }
        let step = match rev {
            Some(r) => delete(&client, &key, r).await.map(|_| {
                rev = None;
            }),
            None if look => find(&client, &key, session.id()).await.map(|found| {
                rev = found;
                look = found.is_some() || doubt.is_some_and(|d| Instant::now() < d);
            }),
            None => break,
        };
        match step {
            Ok(()) if rev.is_some() => continue,
            Ok(()) => {
                delay = Duration::from_millis(50);
                if !look {
                    break;
                }
                // Look again a little later while in doubt.
                let until = doubt.unwrap_or_else(Instant::now);
                let pause =
                    Duration::from_millis(200).min(until.saturating_duration_since(Instant::now()));
                tokio::time::sleep(pause).await;
            }
            Err(e) if e.kind() == LockErrorKind::Unavailable => {
                tracing::debug!(%key, error = %e, "distlock etcd: deleting our key failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
            Err(e) => {
                // A refused request (no permission) wrote nothing either.
                let harmless =
                    matches!(e.kind(), LockErrorKind::Lost | LockErrorKind::Unauthorized);
                if !harmless && !session.is_ended() {
                    tracing::warn!(%key, error = %e, "distlock etcd: could not delete our key; it goes with the session lease");
                }
                break;
            }
        }
    }
    drop(permit);
}
