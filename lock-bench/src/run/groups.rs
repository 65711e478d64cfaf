//! What each backend's group measures: our backend, its raw protocol, its
//! peer, each as a connector of the subjects, with the options of each kind
//! of run.

use std::sync::Arc;

use distlock::MemoryLock;
use lock_testbed::{Kind as ServerKind, Started};

use super::Profile;
use crate::backend::Backend;
use crate::backends::{Ours, Target};
use crate::peers::{EtcdLockRpc, Rslock, ZkRecipe};
use crate::raw::{RawEtcd, RawRedis, RawZk};
use crate::servers::{OpsSource, Servers, ETCD_MEMBERS, REDLOCK_NODES, ZK_SERVERS};
use crate::subject::{Connector, DistOptions, Kind};
use crate::Args;

/// One subject of a backend group.
pub(super) struct Plan {
    /// What it is, in the report.
    pub(super) label: String,
    /// Ours, raw, fenced, checked or peer.
    pub(super) kind: Kind,
    /// Its clients, or why there are none (a server did not start).
    pub(super) connector: Result<Arc<dyn Connector>, String>,
    /// Whether it runs the contended run too.
    pub(super) contended: bool,
}

/// Our backend connected for the keep-alive runs, and its counters.
pub(super) struct KeepAlivePlan {
    /// Our backend as a user gets it.
    pub(super) conn: Result<Arc<dyn Connector>, String>,
    /// Where to count server ops.
    pub(super) source: Option<OpsSource>,
    /// Redis and Redlock: the same backend with renewal batching off, run
    /// after each guard count for the comparison in the same run.
    pub(super) unbatched: Option<Result<Arc<dyn Connector>, String>>,
}

/// A backend group: our backend, its raw protocol, its peer.
pub(super) struct Group {
    /// Which backend.
    pub(super) backend: Backend,
    /// Its servers, in words.
    pub(super) servers: String,
    /// Ours first, then the raw protocol, then the peers.
    pub(super) subjects: Vec<Plan>,
    /// Our backend with keep-alive options, and where to count server ops.
    pub(super) keep_alive: Option<KeepAlivePlan>,
    /// Our backend for the read-heavy run, where it has read-write locks.
    pub(super) read_heavy: Option<Result<Arc<dyn Connector>, String>>,
}

/// The servers of `kind` (`what`, in words), as their own type (`typed`).
fn server<'a, T>(
    servers: &'a Servers,
    kind: ServerKind,
    what: &str,
    typed: fn(&Started) -> Option<&T>,
) -> Result<&'a T, String> {
    match servers.get(kind) {
        Some(Ok(v)) => Ok(typed(v).expect("a backend's fixture starts its own servers")),
        Some(Err(e)) => Err(format!("{what} did not start: {e}")),
        None => Err(format!("{what} was not started")),
    }
}

fn arc<C: Connector + 'static>(c: C) -> Arc<dyn Connector> {
    Arc::new(c)
}

/// The options of our backend in each kind of run.
struct RunOptions {
    /// The uncontended, contended and read-heavy runs.
    opts: DistOptions,
    /// The keep-alive runs.
    ka_opts: DistOptions,
    /// The keep-alive runs with renewal batching off (Redis and Redlock).
    ka_unbatched: DistOptions,
}

impl RunOptions {
    fn new(profile: &Profile) -> Self {
        let opts = DistOptions {
            ttl: profile.ttl,
            keep_alive: true,
            session_ttl: None,
            batch_renewals: true,
        };
        // Keep-alive runs: the session (etcd lease, ZooKeeper session) as short as
        // the guards' TTL, so that it is renewed as often as they are.
        let ka_opts = DistOptions {
            ttl: profile.ka_ttl,
            keep_alive: true,
            session_ttl: Some(profile.ka_ttl),
            batch_renewals: true,
        };
        let ka_unbatched = DistOptions {
            batch_renewals: false,
            ..ka_opts.clone()
        };
        Self {
            opts,
            ka_opts,
            ka_unbatched,
        }
    }
}

/// The keep-alive plan of `conn`, with no batching-off comparison.
fn plan(conn: Result<Arc<dyn Connector>, String>, source: Option<OpsSource>) -> KeepAlivePlan {
    KeepAlivePlan {
        conn,
        source,
        unbatched: None,
    }
}

/// Our backend on `t` with the options `o`.
fn ours(t: &Result<Target, String>, o: &DistOptions) -> Result<Arc<dyn Connector>, String> {
    t.clone().map(|t| arc(Ours::new(t, o.clone())))
}

/// The raw Redis protocol on `urls`, with a fencing counter or without.
fn raw_redis(
    urls: &Result<Vec<String>, String>,
    fenced: bool,
) -> Result<Arc<dyn Connector>, String> {
    urls.clone().map(|urls| arc(RawRedis { urls, fenced }))
}

