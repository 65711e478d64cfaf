//! The servers (started through `lock-testbed`, stopped on drop) and the
//! server-side operation counters used to measure keep-alive traffic.

use std::time::Duration;

use lock_testbed::{Kind, RedisClusterSet, SentinelSet, StartOptions, Started};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::subject::BenchResult;

/// The servers of a run, started through lock-testbed's fixture, by
/// backend: none for a backend that was not needed, `Err` for one whose
/// servers failed to start. Dropping it stops them.
#[derive(Default)]
pub struct Servers {
    started: Vec<(Kind, Result<Started, String>)>,
    /// With Redis: a Sentinel-managed deployment (1 primary, 2 replicas,
    /// 3 sentinels), for the rows of Redis behind Sentinel.
    sentinel: Option<Result<SentinelSet, String>>,
    /// With Redis: a Redis Cluster (3 primaries, 3 replicas), for the row
    /// of Redis Cluster.
    cluster: Option<Result<RedisClusterSet, String>>,
}

/// The members asked of each backend's fixture (lock-testbed's
/// [`Kind::members`] says what each gets: 1 Redis, 5 Redlock nodes, 3 etcd
/// members, 3 ZooKeeper servers).
const MEMBERS: usize = 3;
/// Nodes in the Redlock set.
pub const REDLOCK_NODES: usize = Kind::Redlock.members(MEMBERS);
/// Members of the etcd cluster.
pub const ETCD_MEMBERS: usize = Kind::Etcd.members(MEMBERS);
/// Servers of the ZooKeeper ensemble.
pub const ZK_SERVERS: usize = Kind::Zk.members(MEMBERS);

impl Servers {
    /// Starts the servers of every backend `needed`, in parallel, with their
    /// fixture's default options (blocking: call from a blocking thread).
    pub fn start(needed: &[Kind]) -> Servers {
        std::thread::scope(|s| {
            let sentinel = needed
                .contains(&Kind::Redis)
                .then(|| s.spawn(|| SentinelSet::start().map_err(|e| e.to_string())));
            let cluster = needed
                .contains(&Kind::Redis)
                .then(|| s.spawn(|| RedisClusterSet::start().map_err(|e| e.to_string())));
            let starts: Vec<_> = needed
                .iter()
                .map(|&kind| {
                    let start = s.spawn(move || {
                        kind.start_with(MEMBERS, StartOptions::default())
                            .map_err(|e| e.to_string())
                    });
                    (kind, start)
                })
                .collect();
            let started = starts
                .into_iter()
                .map(|(kind, h)| (kind, joined(h)))
                .collect();
            Servers {
                started,
                sentinel: sentinel.map(joined),
                cluster: cluster.map(joined),
            }
        })
    }

    /// The servers of every backend `needed`, all failed to start for `why`.
    pub fn failed(needed: &[Kind], why: &str) -> Servers {
        Servers {
            started: needed.iter().map(|&k| (k, Err(why.to_string()))).collect(),
            sentinel: needed.contains(&Kind::Redis).then(|| Err(why.to_string())),
            cluster: needed.contains(&Kind::Redis).then(|| Err(why.to_string())),
        }
    }

    /// The Sentinel-managed deployment: `None` if Redis was not needed.
    pub fn sentinel(&self) -> Option<&Result<SentinelSet, String>> {
        self.sentinel.as_ref()
    }

    /// The Redis Cluster: `None` if Redis was not needed.
    pub fn cluster(&self) -> Option<&Result<RedisClusterSet, String>> {
        self.cluster.as_ref()
    }

    /// The servers of `kind`: `None` if they were not needed.
    pub fn get(&self, kind: Kind) -> Option<&Result<Started, String>> {
        self.started
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, r)| r)
    }
}

/// What a start-up thread returned, or why it did not.
fn joined<T>(h: std::thread::ScopedJoinHandle<'_, Result<T, String>>) -> Result<T, String> {
    h.join()
        .unwrap_or_else(|_| Err("the start-up thread panicked".to_string()))
}

/// Where to read the count of operations a server has handled.
#[derive(Clone, Debug)]
pub enum OpsSource {
    /// Redis `INFO stats` `total_commands_processed`, summed over these URLs.
    Redis(Vec<String>),
    /// etcd `/metrics` `grpc_server_msg_received_total` (every unary request and
    /// every stream message, keep-alives included), summed over these members.
    Etcd(Vec<String>),
    /// ZooKeeper `mntr` `zk_packets_received` (requests and pings), summed over
    /// these servers.
    Zk(Vec<String>),
}

impl OpsSource {
    /// What is counted, in words.
    pub fn describe(&self) -> &'static str {
        match self {
            OpsSource::Redis(_) => "Redis INFO total_commands_processed",
            OpsSource::Etcd(_) => "etcd grpc_server_msg_received_total",
            OpsSource::Zk(_) => "ZooKeeper mntr zk_packets_received",
        }
    }

    /// The total now, summed over the nodes.
    pub async fn read(&self) -> BenchResult<u64> {
        let mut total = 0;
        match self {
            OpsSource::Redis(urls) => {
                for url in urls {
                    total += redis_commands(url).await?;
                }
            }
            OpsSource::Etcd(endpoints) => {
                for ep in endpoints {
                    let body = http_get(ep, "/metrics").await?;
                    total += sum_metric(&body, "grpc_server_msg_received_total");
                }
            }
            OpsSource::Zk(endpoints) => {
                for ep in endpoints {
                    let mntr = four_letter_word(ep, "mntr").await?;
                    total += mntr_value(&mntr, "zk_packets_received")
                        .ok_or_else(|| format!("zookeeper {ep}: no zk_packets_received in mntr"))?;
                }
            }
        }
        Ok(total)
    }
}

