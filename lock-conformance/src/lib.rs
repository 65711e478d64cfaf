//! # lock-conformance: the one behaviour suite every distlock backend passes
//!
//! A backend runs the suite from its own `tests/conformance.rs` (declared with
//! `harness = false`) in a few lines:
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use lock_conformance::{Harness, async_trait};
//! use lock_core::{Capabilities, DistributedLock, Fencing, LockError, LockName, LockService, MemoryLock};
//!
//! struct Mem(MemoryLock);
//!
//! #[async_trait]
//! impl Harness for Mem {
//!     async fn client(&self) -> Arc<dyn LockService> { Arc::new(self.0.clone()) }
//!     fn ttl(&self) -> Duration { Duration::from_millis(300) }
//!     async fn remove_behind_back(&self, name: &LockName) { self.0.force_release(name).await.unwrap(); }
//!     async fn leftovers(&self, _name: &LockName) -> Vec<String> { Vec::new() }
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     let expected = Capabilities::new("memory").with_fencing(Fencing::InProcess); // ...
//!     lock_conformance::run(|| async { Mem(MemoryLock::new()) }, expected)
//! }
//! ```
//!
//! Every case is its own named test in `cargo test` output. Cases that need a
//! capability (fencing, FIFO, a remote server) are selected by the backend's
//! [`Capabilities`]; the test `capabilities_as_declared` asserts that the
//! backend reports exactly the capabilities its test file declares, so no case
//! is dropped by under-reporting.
//!
//! The real-server testbed is re-exported as [`testbed`].
#![deny(missing_docs)]

use std::future::Future;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use libtest_mimic::{Arguments, Failed, Trial};
use lock_core::{Capabilities, LockError, LockName, LockService};

pub use async_trait::async_trait;
pub use lock_testbed as testbed;

mod cases;
pub mod many;
mod memory;
pub mod model;

pub use memory::MemoryHarness;

pub use cases::CASES;

/// What a backend gives the suite: clients, timing, and the faults it can
/// cause from outside.
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    /// A new, independent client of the backend (its own connection or
    /// session), as another process would have. Panics if it cannot connect.
    async fn client(&self) -> Arc<dyn LockService>;

    /// The base lease TTL the cases use: short to keep the suite fast, long
    /// enough for the backend (etcd leases are whole seconds; ZooKeeper's is
    /// the session timeout).
    fn ttl(&self) -> Duration;

    /// Extra time allowed on top of every bound the cases check.
    fn slack(&self) -> Duration {
        Duration::from_millis(1500)
    }

    /// Removes the lock `name` behind its holder's back, as an operator
    /// deleting the key (Redis `DEL`, etcd delete of the contender keys,
    /// ZooKeeper delete of the holder's node) would.
    async fn remove_behind_back(&self, name: &LockName);

    /// What is left on the server for `name` (keys, contender keys, nodes) of
    /// every kind of lock (mutex, read-write lock, semaphore), excluding what
    /// is meant to persist (the fencing counter). Empty when clean.
    async fn leftovers(&self, name: &LockName) -> Vec<String>;

    /// The server addresses a client connects to, in the order
    /// [`client_at`](Harness::client_at) takes replacements for them, so a
    /// case can put a fault [`testbed::Proxy`] in front of each. Only called
    /// when [`Capabilities::remote`] is set.
    fn upstreams(&self) -> Vec<SocketAddr> {
        Vec::new()
    }

    /// A client that connects to `addrs` (one per [`upstreams`](Harness::upstreams)
    /// entry, e.g. the proxies in front of them) with its connect timeout and
    /// every request timeout set to `timeout`. The error of the connect is
    /// returned, not a panic: a case may connect through a proxy that does
    /// not answer. Only called when [`Capabilities::remote`] is set.
    async fn client_at(
        &self,
        addrs: &[SocketAddr],
        timeout: Duration,
    ) -> Result<Arc<dyn LockService>, LockError> {
        let _ = (addrs, timeout);
        unreachable!("client_at is only called for remote backends")
    }

    /// How many random operation sequences the model-based case runs.
    fn model_cases(&self) -> u32 {
        12
    }
}

/// How long connecting through healthy proxies may take in all
/// ([`testbed::SET_UP_CONNECT`]): the cases that connect through proxies
/// give the client a short request timeout, which is what they test; the
/// connect itself is set-up, tried again after a retryable failure.
pub const HEALTHY_CONNECT: Duration = testbed::SET_UP_CONNECT;

