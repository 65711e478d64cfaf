//! ZooKeeper: one standalone server or an ensemble, each server its own JVM.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod wire;

pub(crate) use wire::four_letter_word;
use wire::{mode_of, put_buf, put_str, read_buf, ZkCallError, ZkSession, REQUEST_TIMEOUT};

use crate::bins;
use crate::cluster::Cluster;
use crate::etcd::resolve_all;
use crate::member::{member_index, member_index_mut, Member};
use crate::process::{ManagedChild, ManagedDir};
use crate::tls::TlsFiles;
use crate::util::{free_port, loopback};
use crate::{Proxy, TestbedError};

/// How long servers may take to answer `srvr` with a `Mode:` line.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long [`ZkEnsemble::leader`] keeps asking during an election.
const LEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of one four-letter-word exchange and of the znode helpers.
const START_ATTEMPTS: usize = 3;

/// How to run ZooKeeper servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZkOptions {
    /// `tickTime` in ms. Default 200: sessions may ask for 400 ms (2 ticks) up to 4 s
    /// (20 ticks); `initLimit=10` and `syncLimit=5` ticks.
    pub tick_time_ms: u32,
    /// Also serve clients over TLS (`secureClientPort`, Netty) with the
    /// test process's certificates ([`TlsFiles::shared`]), requiring a
    /// client certificate (`ssl.clientAuth=need`); see
    /// [`ZkEnsemble::tls_endpoints`]. The plain port stays.
    pub tls: bool,
}

impl Default for ZkOptions {
    fn default() -> ZkOptions {
        ZkOptions {
            tick_time_ms: 200,
            tls: false,
        }
    }
}

struct ZkServer {
    member: Member,
    client_port: u16,
    /// The TLS client port, with [`ZkOptions::tls`].
    tls_port: Option<u16>,
}

struct Local {
    // Declared first: processes are killed before the dir is removed.
    servers: Vec<ZkServer>,
    /// `links[i][j]`: the proxy through which server `i` reaches server
    /// `j`'s quorum port (see [`ZkEnsemble::start_with_quorum_links`]).
    links: Vec<Vec<Option<Proxy>>>,
    root: ManagedDir,
    java: PathBuf,
    classpath: String,
}

/// When a ZooKeeper server whose `tickTime` is `tick` expires a session it
/// last touched at `touched`, with session timeout `timeout`: ZooKeeper
/// rounds every expiry up to the next multiple of the tick on its elapsed
/// clock (`System.nanoTime()` in whole ms, which on Linux is
/// `CLOCK_MONOTONIC`, the clock of [`std::time::Instant`]), so the session
/// lives a little longer than `touched + timeout`, by an amount a test can
/// know in advance. The server's own scheduling may add a few ms.
pub fn zk_session_expiry(touched: Instant, timeout: Duration, tick: Duration) -> Instant {
    let now = Instant::now();
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let now_ns = i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec);
    let ns = |d: Duration| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX);
    let touched_ns = match touched.checked_duration_since(now) {
        Some(ahead) => now_ns + ns(ahead),
        None => now_ns - ns(now.duration_since(touched)),
    };
    let tick_ms = i128::from(u64::try_from(tick.as_millis()).unwrap_or(u64::MAX).max(1));
    let due_ms = (touched_ns / 1_000_000
        + i128::from(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)))
        / tick_ms
        * tick_ms
        + tick_ms;
    let due_ns = due_ms * 1_000_000;
    if due_ns >= now_ns {
        now + Duration::from_nanos(u64::try_from(due_ns - now_ns).unwrap_or(u64::MAX))
    } else {
        now.checked_sub(Duration::from_nanos(
            u64::try_from(now_ns - due_ns).unwrap_or(0),
        ))
        .unwrap_or(now)
    }
}

