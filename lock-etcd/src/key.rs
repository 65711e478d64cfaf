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
//! later too, and no time window bounds how much later: a member paused
//! for seconds holds it in its socket as long. So every put of a contender
//! key also compares the session's fence key ([`Session::fence`]), and the
//! key then carries a doubt: whatever ends its life moves the fence on
//! ([`Session::bump`], retried until it is known applied), after which no
//! copy of the put can be applied any more, then looks for the key by name
//! and lease and removes what it finds, holding the turn until then.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use lock_core::{LockErrorKind, Result};

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
    /// The session's fence key of the name, moved on to settle a put of
    /// unknown outcome.
    fence: Arc<str>,
    permit: Option<NamePermit>,
    /// What the transaction that deletes the key also does (a leader's
    /// lock-delay marker: deleted on a resignation, moved to a lease of
    /// the delay's length after a loss; see `crate::election::delay`).
    /// Applied only with the deletion of our key, so safe to send again.
    pub(crate) also: Vec<TxnOp>,
    /// A put of this key had an unknown outcome: it may still be applied
    /// until the session's fence has moved on (see the module docs).
    doubt: bool,
    armed: bool,
}

/// What an acquisition that goes on keeps of a key of its that is gone:
/// the turn, and the doubt about a put still on its way.
#[derive(Default)]
pub(crate) struct Carry {
    /// The in-process turn of a mutex name, if the acquisition holds one.
    pub(crate) permit: Option<NamePermit>,
    /// A put of the (mutex) key had an unknown outcome and may still be
    /// applied until the session's fence moves on.
    pub(crate) doubt: bool,
}

impl From<Option<NamePermit>> for Carry {
    fn from(permit: Option<NamePermit>) -> Self {
        Self {
            permit,
            doubt: false,
        }
    }
}

impl OurKey {
    /// A key about to be put, holding the turn and the doubt `carry`
    /// until it is gone.
    pub(crate) fn new(
        client: Arc<EtcdClient>,
        session: Arc<Session>,
        key: String,
        fence: String,
        carry: Carry,
    ) -> Self {
        Self {
            client,
            session,
            key: key.into(),
            rev: None,
            fence: fence.into(),
            permit: carry.permit,
            also: Vec::new(),
            doubt: carry.doubt,
            armed: true,
        }
    }

    /// The put of this key has an unknown outcome: it may still be applied,
    /// until the session's fence moves on.
    pub(crate) fn doubt(&mut self) {
        self.doubt = true;
    }

    /// The put of this key is about to be sent: until its answer comes,
    /// its outcome is unknown (an acquisition dropped meanwhile, a
    /// cancelled wait, leaves the key in doubt for its clean-up to settle).
    /// Returns the doubt it had before, for [`OurKey::answered`].
    pub(crate) fn sending(&mut self) -> bool {
        std::mem::replace(&mut self.doubt, true)
    }

    /// The put's answer came (applied or not, known either way): the key
    /// is in doubt only as it was before it was sent (`before`).
    pub(crate) fn answered(&mut self, before: bool) {
        self.doubt = before;
    }

    /// The put did not happen (or the key already went with its lease):
    /// nothing to delete; the turn and the doubt go on with the
    /// acquisition, whose next key of the same name (a mutex) keeps them.
    pub(crate) fn nothing_written(mut self) -> Carry {
        self.armed = false;
        Carry {
            permit: self.permit.take(),
            doubt: std::mem::take(&mut self.doubt),
        }
    }

    /// Deletes the key now (comparing its create revision, see the module
    /// docs), for an acquisition that goes on: whether it was still there,
    /// so still ours, the turn and the doubt. On an error the delete goes
    /// on in the background, holding the turn until it is done; so it does
    /// if this future is dropped before the server answered.
    pub(crate) async fn remove_and_carry(mut self) -> Result<(bool, Carry)> {
        let deleted = match self.rev {
            Some(rev) => delete(&self.client, &self.key, rev, &self.also).await,
            None => Ok(false),
        };
        match deleted {
            Ok(was_there) => {
                self.armed = false;
                Ok((
                    was_there,
                    Carry {
                        permit: self.permit.take(),
                        doubt: std::mem::take(&mut self.doubt),
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
            Some(rev) => delete(&self.client, &self.key, rev, &self.also).await,
            None => Ok(false),
        };
        if deleted.is_ok() {
            self.rev = None;
            if !self.doubt {
                self.armed = false;
            }
        }
        // Still armed: the drop spawns what is left (the delete, settling a
        // put of unknown outcome).
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
            self.fence.clone(),
            self.rev,
            std::mem::take(&mut self.also),
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
/// docs), applying `also` in the same transaction: whether it was. Safe
/// to send again.
async fn delete(client: &EtcdClient, key: &Arc<str>, rev: i64, also: &[TxnOp]) -> Result<bool> {
    let mut ops = vec![TxnOp::delete(&**key, None)];
    ops.extend(also.iter().cloned());
    let txn = Txn::new()
        .when([Compare::create_revision(&**key, CompareOp::Equal, rev)])
        .and_then(ops);
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
/// with the lease anyway); then, if a put of it had an unknown outcome
/// (`doubt`), moves the session's fence on (retrying likewise): from then
/// on no copy of that put can be applied, so one look for the key by name
/// and lease, and a delete of what it finds, settle it. Gives `permit`
/// back at the end.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn delete_until_done(
    client: Arc<EtcdClient>,
    session: Arc<Session>,
    key: Arc<str>,
    fence: Arc<str>,
    rev: Option<i64>,
    also: Vec<TxnOp>,
    doubt: bool,
    permit: Option<NamePermit>,
) {
    let mut delay = Duration::from_millis(50);
    let (mut rev, mut doubt, mut look) = (rev, doubt, false);
    loop {
        if session.is_ended() {
            break;
        }
        let step = match rev {
            Some(r) => delete(&client, &key, r, &also).await.map(|_| {
                rev = None;
            }),
            None if doubt => session.bump(&fence).await.map(|()| {
                doubt = false;
                look = true;
            }),
            None if look => find(&client, &key, session.id()).await.map(|found| {
                rev = found;
                look = false;
            }),
            None => break,
        };
        match step {
            Ok(()) => delay = Duration::from_millis(50),
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
