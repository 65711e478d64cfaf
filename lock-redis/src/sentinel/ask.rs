//! Asking the sentinels where the primary is, in the order the Redis
//! Sentinel client rules give: one sentinel after the other, the last one
//! that answered first; one whose answer proved wrong (the address it gave
//! was no primary) goes last.

use std::sync::Mutex;
use std::time::Duration;

use lock_core::{LockError, LockErrorKind, TlsConfig};
use tokio::time::Instant;

use super::target::{join_addr, SentinelTarget};
use crate::kit::connect::open_client;
use crate::kit::errors::error_kind;

/// The sentinels of one client, and how to reach them.
pub(crate) struct Sentinels {
    pub(crate) target: SentinelTarget,
    tls: TlsConfig,
    /// Addresses as the sentinels report them, and where to connect instead.
    address_map: Vec<(String, String)>,
    /// Indexes into `target.sentinels`, in the order to ask them.
    order: Mutex<Vec<usize>>,
    /// How long one sentinel may take to connect and answer.
    per_sentinel: Duration,
}

/// A primary named by a sentinel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Named {
    /// `host:port` to connect to (after the address map).
    pub(crate) addr: String,
    /// The sentinel that named it (an index into the URL's list).
    pub(crate) by: usize,
}

impl Sentinels {
    /// The sentinels of `target`, each given `per_sentinel` to answer.
    pub(crate) fn new(
        target: SentinelTarget,
        tls: TlsConfig,
        address_map: Vec<(String, String)>,
        per_sentinel: Duration,
    ) -> Self {
        let order = (0..target.sentinels.len()).collect();
        Self {
            target,
            tls,
            address_map,
            order: Mutex::new(order),
            per_sentinel,
        }
    }

    /// A client of sentinel `i`.
    pub(crate) fn client(&self, i: usize) -> Result<redis::Client, LockError> {
        open_client(
            &self.target.sentinel_url(&self.target.sentinels[i]),
            &self.tls,
        )
    }

    /// The sentinels' indexes in the order to ask them.
    pub(crate) fn order(&self) -> Vec<usize> {
        self.order.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// The primary as the first sentinel that knows it names it, asking
    /// them in order until `deadline`. `Unavailable` when none answered;
    /// `InvalidArgument` when every one answered and none monitors a
    /// primary of that name.
    pub(crate) async fn primary(&self, deadline: Instant) -> Result<Named, LockError> {
        let master = &self.target.master;
        let mut failures = Vec::new();
        for i in self.order() {
            let sentinel = &self.target.sentinels[i];
            if Instant::now() >= deadline {
                failures.push(format!("{sentinel}: not asked before the deadline"));
                continue;
            }
            let until = deadline.min(lock_core::backend::add_saturating(
                Instant::now(),
                self.per_sentinel,
            ));
            match tokio::time::timeout_at(until, self.ask(i)).await {
                Ok(Ok(Some((host, port)))) => {
                    self.answered(i);
                    let reported = join_addr(&host, &port);
                    return Ok(Named {
                        addr: self.mapped(reported),
                        by: i,
                    });
                }
                Ok(Ok(None)) => failures.push(format!("{sentinel}: monitors no {master:?}")),
                Ok(Err(e)) => {
                    if error_kind(&e) == LockErrorKind::Unauthorized {
                        return Err(LockError::new(
                            LockErrorKind::Unauthorized,
                            format!("sentinel {sentinel}: {}", e.category()),
                        ));
                    }
                    failures.push(format!("{sentinel}: {}", e.category()));
                }
                Err(_) => failures.push(format!("{sentinel}: no answer in time")),
            }
        }
        let all_answered = failures
            .iter()
            .all(|f| f.ends_with(&format!("monitors no {master:?}")));
        let kind = if all_answered && !failures.is_empty() {
            LockErrorKind::InvalidArgument
        } else {
            LockErrorKind::Unavailable
        };
        Err(LockError::new(
            kind,
            format!(
                "no sentinel named the primary {master:?}: {}",
                failures.join("; ")
            ),
        ))
    }

    /// `SENTINEL get-master-addr-by-name` on sentinel `i`.
    async fn ask(&self, i: usize) -> redis::RedisResult<Option<(String, String)>> {
        let client = self.client(i).map_err(|e| {
            redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "sentinel URL",
                e.to_string(),
            ))
        })?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.per_sentinel))
            .set_response_timeout(Some(self.per_sentinel));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.target.master)
            .query_async(&mut conn)
            .await
    }

    /// Sentinel `i` answered: it is asked first from now on.
    fn answered(&self, i: usize) {
        if let Ok(mut order) = self.order.lock() {
            order.retain(|&j| j != i);
            order.insert(0, i);
        }
    }

    /// Sentinel `i` named an address that was no primary: it is asked last.
    pub(crate) fn misled(&self, i: usize) {
        if let Ok(mut order) = self.order.lock() {
            order.retain(|&j| j != i);
            order.push(i);
        }
    }

    /// `reported` through the address map.
    fn mapped(&self, reported: String) -> String {
        crate::config::mapped_address(&self.address_map, reported)
    }
}
