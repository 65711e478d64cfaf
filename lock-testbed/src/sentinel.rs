//! Redis Sentinel: one primary, two replicas and three sentinels on loopback,
//! with failover, a lagging replica and a preferred replica on demand.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::bins;
use crate::member::{member_index, member_index_mut};
use crate::process::{log_says_addr_in_use, log_tail, log_tails, ManagedChild, ManagedDir};
use crate::redis::{info_field, RedisOptions, RedisServer};
use crate::resp::{expect_ok, resp_command, RespConnection, RespValue};
use crate::tls::TlsFiles;
use crate::util::{free_port, loopback, poll_until};
use crate::TestbedError;

/// Replicas of the primary.
const REPLICAS: usize = 2;
/// Sentinels watching it.
const SENTINELS: usize = 3;
/// Sentinels that must agree the primary is down (`sentinel monitor ... 2`),
/// and that must name a node for [`SentinelSet::primary`] to believe them.
const QUORUM: usize = 2;
/// How long the whole set may take to start.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one process may take to answer PING after spawn.
const PROCESS_READY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a replica may take to follow its primary again, and the
/// sentinels to see it (after a restart, a heal, a priority change).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long [`SentinelSet::primary`] waits for the sentinels to agree.
const AGREE_TIMEOUT: Duration = Duration::from_secs(5);
/// Timeout of one command to a node or a sentinel.
const CMD_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the waits probe.
const POLL: Duration = Duration::from_millis(50);
/// How often a fresh sentinel start is retried on a new port when the port was taken.
const START_ATTEMPTS: usize = 3;
/// `SENTINEL DEBUG INFO-PERIOD` (default 10 s): how often a sentinel reads
/// `INFO` from each node, so that a priority or role change is seen within a
/// second.
const INFO_PERIOD_MS: u64 = 1000;
/// `SENTINEL DEBUG PING-PERIOD` (default 1 s): how often a sentinel pings
/// each node (at most every `down-after`), and how long it waits before it
/// reconnects a link. After a failover a sentinel links to the new primary
/// afresh and counts it down if it has not answered within `down-after` of
/// the switch, but the reconnection may wait up to this period: with the
/// default, a `down-after` of a second or less failed the new primary over
/// again now and then. Not shorter: a replica is promoted only if its last
/// `INFO` (sent every second while the primary is down) is at most 5 periods
/// old, so at 100 ms most failovers found "no good replica" and waited.
const PING_PERIOD_MS: u64 = 300;
/// `SENTINEL DEBUG PUBLISH-PERIOD` (default 2 s): how often sentinels say
/// hello (they find each other sooner), and a quarter of how long they leave
/// a restarted old primary as a primary before they make it a replica.
const PUBLISH_PERIOD_MS: u64 = 500;
/// The `masterauth` of a lagging replica: its primary has no password, so
/// every reconnection fails at `AUTH` and the replica stays behind.
const LAG_PASSWORD: &str = "distlock-testbed-lagging-replica";

/// How to run a [`SentinelSet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentinelOptions {
    /// The name the sentinels monitor the primary under (`sentinel monitor
    /// <name> ...`), the path of [`SentinelSet::url`]. Default `distlock`.
    pub master_name: &'static str,
    /// `sentinel down-after-milliseconds`: how long the primary may be silent
    /// before a sentinel thinks it is down. Default 1 s. Much less makes
    /// spurious failovers likely on a busy machine: after a failover a
    /// sentinel must reconnect to the new primary and have its answer within
    /// this time, and it may wait 300 ms before it reconnects. It also bounds
    /// how long a lagging replica may have been cut off and still be
    /// promoted: Redis Sentinel skips a replica whose link has been down
    /// longer than 10 times this (plus how long the primary has been down).
    pub down_after: Duration,
    /// `sentinel failover-timeout`. Default 2 s. A failover attempt that
    /// fails (no sentinel elected, no replica fit to promote) is tried again
    /// only after twice this; a failover that succeeded holds back none (the
    /// sentinels forget the old primary's failover when they switch to the
    /// new one), so a second failover in one test takes as long as the first.
    pub failover_timeout: Duration,
    /// Data nodes and sentinels also listen with TLS (mutual TLS, the test
    /// process's certificates, [`TlsFiles::shared`]); replicas replicate and
    /// sentinels talk to every node and to each other over TLS, so the
    /// sentinels name the data nodes' TLS ports: connect with
    /// [`SentinelSet::tls_url`]. The plain ports stay open for the testbed's
    /// own probes ([`RedisServer::cmd`], [`SentinelServer::cmd`]).
    pub tls: bool,
}

impl Default for SentinelOptions {
    fn default() -> Self {
        SentinelOptions {
            master_name: "distlock",
            down_after: Duration::from_millis(1000),
            failover_timeout: Duration::from_millis(2000),
            tls: false,
        }
    }
}

/// Milliseconds of `d`, at least 1.
fn millis(d: Duration) -> u128 {
    d.as_millis().max(1)
}