/// The groups of the selected backends, in the order of `args.backends`.
pub(super) fn groups(args: &Args, profile: &Profile, servers: &Servers) -> Vec<Group> {
    let o = RunOptions::new(profile);
    args.backends
        .iter()
        .map(|b| match b {
            Backend::Memory => memory_group(&o),
            Backend::Redis => redis_group(&o, servers),
            Backend::Redlock => redlock_group(&o, profile, servers),
            Backend::Etcd => etcd_group(&o, servers),
            Backend::Zk => zk_group(&o, servers),
        })
        .collect()
}

/// Our in-process backend alone (no server, no raw protocol, no peer).
fn memory_group(o: &RunOptions) -> Group {
    let t = Ok(Target::Memory(MemoryLock::new()));
    Group {
        backend: Backend::Memory,
        servers: "in process".into(),
        subjects: vec![Plan {
            label: "distlock memory".into(),
            kind: Kind::Ours,
            connector: ours(&t, &o.opts),
            contended: true,
        }],
        keep_alive: Some(plan(ours(&t, &o.ka_opts), None)),
        read_heavy: Some(ours(&t, &o.opts)),
    }
}

/// One Redis: ours, the raw protocol and the raw protocol with a fencing counter.
fn redis_group(o: &RunOptions, servers: &Servers) -> Group {
    let redis = server(
        servers,
        ServerKind::Redis,
        "redis-server",
        Started::as_redis,
    );
    let url = redis.clone().map(|s| s.url());
    let t = redis.map(|s| Target::Redis(s.addr().to_string()));
    let urls = url.clone().map(|u| vec![u]);
    Group {
        backend: Backend::Redis,
        servers: "1 redis-server; the Sentinel rows: 1 primary, 2 replicas, 3 sentinels; \
                  the Cluster row: 3 primaries, 3 replicas"
            .into(),
        subjects: vec![
            Plan {
                label: "distlock redis".into(),
                kind: Kind::Ours,
                connector: ours(&t, &o.opts),
                contended: true,
            },
            Plan {
                label: "raw SET NX PX + EVALSHA del".into(),
                kind: Kind::Raw,
                connector: raw_redis(&urls, false),
                contended: false,
            },
            Plan {
                label: "raw + fencing counter (MULTI SET NX PX, INCR)".into(),
                kind: Kind::Fenced,
                connector: raw_redis(&urls, true),
                contended: false,
            },
            sentinel_plan(servers, o, 0),
            sentinel_plan(servers, o, 1),
            cluster_plan(servers, o),
        ],
        keep_alive: Some(KeepAlivePlan {
            unbatched: Some(ours(&t, &o.ka_unbatched)),
            ..plan(
                ours(&t, &o.ka_opts),
                url.ok().map(|u| OpsSource::Redis(vec![u])),
            )
        }),
        read_heavy: Some(ours(&t, &o.opts)),
    }
}

/// Our Redis backend on the primary of the Sentinel-managed deployment
/// (1 primary, 2 replicas, 3 sentinels), with `sync_replicas` replicas
/// confirming each acquisition (`WAIT`; 0: none).
fn sentinel_plan(servers: &Servers, o: &RunOptions, sync_replicas: u32) -> Plan {
    let url = match servers.sentinel() {
        Some(Ok(set)) => Ok(set.url()),
        Some(Err(e)) => Err(format!("the Sentinel set did not start: {e}")),
        None => Err("the Sentinel set was not started".to_string()),
    };
    let t = url.map(|url| Target::RedisSentinel { url, sync_replicas });
    let label = match sync_replicas {
        0 => "distlock redis+sentinel (1 primary, 2 replicas)".to_string(),
        n => format!("distlock redis+sentinel, sync_replicas={n} (WAIT {n})"),
    };
    Plan {
        label,
        kind: Kind::Deployment,
        connector: ours(&t, &o.opts),
        contended: sync_replicas == 0,
    }
}

/// Our Redis backend on a Redis Cluster (3 primaries, 3 replicas): the
/// names spread over the primaries by their slots.
fn cluster_plan(servers: &Servers, o: &RunOptions) -> Plan {
    let t = match servers.cluster() {
        Some(Ok(set)) => Ok(Target::RedisCluster(set.url())),
        Some(Err(e)) => Err(format!("the Redis Cluster did not start: {e}")),
        None => Err("the Redis Cluster was not started".to_string()),
    };
    Plan {
        label: "distlock redis+cluster (3 primaries, 3 replicas)".to_string(),
        kind: Kind::Deployment,
        connector: ours(&t, &o.opts),
        contended: true,
    }
}

