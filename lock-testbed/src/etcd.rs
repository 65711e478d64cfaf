//! etcd: one member or a cluster, started with the fast loopback timing flags.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::bins;
use crate::cluster::Cluster;
use crate::http;
use crate::member::{member_index, member_index_mut, Member};
use crate::process::{ManagedChild, ManagedDir};
use crate::tls::TlsFiles;
use crate::util::{free_port, loopback, unique_name};
use crate::TestbedError;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{json, Value};

/// How long members may take to report healthy.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long [`EtcdCluster::leader`] keeps asking during an election.
const LEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Per-request timeout of the JSON gateway helpers.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
const START_ATTEMPTS: usize = 3;

struct EtcdMember {
    member: Member,
    name: String,
    client_port: u16,
    peer_port: u16,
    /// The https client port, in a TLS cluster.
    tls_port: Option<u16>,
}

struct Local {
    // Declared first: processes are killed before the dir is removed.
    members: Vec<EtcdMember>,
    root: ManagedDir,
    bin: PathBuf,
    token: String,
    initial_cluster: String,
    /// The certificates of a TLS cluster.
    tls: Option<&'static TlsFiles>,
}

/// An etcd cluster of N members on loopback, or one started elsewhere
/// (see [`EtcdCluster::external`]).
///
/// Members run with `--heartbeat-interval=10 --election-timeout=100`, so a new leader
/// is elected within a few hundred ms of a leader's death, and the minimum lease TTL is
/// 1 s (ceil(1.5 x election timeout)). Dropping it SIGKILLs every member, reaps them
/// and removes the temp dir.
pub struct EtcdCluster {
    endpoints: Vec<String>,
    addrs: Vec<SocketAddr>,
    local: Option<Local>,
}

impl fmt::Debug for EtcdCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pids: Vec<Option<u32>> = (0..self.endpoints.len()).map(|i| self.pid(i)).collect();
        f.debug_struct("EtcdCluster")
            .field("endpoints", &self.endpoints)
            .field("pids", &pids)
            .field("external", &self.local.is_none())
            .finish()
    }
}

/// The Prometheus metrics of the etcd member whose client endpoint is
/// `endpoint` (`127.0.0.1:PORT`, as [`EtcdCluster::endpoints`] gives them),
/// as text: what tests count server-side requests and watchers with.
pub fn etcd_metrics(endpoint: &str) -> Result<String, TestbedError> {
    let addr: std::net::SocketAddr = endpoint
        .parse()
        .map_err(|e| TestbedError::protocol(format!("etcd endpoint {endpoint}"), format!("{e}")))?;
    let (code, body) = http::request(addr, "GET", "/metrics", None, Duration::from_secs(5))?;
    if code != 200 {
        return Err(TestbedError::protocol(
            format!("GET /metrics from {endpoint}"),
            format!("HTTP {code}"),
        ));
    }
    Ok(body)
}

impl EtcdCluster {
    /// Start a `members`-member cluster (all members in parallel) and wait until every
    /// member answers `GET /health` with `{"health":"true"}` (at most 20 s).
    pub fn start(members: usize) -> Result<EtcdCluster, TestbedError> {
        Self::start_with(members, false)
    }

    /// Like [`EtcdCluster::start`], and every member also serves clients
    /// over TLS on a second port ([`EtcdCluster::tls_endpoints`]) with the
    /// test process's certificates ([`TlsFiles::shared`]), requiring a
    /// client certificate signed by its CA (`--client-cert-auth`). The
    /// plain port stays for the testbed's own queries.
    pub fn start_tls(members: usize) -> Result<EtcdCluster, TestbedError> {
        Self::start_with(members, true)
    }

    fn start_with(members: usize, tls: bool) -> Result<EtcdCluster, TestbedError> {
        let mut last_err = None;
        for _ in 0..START_ATTEMPTS {
            let mut cluster = EtcdCluster::launch(members, tls)?;
            let deadline = Instant::now() + READY_TIMEOUT;
            let mut result = Ok(());
            for i in 0..members {
                result = cluster.wait_member_ready(i, deadline);
                if result.is_err() {
                    break;
                }
            }
            match result {
                Ok(()) => return Ok(cluster),
                Err(e) if cluster.port_was_taken() => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| TestbedError::protocol("starting etcd", "no attempt made")))
    }