/// One Redis Sentinel process (`redis-server <dir>/sentinel.conf --sentinel`)
/// on `127.0.0.1:<free port>`, with its writable config file (the sentinel
/// rewrites it with what it learns) and its log in its own temp dir.
///
/// Dropping it SIGKILLs the process, reaps it and removes the temp dir.
pub struct SentinelServer {
    // Declared first: dropped (killed, reaped) before the dir is removed.
    child: Option<ManagedChild>,
    addr: SocketAddr,
    /// The TLS port and its certificates, with [`SentinelOptions::tls`].
    tls: Option<(u16, &'static TlsFiles)>,
    dir: ManagedDir,
    bin: PathBuf,
}

impl fmt::Debug for SentinelServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelServer")
            .field("addr", &self.addr)
            .field("tls_addr", &self.tls_addr())
            .field("pid", &self.pid())
            .finish()
    }
}

impl SentinelServer {
    /// Start a sentinel monitoring `primary` under `opts`, wait until it
    /// answers PING and shorten its periods; a new port if its was taken.
    fn start(
        bin: &Path,
        primary: SocketAddr,
        opts: &SentinelOptions,
    ) -> Result<SentinelServer, TestbedError> {
        let mut last_err = None;
        for _ in 0..START_ATTEMPTS {
            let tls = if opts.tls {
                Some((free_port(), TlsFiles::shared()?))
            } else {
                None
            };
            let mut sentinel = SentinelServer {
                child: None,
                addr: loopback(free_port()),
                tls,
                dir: ManagedDir::new("sentinel")?,
                bin: bin.to_path_buf(),
            };
            sentinel.write_config(primary, opts)?;
            sentinel.spawn_process()?;
            match sentinel.wait_ready(Instant::now() + PROCESS_READY_TIMEOUT) {
                Ok(()) => {
                    sentinel.tune()?;
                    return Ok(sentinel);
                }
                Err(e) if sentinel.port_was_taken() => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err
            .unwrap_or_else(|| TestbedError::protocol("starting a sentinel", "no attempt made")))
    }

    fn what(&self) -> String {
        format!("redis sentinel on {}", self.addr)
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("sentinel.conf")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("sentinel.log")
    }

    fn stderr_path(&self) -> PathBuf {
        self.dir.path().join("sentinel.stderr.log")
    }

    fn port_was_taken(&self) -> bool {
        log_says_addr_in_use(&self.log_path()) || log_says_addr_in_use(&self.stderr_path())
    }

    /// Writes the config the sentinel starts from (and then rewrites).
    fn write_config(
        &self,
        primary: SocketAddr,
        opts: &SentinelOptions,
    ) -> Result<(), TestbedError> {
        let name = opts.master_name;
        let dir = self.dir.path();
        let mut conf = format!(
            "port {port}\n\
             bind 127.0.0.1\n\
             protected-mode no\n\
             daemonize no\n\
             dir {dir}\n\
             logfile {log}\n\
             sentinel monitor {name} {ip} {primary_port} {QUORUM}\n\
             sentinel down-after-milliseconds {name} {down_after}\n\
             sentinel failover-timeout {name} {failover_timeout}\n\
             sentinel parallel-syncs {name} 1\n",
            port = self.addr.port(),
            dir = dir.display(),
            log = self.log_path().display(),
            ip = primary.ip(),
            primary_port = primary.port(),
            down_after = millis(opts.down_after),
            failover_timeout = millis(opts.failover_timeout),
        );
        if let Some((tls_port, files)) = &self.tls {
            conf.push_str(&format!(
                "tls-port {tls_port}\n\
                 tls-cert-file {cert}\n\
                 tls-key-file {key}\n\
                 tls-ca-cert-file {ca}\n\
                 tls-auth-clients yes\n\
                 tls-replication yes\n",
                cert = files.server_cert().display(),
                key = files.server_key().display(),
                ca = files.ca().display(),
            ));
        }
        let path = self.config_path();
        std::fs::write(&path, conf)
            .map_err(|e| TestbedError::io(format!("writing {}", path.display()), e))
    }

    fn spawn_process(&mut self) -> Result<(), TestbedError> {
        let what = self.what();
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.stderr_path())
            .map_err(|e| TestbedError::io("creating sentinel.stderr.log", e))?;
        let stdout = stderr
            .try_clone()
            .map_err(|e| TestbedError::io("creating sentinel.stderr.log", e))?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg(self.config_path())
            .arg("--sentinel")
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        self.child = Some(ManagedChild::spawn(cmd, &what)?);
        Ok(())
    }

