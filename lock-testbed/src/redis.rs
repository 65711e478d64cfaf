//! Redis servers: one, or N independent ones (for Redlock).

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::bins;
use crate::cluster::Cluster;
use crate::member::{member_index, only_member};
use crate::process::{log_says_addr_in_use, log_tail, ManagedChild, ManagedDir};
use crate::resp::{resp_command, RespValue};
use crate::tls::TlsFiles;
use crate::util::{free_port, loopback};
use crate::TestbedError;

/// What Redis persists in its dir.
const DATA_FILES: [&str; 2] = ["dump.rdb", "appendonlydir"];

/// Copies the persisted data files of `from` (those that exist) into `to`.
fn copy_data(from: &Path, to: &Path) -> Result<(), TestbedError> {
    std::fs::create_dir_all(to).map_err(|e| TestbedError::io("creating a checkpoint dir", e))?;
    for data in DATA_FILES {
        let src = from.join(data);
        if src.is_dir() {
            let dst = to.join(data);
            std::fs::create_dir_all(&dst).map_err(|e| TestbedError::io("copying AOF files", e))?;
            let entries =
                std::fs::read_dir(&src).map_err(|e| TestbedError::io("copying AOF files", e))?;
            for entry in entries.flatten() {
                std::fs::copy(entry.path(), dst.join(entry.file_name()))
                    .map_err(|e| TestbedError::io("copying AOF files", e))?;
            }
        } else if src.is_file() {
            std::fs::copy(&src, to.join(data))
                .map_err(|e| TestbedError::io("copying dump.rdb", e))?;
        }
    }
    Ok(())
}

/// How long a Redis may take to answer PING after spawn.
const READY_TIMEOUT: Duration = Duration::from_secs(5);
/// Timeout of [`RedisServer::cmd`].
const CMD_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a fresh start is retried on a new port when the port was taken.
const START_ATTEMPTS: usize = 3;

/// What a Redis server keeps across [`RedisServer::kill`] + [`RedisServer::restart`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Persistence {
    /// `--save '' --appendonly no`: nothing survives a restart (the default).
    #[default]
    None,
    /// RDB snapshots, as a default-configured Redis: `--save "3600 1 300 100
    /// 60 10000"` and `SAVE`/`BGSAVE` on demand; a restart reloads the last
    /// snapshot (older than the last writes).
    Snapshots,
    /// `--appendonly yes --appendfsync everysec`, the usual AOF setting: a
    /// machine crash loses up to the last second of writes (a test
    /// reproduces that with [`RedisServer::checkpoint_disk`] and
    /// [`RedisServer::crash_to_checkpoint`]).
    AofEverySec,
    /// `--appendonly yes --appendfsync always`: every write is on disk before
    /// it is acknowledged.
    AofAlways,
}

/// How to run a Redis server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RedisOptions {
    /// What survives a restart.
    pub persistence: Persistence,
    /// Also listen with TLS on a second port ([`RedisServer::tls_url`]),
    /// with the test process's certificates ([`TlsFiles::shared`]); clients
    /// must present the client certificate (mutual TLS) unless
    /// [`RedisOptions::tls_client_cert_optional`].
    pub tls: bool,
    /// With [`RedisOptions::tls`]: clients may connect without a
    /// certificate (`--tls-auth-clients optional`), as on managed services.
    pub tls_client_cert_optional: bool,
    /// `--maxmemory-policy` (for instance `volatile-ttl`); `None`: Redis's
    /// default, `noeviction`.
    pub maxmemory_policy: Option<&'static str>,
    /// `--replicaof <ip> <port>`: start as a replica of the Redis at this
    /// address (its TLS port with [`RedisOptions::tls_replication`]).
    /// [`RedisServer::start_with`] returns once the replica answers `PING`,
    /// not once it has synced: see `master_link_status` in `INFO replication`.
    pub replica_of: Option<SocketAddr>,
    /// `--replica-priority`: which replica Redis Sentinel promotes first
    /// (lower first; 0 never). `None`: Redis's default, 100.
    pub replica_priority: Option<u32>,
    /// With [`RedisOptions::tls`]: `--tls-replication yes`, so a replica
    /// reaches its primary over TLS (give [`RedisOptions::replica_of`] the
    /// primary's TLS port) and announces its own TLS port to it, and so to
    /// Redis Sentinel.
    pub tls_replication: bool,
    /// `Some(node timeout)`: a Redis Cluster node, `--cluster-enabled yes
    /// --cluster-config-file nodes.conf --cluster-node-timeout <ms>`, with its
    /// cluster bus on a free port of its own (`--cluster-port`, kept across
    /// restarts, as is `nodes.conf` in its dir). It starts alone, with no
    /// slots: [`RedisClusterSet`](crate::RedisClusterSet) makes a cluster of
    /// such nodes.
    pub cluster_node_timeout: Option<Duration>,
    /// With [`RedisOptions::tls`] and [`RedisOptions::cluster_node_timeout`]:
    /// `--tls-cluster yes`, the cluster bus over TLS; a node then names its
    /// TLS port to clients that asked over TLS (`CLUSTER SLOTS`, `MOVED`)
    /// and its plain port to the others.
    pub tls_cluster: bool,
}