/// A ZooKeeper ensemble of N servers on loopback (N = 1 runs standalone), or one
/// started elsewhere (see [`ZkEnsemble::external`]).
///
/// Each server is `java -Xms64m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1
/// ... QuorumPeerMain zoo.cfg` (C1 only: less CPU at start-up on small machines), its
/// stdout/stderr in `zkN/zk.log` under [`dir`](Self::dir), with the admin server off and the four-letter words `ruok,srvr,stat,mntr,conf,cons`
/// allowed. Dropping it SIGKILLs every server, reaps them and removes the temp dir.
pub struct ZkEnsemble {
    endpoints: Vec<String>,
    addrs: Vec<SocketAddr>,
    local: Option<Local>,
}

impl fmt::Debug for ZkEnsemble {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pids: Vec<Option<u32>> = (0..self.endpoints.len()).map(|i| self.pid(i)).collect();
        f.debug_struct("ZkEnsemble")
            .field("endpoints", &self.endpoints)
            .field("pids", &pids)
            .field("external", &self.local.is_none())
            .finish()
    }
}

impl ZkEnsemble {
    /// Start `servers` servers with default options (all in parallel) and wait until
    /// each answers `srvr` with a `Mode:` line (at most 20 s).
    pub fn start(servers: usize) -> Result<ZkEnsemble, TestbedError> {
        ZkEnsemble::start_with(servers, ZkOptions::default())
    }

    /// Start `servers` servers with `opts` and wait until each serves.
    pub fn start_with(servers: usize, opts: ZkOptions) -> Result<ZkEnsemble, TestbedError> {
        ZkEnsemble::start_inner(servers, opts, false)
    }

    /// Like [`start_with`](Self::start_with), but every server reaches the
    /// quorum port of every other server (where a follower talks to its
    /// leader: proposals, commits, session revalidation) through a
    /// [`Proxy`] of its own, [`quorum_link`](Self::quorum_link)`(i, j)`.
    /// Delaying what the leader sends one follower makes that follower lag
    /// behind while it still serves clients. Election traffic is direct.
    pub fn start_with_quorum_links(
        servers: usize,
        opts: ZkOptions,
    ) -> Result<ZkEnsemble, TestbedError> {
        ZkEnsemble::start_inner(servers, opts, true)
    }

    /// The proxy through which server `from` reaches server `to`'s quorum
    /// port, in an ensemble started with
    /// [`start_with_quorum_links`](Self::start_with_quorum_links); `None`
    /// otherwise, for `from == to`, or out of range. Its "replies" are what
    /// `to` sends `from` (e.g. a leader's proposals and commits).
    pub fn quorum_link(&self, from: usize, to: usize) -> Option<&Proxy> {
        self.local.as_ref()?.links.get(from)?.get(to)?.as_ref()
    }

