//! [`OurKey`]: the one owner of a contender key we put, of the in-process
//! turn that goes with it (mutex), and of their clean-up.
//!
//! The rule it keeps: the key is deleted whatever ends its life (a release,
//! a loss, an error, a dropped acquire), the turn is given back only once the
//! key is gone (or goes with its lease), and nobody else's key is ever
//! deleted (the delete compares the key's create revision, or its lease
//! before the create revision is known).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use lock_core::{LockErrorKind, Result};

use crate::client::EtcdClient;
use crate::permit::NamePermit;
use crate::queue::txn_call;
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
    armed: bool,
}

impl OurKey {
    /// A key about to be put, holding `permit` until it is gone.
    pub(crate) fn new(
        client: Arc<EtcdClient>,
        session: Arc<Session>,
        key: String,
        permit: Option<NamePermit>,
    ) -> Self {
        Self {
            client,
            session,
            key: key.into(),
            rev: None,
            permit,
            armed: true,
        }
    }

    /// The put did not happen (or the key already went with its lease):
    /// nothing to delete; the turn comes back.
    pub(crate) fn nothing_written(mut self) -> Option<NamePermit> {
        self.armed = false;
        self.permit.take()
    }

    /// Deletes the key now (compare-and-delete): whether it was still ours,
    /// and the turn, for an acquisition that goes on. On an error the delete
    /// goes on in the background, holding the turn until it is done; so it
    /// does if this future is dropped before the server answered.
    pub(crate) async fn remove(mut self) -> Result<(bool, Option<NamePermit>)> {
        let guard = self.guard();
        let txn = Txn::new()
            .when([guard.clone()])
            .and_then([TxnOp::delete(&*self.key, None)]);
        let deleted = self
            .client
            .call("delete a contender key", txn_call(&txn))
            .await;
        self.armed = false;
        match deleted {
            Ok(resp) => Ok((resp.succeeded(), self.permit.take())),
            Err(e) => {
                // Keep trying in the background, holding the turn, so that
                // the key never outlives its owner on a live session.
                tokio::spawn(delete_until_done(
                    self.client.clone(),
                    self.session.clone(),
                    self.key.to_string(),
                    guard,
                    self.permit.take(),
                ));
                Err(e)
            }
        }
    }

    /// What a delete must compare: the create revision once known, else
    /// the lease (a key of this name on our lease is ours).
    fn guard(&self) -> Compare {
        match self.rev {
            Some(rev) => Compare::create_revision(&*self.key, CompareOp::Equal, rev),
            None => Compare::lease(&*self.key, CompareOp::Equal, self.session.id()),
        }
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
            self.key.to_string(),
            self.guard(),
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

/// Deletes `key` if `guard` holds, retrying while the server is unreachable
/// and the session lives (after that the key goes with the lease anyway).
/// Gives `permit` back at the end.
pub(crate) async fn delete_until_done(
    client: Arc<EtcdClient>,
    session: Arc<Session>,
    key: String,
    guard: Compare,
    permit: Option<NamePermit>,
) {
    let txn = Txn::new()
        .when([guard])
        .and_then([TxnOp::delete(key.clone(), None)]);
    let mut delay = Duration::from_millis(50);
    loop {
        match client.call("delete a contender key", txn_call(&txn)).await {
            Ok(_) => break,
            Err(e) if e.kind() == LockErrorKind::Unavailable && !session.is_ended() => {
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
