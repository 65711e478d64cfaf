//! The conformance harness of `lock-redis`, over plain TCP or mutual TLS.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lock_conformance::{async_trait, Harness};
use lock_core::{Capabilities, Fencing, LockError, LockName, LockService, TlsConfig};
use lock_redis::kit::layout::{Keys, LeaderKeys};
use lock_redis::{RedisLock, RedisLockConfig};
use lock_testbed::{shared_redis, RedisOptions, RedisServer, RespValue};

/// The suite's view of one Redis server, reached over TLS or not.
struct Redis {
    server: &'static RedisServer,
    tls: bool,
}

impl Redis {
    /// The URL clients use, and the TLS files they need.
    fn target(&self, addr: SocketAddr) -> (String, TlsConfig) {
        if !self.tls {
            return (format!("redis://{addr}/"), TlsConfig::default());
        }
        let files = self.server.tls_files().expect("a TLS server");
        (
            format!("rediss://{addr}/"),
            TlsConfig::new()
                .ca(files.ca())
                .identity(files.client_cert(), files.client_key()),
        )
    }

    fn config(&self) -> RedisLockConfig {
        let (url, tls) = self.target(self.upstreams()[0]);
        RedisLockConfig::new(url)
            .tls(tls)
            .request_timeout(Duration::from_millis(500))
    }

    fn keys(name: &LockName) -> Keys {
        Keys::new("", name.as_str())
    }

    /// One command to the server (the testbed client is synchronous: run it off the runtime).
    async fn cmd(&self, args: &[&str]) -> RespValue {
        let server = self.server;
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            server
                .cmd(&refs)
                .unwrap_or_else(|e| panic!("redis {args:?}: {e}"))
        })
        .await
        .expect("redis command task")
    }
}

#[async_trait]
impl Harness for Redis {
    async fn client(&self) -> Arc<dyn LockService> {
        let client = RedisLock::connect(self.config())
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.server.url()));
        Arc::new(client)
    }

    fn ttl(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn remove_behind_back(&self, name: &LockName) {
        let keys = Self::keys(name);
        self.cmd(&["DEL", keys.lock(), keys.rw(), keys.permits()])
            .await;
    }

    async fn leftovers(&self, name: &LockName) -> Vec<String> {
        let keys = Self::keys(name);
        let mut left = Vec::new();
        // Holders of every primitive (and the mutex holder's description),
        // and the waiters of the mutex and the read-write lock.
        for key in [
            keys.lock(),
            keys.holder(),
            keys.queue(),
            keys.lapse(),
            keys.rw(),
            keys.rw_queue(),
            keys.rw_lapse(),
            keys.permits(),
        ] {
            if self.cmd(&["EXISTS", key]).await != RespValue::Int(0) {
                left.push(format!("key {key}"));
            }
        }
        // The election's leader, its info, its line and its lock-delay marker.
        let leader = LeaderKeys::new("", name.as_str());
        for key in [
            leader.leader(),
            leader.info(),
            leader.queue(),
            leader.lapse(),
            leader.delay(),
        ] {
            if self.cmd(&["EXISTS", key]).await != RespValue::Int(0) {
                left.push(format!("key {key}"));
            }
        }
        // No client may stay subscribed to a release channel after its
        // waiters left, nor to a change channel after its followers did.
        for channel in [
            keys.released(),
            keys.rw_released(),
            keys.permits_released(),
            leader.released(),
            leader.changed(),
        ] {
            match self.cmd(&["PUBSUB", "NUMSUB", channel]).await {
                RespValue::Array(Some(items)) if items.len() == 2 => {
                    if items[1] != RespValue::Int(0) {
                        left.push(format!("subscribers of {channel}: {:?}", items[1]));
                    }
                }
                other => panic!("PUBSUB NUMSUB answered {other:?}"),
            }
        }
        left
    }

    fn upstreams(&self) -> Vec<SocketAddr> {
        if self.tls {
            vec![self.server.tls_addr().expect("a TLS server")]
        } else {
            vec![self.server.addr()]
        }
    }

    async fn client_at(
        &self,
        addrs: &[SocketAddr],
        timeout: Duration,
    ) -> Result<Arc<dyn LockService>, LockError> {
        let (url, tls) = self.target(addrs[0]);
        let config = RedisLockConfig::new(url)
            .tls(tls)
            .connect_timeout(timeout)
            .request_timeout(timeout);
        let client = RedisLock::connect(config).await?;
        Ok(Arc::new(client))
    }
}

/// Runs the suite against the shared Redis, or (`tls`) against a Redis of
/// its own reached over mutual TLS.
pub fn run(tls: bool) -> ExitCode {
    let expected = Capabilities::new("redis")
        .with_fencing(Fencing::ServerClock)
        .with_fifo(true)
        .with_loss_events(false)
        .with_notified_wait(true)
        .with_remote(true)
        .with_fault_tolerance("none: a single server")
        .with_read_write(true)
        .with_semaphore(true)
        .with_describes_holder(true)
        .with_election(true);
    lock_conformance::run(
        || async {
            let server = if tls {
                tls_redis()
            } else {
                shared_redis().unwrap_or_else(|e| panic!("starting the shared redis-server: {e}"))
            };
            Redis { server, tls }
        },
        expected,
    )
}

/// One redis-server with a TLS port for the whole run (stopped with the
/// test process).
fn tls_redis() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        RedisServer::start_with(RedisOptions {
            tls: true,
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("starting a redis-server with TLS: {e}"))
    })
}