const IO_TIMEOUT: Duration = Duration::from_secs(5);

async fn redis_commands(url: &str) -> BenchResult<u64> {
    let work = async {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| e.to_string())?;
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query_async(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        info_value(&info, "total_commands_processed")
            .ok_or_else(|| "no total_commands_processed".to_string())
    };
    match tokio::time::timeout(IO_TIMEOUT, work).await {
        Ok(r) => r.map_err(|e| format!("redis {url} INFO stats: {e}")),
        Err(_) => Err(format!("redis {url} INFO stats: timed out")),
    }
}

async fn exchange(addr: &str, request: &[u8]) -> BenchResult<String> {
    let work = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(request).await?;
        let mut buf = Vec::new();
        stream.read_to_end(&mut buf).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&buf).into_owned())
    };
    match tokio::time::timeout(IO_TIMEOUT, work).await {
        Ok(r) => r.map_err(|e| format!("{addr}: {e}")),
        Err(_) => Err(format!("{addr}: timed out")),
    }
}

async fn http_get(addr: &str, path: &str) -> BenchResult<String> {
    let text = exchange(
        addr,
        format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes(),
    )
    .await?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET {path} on {addr}: no HTTP header end"))?;
    let status = head.split_whitespace().nth(1);
    if !head.starts_with("HTTP/1.") || status != Some("200") {
        return Err(format!(
            "GET {path} on {addr}: {}",
            head.lines().next().unwrap_or("no status line")
        ));
    }
    Ok(body.to_string())
}

async fn four_letter_word(addr: &str, word: &str) -> BenchResult<String> {
    exchange(addr, word.as_bytes()).await
}

/// `key:value` from Redis `INFO`.
pub fn info_value(info: &str, key: &str) -> Option<u64> {
    info.lines().find_map(|l| {
        l.trim()
            .strip_prefix(key)?
            .strip_prefix(':')?
            .trim()
            .parse()
            .ok()
    })
}

/// `key<TAB>value` from ZooKeeper `mntr`.
pub fn mntr_value(mntr: &str, key: &str) -> Option<u64> {
    mntr.lines().find_map(|l| {
        let mut parts = l.split_whitespace();
        (parts.next()? == key).then(|| parts.next()?.parse().ok())?
    })
}

/// The sum over every series of a Prometheus counter `name` (all label sets).
pub fn sum_metric(exposition: &str, name: &str) -> u64 {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            if !(rest.starts_with('{') || rest.starts_with(' ')) {
                return None;
            }
            let value = l.rsplit(' ').next()?;
            value.parse::<f64>().ok()
        })
        .sum::<f64>() as u64
}

/// Resident memory of this process in bytes (`/proc/self/statm`), if readable.
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions; it returns -1 on error.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok().filter(|p| *p > 0)?)
}

/// CPU time this process has used so far, all its threads together
/// (`CLOCK_PROCESS_CPUTIME_ID`: the user + system time `/proc/self/stat`
/// reports, to the nanosecond instead of the clock tick). The servers are
/// processes of their own: this is the client's work alone.
pub fn process_cpu() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call has no other
    // preconditions and returns -1 on error.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return None;
    }
    Some(Duration::new(
        u64::try_from(ts.tv_sec).ok()?,
        u32::try_from(ts.tv_nsec).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_cpu_counts_work_done() {
        // Spins until 20 ms of CPU are counted (a busy machine gives this
        // thread less than its wall time), for at most 10 s of wall time.
        let before = process_cpu().unwrap();
        let t0 = std::time::Instant::now();
        let mut x = 0u64;
        let used = loop {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            let used = process_cpu().unwrap() - before;
            if used >= Duration::from_millis(20) || t0.elapsed() > Duration::from_secs(10) {
                break used;
            }
        };
        assert!(used >= Duration::from_millis(20), "{used:?}");
        assert!(
            used <= t0.elapsed() * 2 + Duration::from_millis(10),
            "{used:?}"
        );
    }

    #[test]
    fn member_counts_are_the_bench_s() {
        assert_eq!((REDLOCK_NODES, ETCD_MEMBERS, ZK_SERVERS), (5, 3, 3));
        assert_eq!(Kind::Redis.members(MEMBERS), 1);
    }

    #[test]
    fn parses_counters() {
        let info = "# Stats\r\ntotal_connections_received:3\r\ntotal_commands_processed:1234\r\n";
        assert_eq!(info_value(info, "total_commands_processed"), Some(1234));
        assert_eq!(info_value(info, "missing"), None);
        let mntr = "zk_version\t3.8.0\nzk_packets_received\t77\nzk_packets_sent\t80\n";
        assert_eq!(mntr_value(mntr, "zk_packets_received"), Some(77));
        let prom = "# HELP grpc_server_msg_received_total x\n\
                    grpc_server_msg_received_total{grpc_method=\"Range\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 10\n\
                    grpc_server_msg_received_total{grpc_method=\"LeaseKeepAlive\",grpc_service=\"etcdserverpb.Lease\",grpc_type=\"bidi_stream\"} 5\n\
                    grpc_server_msg_received_totalx 100\n";
        assert_eq!(sum_metric(prom, "grpc_server_msg_received_total"), 15);
    }
}