struct Local {
    // Declared first: dropped (killed, reaped) before the dir is removed.
    child: Option<ManagedChild>,
    dir: ManagedDir,
    bin: PathBuf,
    opts: RedisOptions,
    /// The TLS port and its certificates ([`TlsFiles::shared`]), with `opts.tls`.
    tls: Option<(u16, &'static TlsFiles)>,
    /// The cluster bus port, with `opts.cluster_node_timeout`.
    cluster_port: Option<u16>,
}

/// One Redis server on `127.0.0.1:<free port>` in its own temp dir, or one started
/// elsewhere (see [`RedisServer::external`]).
///
/// Dropping it SIGKILLs the process, reaps it and removes the temp dir.
pub struct RedisServer {
    addr: SocketAddr,
    local: Option<Local>,
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("addr", &self.addr)
            .field("pid", &self.pid())
            .field("external", &self.local.is_none())
            .finish()
    }
}

impl RedisServer {
    /// Start a Redis with default options (no persistence) and wait until it answers PING.
    pub fn start() -> Result<RedisServer, TestbedError> {
        RedisServer::start_with(RedisOptions::default())
    }

    /// Start a Redis with `opts` and wait until it answers PING (at most 5 s).
    pub fn start_with(opts: RedisOptions) -> Result<RedisServer, TestbedError> {
        let mut last_err = None;
        for _ in 0..START_ATTEMPTS {
            let mut server = RedisServer::launch(opts)?;
            match server.wait_ready(Instant::now() + READY_TIMEOUT) {
                Ok(()) => return Ok(server),
                Err(e) if server.port_was_taken() => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| TestbedError::protocol("starting Redis", "no attempt made")))
    }

    /// A handle on a Redis started elsewhere (docker compose, a CI service).
    ///
    /// [`cmd`](Self::cmd) and [`expire_now`](Self::expire_now) work; the fault methods
    /// return [`TestbedError::External`]. Dropping it does nothing to the server.
    pub fn external(addr: SocketAddr) -> RedisServer {
        RedisServer { addr, local: None }
    }

    /// Spawn without waiting for readiness.
    pub(crate) fn launch(opts: RedisOptions) -> Result<RedisServer, TestbedError> {
        let bin = bins::resolve(bins::REDIS_SERVER)?;
        let dir = ManagedDir::new("redis")?;
        let addr = loopback(free_port());
        let tls = if opts.tls {
            Some((free_port(), TlsFiles::shared()?))
        } else {
            None
        };
        let cluster_port = opts.cluster_node_timeout.map(|_| free_port());
        let mut server = RedisServer {
            addr,
            local: Some(Local {
                child: None,
                dir,
                bin,
                opts,
                tls,
                cluster_port,
            }),
        };
        server.spawn_process()?;
        Ok(server)
    }

    fn what(&self) -> String {
        format!("redis-server on {}", self.addr)
    }

    fn log_path(dir: &Path) -> PathBuf {
        dir.join("redis.log")
    }

