//! [`RedlockLock`]: the client of N independent Redis nodes that the
//! application holds, its connection to them and what it tells about them.

use std::fmt;
use std::sync::Arc;

use futures::stream::StreamExt;
use lock_core::{LockError, LockName, Result};
use lock_redis::kit::notify::{Notifier, NotifyNode, Timeouts};
use lock_redis::kit::scripts::Scripts;

use crate::config::RedlockConfig;
use crate::fan_out::fan_out;
use crate::inner::Inner;
use crate::node::Node;
use crate::tally::Tally;

/// A Redlock client over N independent Redis masters.
///
/// Cheap to clone (one shared set of connections). Use it through
/// [`lock_core::DistributedLock`] (`try_acquire`, `acquire`, `inspect`);
/// the guards it returns carry no fencing token. See the crate docs for the
/// algorithm, its timing assumptions and when not to use it.
#[derive(Clone)]
pub struct RedlockLock {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for RedlockLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockLock")
            .field("nodes", &self.nodes())
            .field("quorum", &self.inner.quorum)
            .field("node_timeout", &self.inner.config.node_timeout)
            .finish_non_exhaustive()
    }
}

impl RedlockLock {
    /// Validates `config`, connects to every node in parallel (each bounded
    /// by [`RedlockConfig::connect_timeout`]) and succeeds if at least a
    /// quorum answered. Nodes that are down are connected later, lazily, as
    /// rounds need them.
    ///
    /// Errors: [`LockErrorKind::InvalidArgument`](lock_core::LockErrorKind::InvalidArgument) for a bad configuration;
    /// [`LockErrorKind::Unavailable`](lock_core::LockErrorKind::Unavailable), naming each node that failed and why,
    /// when fewer than a quorum could be reached.
    pub async fn connect(config: RedlockConfig) -> Result<Self> {
        let lock = Self::connect_lazy(config)?;
        lock.check_quorum().await?;
        Ok(lock)
    }

    /// Validates `config` and builds the client without any I/O: connections
    /// are opened by the first round that needs them, and re-opened after a
    /// failure. Acquiring fails with [`LockErrorKind::Unavailable`](lock_core::LockErrorKind::Unavailable) while
    /// fewer than a quorum of nodes can be reached: at once when they refuse
    /// connections, after two [`RedlockConfig::node_timeout`]s when they do
    /// not answer (one retry). A waiting acquire that a node coming back
    /// woke (its subscription there confirmed again) keeps waiting instead,
    /// for the other nodes on their way back, re-checking with backoff and
    /// as each of them confirms, until a quorum answers or its wait ends
    /// (then with that error). Must be called within a Tokio runtime.
    pub fn connect_lazy(config: RedlockConfig) -> Result<Self> {
        config.validate()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(LockError::invalid(
                "redlock: RedlockLock must be created within a Tokio runtime",
            ));
        }
        let inbox: Arc<str> = inbox_prefix(&config.key_prefix).into();
        let nodes = config
            .nodes
            .iter()
            .map(|url| {
                Node::new(
                    url,
                    &config.tls,
                    config.connect_timeout,
                    config.renew_batching,
                    config.node_timeout,
                    inbox.clone(),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let notifier = Notifier::start(
            nodes
                .iter()
                .map(|n| NotifyNode::fixed(n.addr.clone(), n.client.clone()))
                .collect(),
            Timeouts {
                connect: config.connect_timeout,
                request: config.connect_timeout.max(config.node_timeout),
            },
            Some(&inbox),
        );
        Ok(Self {
            inner: Arc::new(Inner {
                quorum: config.quorum(),
                nodes,
                config,
                scripts: Scripts::default(),
                notifier,
            }),
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &RedlockConfig {
        &self.inner.config
    }

    /// The nodes' addresses (`host:port`), in configuration order.
    pub fn nodes(&self) -> Vec<&str> {
        self.inner.nodes.iter().map(|n| n.addr.as_str()).collect()
    }

    /// How many nodes must agree: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// The Redis key of lock `name` on every node (the prefix plus the name).
    pub fn key_of(&self, name: &LockName) -> String {
        self.inner.keys(name).key.to_string()
    }

    /// Connects to every node (loading the shared scripts, reading its
    /// eviction policy); `Ok` if a quorum answered and no node that did has
    /// a policy [`RedlockConfig::require_noeviction`] refuses.
    async fn check_quorum(&self) -> Result<()> {
        let inner = &self.inner;
        let limit = inner.config.connect_timeout;
        let mut pending = fan_out(inner, inner.all(), limit, |inner, i| async move {
            let node = &inner.nodes[i];
            node.load_scripts(&inner.scripts).await?;
            node.eviction_policy().await
        });
        let mut tally = Tally::new(inner.nodes.len(), inner.quorum);
        let mut failures = Vec::new();
        while let Some((i, r)) = pending.next().await {
            match r {
                Ok(policy) => {
                    tally.said_yes(i);
                    lock_redis::kit::eviction::check_policy(
                        policy.as_deref(),
                        inner.config.require_noeviction,
                        &inner.nodes[i].addr,
                        "redlock",
                    )?;
                }
                Err(f) => {
                    tally.failed(i);
                    failures.push(f);
                }
            }
        }
        if tally.reached() {
            for f in &failures {
                tracing::warn!(node = %f.node, reason = %f.reason, detail = %f.detail, "redlock: node not reachable at start; it will be retried by later rounds");
            }
            Ok(())
        } else {
            Err(LockError::unavailable(format!(
                "redlock: only {} of {} nodes could be reached within {limit:?}; a quorum of {} is needed",
                tally.yes(),
                inner.nodes.len(),
                inner.quorum
            ))
            .with_nodes(failures))
        }
    }
}

/// The prefix of this client's inbox channel (`<key_prefix>distlock inbox
/// <client id>`), where the nodes announce its waiters' turns.
fn inbox_prefix(key_prefix: &str) -> String {
    format!("{key_prefix}distlock inbox ")
}