/// Fault proxies in front of every upstream of `h`, and a client that talks
/// through them with `timeout` (see [`Harness::client_at`]), connected
/// while the proxies pass everything (tried again within
/// [`HEALTHY_CONNECT`]). The proxies must outlive the client.
pub async fn client_through_proxies(
    h: &dyn Harness,
    timeout: Duration,
) -> (Vec<testbed::Proxy>, Result<Arc<dyn LockService>, LockError>) {
    let proxies: Vec<testbed::Proxy> = h
        .upstreams()
        .into_iter()
        .map(|up| testbed::Proxy::start(up).unwrap_or_else(|e| panic!("proxy to {up}: {e}")))
        .collect();
    assert!(!proxies.is_empty(), "a remote harness names its upstreams");
    let addrs: Vec<SocketAddr> = proxies.iter().map(testbed::Proxy::addr).collect();
    let client = testbed::retry_set_up(
        "connect through healthy proxies",
        LockError::is_retryable,
        || h.client_at(&addrs, timeout),
    )
    .await;
    (proxies, client)
}

/// Any duration, from zero to `Duration::MAX`, with the edges and everyday
/// values well represented: for the property tests that prove no
/// configuration can make a backend panic.
pub fn any_duration() -> impl proptest::strategy::Strategy<Value = Duration> {
    use proptest::prelude::*;
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        (0u64..=u64::MAX, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        (0u64..5_000).prop_map(Duration::from_millis),
    ]
}

/// A loopback address where nothing listens (a port bound and released):
/// connecting there is refused at once.
pub fn closed_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], testbed::free_port()))
}

/// A lock name unique to this process and call, for one case.
pub fn unique_name(case: &str) -> LockName {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    LockName::new(format!("conformance-{case}-{}-{n}", std::process::id()))
        .expect("generated names are valid")
}

/// One case of the suite.
pub struct Case {
    /// The test name.
    pub name: &'static str,
    /// Whether a backend with these capabilities must pass it.
    pub applies: fn(&Capabilities) -> bool,
    /// The case itself.
    pub run: fn(Arc<dyn Harness>) -> BoxFuture<'static, ()>,
}

/// Cases that apply to a backend with `caps`, and those that do not.
pub fn select(caps: &Capabilities) -> (Vec<&'static Case>, Vec<&'static Case>) {
    CASES.iter().partition(|c| (c.applies)(caps))
}

/// Builds the harness with `make`, checks the backend's capabilities against
/// `expected`, runs every applicable case as its own test, drops the harness
/// (stopping its servers) and returns the exit code. Accepts the usual
/// `cargo test` arguments (filters, `--list`, `--test-threads`).
pub fn run<H, F, Fut>(make: F, expected: Capabilities) -> ExitCode
where
    H: Harness,
    F: FnOnce() -> Fut,
    Fut: Future<Output = H>,
{
    let _ = tracing_subscriber_init();
    let mut args = Arguments::from_args();
    if args.test_threads.is_none() {
        // Most cases sleep on timers; a few more threads than cores keep the suite short.
        args.test_threads = Some(4);
    }
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .expect("tokio runtime"),
    );
    let harness: Arc<dyn Harness> = Arc::new(rt.block_on(make()));
    let caps = rt.block_on(async { harness.client().await.capabilities() });
    let (applicable, deselected) = select(&expected);

    let mut trials = Vec::new();
    {
        let caps = caps.clone();
        let expected = expected.clone();
        let deselected: Vec<&'static str> = deselected.iter().map(|c| c.name).collect();
        trials.push(Trial::test("capabilities_as_declared", move || {
            if caps != expected {
                return Err(Failed::from(format!(
                    "the backend reports {caps:#?}\nbut its conformance test declares {expected:#?}"
                )));
            }
            println!("deselected by capability: {deselected:?}");
            Ok(())
        }));
    }
    for case in applicable {
        let h = harness.clone();
        let rt = rt.clone();
        trials.push(Trial::test(case.name, move || run_case(&rt, case, h)));
    }
    let conclusion = libtest_mimic::run(&args, trials);
    drop(harness);
    if let Ok(rt) = Arc::try_unwrap(rt) {
        rt.shutdown_timeout(Duration::from_secs(5));
    }
    conclusion.exit_code()
}

/// The longest any one case may run before it counts as hung.
pub const CASE_TIMEOUT: Duration = Duration::from_secs(120);

fn run_case(
    rt: &tokio::runtime::Runtime,
    case: &'static Case,
    h: Arc<dyn Harness>,
) -> Result<(), Failed> {
    let task = rt.spawn(async move { tokio::time::timeout(CASE_TIMEOUT, (case.run)(h)).await });
    match rt.block_on(task) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(Failed::from(format!(
            "{} hung for more than {CASE_TIMEOUT:?}",
            case.name
        ))),
        Err(join) => match join.try_into_panic() {
            Ok(panic) => Err(Failed::from(panic_message(&panic))),
            Err(e) => Err(Failed::from(format!("case task failed: {e}"))),
        },
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

fn tracing_subscriber_init() -> Option<()> {
    // Tests print warnings from the library when RUST_LOG asks for them.
    std::env::var_os("RUST_LOG")?;
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init()
        .ok()
}