    fn wait_ready(&mut self, deadline: Instant) -> Result<(), TestbedError> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.exited()) {
                self.child = None;
                return Err(self.not_ready(started, format!("exited during start-up: {status}")));
            }
            let detail = match resp_command(self.addr, &["PING"], Duration::from_millis(500)) {
                Ok(RespValue::Simple(s)) if s == "PONG" => return Ok(()),
                Ok(other) => format!("PING answered {other:?}"),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(self.not_ready(started, detail));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn not_ready(&self, started: Instant, detail: String) -> TestbedError {
        TestbedError::NotReady {
            what: self.what(),
            waited: started.elapsed(),
            detail,
            log_tail: log_tails(&[self.log_path(), self.stderr_path()], 20),
        }
    }

    /// Shortens the sentinel's info, ping and hello periods (they are not
    /// config file settings, so again after every start).
    fn tune(&self) -> Result<(), TestbedError> {
        let (info, ping, publish) = (
            INFO_PERIOD_MS.to_string(),
            PING_PERIOD_MS.to_string(),
            PUBLISH_PERIOD_MS.to_string(),
        );
        let args = [
            "SENTINEL",
            "DEBUG",
            "INFO-PERIOD",
            info.as_str(),
            "PING-PERIOD",
            ping.as_str(),
            "PUBLISH-PERIOD",
            publish.as_str(),
        ];
        expect_ok(self.addr, &args, self.cmd(&args)?)
    }

    /// `127.0.0.1:<port>`: the plain port, which every sentinel has.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `127.0.0.1:<tls port>` with [`SentinelOptions::tls`].
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls.as_ref().map(|(port, _)| loopback(*port))
    }

    /// The sentinel's PID; `None` while killed.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(ManagedChild::pid)
    }

    /// The temp dir holding `sentinel.conf` (as the sentinel rewrote it) and
    /// `sentinel.log`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last `lines` lines of the sentinel's log (its events: `+sdown`,
    /// `+odown`, `+switch-master`...).
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log_path(), lines)
    }

    /// Send one command to the sentinel (2 s timeout), e.g. `["SENTINEL",
    /// "get-master-addr-by-name", "distlock"]`.
    pub fn cmd(&self, args: &[&str]) -> Result<RespValue, TestbedError> {
        resp_command(self.addr, args, CMD_TIMEOUT)
    }

    fn running_child(&self, operation: &'static str) -> Result<&ManagedChild, TestbedError> {
        self.child.as_ref().ok_or_else(|| TestbedError::NotRunning {
            what: self.what(),
            operation,
        })
    }

    /// Freeze the sentinel with SIGSTOP. Redis Sentinel enters TILT mode (no
    /// failover for 30 s) when it finds more than 2 s went by unseen, so a
    /// long pause silences it for a while after [`resume`](Self::resume).
    pub fn pause(&self) -> Result<(), TestbedError> {
        self.running_child("pause")?
            .signal(libc::SIGSTOP, &self.what())
    }

    /// Unfreeze a paused sentinel with SIGCONT.
    pub fn resume(&self) -> Result<(), TestbedError> {
        self.running_child("resume")?
            .signal(libc::SIGCONT, &self.what())
    }

    /// SIGKILL the sentinel and reap it. Idempotent.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill();
        }
    }

    /// Kill if running, then start again on the same port from its config
    /// file (which holds what it knew: the primary, the replicas, the other
    /// sentinels, the epochs) and wait until it answers PING.
    pub fn restart(&mut self) -> Result<(), TestbedError> {
        self.kill();
        let deadline = Instant::now() + PROCESS_READY_TIMEOUT;
        loop {
            self.spawn_process()?;
            match self.wait_ready(deadline) {
                Ok(()) => return self.tune(),
                // The old socket may linger briefly: retry on the same port.
                Err(_) if self.port_was_taken() && Instant::now() < deadline => {
                    self.kill();
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Redis Sentinel on loopback: one primary and two replicas (`redis-server
/// --replicaof`, data nodes 0, 1 and 2; node 0 starts as the primary) and
/// three sentinels (`redis-server sentinel.conf --sentinel`, quorum 2), each
/// process in its own temp dir.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_testbed::SentinelSet;
///
/// let mut set = SentinelSet::start()?;
/// let url = set.url(); // redis+sentinel://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3/distlock
/// let old = set.kill_primary()?;
/// let new = set.wait_for_failover(old, Duration::from_secs(20))?;
/// set.restart_node(old)?; // back as a replica of `new`
/// # Ok::<(), lock_testbed::TestbedError>(())
/// ```
///
/// A replica can be made to fall behind ([`lag_replica`](Self::lag_replica))
/// and be made the only one sentinels may promote
/// ([`prefer`](Self::prefer)), to show what a failover to a replica that
/// missed writes does.
///
/// Dropping it SIGKILLs every process it started (sentinels first) and
/// removes their temp dirs.
#[derive(Debug)]
pub struct SentinelSet {
    // Declared first: the sentinels go before the nodes they watch.
    sentinels: Vec<SentinelServer>,
    nodes: Vec<RedisServer>,
    opts: SentinelOptions,
}

/// One sentinel's view of the monitored primary and its replicas.
struct View {
    /// The primary it names now.
    primary: SocketAddr,
    /// The replicas it knows: address, healthy (up, linked to the primary),
    /// `slave-priority`.
    replicas: Vec<(SocketAddr, bool, Option<u32>)>,
    /// The other sentinels it knows and sees up.
    sentinels_up: usize,
}

/// The records of a `SENTINEL replicas`/`SENTINEL sentinels` reply: each a
/// map of its flat field/value list.
fn records(reply: &RespValue) -> Option<Vec<HashMap<String, String>>> {
    let RespValue::Array(Some(items)) = reply else {
        return None;
    };
    items.iter().map(fields).collect()
}

fn fields(record: &RespValue) -> Option<HashMap<String, String>> {
    let RespValue::Array(Some(kv)) = record else {
        return None;
    };
    Some(
        kv.chunks(2)
            .filter_map(|pair| {
                Some((
                    pair.first()?.as_str()?.to_string(),
                    pair.get(1)?.as_str()?.to_string(),
                ))
            })
            .collect(),
    )
}

/// Whether Sentinel `flags` say the instance is up and reachable.
fn flags_up(flags: &str) -> bool {
    !flags
        .split(',')
        .any(|f| matches!(f, "s_down" | "o_down" | "disconnected"))
}

fn record_addr(record: &HashMap<String, String>) -> Option<SocketAddr> {
    format!("{}:{}", record.get("ip")?, record.get("port")?)
        .parse()
        .ok()
}

impl SentinelSet {
    /// Start a primary, two replicas and three sentinels with the default
    /// options ([`SentinelOptions::default`]) and wait until they are ready:
    /// see [`start_with`](Self::start_with).
    pub fn start() -> Result<SentinelSet, TestbedError> {
        SentinelSet::start_with(SentinelOptions::default())
    }

    /// Start a primary (node 0), two replicas of it (nodes 1 and 2) and three
    /// sentinels with `opts`, and wait (at most 20 s) until every data node
    /// answers PING, each replica reports `master_link_status:up` and has
    /// applied a write made after it synced (the stream flows: a `WAIT`
    /// after a write counts it), and every sentinel names node 0 as the
    /// primary and sees both replicas and the two other sentinels up.
    pub fn start_with(opts: SentinelOptions) -> Result<SentinelSet, TestbedError> {
        let started = Instant::now();
        let deadline = started + READY_TIMEOUT;
        let bin = bins::resolve(bins::REDIS_SERVER)?;
        let base = RedisOptions {
            tls: opts.tls,
            tls_replication: opts.tls,
            ..RedisOptions::default()
        };
        let primary = RedisServer::start_with(base)?;
        let replica = RedisOptions {
            replica_of: Some(Self::announced_addr(&primary, opts.tls)),
            ..base
        };
        let mut nodes = vec![primary];
        let mut launched = Vec::with_capacity(REPLICAS);
        for _ in 0..REPLICAS {
            launched.push(RedisServer::launch(replica)?);
        }
        for mut node in launched {
            if let Err(e) = node.wait_ready(Instant::now() + PROCESS_READY_TIMEOUT) {
                if !node.port_was_taken() {
                    return Err(e);
                }
                node = RedisServer::start_with(replica)?;
            }
            nodes.push(node);
        }
        let mut set = SentinelSet {
            sentinels: Vec::with_capacity(SENTINELS),
            nodes,
            opts,
        };
        let synced = poll_until(deadline, POLL, || {
            (1..=REPLICAS).try_for_each(|i| set.replica_linked(i, None))?;
            let replicas: Vec<SocketAddr> = (1..=REPLICAS).map(|i| set.announced(i)).collect();
            set.replicas_acked(0, &replicas)
        });
        if let Err(detail) = synced {
            return Err(set.not_ready("replicas", started, detail));
        }
        let primary_addr = set.announced(0);
        for _ in 0..SENTINELS {
            let sentinel = SentinelServer::start(&bin, primary_addr, &opts)?;
            set.sentinels.push(sentinel);
        }
        let replicas: Vec<SocketAddr> = (1..=REPLICAS).map(|i| set.announced(i)).collect();
        let seen = poll_until(deadline, POLL, || {
            (0..SENTINELS).try_for_each(|s| {
                let view = set.view(s)?;
                if view.primary != primary_addr {
                    return Err(format!(
                        "sentinel {s} names {} as the primary, not node 0 ({primary_addr})",
                        view.primary
                    ));
                }
                for addr in &replicas {
                    if !view.replicas.iter().any(|(a, up, _)| a == addr && *up) {
                        return Err(format!(
                            "sentinel {s} does not see replica {addr} up yet (it knows {:?})",
                            view.replicas
                        ));
                    }
                }
                if view.sentinels_up < SENTINELS - 1 {
                    return Err(format!(
                        "sentinel {s} sees {} other sentinels up, not {}",
                        view.sentinels_up,
                        SENTINELS - 1
                    ));
                }
                Ok(())
            })
        });
        match seen {
            Ok(()) => Ok(set),
            Err(detail) => Err(set.not_ready("sentinels", started, detail)),
        }
    }

    fn what(&self) -> String {
        format!("redis sentinel set {:?}", self.opts.master_name)
    }

    fn not_ready(&self, part: &str, started: Instant, detail: String) -> TestbedError {
        TestbedError::NotReady {
            what: format!("{} ({part})", self.what()),
            waited: started.elapsed(),
            detail,
            log_tail: self.logs(15),
        }
    }

    /// The tails of every node's and sentinel's log, for error messages.
    fn logs(&self, lines: usize) -> String {
        let mut paths: Vec<PathBuf> = self
            .nodes
            .iter()
            .filter_map(|n| n.dir().map(|d| d.join("redis.log")))
            .collect();
        paths.extend(self.sentinels.iter().map(SentinelServer::log_path));
        log_tails(&paths, lines)
    }

    /// The address the sentinels know `node` by: its TLS port with TLS.
    fn announced_addr(node: &RedisServer, tls: bool) -> SocketAddr {
        match node.tls_addr() {
            Some(addr) if tls => addr,
            _ => node.addr(),
        }
    }

    fn announced(&self, i: usize) -> SocketAddr {
        Self::announced_addr(&self.nodes[i], self.opts.tls)
    }

    /// The data node the sentinels know by `addr`.
    fn index_of(&self, addr: SocketAddr) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| self.announced(i) == addr || self.nodes[i].addr() == addr)
    }

    /// The options the set was started with.
    pub fn options(&self) -> SentinelOptions {
        self.opts
    }

    /// The name the sentinels know the primary by (`distlock` by default).
    pub fn master_name(&self) -> &'static str {
        self.opts.master_name
    }

    /// The sentinels' plain addresses, in sentinel order.
    pub fn sentinel_addrs(&self) -> Vec<SocketAddr> {
        self.sentinels.iter().map(SentinelServer::addr).collect()
    }

    /// The data nodes' plain addresses, in node order (node 0 started as the
    /// primary).
    pub fn data_addrs(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(RedisServer::addr).collect()
    }

    /// `redis+sentinel://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3/<master
    /// name>`: the sentinels' plain ports. With [`SentinelOptions::tls`] the
    /// sentinels name the data nodes' TLS ports: use [`tls_url`](Self::tls_url).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinel_addrs()
            .iter()
            .map(|a| a.to_string())
            .collect();
        format!(
            "redis+sentinel://{}/{}",
            hosts.join(","),
            self.opts.master_name
        )
    }

    /// `rediss+sentinel://127.0.0.1:t1,127.0.0.1:t2,127.0.0.1:t3/<master
    /// name>`, the sentinels' TLS ports, with [`SentinelOptions::tls`]. A
    /// client presents the certificates of [`TlsFiles::shared`] (mutual TLS)
    /// to the sentinels and to the data nodes.
    pub fn tls_url(&self) -> Option<String> {
        let hosts = self
            .sentinels
            .iter()
            .map(|s| s.tls_addr().map(|a| a.to_string()))
            .collect::<Option<Vec<String>>>()?;
        Some(format!(
            "rediss+sentinel://{}/{}",
            hosts.join(","),
            self.opts.master_name
        ))
    }

    /// The data nodes, in node order.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Data node `i`.
    ///
    /// # Panics
    ///
    /// Panics if `i >= 3`, like slice indexing.
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// Data node `i`, for faults that need `&mut` ([`RedisServer::kill`]).
    /// Restart it with [`restart_node`](Self::restart_node), which brings it
    /// back in the role the sentinels give it.
    ///
    /// # Panics
    ///
    /// Panics if `i >= 3`, like slice indexing.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// The sentinels, in sentinel order.
    pub fn sentinels(&self) -> &[SentinelServer] {
        &self.sentinels
    }

    /// Sentinel `i`.
    ///
    /// # Panics
    ///
    /// Panics if `i >= 3`, like slice indexing.
    pub fn sentinel(&self, i: usize) -> &SentinelServer {
        &self.sentinels[i]
    }

    /// Sentinel `i`, to kill or restart it.
    ///
    /// # Panics
    ///
    /// Panics if `i >= 3`, like slice indexing.
    pub fn sentinel_mut(&mut self, i: usize) -> &mut SentinelServer {
        &mut self.sentinels[i]
    }

    /// Sentinel `s`'s view of the primary, its replicas and the other sentinels.
    fn view(&self, s: usize) -> Result<View, String> {
        let sentinel = &self.sentinels[s];
        let name = self.opts.master_name;
        let ask = |args: &[&str]| {
            sentinel
                .cmd(args)
                .map_err(|e| format!("sentinel {s}: {} failed: {e}", args.join(" ")))
        };
        let primary = master_addr(&ask(&["SENTINEL", "get-master-addr-by-name", name])?)
            .ok_or_else(|| format!("sentinel {s} names no primary for {name:?}"))?;
        let replicas = records(&ask(&["SENTINEL", "replicas", name])?)
            .ok_or_else(|| format!("sentinel {s}: SENTINEL replicas: unexpected answer"))?
            .iter()
            .filter_map(|r| {
                let up = flags_up(r.get("flags")?) && r.get("master-link-status")? == "ok";
                let priority = r.get("slave-priority").and_then(|p| p.parse().ok());
                Some((record_addr(r)?, up, priority))
            })
            .collect();
        let sentinels_up = records(&ask(&["SENTINEL", "sentinels", name])?)
            .ok_or_else(|| format!("sentinel {s}: SENTINEL sentinels: unexpected answer"))?
            .iter()
            .filter(|r| r.get("flags").is_some_and(|f| flags_up(f)))
            .count();
        Ok(View {
            primary,
            replicas,
            sentinels_up,
        })
    }

    /// The running sentinels.
    fn running_sentinels(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.sentinels.len()).filter(|&s| self.sentinels[s].pid().is_some())
    }

    /// The data node that at least [`QUORUM`] sentinels name as the primary.
    fn named_primary(&self) -> Result<usize, String> {
        let name = self.opts.master_name;
        let mut votes: HashMap<SocketAddr, usize> = HashMap::new();
        let mut said = Vec::new();
        for s in self.running_sentinels() {
            match self.sentinels[s].cmd(&["SENTINEL", "get-master-addr-by-name", name]) {
                Ok(reply) => match master_addr(&reply) {
                    Some(addr) => {
                        *votes.entry(addr).or_default() += 1;
                        said.push(format!("sentinel {s}: {addr}"));
                    }
                    None => said.push(format!("sentinel {s}: {reply:?}")),
                },
                Err(e) => said.push(format!("sentinel {s}: {e}")),
            }
        }
        let Some((&addr, _)) = votes.iter().find(|(_, &n)| n >= QUORUM) else {
            return Err(format!(
                "no {QUORUM} sentinels name the same primary ({})",
                said.join("; ")
            ));
        };
        self.index_of(addr)
            .ok_or_else(|| format!("the sentinels name {addr}, which is no node of this set"))
    }

    /// `Ok` if node `i` says `ROLE` master.
    fn confirm_master(&self, i: usize) -> Result<(), String> {
        match self.nodes[i].cmd(&["ROLE"]) {
            Ok(RespValue::Array(Some(role)))
                if role.first().and_then(RespValue::as_str) == Some("master") =>
            {
                Ok(())
            }
            Ok(other) => Err(format!("node {i} answers ROLE with {other:?}")),
            Err(e) => Err(format!("node {i} does not answer ROLE: {e}")),
        }
    }

    fn no_leader(&self, detail: String) -> TestbedError {
        TestbedError::NoLeader {
            what: self.what(),
            detail: format!(
                "{detail}\n--- last lines of the logs ---\n{}",
                self.logs(12)
            ),
        }
    }

    /// The index of the data node that is the primary now: the node that at
    /// least two sentinels name (`SENTINEL get-master-addr-by-name`) and that
    /// says it is a master (`ROLE`). Waits up to 5 s for the sentinels to
    /// agree (they do within a second of a failover); an error
    /// ([`TestbedError::NoLeader`]) if they do not, or if the node they name
    /// is down or not a master.
    pub fn primary(&self) -> Result<usize, TestbedError> {
        poll_until(Instant::now() + AGREE_TIMEOUT, POLL, || {
            let i = self.named_primary()?;
            self.confirm_master(i)?;
            Ok(i)
        })
        .map_err(|detail| self.no_leader(detail))
    }

    /// SIGKILL the current primary ([`primary`](Self::primary)) by PID and
    /// return its index.
    pub fn kill_primary(&mut self) -> Result<usize, TestbedError> {
        let i = self.primary()?;
        self.nodes[i].kill()?;
        Ok(i)
    }

    /// Wait until at least two sentinels name a data node other than `old` as
    /// the primary and that node's `ROLE` says master; return its index. An
    /// error ([`TestbedError::NoLeader`], with the sentinels' logs) if that
    /// has not happened `within`.
    pub fn wait_for_failover(&self, old: usize, within: Duration) -> Result<usize, TestbedError> {
        member_index(&self.nodes, old)?;
        poll_until(Instant::now() + within, POLL, || {
            let i = self.named_primary()?;
            if i == old {
                return Err(format!("the sentinels still name node {old}"));
            }
            self.confirm_master(i)?;
            Ok(i)
        })
        .map_err(|detail| {
            self.no_leader(format!(
                "no failover from node {old} within {within:?}: {detail}"
            ))
        })
    }

    /// `Ok` if running node `i` is a replica whose link to its primary is up
    /// (to `primary`, if given: the address it must follow).
    fn replica_linked(&self, i: usize, primary: Option<SocketAddr>) -> Result<(), String> {
        let info = self.nodes[i]
            .replication_info()
            .map_err(|e| format!("node {i}: {e}"))?;
        let field = |name| info_field(&info, name).unwrap_or("?");
        if field("role") != "slave" {
            return Err(format!("node {i} is a {}, not a replica", field("role")));
        }
        if let Some(primary) = primary {
            if field("master_port") != primary.port().to_string() {
                return Err(format!(
                    "node {i} follows port {}, not the primary {primary}",
                    field("master_port")
                ));
            }
        }
        if field("master_link_status") != "up" {
            return Err(format!(
                "node {i}: master_link_status:{}",
                field("master_link_status")
            ));
        }
        Ok(())
    }

    /// `Ok` once primary `p` lists every replica of `must` (as the sentinels
    /// know them) online and every replica it lists online has applied a
    /// write (a `PUBLISH`, which touches no key) made now: the replication
    /// stream flows. (A replica that just synced gets the stream only after
    /// its first acknowledgement, up to a second later.)
    fn replicas_acked(&self, p: usize, must: &[SocketAddr]) -> Result<(), String> {
        let node = &self.nodes[p];
        let info = node
            .replication_info()
            .map_err(|e| format!("node {p}: {e}"))?;
        let online: Vec<&str> = info
            .lines()
            .filter(|l| l.starts_with("slave") && l.contains("state=online"))
            .collect();
        for addr in must {
            let port = format!("port={},", addr.port());
            if !online.iter().any(|l| l.contains(&port)) {
                return Err(format!("node {p} does not list replica {addr} online yet"));
            }
        }
        let online = online.len();
        let mut conn = RespConnection::connect(node.addr(), CMD_TIMEOUT)
            .map_err(|e| format!("node {p}: {e}"))?;
        conn.cmd(&["PUBLISH", "__lock-testbed__", "probe"])
            .map_err(|e| format!("node {p}: {e}"))?;
        let acked = conn
            .cmd(&["WAIT", &online.to_string(), "1000"])
            .map_err(|e| format!("node {p}: {e}"))?;
        if acked == RespValue::Int(online as i64) {
            Ok(())
        } else {
            Err(format!(
                "node {p}: {acked:?} of its {online} online replicas acknowledged a write"
            ))
        }
    }

    fn running_node(
        &self,
        i: usize,
        operation: &'static str,
    ) -> Result<&RedisServer, TestbedError> {
        let node = member_index(&self.nodes, i)?;
        if node.pid().is_none() {
            return Err(TestbedError::NotRunning {
                what: format!("data node {i} ({})", node.addr()),
                operation,
            });
        }
        Ok(node)
    }

    /// Node `i`'s replication offset from `INFO replication`: how much of the
    /// replication stream it has applied (`slave_repl_offset` on a replica,
    /// `master_repl_offset` on the primary). A lagging replica's stays put
    /// while the primary's grows with every write.
    pub fn repl_offset(&self, i: usize) -> Result<u64, TestbedError> {
        let node = self.running_node(i, "repl_offset")?;
        let info = node.replication_info()?;
        let name = if info_field(&info, "role") == Some("slave") {
            "slave_repl_offset"
        } else {
            "master_repl_offset"
        };
        info_field(&info, name)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                TestbedError::protocol(
                    format!("INFO replication on {}", node.addr()),
                    format!("no {name} in {info:?}"),
                )
            })
    }

    /// Cut replica `i` off its primary while it stays up and answers
    /// everyone, sentinels included: its replication link is closed and
    /// every reconnection fails (the replica is given a `masterauth` its
    /// primary refuses), so writes from now on never reach it and its
    /// [`repl_offset`](Self::repl_offset) stops. Returns once `INFO
    /// replication` says `master_link_status:down`. The lag outlives
    /// failovers (a sentinel pointing it at a new primary does not help)
    /// until [`heal_replica`](Self::heal_replica) or
    /// [`restart_node`](Self::restart_node).
    ///
    /// Sentinels still promote it ([`prefer`](Self::prefer) makes them pick
    /// it) while its link has been down less than 10 ×
    /// [`SentinelOptions::down_after`] plus how long the primary has been
    /// down: start the lag right before the writes it should miss.
    ///
    /// (The replicas reach their primary directly, not through a
    /// [`Proxy`](crate::Proxy): Redis Sentinel points a replica that follows
    /// another address than the primary's at the primary itself within
    /// [`SentinelOptions::failover_timeout`], `+fix-slave-config`.)
    pub fn lag_replica(&self, i: usize) -> Result<(), TestbedError> {
        let node = self.running_node(i, "lag_replica")?;
        let addr = node.addr();
        let info = node.replication_info()?;
        if info_field(&info, "role") != Some("slave") {
            return Err(TestbedError::protocol(
                format!("lag_replica({i}) on {addr}"),
                "the node is the primary: it has no replication link to cut",
            ));
        }
        let set = ["CONFIG", "SET", "masterauth", LAG_PASSWORD];
        expect_ok(addr, &set, node.cmd(&set)?)?;
        // A reconnection that already passed AUTH may still complete: kill
        // the link until it stays down.
        poll_until(Instant::now() + SETTLE_TIMEOUT, POLL, || {
            node.cmd(&["CLIENT", "KILL", "TYPE", "master"])
                .map_err(|e| e.to_string())?;
            let info = node.replication_info().map_err(|e| e.to_string())?;
            let link = info_field(&info, "master_link_status").unwrap_or("?");
            let syncing = info_field(&info, "master_sync_in_progress").unwrap_or("?");
            if link == "down" && syncing == "0" {
                Ok(())
            } else {
                Err(format!(
                    "node {i}: master_link_status:{link} master_sync_in_progress:{syncing}"
                ))
            }
        })
        .map_err(|detail| TestbedError::protocol(format!("lag_replica({i}) on {addr}"), detail))
    }

    /// End [`lag_replica`](Self::lag_replica): replica `i` reconnects to its
    /// primary, catches up, and this returns once its link is up again (at
    /// most 20 s). On a node that was promoted meanwhile it only clears the
    /// lag.
    pub fn heal_replica(&self, i: usize) -> Result<(), TestbedError> {
        let node = self.running_node(i, "heal_replica")?;
        let addr = node.addr();
        let set = ["CONFIG", "SET", "masterauth", ""];
        expect_ok(addr, &set, node.cmd(&set)?)?;
        let info = node.replication_info()?;
        if info_field(&info, "role") != Some("slave") {
            return Ok(());
        }
        poll_until(Instant::now() + SETTLE_TIMEOUT, POLL, || {
            self.replica_linked(i, None)
        })
        .map_err(|detail| TestbedError::protocol(format!("heal_replica({i}) on {addr}"), detail))
    }

    /// Make node `i` the only replica the sentinels may promote: `CONFIG SET
    /// replica-priority 100` on it and 0 (never promote) on every other
    /// running node, kept across [`restart_node`](Self::restart_node).
    /// Returns once every running sentinel reports those priorities for the
    /// running replicas (within a second or two).
    pub fn prefer(&mut self, i: usize) -> Result<(), TestbedError> {
        member_index(&self.nodes, i)?;
        let priority = |j: usize| if j == i { 100u32 } else { 0 };
        for (j, node) in self.nodes.iter_mut().enumerate() {
            if let Some(opts) = node.options() {
                node.set_options(RedisOptions {
                    replica_priority: Some(priority(j)),
                    ..opts
                });
            }
            if node.pid().is_none() {
                continue;
            }
            let value = priority(j).to_string();
            let args = ["CONFIG", "SET", "replica-priority", value.as_str()];
            expect_ok(node.addr(), &args, node.cmd(&args)?)?;
        }
        poll_until(Instant::now() + SETTLE_TIMEOUT, POLL, || {
            for s in self.running_sentinels() {
                for (addr, _, seen) in self.view(s)?.replicas {
                    let Some(j) = self.index_of(addr) else {
                        continue;
                    };
                    if self.nodes[j].pid().is_some() && seen != Some(priority(j)) {
                        return Err(format!(
                            "sentinel {s} sees priority {seen:?} on node {j}, not {}",
                            priority(j)
                        ));
                    }
                }
            }
            Ok(())
        })
        .map_err(|detail| TestbedError::protocol(format!("prefer({i})"), detail))
    }

    /// Start killed data node `i` again on its port and dir, in the role the
    /// sentinels give it now: a replica of the current primary (as a node
    /// whose config file the sentinels rewrote would), or the primary if the
    /// sentinels still name it (no failover happened). Returns once it is
    /// back in that role: as a replica, once its link to the primary is up
    /// and every running sentinel sees it up. A running node is killed
    /// first. It also ends a [`lag_replica`](Self::lag_replica).
    pub fn restart_node(&mut self, i: usize) -> Result<(), TestbedError> {
        member_index(&self.nodes, i)?;
        let primary = poll_until(Instant::now() + SETTLE_TIMEOUT, POLL, || {
            self.named_primary()
        })
        .map_err(|detail| self.no_leader(detail))?;
        let follow = (primary != i).then(|| self.announced(primary));
        let node = member_index_mut(&mut self.nodes, i)?;
        let opts = node.options().ok_or_else(|| TestbedError::External {
            what: format!("data node {i}"),
            operation: "restart_node",
        })?;
        node.set_options(RedisOptions {
            replica_of: follow,
            ..opts
        });
        node.restart()?;
        let me = self.announced(i);
        let started = Instant::now();
        poll_until(started + SETTLE_TIMEOUT, POLL, || {
            if follow.is_none() {
                return self.confirm_master(i);
            }
            // The sentinels name the primary to follow (another one, should
            // they fail over meanwhile; they then point this node at it).
            let primary = self.named_primary()?;
            self.replica_linked(i, Some(self.announced(primary)))?;
            for s in self.running_sentinels() {
                if !self
                    .view(s)?
                    .replicas
                    .iter()
                    .any(|(a, up, _)| *a == me && *up)
                {
                    return Err(format!("sentinel {s} does not see node {i} ({me}) up yet"));
                }
            }
            self.replicas_acked(primary, &[me])
        })
        .map_err(|detail| self.not_ready(&format!("node {i} after a restart"), started, detail))
    }

    /// A graceful failover: `SENTINEL FAILOVER <name>` on a sentinel (no
    /// agreement needed, the primary stays up), then wait until the sentinels
    /// name the promoted replica ([`wait_for_failover`](Self::wait_for_failover))
    /// and the old primary follows it as a replica (the sentinels demote it
    /// within a few seconds); returns the new primary's index.
    pub fn failover(&self) -> Result<usize, TestbedError> {
        let old = self.primary()?;
        let bound = SETTLE_TIMEOUT + 2 * self.opts.failover_timeout;
        let deadline = Instant::now() + bound;
        let name = self.opts.master_name;
        poll_until(deadline, Duration::from_millis(200), || {
            let mut answers = Vec::new();
            for s in self.running_sentinels() {
                match self.sentinels[s].cmd(&["SENTINEL", "FAILOVER", name]) {
                    Ok(RespValue::Simple(ok)) if ok == "OK" => return Ok(()),
                    Ok(other) => answers.push(format!("sentinel {s}: {other:?}")),
                    Err(e) => answers.push(format!("sentinel {s}: {e}")),
                }
            }
            Err(answers.join("; "))
        })
        .map_err(|detail| TestbedError::protocol(format!("SENTINEL FAILOVER {name}"), detail))?;
        let new = self.wait_for_failover(old, bound)?;
        if self.nodes[old].pid().is_some() {
            let new_addr = self.announced(new);
            poll_until(deadline, POLL, || self.replica_linked(old, Some(new_addr))).map_err(
                |detail| {
                    self.no_leader(format!(
                        "the old primary, node {old}, was not demoted: {detail}"
                    ))
                },
            )?;
        }
        Ok(new)
    }
}