    /// Handles on etcd members started elsewhere, as `host:port` client endpoints.
    ///
    /// Queries ([`leader`](Self::leader), [`put`](Self::put), [`get`](Self::get)) work;
    /// fault methods return [`TestbedError::External`].
    pub fn external(endpoints: &[String]) -> Result<EtcdCluster, TestbedError> {
        let addrs = resolve_all(endpoints, "etcd")?;
        Ok(EtcdCluster {
            endpoints: endpoints.to_vec(),
            addrs,
            local: None,
        })
    }

    fn launch(n: usize, tls: bool) -> Result<EtcdCluster, TestbedError> {
        let bin = bins::resolve(bins::ETCD)?;
        let tls = if tls { Some(TlsFiles::shared()?) } else { None };
        let root = ManagedDir::new("etcd")?;
        let token = unique_name("distlock-etcd");
        let mut members = Vec::with_capacity(n);
        for i in 0..n {
            let name = format!("e{}", i + 1);
            let client_port = free_port();
            let peer_port = free_port();
            let dir = root.path().join(&name);
            std::fs::create_dir_all(&dir)
                .map_err(|e| TestbedError::io(format!("creating {}", dir.display()), e))?;
            let logs = vec![dir.join("etcd.log"), dir.join("stderr.log")];
            let what = format!("etcd member {name} on 127.0.0.1:{client_port}");
            members.push(EtcdMember {
                member: Member::new(dir, logs, what),
                name,
                client_port,
                peer_port,
                tls_port: tls.map(|_| free_port()),
            });
        }
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let endpoints = members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect();
        let addrs = members.iter().map(|m| loopback(m.client_port)).collect();
        let mut cluster = EtcdCluster {
            endpoints,
            addrs,
            local: Some(Local {
                members,
                root,
                bin,
                token,
                initial_cluster,
                tls,
            }),
        };
        for i in 0..n {
            cluster.spawn_member(i)?;
        }
        Ok(cluster)
    }

    fn local(&self, operation: &'static str) -> Result<&Local, TestbedError> {
        self.local.as_ref().ok_or_else(|| TestbedError::External {
            what: format!("etcd at {}", self.endpoints.join(",")),
            operation,
        })
    }

    fn local_mut(&mut self, operation: &'static str) -> Result<&mut Local, TestbedError> {
        let what = format!("etcd at {}", self.endpoints.join(","));
        self.local
            .as_mut()
            .ok_or(TestbedError::External { what, operation })
    }

