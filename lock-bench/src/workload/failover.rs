//! Failover: a leader killed, the next candidate leading. Per round,
//! candidate A (its own client, connected through proxies of its own)
//! campaigns and leads; candidate B (another client, connected straight
//! to the servers) campaigns and waits; then A's proxies are cut (every
//! connection reset, every reconnect refused: a crashed process or a
//! network gone, so no resignation, release, keep-alive or session close
//! reaches the servers) and the time from the cut to B's campaign
//! returning is one sample. A's term then lasts until its lease or session
//! expires on the server, so a failover is bounded below by the TTL.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lock_testbed::Proxy;
use serde::Serialize;

use super::Errors;
use crate::stats::Summary;
use crate::subject::BenchResult;

/// Connects the candidates of one kind of election (ours on a backend, or
/// a peer's), each its own client, as another process would be.
#[async_trait]
pub trait Electorate: Send + Sync {
    /// The servers' client addresses.
    fn servers(&self) -> Vec<SocketAddr>;

    /// A new candidate whose client talks to `servers` (the real ones, or
    /// proxies standing in for them, in the same order) and no other.
    async fn connect(&self, servers: &[SocketAddr]) -> BenchResult<Box<dyn Candidate>>;
}

/// One candidate: a client of its own.
#[async_trait]
pub trait Candidate: Send + Sync {
    /// Campaigns for `name` publishing `value`; returns once it leads.
    async fn campaign(&self, name: &str, value: &str) -> BenchResult<Box<dyn Term>>;
}

/// A term won by a campaign.
#[async_trait]
pub trait Term: Send {
    /// Ends the term cleanly.
    async fn resign(self: Box<Self>) -> BenchResult<()>;
}

/// How many rounds, and their bounds.
#[derive(Clone, Debug)]
pub struct FailoverParams {
    /// Rounds (samples) per subject.
    pub rounds: u32,
    /// How long B campaigns before A is killed, so that it waits in line
    /// (its candidacy on the server) when the kill comes.
    pub settle: Duration,
    /// The longest a campaign may take (A's first, B's after the kill).
    pub wait: Duration,
}

/// The failovers of one subject.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Failover {
    /// Kill to next leader leading, over the rounds that completed.
    pub failover: Option<Summary>,
    /// Rounds that failed, and why.
    pub errors: Errors,
}

/// Runs `params.rounds` rounds of `electorate` on names starting with
/// `prefix`, calling `tick` after each.
pub async fn failover(
    electorate: Arc<dyn Electorate>,
    params: &FailoverParams,
    prefix: &str,
    tick: impl Fn(),
) -> Failover {
    let mut samples = Vec::new();
    let mut errors = Errors::default();
    for round in 0..params.rounds {
        let name = format!("{prefix}-{round}");
        match one_round(electorate.as_ref(), params, &name).await {
            Ok(d) => samples.push(d),
            Err(e) => errors.push(format!("round {round}: {e}")),
        }
        tick();
    }
    Failover {
        failover: Summary::of(&mut samples),
        errors,
    }
}

/// A leader on the far side of proxies of its own, and what to cut.
struct Killable {
    proxies: Vec<Proxy>,
    candidate: Box<dyn Candidate>,
}

impl Killable {
    /// A candidate of `e` connected through a new proxy per server.
    async fn connect(e: &dyn Electorate) -> BenchResult<Self> {
        let proxies = e
            .servers()
            .into_iter()
            .map(|s| Proxy::start(s).map_err(|err| format!("proxy to {s}: {err}")))
            .collect::<BenchResult<Vec<_>>>()?;
        let via: Vec<SocketAddr> = proxies.iter().map(Proxy::addr).collect();
        let candidate = e.connect(&via).await?;
        Ok(Self { proxies, candidate })
    }

    /// Kills it: resets every connection and refuses every new one.
    fn kill(&self) {
        for p in &self.proxies {
            p.cut();
        }
    }

    /// Drops the term, then the client and the proxies off the async
    /// threads (a proxy joins its threads; a Curator participant reaps its
    /// JVM).
    async fn dispose(self, term: Option<Box<dyn Term>>) {
        drop(term);
        let Killable { proxies, candidate } = self;
        let _ = tokio::task::spawn_blocking(move || {
            drop(candidate);
            drop(proxies);
        })
        .await;
    }
}

/// One round: A leads, B waits, A is killed; the time from the kill to B
/// leading.
async fn one_round(e: &dyn Electorate, p: &FailoverParams, name: &str) -> BenchResult<Duration> {
    let a = Killable::connect(e).await?;
    let a_term = match bounded(p.wait, "A's campaign", a.candidate.campaign(name, "a")).await {
        Ok(t) => t,
        Err(err) => {
            a.dispose(None).await;
            return Err(err);
        }
    };
    let result = take_over(e, p, name, &a).await;
    // A's term is dropped only now, behind the cut proxies: whatever its
    // drop sends never reaches the servers.
    a.dispose(Some(a_term)).await;
    result
}