/// The address in a `SENTINEL get-master-addr-by-name` reply.
fn master_addr(reply: &RespValue) -> Option<SocketAddr> {
    let RespValue::Array(Some(parts)) = reply else {
        return None;
    };
    format!("{}:{}", parts.first()?.as_str()?, parts.get(1)?.as_str()?)
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> RespValue {
        RespValue::Bulk(Some(s.as_bytes().to_vec()))
    }

    #[test]
    fn parses_sentinel_replies() {
        let reply = RespValue::Array(Some(vec![RespValue::Array(Some(vec![
            bulk("ip"),
            bulk("127.0.0.1"),
            bulk("port"),
            bulk("6380"),
            bulk("flags"),
            bulk("s_down,slave"),
        ]))]));
        let recs = records(&reply).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(
            record_addr(&recs[0]),
            Some("127.0.0.1:6380".parse().unwrap())
        );
        assert!(!flags_up(&recs[0]["flags"]));
        assert!(flags_up("slave"));
        assert!(flags_up("master"));
        assert!(!flags_up("slave,disconnected"));
        let addr = RespValue::Array(Some(vec![bulk("127.0.0.1"), bulk("7000")]));
        assert_eq!(master_addr(&addr), Some("127.0.0.1:7000".parse().unwrap()));
        assert_eq!(master_addr(&RespValue::Array(None)), None);
    }
}