    pub(crate) fn port_was_taken(&self) -> bool {
        self.local.as_ref().is_some_and(|l| {
            log_says_addr_in_use(&Self::log_path(l.dir.path()))
                || log_says_addr_in_use(&l.dir.path().join("redis.stderr.log"))
        })
    }

    fn spawn_process(&mut self) -> Result<(), TestbedError> {
        let what = self.what();
        let port = self.addr.port().to_string();
        let Some(local) = self.local.as_mut() else {
            return Err(TestbedError::External {
                what,
                operation: "start",
            });
        };
        let dir = local.dir.path();
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("redis.stderr.log"))
            .map_err(|e| TestbedError::io("creating redis.stderr.log", e))?;
        let stdout = stderr
            .try_clone()
            .map_err(|e| TestbedError::io("creating redis.stderr.log", e))?;
        let mut cmd = Command::new(&local.bin);
        cmd.args(["--port", &port, "--bind", "127.0.0.1"]).args([
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
            // A replica's first sync starts at once, not 5 s later.
            "--repl-diskless-sync-delay",
            "0",
        ]);
        match local.opts.persistence {
            Persistence::None => cmd.args(["--save", "", "--appendonly", "no"]),
            Persistence::Snapshots => {
                cmd.args(["--save", "3600 1 300 100 60 10000", "--appendonly", "no"])
            }
            Persistence::AofEverySec => cmd.args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
            ]),
            Persistence::AofAlways => cmd.args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ]),
        };
        if let Some(policy) = local.opts.maxmemory_policy {
            cmd.args(["--maxmemory-policy", policy]);
        }
        if let Some(primary) = local.opts.replica_of {
            cmd.arg("--replicaof")
                .arg(primary.ip().to_string())
                .arg(primary.port().to_string());
        }
        if let Some(priority) = local.opts.replica_priority {
            cmd.arg("--replica-priority").arg(priority.to_string());
        }
        if let (Some(timeout), Some(bus)) = (local.opts.cluster_node_timeout, local.cluster_port) {
            cmd.args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ])
            .arg("--cluster-node-timeout")
            .arg(timeout.as_millis().max(1).to_string())
            .arg("--cluster-port")
            .arg(bus.to_string());
        }
        if let Some((tls_port, files)) = &local.tls {
            cmd.arg("--tls-port")
                .arg(tls_port.to_string())
                .arg("--tls-cert-file")
                .arg(files.server_cert())
                .arg("--tls-key-file")
                .arg(files.server_key())
                .arg("--tls-ca-cert-file")
                .arg(files.ca())
                .args([
                    "--tls-auth-clients",
                    if local.opts.tls_client_cert_optional {
                        "optional"
                    } else {
                        "yes"
                    },
                ]);
            if local.opts.tls_replication {
                cmd.args(["--tls-replication", "yes"]);
            }
            if local.opts.tls_cluster {
                cmd.args(["--tls-cluster", "yes"]);
            }
        }
        cmd.arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(Self::log_path(dir))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        local.child = Some(ManagedChild::spawn(cmd, &what)?);
        Ok(())
    }

    pub(crate) fn wait_ready(&mut self, deadline: Instant) -> Result<(), TestbedError> {
        let started = Instant::now();
        let what = self.what();
        let addr = self.addr;
        loop {
            if let Some(local) = self.local.as_mut() {
                let exited = local.child.as_mut().and_then(|c| c.exited());
                if let Some(status) = exited {
                    local.child = None;
                    return Err(
                        self.not_ready(started, format!("exited during start-up: {status}"))
                    );
                }
            }
            let detail = match resp_command(addr, &["PING"], Duration::from_millis(500)) {
                Ok(RespValue::Simple(s)) if s == "PONG" => return Ok(()),
                Ok(other) => format!("PING answered {other:?}"),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                tracing::debug!(what, "lock-testbed: not ready");
                return Err(self.not_ready(started, detail));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn not_ready(&self, started: Instant, detail: String) -> TestbedError {
        let log_tail = match &self.local {
            Some(l) => {
                let mut t = log_tail(&Self::log_path(l.dir.path()), 20);
                let e = log_tail(&l.dir.path().join("redis.stderr.log"), 10);
                if !e.is_empty() {
                    t.push_str("\n[stderr]\n");
                    t.push_str(&e);
                }
                t
            }
            None => String::new(),
        };
        TestbedError::NotReady {
            what: self.what(),
            waited: started.elapsed(),
            detail,
            log_tail,
        }
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// `rediss://127.0.0.1:<tls port>/` when started with
    /// [`RedisOptions::tls`].
    pub fn tls_url(&self) -> Option<String> {
        let (port, _) = self.local.as_ref()?.tls.as_ref()?;
        Some(format!("rediss://127.0.0.1:{port}/"))
    }

    /// `127.0.0.1:<tls port>` when started with [`RedisOptions::tls`].
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        let (port, _) = self.local.as_ref()?.tls.as_ref()?;
        Some(loopback(*port))
    }

    /// The certificates of the TLS port (CA, server, client).
    pub fn tls_files(&self) -> Option<&'static TlsFiles> {
        Some(self.local.as_ref()?.tls.as_ref()?.1)
    }

    /// The server's PID; `None` when killed or external.
    pub fn pid(&self) -> Option<u32> {
        self.local
            .as_ref()
            .and_then(|l| l.child.as_ref())
            .map(ManagedChild::pid)
    }

    /// The temp dir holding the log and the persisted data (`dump.rdb`,
    /// `appendonlydir/`); `None` when external.
    pub fn dir(&self) -> Option<&Path> {
        self.local.as_ref().map(|l| l.dir.path())
    }

    /// The options it was started with; `None` when external.
    pub fn options(&self) -> Option<RedisOptions> {
        self.local.as_ref().map(|l| l.opts)
    }

    /// The options the next [`restart`](Self::restart) uses (a node that
    /// comes back as a replica of another primary); external: nothing.
    pub(crate) fn set_options(&mut self, opts: RedisOptions) {
        if let Some(local) = self.local.as_mut() {
            local.opts = opts;
        }
    }

    /// The cluster bus port of a node started with
    /// [`RedisOptions::cluster_node_timeout`].
    pub(crate) fn cluster_bus_port(&self) -> Option<u16> {
        self.local.as_ref()?.cluster_port
    }

    /// This server's `INFO replication` as text.
    pub(crate) fn replication_info(&self) -> Result<String, TestbedError> {
        info_text(
            self.addr,
            "replication",
            &self.cmd(&["INFO", "replication"])?,
        )
    }

    fn running_child(&self, operation: &'static str) -> Result<&ManagedChild, TestbedError> {
        let local = self.local.as_ref().ok_or_else(|| TestbedError::External {
            what: self.what(),
            operation,
        })?;
        local
            .child
            .as_ref()
            .ok_or_else(|| TestbedError::NotRunning {
                what: self.what(),
                operation,
            })
    }

    /// Freeze the server with SIGSTOP: connections stay open, nothing is answered.
    pub fn pause(&self) -> Result<(), TestbedError> {
        self.running_child("pause")?
            .signal(libc::SIGSTOP, &self.what())
    }

    /// Unfreeze a paused server with SIGCONT.
    pub fn resume(&self) -> Result<(), TestbedError> {
        self.running_child("resume")?
            .signal(libc::SIGCONT, &self.what())
    }

    /// SIGKILL the server and reap it (a crash: no shutdown save). Idempotent.
    pub fn kill(&mut self) -> Result<(), TestbedError> {
        let what = self.what();
        let local = self.local.as_mut().ok_or(TestbedError::External {
            what,
            operation: "kill",
        })?;
        if let Some(mut child) = local.child.take() {
            child.kill();
        }
        Ok(())
    }

    /// Remembers what is on disk now (the RDB snapshot and the AOF files), as
    /// the last state a machine crash would leave: see
    /// [`crash_to_checkpoint`](Self::crash_to_checkpoint).
    pub fn checkpoint_disk(&self) -> Result<(), TestbedError> {
        let dir = self.dir().ok_or_else(|| TestbedError::External {
            what: self.what(),
            operation: "checkpoint_disk",
        })?;
        let saved = dir.join("checkpoint");
        let _ = std::fs::remove_dir_all(&saved);
        copy_data(dir, &saved)
    }

    /// A machine crash that loses every write since [`Self::checkpoint_disk`]
    /// (what `appendfsync everysec` or an RDB snapshot can lose): SIGKILL,
    /// put the checkpointed files back, restart on the same port.
    pub fn crash_to_checkpoint(&mut self) -> Result<(), TestbedError> {
        self.kill()?;
        let dir = self
            .dir()
            .ok_or_else(|| TestbedError::External {
                what: self.what(),
                operation: "crash_to_checkpoint",
            })?
            .to_path_buf();
        for data in DATA_FILES {
            let path = dir.join(data);
            let _ = std::fs::remove_dir_all(&path);
            let _ = std::fs::remove_file(&path);
        }
        copy_data(&dir.join("checkpoint"), &dir)?;
        self.restart()
    }

    /// Kill if running, then start again on the same port, dir and options, and wait
    /// until it answers PING. With persistence the data set is loaded from disk.
    pub fn restart(&mut self) -> Result<(), TestbedError> {
        self.kill()?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            self.spawn_process()?;
            match self.wait_ready(deadline) {
                Ok(()) => return Ok(()),
                // The old socket may linger briefly: retry on the same port.
                Err(e) if self.port_was_taken() && Instant::now() < deadline => {
                    tracing::debug!(error = %e, "lock-testbed: Redis port busy, retrying");
                    self.kill()?;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Send one command over a fresh connection (2 s timeout) and return the reply.
    ///
    /// A Redis error reply is `Ok(RespValue::Error(..))`; a timeout or broken connection
    /// is an `Err` (see [`TestbedError::is_timeout`]).
    pub fn cmd(&self, args: &[&str]) -> Result<RespValue, TestbedError> {
        resp_command(self.addr, args, CMD_TIMEOUT)
    }

    /// [`cmd`](Self::cmd) from async code: the call runs on tokio's blocking
    /// pool, not on a runtime worker.
    pub async fn cmd_async(&self, args: &[&str]) -> Result<RespValue, TestbedError> {
        let addr = self.addr;
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            resp_command(addr, &refs, CMD_TIMEOUT)
        })
        .await
        .map_err(|e| TestbedError::protocol(format!("a command on {addr}"), e.to_string()))?
    }

    /// How many times this server has run `command` (lower case, e.g.
    /// `evalsha`) so far, by `INFO commandstats`; commands run by scripts
    /// count too. 0 if it never ran.
    pub fn calls(&self, command: &str) -> Result<u64, TestbedError> {
        command_calls(self.addr, &self.cmd(&["INFO", "commandstats"])?, command)
    }

    /// [`calls`](Self::calls) from async code.
    pub async fn calls_async(&self, command: &str) -> Result<u64, TestbedError> {
        let info = self.cmd_async(&["INFO", "commandstats"]).await?;
        command_calls(self.addr, &info, command)
    }

    /// Premature expiry: `PEXPIRE key 1` on this node, then wait 2 ms so the key is gone
    /// when this returns. An error if the key does not exist on this node.
    pub fn expire_now(&self, key: &str) -> Result<(), TestbedError> {
        match self.cmd(&["PEXPIRE", key, "1"])? {
            RespValue::Int(1) => {
                std::thread::sleep(Duration::from_millis(2));
                Ok(())
            }
            RespValue::Int(0) => Err(TestbedError::protocol(
                format!("PEXPIRE {key} 1 on {}", self.addr),
                "the key does not exist on this node",
            )),
            other => Err(TestbedError::protocol(
                format!("PEXPIRE {key} 1 on {}", self.addr),
                format!("{other:?}"),
            )),
        }
    }
}

/// N independent Redis servers (not a cluster, no replication): the Redlock setting.
///
/// Dropping it stops all of them.
#[derive(Debug)]
pub struct RedisSet {
    nodes: Vec<RedisServer>,
}

impl RedisSet {
    /// Start `n` Redis servers in parallel (default options) and wait until all answer.
    pub fn start(n: usize) -> Result<RedisSet, TestbedError> {
        RedisSet::start_with(n, RedisOptions::default())
    }

    /// Start `n` Redis servers with `opts` in parallel and wait until all answer.
    pub fn start_with(n: usize, opts: RedisOptions) -> Result<RedisSet, TestbedError> {
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            nodes.push(RedisServer::launch(opts)?);
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        for node in nodes.iter_mut() {
            if let Err(e) = node.wait_ready(deadline) {
                if !node.port_was_taken() {
                    return Err(e);
                }
                *node = RedisServer::start_with(opts)?;
            }
        }
        Ok(RedisSet { nodes })
    }

    /// Handles on Redis servers started elsewhere (fault methods return errors).
    pub fn external(addrs: &[SocketAddr]) -> RedisSet {
        RedisSet {
            nodes: addrs.iter().map(|a| RedisServer::external(*a)).collect(),
        }
    }

    /// The servers, index-stable.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// One server, for faults that need `&mut` (kill, restart).
    ///
    /// # Panics
    ///
    /// Panics if `i >= nodes().len()`, like slice indexing.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// `redis://127.0.0.1:<port>/` of every server, in node order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The address of every server, in node order.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(RedisServer::addr).collect()
    }

    /// The number of servers.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when the set has no server.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// The text of an `INFO <section>` reply of `addr`.
pub(crate) fn info_text(
    addr: SocketAddr,
    section: &str,
    reply: &RespValue,
) -> Result<String, TestbedError> {
    reply.as_str().map(str::to_string).ok_or_else(|| {
        TestbedError::protocol(format!("INFO {section} on {addr}"), format!("{reply:?}"))
    })
}

/// The value of `name:value` in the text of an `INFO` reply.
pub(crate) fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// The `calls=` count of `command` in an `INFO commandstats` reply of `addr`.
fn command_calls(addr: SocketAddr, info: &RespValue, command: &str) -> Result<u64, TestbedError> {
    let text = info.as_str().ok_or_else(|| {
        TestbedError::protocol(format!("INFO commandstats on {addr}"), format!("{info:?}"))
    })?;
    let prefix = format!("cmdstat_{command}:calls=");
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0))
}

