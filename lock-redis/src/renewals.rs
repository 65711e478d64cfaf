//! How a client's renewal batches reach Redis (see [`crate::kit::renew`]):
//! one batcher on one server, one batcher per primary on a Redis Cluster.
//!
//! On a cluster a renewal goes to the batcher of the primary that owns
//! its key's slot in the slot map as last read; the batch runs
//! [`RENEW_BATCH_ANY_SLOT`](crate::kit::renew::RENEW_BATCH_ANY_SLOT) on
//! that primary alone, whatever the slots of its keys. A key whose slot
//! moved away is answered "non local" and nothing is done to it: the slot
//! map is read again and the renewal sent to the new owner, within the
//! request timeout (extending is idempotent).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::batching::RenewBatching;
use crate::client::Client;
use crate::conn::Conn;
use crate::failure::Failure;
use crate::kit::renew::{BatchSender, Batcher, KeyOutcome, RenewItem, Renewed};

/// The pause before a renewal whose key moved is sent again (the slot map
/// is read again meanwhile).
const MOVED_PAUSE: Duration = Duration::from_millis(20);

/// A client's renewal batchers.
pub(crate) enum Renewals {
    /// One server: one batcher.
    One(Batcher<BatchOnClient>),
    /// A Redis Cluster: one batcher per primary, made on first use.
    PerPrimary {
        client: Weak<Client>,
        batching: RenewBatching,
        batchers: Mutex<HashMap<String, Arc<Batcher<BatchOnPrimary>>>>,
    },
}

impl Renewals {
    /// The batchers of `client`, on a cluster or not.
    pub(crate) fn new(client: Weak<Client>, cluster: bool, batching: RenewBatching) -> Self {
        if cluster {
            Renewals::PerPrimary {
                client,
                batching,
                batchers: Mutex::new(HashMap::new()),
            }
        } else {
            Renewals::One(Batcher::new(BatchOnClient(client), batching))
        }
    }

    /// Renews `item` in its batch; on a cluster, again at the new owner
    /// while its key's slot is found to have moved, until the request
    /// timeout (then a retryable failure).
    pub(crate) async fn renew(&self, item: RenewItem) -> Result<Renewed, Failure> {
        match self {
            Renewals::One(batcher) => batcher.renew(item).await,
            Renewals::PerPrimary {
                client,
                batching,
                batchers,
            } => {
                let batcher_of = |owner: &str| {
                    let mut all = batchers.lock().unwrap_or_else(|e| e.into_inner());
                    let batcher = all.entry(owner.to_string()).or_insert_with(|| {
                        let sender = BatchOnPrimary {
                            client: client.clone(),
                            addr: owner.to_string(),
                        };
                        Arc::new(Batcher::new(sender, *batching))
                    });
                    batcher.clone()
                };
                renew_at_owner(client, batcher_of, item).await
            }
        }
    }
}

/// [`Renewals::renew`] on a cluster: `item` in the batch of its key's
/// owner (`batcher_of` it).
async fn renew_at_owner(
    client: &Weak<Client>,
    batcher_of: impl Fn(&str) -> Arc<Batcher<BatchOnPrimary>>,
    item: RenewItem,
) -> Result<Renewed, Failure> {
    let client = client.upgrade().ok_or(Failure::Abandoned)?;
    let until = Instant::now() + client.config.request_timeout;
    let Some(cluster) = client.route.cluster() else {
        return Err(Failure::Abandoned);
    };
    loop {
        let Some(owner) = cluster.owner_of(&item.key) else {
            return Err(not_served(&item.key, "no primary serves its slot"));
        };
        let renewed = batcher_of(&owner).renew(item.clone()).await?;
        if !renewed.outcome.is_elsewhere() {
            return Ok(renewed);
        }
        if Instant::now() + MOVED_PAUSE >= until {
            return Err(not_served(
                &item.key,
                "its slot moved, and its new owner was not found in time",
            ));
        }
        tracing::debug!(key = %item.key, from = %owner, "distlock redis cluster: a renewal's slot moved; renewing at its new owner");
        cluster.refresh().await;
        tokio::time::sleep(MOVED_PAUSE).await;
    }
}

/// The retryable failure of a renewal of `key` that no primary took.
fn not_served(key: &str, why: &str) -> Failure {
    Failure::Redis(redis::RedisError::from((
        redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain),
        "renewal not sent",
        format!("{key:?}: {why}"),
    )))
}

/// How a client's renewal batches reach one server: one
/// [`RENEW_BATCH`](crate::kit::renew::RENEW_BATCH) per batch through the
/// client's connection, within the request timeout, retried once after a
/// dropped connection (extending is idempotent), as a single renewal
/// always was.
pub(crate) struct BatchOnClient(Weak<Client>);

impl BatchSender for BatchOnClient {
    type Error = Failure;

    async fn send(&self, items: Vec<RenewItem>) -> Result<Vec<KeyOutcome>, Failure> {
        let Some(client) = self.0.upgrade() else {
            return Err(Failure::Abandoned);
        };
        client
            .request_idempotent_raw("renew", || {
                let mut conn = client.route.conn();
                let (script, items) = (&client.scripts.renew_batch, &items);
                async move { crate::kit::renew::send_batch(&mut conn, script, items).await }
            })
            .await
    }

    fn abandoned(&self) -> Failure {
        Failure::Abandoned
    }
}

/// How a client's renewal batches reach one primary of a cluster (`addr`,
/// as announced): one `RENEW_BATCH_ANY_SLOT` per batch to that node, as
/// [`BatchOnClient`] otherwise.
pub(crate) struct BatchOnPrimary {
    client: Weak<Client>,
    addr: String,
}

impl BatchSender for BatchOnPrimary {
    type Error = Failure;

    async fn send(&self, items: Vec<RenewItem>) -> Result<Vec<KeyOutcome>, Failure> {
        let Some(client) = self.client.upgrade() else {
            return Err(Failure::Abandoned);
        };
        client
            .request_idempotent_raw("renew", || {
                let conn = client.route.conn();
                let (script, items, addr) =
                    (&client.scripts.renew_batch_any_slot, &items, &self.addr);
                async move {
                    let Conn::Cluster(mut conn) = conn else {
                        return Err(redis::RedisError::from((
                            redis::ErrorKind::Client,
                            "a cluster's renewal on a connection to one server",
                        )));
                    };
                    let mut node = conn.node(addr).ok_or_else(|| {
                        redis::RedisError::from((
                            redis::ErrorKind::Client,
                            "a primary that is no host:port",
                            addr.clone(),
                        ))
                    })?;
                    crate::kit::renew::send_batch_any_slot(&mut node, script, items).await
                }
            })
            .await
    }

    fn abandoned(&self) -> Failure {
        Failure::Abandoned
    }
}