    fn spawn_member(&mut self, i: usize) -> Result<(), TestbedError> {
        let local = self.local_mut("start")?;
        let (bin, token, initial_cluster, tls) = (
            local.bin.clone(),
            local.token.clone(),
            local.initial_cluster.clone(),
            local.tls,
        );
        let m = member_index_mut(&mut local.members, i)?;
        let dir = m.member.dir.clone();
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("stderr.log"))
            .map_err(|e| TestbedError::io("creating etcd stderr.log", e))?;
        let stdout = stderr
            .try_clone()
            .map_err(|e| TestbedError::io("creating etcd stderr.log", e))?;
        let mut client_url = format!("http://127.0.0.1:{}", m.client_port);
        if let Some(port) = m.tls_port {
            client_url.push_str(&format!(",https://127.0.0.1:{port}"));
        }
        let peer_url = format!("http://127.0.0.1:{}", m.peer_port);
        let mut cmd = Command::new(bin);
        // ETCD_* variables of the caller's environment would override our flags.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(key);
            }
        }
        cmd.arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--logger=zap")
            .arg(format!("--log-outputs={}", dir.join("etcd.log").display()))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &token])
            .args(["--heartbeat-interval=10", "--election-timeout=100"]);
        if let Some(files) = tls {
            cmd.arg("--cert-file")
                .arg(files.server_cert())
                .arg("--key-file")
                .arg(files.server_key())
                .arg("--trusted-ca-file")
                .arg(files.ca())
                .arg("--client-cert-auth");
        }
        cmd.current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        m.member.child = Some(ManagedChild::spawn(cmd, &m.member.what)?);
        m.member
            .paused
            .store(false, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    fn port_was_taken(&self) -> bool {
        self.local
            .as_ref()
            .is_some_and(|l| l.members.iter().any(|m| m.member.port_was_taken()))
    }

    fn wait_member_ready(&mut self, i: usize, deadline: Instant) -> Result<(), TestbedError> {
        let started = Instant::now();
        let addr = *member_index(&self.addrs, i)?;
        loop {
            if let Some(local) = self.local.as_mut() {
                let m = member_index_mut(&mut local.members, i)?;
                if let Some(status) = m.member.child.as_mut().and_then(ManagedChild::exited) {
                    m.member.child = None;
                    return Err(TestbedError::NotReady {
                        what: m.member.what.clone(),
                        waited: started.elapsed(),
                        detail: format!("exited during start-up: {status}"),
                        log_tail: m.member.log_tail(),
                    });
                }
            }
            let detail = match health(addr) {
                Ok(true) => return Ok(()),
                Ok(false) => "GET /health answered, but not healthy".to_string(),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                let (what, log_tail) = match &self.local {
                    Some(l) => (
                        l.members[i].member.what.clone(),
                        l.members[i].member.log_tail(),
                    ),
                    None => (format!("etcd at {addr}"), String::new()),
                };
                return Err(TestbedError::NotReady {
                    what,
                    waited: started.elapsed(),
                    detail,
                    log_tail,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Client addresses of all members (running or not), index-stable.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.addrs.clone()
    }

    /// Client endpoints `127.0.0.1:PORT` of all members (running or not), index-stable.
    pub fn endpoints(&self) -> Vec<String> {
        self.endpoints.clone()
    }

    /// The TLS client endpoints `127.0.0.1:PORT` of a cluster started with
    /// [`EtcdCluster::start_tls`] (empty otherwise), index-stable.
    pub fn tls_endpoints(&self) -> Vec<String> {
        self.local
            .iter()
            .flat_map(|l| l.members.iter())
            .filter_map(|m| m.tls_port.map(|p| format!("127.0.0.1:{p}")))
            .collect()
    }

    /// The certificates of a cluster started with [`EtcdCluster::start_tls`].
    pub fn tls_files(&self) -> Option<&'static TlsFiles> {
        self.local.as_ref()?.tls
    }

    /// Client endpoint of member `i`.
    ///
    /// # Panics
    ///
    /// Panics if `i` is out of range, like slice indexing.
    pub fn endpoint(&self, i: usize) -> String {
        self.endpoints[i].clone()
    }

    /// Client URLs `http://127.0.0.1:PORT` of all members, index-stable.
    pub fn client_urls(&self) -> Vec<String> {
        self.endpoints
            .iter()
            .map(|e| format!("http://{e}"))
            .collect()
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// True when the cluster has no member.
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// The temp dir holding every member's data and logs; `None` when external.
    pub fn dir(&self) -> Option<&std::path::Path> {
        self.local.as_ref().map(|l| l.root.path())
    }

    fn answering(&self, i: usize) -> bool {
        match &self.local {
            Some(l) => l.members.get(i).is_some_and(|m| m.member.answering()),
            None => true,
        }
    }

    /// Index of the current leader, asking every running, unpaused member through the
    /// JSON gateway (`POST /v3/maintenance/status`). Waits up to 10 s while an election
    /// is going on; the answer is a member that says it leads and that every other
    /// answering member agrees on.
    pub fn leader(&self) -> Result<usize, TestbedError> {
        let deadline = Instant::now() + LEADER_TIMEOUT;
        loop {
            let mut answers = Vec::new();
            let mut detail = Vec::new();
            for (i, addr) in self.addrs.iter().enumerate() {
                if !self.answering(i) {
                    detail.push(format!("member {i}: not running or paused"));
                    continue;
                }
                match status(*addr, Duration::from_millis(1000)) {
                    Ok((me, leader)) => {
                        detail.push(format!("member {i}: id {me}, leader {leader}"));
                        answers.push((i, me, leader));
                    }
                    Err(e) => detail.push(format!("member {i}: {e}")),
                }
            }
            let agreed = answers.first().map(|a| a.2.clone()).filter(|l| {
                l != "0" && !l.is_empty() && answers.iter().all(|(_, _, other)| other == l)
            });
            if let Some(leader) = agreed {
                if let Some((i, _, _)) = answers.iter().find(|(_, me, _)| *me == leader) {
                    return Ok(*i);
                }
            }
            if Instant::now() >= deadline {
                return Err(TestbedError::NoLeader {
                    what: format!("etcd {}", self.endpoints.join(",")),
                    detail: detail.join("; "),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL member `i` and reap it. Its data dir is kept for [`restart`](Self::restart).
    pub fn kill(&mut self, i: usize) -> Result<(), TestbedError> {
        let local = self.local_mut("kill")?;
        member_index_mut(&mut local.members, i)?.member.kill();
        Ok(())
    }

    /// Kill member `i` if running, start it again with the same name, ports, data dir
    /// and flags, and wait until it reports healthy (at most 20 s).
    pub fn restart(&mut self, i: usize) -> Result<(), TestbedError> {
        self.kill(i)?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            self.spawn_member(i)?;
            match self.wait_member_ready(i, deadline) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let taken = self
                        .local
                        .as_ref()
                        .is_some_and(|l| l.members[i].member.port_was_taken());
                    if !taken || Instant::now() >= deadline {
                        return Err(e);
                    }
                    self.kill(i)?;
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }

    /// SIGSTOP member `i`.
    pub fn pause(&self, i: usize) -> Result<(), TestbedError> {
        member_index(&self.local("pause")?.members, i)?
            .member
            .pause()
    }

    /// SIGCONT member `i`.
    pub fn resume(&self, i: usize) -> Result<(), TestbedError> {
        member_index(&self.local("resume")?.members, i)?
            .member
            .resume()
    }

    /// PID of member `i`; `None` when killed, external or out of range.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.local
            .as_ref()
            .and_then(|l| l.members.get(i))
            .and_then(|m| m.member.pid())
    }

    /// Put `key` = `value` through member `i`'s JSON gateway (`POST /v3/kv/put`).
    pub fn put(&self, i: usize, key: &str, value: &[u8]) -> Result<(), TestbedError> {
        let addr = *member_index(&self.addrs, i)?;
        let body = json!({"key": BASE64.encode(key), "value": BASE64.encode(value)});
        let json = gateway(addr, "/v3/kv/put", &body, REQUEST_TIMEOUT)?;
        if json.get("header").is_none() {
            return Err(TestbedError::protocol(
                format!("etcd put {key} via {addr}"),
                format!("{json:?}"),
            ));
        }
        Ok(())
    }

    /// Get `key` through member `i`'s JSON gateway (`POST /v3/kv/range`, linearizable).
    pub fn get(&self, i: usize, key: &str) -> Result<Option<Vec<u8>>, TestbedError> {
        let addr = *member_index(&self.addrs, i)?;
        let body = json!({"key": BASE64.encode(key)});
        let json = gateway(addr, "/v3/kv/range", &body, REQUEST_TIMEOUT)?;
        let ctx = || format!("etcd get {key} via {addr}");
        let Some(kvs) = json.get("kvs").and_then(Value::as_array) else {
            return if json.get("header").is_some() {
                Ok(None)
            } else {
                Err(TestbedError::protocol(ctx(), format!("{json:?}")))
            };
        };
        // etcd leaves an empty value out of the JSON.
        let value = kvs
            .first()
            .and_then(|kv| kv.get("value"))
            .and_then(Value::as_str)
            .unwrap_or("");
        BASE64
            .decode(value)
            .map(Some)
            .map_err(|e| TestbedError::protocol(ctx(), format!("bad base64 {value:?}: {e}")))
    }
}

/// POST a JSON body to the gateway; an error unless 200 with a JSON object.
fn gateway(
    addr: SocketAddr,
    path: &str,
    body: &Value,
    timeout: Duration,
) -> Result<Value, TestbedError> {
    let body = body.to_string();
    let (code, text) = http::request(addr, "POST", path, Some(&body), timeout)?;
    let ctx = || format!("etcd POST {path} to {addr}");
    if code != 200 {
        return Err(TestbedError::protocol(
            ctx(),
            format!("HTTP {code}: {text}"),
        ));
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(json) if json.is_object() => Ok(json),
        Ok(_) => Err(TestbedError::protocol(
            ctx(),
            format!("not an object: {text}"),
        )),
        Err(e) => Err(TestbedError::protocol(ctx(), format!("{e}: {text}"))),
    }
}

/// A field etcd encodes as a string (uint64 fields) or a number, as text.
fn text_of(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// GET /health: true when `{"health":"true"}`.
fn health(addr: SocketAddr) -> Result<bool, TestbedError> {
    let (code, text) = http::request(addr, "GET", "/health", None, Duration::from_millis(1000))?;
    let healthy = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|j| text_of(j.get("health")))
        .is_some_and(|h| h == "true");
    Ok(code == 200 && healthy)
}

/// (member_id, leader_id) from the maintenance status RPC.
fn status(addr: SocketAddr, timeout: Duration) -> Result<(String, String), TestbedError> {
    let json = gateway(addr, "/v3/maintenance/status", &json!({}), timeout)?;
    let me = text_of(json.get("header").and_then(|h| h.get("member_id")));
    let leader = text_of(json.get("leader")).unwrap_or_else(|| "0".into());
    match me {
        Some(me) => Ok((me, leader)),
        None => Err(TestbedError::protocol(
            format!("etcd status from {addr}"),
            format!("{json:?}"),
        )),
    }
}

/// Resolve `host:port` strings (first address of each, IPv4 preferred).
pub(crate) fn resolve_all(
    endpoints: &[String],
    what: &str,
) -> Result<Vec<SocketAddr>, TestbedError> {
    endpoints
        .iter()
        .map(|e| {
            let all: Vec<SocketAddr> = e
                .to_socket_addrs()
                .map_err(|err| TestbedError::io(format!("resolving {what} endpoint {e:?}"), err))?
                .collect();
            all.iter()
                .find(|a| a.is_ipv4())
                .or(all.first())
                .copied()
                .ok_or_else(|| {
                    TestbedError::protocol(format!("resolving {what} endpoint {e:?}"), "no address")
                })
        })
        .collect()
}

/// The URL scheme of an etcd client.
pub(crate) const SCHEME: &str = "etcd";

impl Cluster for EtcdCluster {
    fn scheme(&self) -> &'static str {
        SCHEME
    }
    fn addrs(&self) -> Vec<SocketAddr> {
        EtcdCluster::addrs(self)
    }
    fn pause(&self, i: usize) -> Result<(), TestbedError> {
        EtcdCluster::pause(self, i)
    }
    fn resume(&self, i: usize) -> Result<(), TestbedError> {
        EtcdCluster::resume(self, i)
    }
    fn kill(&mut self, i: usize) -> Result<(), TestbedError> {
        EtcdCluster::kill(self, i)
    }
    fn restart(&mut self, i: usize) -> Result<(), TestbedError> {
        EtcdCluster::restart(self, i)
    }
    fn leader(&self) -> Result<Option<usize>, TestbedError> {
        EtcdCluster::leader(self).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// etcd's gateway writes uint64 fields as strings; both forms are read.
    #[test]
    fn reads_the_status_document() {
        let src = r#"{"header":{"cluster_id":"148","member_id":"102","revision":"1","raft_term":"2"},"version":"3.4.23","leader":102,"isLearner":false,"errors":[]}"#;
        let json: Value = serde_json::from_str(src).unwrap();
        let me = text_of(json.get("header").and_then(|h| h.get("member_id")));
        assert_eq!(me.as_deref(), Some("102"));
        assert_eq!(text_of(json.get("leader")).as_deref(), Some("102"));
        assert_eq!(text_of(json.get("isLearner")), None);
        assert_eq!(text_of(json.get("missing")), None);
        assert_eq!(BASE64.encode("foobar"), "Zm9vYmFy");
        assert_eq!(BASE64.decode("Zm8=").unwrap(), b"fo");
    }
}