/// B campaigns, A is killed once B waits; the time from the kill to B
/// leading (B then resigns).
async fn take_over(
    e: &dyn Electorate,
    p: &FailoverParams,
    name: &str,
    a: &Killable,
) -> BenchResult<Duration> {
    let b = e.connect(&e.servers()).await?;
    let b_name = name.to_string();
    let mut b_campaign = tokio::spawn(async move {
        let term = b.campaign(&b_name, "b").await;
        (term, Instant::now(), b)
    });
    tokio::time::sleep(p.settle).await;
    if b_campaign.is_finished() {
        return Err("B led while A still led (or B's campaign failed at once)".into());
    }
    a.kill();
    let killed = Instant::now();
    let joined = match tokio::time::timeout(p.wait, &mut b_campaign).await {
        Ok(joined) => joined,
        Err(_) => {
            b_campaign.abort();
            return Err(format!("B did not lead within {:?} of the kill", p.wait));
        }
    };
    let (term, led, b) = joined.map_err(|err| format!("B's campaign task: {err}"))?;
    let took = led.saturating_duration_since(killed);
    let resigned = match term {
        Ok(term) => bounded(p.wait, "B's resignation", term.resign()).await,
        Err(e) => Err(e),
    };
    // Off the async threads, as A's (a Curator participant reaps its JVM).
    let _ = tokio::task::spawn_blocking(move || drop(b)).await;
    resigned.map(|()| took)
}

/// `fut` within `wait`, or an error naming `what`.
async fn bounded<T>(
    wait: Duration,
    what: &str,
    fut: impl std::future::Future<Output = BenchResult<T>>,
) -> BenchResult<T> {
    tokio::time::timeout(wait, fut)
        .await
        .map_err(|_| format!("{what} took over {wait:?}"))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::watch;

    /// An in-process election whose leader dies when its proxies stop
    /// forwarding: the leader's "server" is a flag it holds, and a waiter
    /// leads once no connection of the leader is open.
    struct Fake {
        addr: SocketAddr,
        _listener: std::net::TcpListener,
        leading: watch::Sender<Option<Arc<tokio::net::TcpStream>>>,
        ttl: Duration,
        connects: AtomicUsize,
    }

    impl Fake {
        fn new(ttl: Duration) -> Arc<Self> {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            Arc::new(Self {
                addr: listener.local_addr().unwrap(),
                _listener: listener,
                leading: watch::channel(None).0,
                ttl,
                connects: AtomicUsize::new(0),
            })
        }
    }

    struct FakeCandidate {
        fake: Arc<Fake>,
        stream: Arc<tokio::net::TcpStream>,
    }

    struct FakeTerm(Arc<Fake>);

    #[async_trait]
    impl Electorate for Arc<Fake> {
        fn servers(&self) -> Vec<SocketAddr> {
            vec![self.addr]
        }

        async fn connect(&self, servers: &[SocketAddr]) -> BenchResult<Box<dyn Candidate>> {
            self.connects.fetch_add(1, Ordering::SeqCst);
            let stream = tokio::net::TcpStream::connect(servers[0])
                .await
                .map_err(|e| e.to_string())?;
            Ok(Box::new(FakeCandidate {
                fake: self.clone(),
                stream: Arc::new(stream),
            }))
        }
    }

    #[async_trait]
    impl Candidate for FakeCandidate {
        async fn campaign(&self, _name: &str, _value: &str) -> BenchResult<Box<dyn Term>> {
            let mut rx = self.fake.leading.subscribe();
            loop {
                let free = match rx.borrow_and_update().as_ref() {
                    None => true,
                    Some(leader) => dead(leader),
                };
                if free {
                    self.fake.leading.send_replace(Some(self.stream.clone()));
                    return Ok(Box::new(FakeTerm(self.fake.clone())));
                }
                // A lease: the server notices a dead leader within a TTL.
                let _ = tokio::time::timeout(self.fake.ttl, rx.changed()).await;
            }
        }
    }

    /// Whether the leader's connection was reset or closed.
    fn dead(s: &tokio::net::TcpStream) -> bool {
        let mut buf = [0u8; 1];
        match s.try_read(&mut buf) {
            Ok(n) => n == 0,
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        }
    }

    #[async_trait]
    impl Term for FakeTerm {
        async fn resign(self: Box<Self>) -> BenchResult<()> {
            self.0.leading.send_replace(None);
            Ok(())
        }
    }

    #[test]
    fn a_round_times_the_kill_to_the_next_leader() {
        // The fake's "server" is a bare listener that never accepts: the
        // proxy's connection to it stays open, so the fake judges the
        // leader by its own end of the proxy connection, which the cut
        // resets.
        let rt = tokio::runtime::Runtime::new().unwrap();
        let fake = Fake::new(Duration::from_millis(100));
        let params = FailoverParams {
            rounds: 2,
            settle: Duration::from_millis(50),
            wait: Duration::from_secs(5),
        };
        let ticks = AtomicUsize::new(0);
        let e: Arc<dyn Electorate> = Arc::new(fake.clone());
        let out = rt.block_on(failover(e, &params, "t", || {
            ticks.fetch_add(1, Ordering::SeqCst);
        }));
        assert_eq!(ticks.load(Ordering::SeqCst), 2);
        assert_eq!(fake.connects.load(Ordering::SeqCst), 4, "A and B per round");
        let s = out.failover.unwrap_or_else(|| panic!("{:?}", out.errors));
        assert_eq!(s.n, 2, "{:?}", out.errors);
        assert!(out.errors.is_empty());
        assert!(s.max_ms < 2_000.0, "{s:?}");
    }
}