/// Redlock on independent Redis nodes: ours, the raw protocol and the raw protocol with a fencing counter on every node, rslock.
fn redlock_group(o: &RunOptions, profile: &Profile, servers: &Servers) -> Group {
    let set = server(
        servers,
        ServerKind::Redlock,
        "5 redis-servers",
        Started::as_redis_set,
    );
    let urls = set.clone().map(|s| s.urls());
    let t = set.map(|s| Target::Redlock(s.addrs().iter().map(ToString::to_string).collect()));
    Group {
        backend: Backend::Redlock,
        servers: format!("{REDLOCK_NODES} independent redis-servers"),
        subjects: vec![
            Plan {
                label: "distlock redlock".into(),
                kind: Kind::Ours,
                connector: ours(&t, &o.opts),
                contended: true,
            },
            Plan {
                label: format!("raw SET NX PX + EVALSHA del, {REDLOCK_NODES} nodes in parallel"),
                kind: Kind::Raw,
                connector: raw_redis(&urls, false),
                contended: false,
            },
            Plan {
                label: format!(
                    "raw + fencing counter (MULTI SET NX PX, INCR), {REDLOCK_NODES} nodes"
                ),
                kind: Kind::Fenced,
                connector: raw_redis(&urls, true),
                contended: false,
            },
            Plan {
                label: "rslock 0.10".into(),
                kind: Kind::Peer,
                connector: urls.clone().map(|urls| {
                    arc(Rslock {
                        urls,
                        ttl: profile.ttl,
                    })
                }),
                contended: true,
            },
        ],
        keep_alive: Some(KeepAlivePlan {
            unbatched: Some(ours(&t, &o.ka_unbatched)),
            ..plan(ours(&t, &o.ka_opts), urls.ok().map(OpsSource::Redis))
        }),
        read_heavy: None,
    }
}

/// The etcd cluster: ours, the raw protocol, the raw protocol with a compared delete, etcd's Lock RPC.
fn etcd_group(o: &RunOptions, servers: &Servers) -> Group {
    let eps =
        server(servers, ServerKind::Etcd, "etcd cluster", Started::as_etcd).map(|c| c.endpoints());
    let t = eps.clone().map(Target::Etcd);
    Group {
        backend: Backend::Etcd,
        servers: format!("etcd, {ETCD_MEMBERS} members"),
        subjects: vec![
            Plan {
                label: "distlock etcd".into(),
                kind: Kind::Ours,
                connector: ours(&t, &o.opts),
                contended: true,
            },
            Plan {
                label: "raw txn put-if-absent (lease) + delete".into(),
                kind: Kind::Raw,
                connector: eps.clone().map(|endpoints| {
                    arc(RawEtcd {
                        endpoints,
                        compared: false,
                    })
                }),
                contended: false,
            },
            Plan {
                label:
                    "raw txn put-if-absent (lease) + compared delete (txn on the create revision)"
                        .into(),
                kind: Kind::Checked,
                connector: eps.clone().map(|endpoints| {
                    arc(RawEtcd {
                        endpoints,
                        compared: true,
                    })
                }),
                contended: false,
            },
            Plan {
                label: "etcd Lock RPC (v3lock)".into(),
                kind: Kind::Peer,
                connector: eps.clone().map(|endpoints| arc(EtcdLockRpc { endpoints })),
                contended: true,
            },
        ],
        keep_alive: Some(plan(ours(&t, &o.ka_opts), eps.ok().map(OpsSource::Etcd))),
        read_heavy: Some(ours(&t, &o.opts)),
    }
}

/// The ZooKeeper ensemble: ours, the raw protocol, zookeeper-client's lock recipe.
fn zk_group(o: &RunOptions, servers: &Servers) -> Group {
    let ens = server(
        servers,
        ServerKind::Zk,
        "ZooKeeper ensemble",
        Started::as_zk,
    );
    let cs = ens
        .as_ref()
        .map(|e| e.connect_string())
        .map_err(|e| e.clone());
    let eps = ens.map(|e| e.endpoints());
    let t = cs.clone().map(Target::Zk);
    Group {
        backend: Backend::Zk,
        servers: format!(
            "ZooKeeper, {ZK_SERVERS} servers (every subject deals them to its clients in the same turn)"
        ),
        subjects: vec![
            Plan {
                label: "distlock zk".into(),
                kind: Kind::Ours,
                connector: ours(&t, &o.opts),
                contended: true,
            },
            Plan {
                label: "raw create ephemeral-sequential + delete".into(),
                kind: Kind::Raw,
                connector: cs.clone().map(|connect_string| {
                    arc(RawZk {
                        servers: crate::placement::Deal::new(&connect_string),
                        root: "/bench-raw".into(),
                    })
                }),
                contended: false,
            },
            Plan {
                label: "zookeeper-client lock recipe".into(),
                kind: Kind::Peer,
                connector: cs.clone().map(|connect_string| {
                    arc(ZkRecipe {
                        servers: crate::placement::Deal::new(&connect_string),
                        root: "/bench-peer".into(),
                    })
                }),
                contended: true,
            },
        ],
        keep_alive: Some(plan(
            ours(&t, &o.ka_opts),
            eps.ok().map(OpsSource::Zk),
        )),
        read_heavy: Some(ours(&t, &o.opts)),
    }
}