/// The URL scheme of a client of one Redis server.
pub(crate) const SCHEME: &str = "redis";
/// The URL scheme of a Redlock client of a [`RedisSet`].
pub(crate) const REDLOCK_SCHEME: &str = "redlock";

impl Cluster for RedisServer {
    fn scheme(&self) -> &'static str {
        SCHEME
    }
    fn addrs(&self) -> Vec<SocketAddr> {
        vec![self.addr()]
    }
    fn pause(&self, i: usize) -> Result<(), TestbedError> {
        only_member(i).and_then(|()| RedisServer::pause(self))
    }
    fn resume(&self, i: usize) -> Result<(), TestbedError> {
        only_member(i).and_then(|()| RedisServer::resume(self))
    }
    fn kill(&mut self, i: usize) -> Result<(), TestbedError> {
        only_member(i).and_then(|()| RedisServer::kill(self))
    }
    fn restart(&mut self, i: usize) -> Result<(), TestbedError> {
        only_member(i).and_then(|()| RedisServer::restart(self))
    }
    fn leader(&self) -> Result<Option<usize>, TestbedError> {
        Ok(None)
    }
}

impl Cluster for RedisSet {
    fn scheme(&self) -> &'static str {
        REDLOCK_SCHEME
    }
    fn addrs(&self) -> Vec<SocketAddr> {
        RedisSet::addrs(self)
    }
    fn pause(&self, i: usize) -> Result<(), TestbedError> {
        member_index(self.nodes(), i)?.pause()
    }
    fn resume(&self, i: usize) -> Result<(), TestbedError> {
        member_index(self.nodes(), i)?.resume()
    }
    fn kill(&mut self, i: usize) -> Result<(), TestbedError> {
        member_index(self.nodes(), i)?;
        self.node_mut(i).kill()
    }
    fn restart(&mut self, i: usize) -> Result<(), TestbedError> {
        member_index(self.nodes(), i)?;
        self.node_mut(i).restart()
    }
    fn leader(&self) -> Result<Option<usize>, TestbedError> {
        Ok(None)
    }
}