    fn start_inner(
        servers: usize,
        opts: ZkOptions,
        links: bool,
    ) -> Result<ZkEnsemble, TestbedError> {
        let mut last_err = None;
        for _ in 0..START_ATTEMPTS {
            let mut ensemble = ZkEnsemble::launch(servers, opts, links)?;
            let deadline = Instant::now() + READY_TIMEOUT;
            let mut result = Ok(());
            for i in 0..servers {
                result = ensemble.wait_server_ready(i, deadline);
                if result.is_err() {
                    break;
                }
            }
            match result {
                Ok(()) => return Ok(ensemble),
                Err(e) if ensemble.port_was_taken() => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err
            .unwrap_or_else(|| TestbedError::protocol("starting ZooKeeper", "no attempt made")))
    }

    /// Handles on ZooKeeper servers started elsewhere, as `host:port` client endpoints.
    ///
    /// Queries work; fault methods return [`TestbedError::External`].
    pub fn external(endpoints: &[String]) -> Result<ZkEnsemble, TestbedError> {
        let addrs = resolve_all(endpoints, "ZooKeeper")?;
        Ok(ZkEnsemble {
            endpoints: endpoints.to_vec(),
            addrs,
            local: None,
        })
    }

    fn launch(n: usize, opts: ZkOptions, proxied: bool) -> Result<ZkEnsemble, TestbedError> {
        let java = bins::resolve(bins::JAVA)?;
        let mut classpath = bins::zk_classpath()?;
        let tls = if opts.tls {
            classpath.push(':');
            classpath.push_str(&bins::netty_classpath()?);
            Some(TlsFiles::shared()?)
        } else {
            None
        };
        let root = ManagedDir::new("zk")?;
        let ports: Vec<(u16, u16, u16)> = (0..n)
            .map(|_| (free_port(), free_port(), free_port()))
            .collect();
        let mut links: Vec<Vec<Option<Proxy>>> = Vec::with_capacity(n);
        for i in 0..n {
            let mut row = Vec::with_capacity(n);
            for (j, (_, quorum, _)) in ports.iter().enumerate() {
                row.push(if proxied && n > 1 && i != j {
                    Some(Proxy::start(loopback(*quorum))?)
                } else {
                    None
                });
            }
            links.push(row);
        }
        // Server `i`'s view of the ensemble: its own quorum port, and the
        // others' through its links when proxied.
        let server_lines = |i: usize| -> String {
            if n < 2 {
                return String::new();
            }
            ports
                .iter()
                .enumerate()
                .map(|(j, (_, quorum, election))| {
                    let quorum = links[i][j].as_ref().map_or(*quorum, |p| p.addr().port());
                    format!("server.{}=127.0.0.1:{quorum}:{election}\n", j + 1)
                })
                .collect()
        };
        let mut servers = Vec::with_capacity(n);
        for (i, (client_port, _, _)) in ports.iter().enumerate() {
            let server_lines = server_lines(i);
            let dir = root.path().join(format!("zk{}", i + 1));
            let data = dir.join("data");
            std::fs::create_dir_all(&data)
                .map_err(|e| TestbedError::io(format!("creating {}", data.display()), e))?;
            let tls_port = tls.map(|_| free_port());
            let tls_lines = match (tls, tls_port) {
                (Some(files), Some(port)) => format!(
                    "secureClientPort={port}\nsecureClientPortAddress=127.0.0.1\n\
                     serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                     ssl.keyStore.location={}\nssl.keyStore.type=PEM\n\
                     ssl.trustStore.location={}\nssl.trustStore.type=PEM\n\
                     ssl.clientAuth=need\n",
                    files.server_pem().display(),
                    files.ca().display()
                ),
                _ => String::new(),
            };
            let cfg = format!(
                "tickTime={}\ninitLimit=10\nsyncLimit=5\ndataDir={}\nclientPort={client_port}\n\
                 clientPortAddress=127.0.0.1\nmaxClientCnxns=0\nadmin.enableServer=false\n\
                 4lw.commands.whitelist=ruok,srvr,stat,mntr,conf,cons\n\
                 autopurge.purgeInterval=0\n{tls_lines}{server_lines}",
                opts.tick_time_ms.max(1),
                data.display(),
            );
            let write = |path: PathBuf, text: String| {
                std::fs::write(&path, text)
                    .map_err(|e| TestbedError::io(format!("writing {}", path.display()), e))
            };
            write(dir.join("zoo.cfg"), cfg)?;
            if n > 1 {
                write(data.join("myid"), format!("{}\n", i + 1))?;
            }
            let logs = vec![dir.join("zk.log")];
            let what = format!("ZooKeeper server {} on 127.0.0.1:{client_port}", i + 1);
            servers.push(ZkServer {
                member: Member::new(dir, logs, what),
                client_port: *client_port,
                tls_port,
            });
        }
        let endpoints = servers
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.client_port))
            .collect();
        let addrs = servers.iter().map(|s| loopback(s.client_port)).collect();
        let mut ensemble = ZkEnsemble {
            endpoints,
            addrs,
            local: Some(Local {
                servers,
                links,
                root,
                java,
                classpath,
            }),
        };
        for i in 0..n {
            ensemble.spawn_server(i)?;
        }
        Ok(ensemble)
    }

    fn local(&self, operation: &'static str) -> Result<&Local, TestbedError> {
        self.local.as_ref().ok_or_else(|| TestbedError::External {
            what: format!("ZooKeeper at {}", self.connect_string()),
            operation,
        })
    }

    fn local_mut(&mut self, operation: &'static str) -> Result<&mut Local, TestbedError> {
        let what = format!("ZooKeeper at {}", self.connect_string());
        self.local
            .as_mut()
            .ok_or(TestbedError::External { what, operation })
    }

    fn spawn_server(&mut self, i: usize) -> Result<(), TestbedError> {
        let local = self.local_mut("start")?;
        let (java, classpath) = (local.java.clone(), local.classpath.clone());
        let s = member_index_mut(&mut local.servers, i)?;
        let dir = s.member.dir.clone();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("zk.log"))
            .map_err(|e| TestbedError::io("creating zk.log", e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| TestbedError::io("creating zk.log", e))?;
        let mut cmd = Command::new(java);
        cmd.args(["-Xms64m", "-Xmx256m", "-XX:+UseSerialGC"])
            .args(["-XX:TieredStopAtLevel=1", "-Xss512k"])
            .arg("-Djava.net.preferIPv4Stack=true")
            .arg("-Dzookeeper.admin.enableServer=false")
            .arg("-Dorg.slf4j.simpleLogger.showDateTime=true")
            .arg("-cp")
            .arg(classpath)
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(dir.join("zoo.cfg"))
            .env_remove("JAVA_TOOL_OPTIONS")
            .env_remove("JDK_JAVA_OPTIONS")
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        s.member.child = Some(ManagedChild::spawn(cmd, &s.member.what)?);
        s.member
            .paused
            .store(false, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    fn port_was_taken(&self) -> bool {
        self.local
            .as_ref()
            .is_some_and(|l| l.servers.iter().any(|s| s.member.port_was_taken()))
    }

    fn wait_server_ready(&mut self, i: usize, deadline: Instant) -> Result<(), TestbedError> {
        let started = Instant::now();
        let addr = *member_index(&self.addrs, i)?;
        loop {
            if let Some(local) = self.local.as_mut() {
                let s = member_index_mut(&mut local.servers, i)?;
                if let Some(status) = s.member.child.as_mut().and_then(ManagedChild::exited) {
                    s.member.child = None;
                    return Err(TestbedError::NotReady {
                        what: s.member.what.clone(),
                        waited: started.elapsed(),
                        detail: format!("exited during start-up: {status}"),
                        log_tail: s.member.log_tail(),
                    });
                }
            }
            let tls_port = self
                .local
                .as_ref()
                .and_then(|l| l.servers.get(i))
                .and_then(|s| s.tls_port);
            let detail = match four_letter_word(addr, "srvr", Duration::from_millis(1000)) {
                // The secure port opens after the plain one has answered.
                Ok(answer) if mode_of(&answer).is_some() => match tls_port {
                    None => return Ok(()),
                    Some(port) => match std::net::TcpStream::connect_timeout(
                        &loopback(port),
                        Duration::from_millis(500),
                    ) {
                        Ok(_) => return Ok(()),
                        Err(e) => format!("the TLS port {port} does not accept yet: {e}"),
                    },
                },
                Ok(answer) => format!("`srvr` answered {:?}", answer.trim()),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                let (what, log_tail) = match &self.local {
                    Some(l) => (
                        l.servers[i].member.what.clone(),
                        l.servers[i].member.log_tail(),
                    ),
                    None => (format!("ZooKeeper at {addr}"), String::new()),
                };
                return Err(TestbedError::NotReady {
                    what,
                    waited: started.elapsed(),
                    detail,
                    log_tail,
                });
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,...` for a ZooKeeper client.
    pub fn connect_string(&self) -> String {
        self.endpoints.join(",")
    }

    /// Client addresses of all members (running or not), index-stable.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.addrs.clone()
    }

    /// Client endpoints of all servers (running or not), index-stable.
    pub fn endpoints(&self) -> Vec<String> {
        self.endpoints.clone()
    }

    /// The TLS client endpoints `127.0.0.1:P` of an ensemble started with
    /// [`ZkOptions::tls`] (empty otherwise), index-stable.
    pub fn tls_endpoints(&self) -> Vec<String> {
        self.local
            .iter()
            .flat_map(|l| l.servers.iter())
            .filter_map(|s| s.tls_port.map(|p| format!("127.0.0.1:{p}")))
            .collect()
    }

    /// The certificates of an ensemble started with [`ZkOptions::tls`].
    pub fn tls_files(&self) -> Option<&'static TlsFiles> {
        self.local
            .as_ref()
            .filter(|l| l.servers.iter().any(|s| s.tls_port.is_some()))
            .map(|_| TlsFiles::shared())
            .and_then(Result::ok)
    }

    /// Client endpoint `127.0.0.1:P` of server `i`.
    ///
    /// # Panics
    ///
    /// Panics if `i` is out of range, like slice indexing.
    pub fn endpoint(&self, i: usize) -> String {
        self.endpoints[i].clone()
    }

    /// The number of servers.
    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// True when the ensemble has no server.
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// The temp dir holding every server's config, data and log; `None` when external.
    pub fn dir(&self) -> Option<&std::path::Path> {
        self.local.as_ref().map(|l| l.root.path())
    }

    fn answering(&self, i: usize) -> bool {
        match &self.local {
            Some(l) => l.servers.get(i).is_some_and(|s| s.member.answering()),
            None => true,
        }
    }

    /// The raw answer of server `i` to the four-letter word `srvr`.
    pub fn srvr(&self, i: usize) -> Result<String, TestbedError> {
        let addr = *member_index(&self.addrs, i)?;
        four_letter_word(addr, "srvr", REQUEST_TIMEOUT)
    }

    /// Index of the server whose `srvr` says `Mode: leader` (or `standalone`), asking
    /// every running, unpaused server; waits up to 10 s while an election is going on.
    pub fn leader(&self) -> Result<usize, TestbedError> {
        let deadline = Instant::now() + LEADER_TIMEOUT;
        loop {
            let mut detail = Vec::new();
            for (i, addr) in self.addrs.iter().enumerate() {
                if !self.answering(i) {
                    detail.push(format!("server {i}: not running or paused"));
                    continue;
                }
                match four_letter_word(*addr, "srvr", Duration::from_millis(1000)) {
                    Ok(answer) => match mode_of(&answer) {
                        Some("leader" | "standalone") => return Ok(i),
                        Some(mode) => detail.push(format!("server {i}: {mode}")),
                        None => detail.push(format!("server {i}: {:?}", answer.trim())),
                    },
                    Err(e) => detail.push(format!("server {i}: {e}")),
                }
            }
            if Instant::now() >= deadline {
                return Err(TestbedError::NoLeader {
                    what: format!("ZooKeeper {}", self.connect_string()),
                    detail: detail.join("; "),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL server `i` and reap it. Its data dir is kept for [`restart`](Self::restart).
    pub fn kill(&mut self, i: usize) -> Result<(), TestbedError> {
        let local = self.local_mut("kill")?;
        member_index_mut(&mut local.servers, i)?.member.kill();
        Ok(())
    }

    /// Kill server `i` if running, start it again with the same config and data dir,
    /// and wait until it serves (at most 20 s; in an ensemble that needs a quorum).
    pub fn restart(&mut self, i: usize) -> Result<(), TestbedError> {
        self.kill(i)?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            self.spawn_server(i)?;
            match self.wait_server_ready(i, deadline) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let taken = self
                        .local
                        .as_ref()
                        .is_some_and(|l| l.servers[i].member.port_was_taken());
                    if !taken || Instant::now() >= deadline {
                        return Err(e);
                    }
                    self.kill(i)?;
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }

    /// SIGSTOP server `i` (the whole JVM).
    pub fn pause(&self, i: usize) -> Result<(), TestbedError> {
        member_index(&self.local("pause")?.servers, i)?
            .member
            .pause()
    }

    /// SIGCONT server `i`.
    pub fn resume(&self, i: usize) -> Result<(), TestbedError> {
        member_index(&self.local("resume")?.servers, i)?
            .member
            .resume()
    }

    /// PID of server `i`; `None` when killed, external or out of range.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.local
            .as_ref()
            .and_then(|l| l.servers.get(i))
            .and_then(|s| s.member.pid())
    }

    /// Open a session on server `i` and close it again: proof that it serves clients.
    pub fn check_session(&self, i: usize) -> Result<(), TestbedError> {
        let addr = *member_index(&self.addrs, i)?;
        ZkSession::connect(addr)?.close();
        Ok(())
    }

    /// Create the persistent znode `path` holding `data` (open ACL) through server `i`,
    /// in a short session of its own. The parent must exist.
    pub fn create(&self, i: usize, path: &str, data: &[u8]) -> Result<(), TestbedError> {
        let addr = *member_index(&self.addrs, i)?;
        let mut s = ZkSession::connect(addr)?;
        let mut req = Vec::new();
        put_str(&mut req, path);
        put_buf(&mut req, data);
        req.extend_from_slice(&1i32.to_be_bytes()); // one ACL
        req.extend_from_slice(&31i32.to_be_bytes()); // Perms.ALL
        put_str(&mut req, "world");
        put_str(&mut req, "anyone");
        req.extend_from_slice(&0i32.to_be_bytes()); // persistent
        s.call(1, &req, &format!("create {path}"))
            .map_err(|e| e.into_testbed(addr, path))?;
        s.close();
        Ok(())
    }

    /// The data of znode `path` read through server `i` (`None` if it does not exist).
    pub fn get_data(&self, i: usize, path: &str) -> Result<Option<Vec<u8>>, TestbedError> {
        let addr = *member_index(&self.addrs, i)?;
        let mut s = ZkSession::connect(addr)?;
        // sync first, so the read sees every write committed before this call.
        let mut sync = Vec::new();
        put_str(&mut sync, path);
        let _ = s.call(9, &sync, &format!("sync {path}"));
        let mut req = Vec::new();
        put_str(&mut req, path);
        req.push(0); // no watch
        let reply = match s.call(4, &req, &format!("getData {path}")) {
            Ok(reply) => reply,
            Err(ZkCallError::Code(-101)) => {
                s.close();
                return Ok(None);
            }
            Err(e) => return Err(e.into_testbed(addr, path)),
        };
        s.close();
        let data = read_buf(&reply, 0).ok_or_else(|| {
            TestbedError::protocol(format!("ZooKeeper getData {path} on {addr}"), "short reply")
        })?;
        Ok(Some(data))
    }
}

/// The URL scheme of a ZooKeeper client.
pub(crate) const SCHEME: &str = "zk";

impl Cluster for ZkEnsemble {
    fn scheme(&self) -> &'static str {
        SCHEME
    }
    fn addrs(&self) -> Vec<SocketAddr> {
        ZkEnsemble::addrs(self)
    }
    fn pause(&self, i: usize) -> Result<(), TestbedError> {
        ZkEnsemble::pause(self, i)
    }
    fn resume(&self, i: usize) -> Result<(), TestbedError> {
        ZkEnsemble::resume(self, i)
    }
    fn kill(&mut self, i: usize) -> Result<(), TestbedError> {
        ZkEnsemble::kill(self, i)
    }
    fn restart(&mut self, i: usize) -> Result<(), TestbedError> {
        ZkEnsemble::restart(self, i)
    }
    fn leader(&self) -> Result<Option<usize>, TestbedError> {
        ZkEnsemble::leader(self).map(Some)
    }
}
