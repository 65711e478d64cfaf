//! A fault-injecting TCP proxy, on a thread of its own with its own tokio runtime.

use std::collections::VecDeque;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::pubsub::{holds_subscribe, is_message, Frames};
use crate::util::reserve_port;
use crate::TestbedError;

const PASS: u8 = 0;
const BLACKHOLE: u8 = 1;
const CUT: u8 = 2;
/// Client bytes are swallowed; replies still pass (one-way blackhole in).
const DROP_REQUESTS: u8 = 3;
/// Client bytes reach the server; its replies are swallowed (one-way
/// blackhole out: the server applies what it never answers).
const DROP_REPLIES: u8 = 4;

/// Whether a proxy in `mode` forwards what clients send.
fn forwards_requests(mode: u8) -> bool {
    matches!(mode, PASS | DROP_REPLIES)
}

/// Whether a proxy in `mode` forwards what the server answers.
fn forwards_replies(mode: u8) -> bool {
    matches!(mode, PASS | DROP_REQUESTS)
}

const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

struct Control {
    mode: AtomicU8,
    latency_ns: AtomicU64,
    reply_delay_ns: AtomicU64,
    /// Extra delay of replies on connections that sent a subscribe command.
    subscriber_delay_ns: AtomicU64,
    /// When non-zero, every pub/sub message is delivered a second time this
    /// long after the first.
    replay_after_ns: AtomicU64,
    open: AtomicUsize,
    /// When the upstream last sent anything, in ns after `born` (0: never).
    last_reply_ns: AtomicU64,
    born: std::time::Instant,
    /// Bumped to reset every connection open at that moment.
    kill_gen: watch::Sender<u64>,
    /// Bumped by [`Proxy::heal`]: connections that swallowed bytes are
    /// reset then.
    heal_gen: watch::Sender<u64>,
}

impl Control {
    fn mode(&self) -> u8 {
        self.mode.load(Ordering::SeqCst)
    }

    fn latency(&self) -> Duration {
        Duration::from_nanos(self.latency_ns.load(Ordering::SeqCst))
    }

    fn reply_delay(&self) -> Duration {
        Duration::from_nanos(self.reply_delay_ns.load(Ordering::SeqCst))
    }

    fn subscriber_delay(&self) -> Duration {
        Duration::from_nanos(self.subscriber_delay_ns.load(Ordering::SeqCst))
    }

    fn replay_after(&self) -> Duration {
        Duration::from_nanos(self.replay_after_ns.load(Ordering::SeqCst))
    }

    fn saw_reply(&self) {
        let ns = duration_ns(self.born.elapsed()).max(1);
        self.last_reply_ns.store(ns, Ordering::SeqCst);
    }

    fn reset_open(&self) {
        self.kill_gen.send_modify(|g| *g += 1);
    }
}

/// A TCP proxy from `127.0.0.1:<random port>` to one upstream address, with faults.
///
/// Put one in front of a node and give the client [`addr`](Self::addr) instead of the
/// node's. Several proxies are independent, so different clients can see different
/// subsets of nodes cut, slowed or blackholed. The proxy runs on its own thread with
/// its own tokio runtime, so it works from any test runtime or none.
///
/// If the upstream refuses the connection, the client's connection is reset.
/// Dropping the proxy stops its thread and closes every connection.
///
/// A connection never carries on past a gap: TCP delivers a byte stream whole
/// and in order, or the connection breaks. So a connection through which a
/// blackhole or a one-way drop swallowed any bytes is reset when the proxy
/// heals (as a real connection breaks when its peer's timeout gives up on
/// it), and one that lost nothing goes on. Resuming a stream with bytes
/// missing would feed servers and clients a fault no network produces: a
/// ZooKeeper follower that reads on past proposals it never saw diverges
/// from its leader, and a client that reads on past a lost reply takes the
/// next reply for the answer to the request it gave up on.
pub struct Proxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    control: Arc<Control>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .field("upstream", &self.upstream)
            .field("mode", &self.control.mode())
            .field("connections", &self.connections())
            .finish()
    }
}

impl Proxy {
    /// Listen on a free loopback port and forward every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> Result<Proxy, TestbedError> {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| TestbedError::io("proxy: binding 127.0.0.1:0", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| TestbedError::io("proxy: set_nonblocking", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| TestbedError::io("proxy: local_addr", e))?;
        reserve_port(addr.port());
        let (kill_gen, _) = watch::channel(0u64);
        let (heal_gen, _) = watch::channel(0u64);
        let control = Arc::new(Control {
            mode: AtomicU8::new(PASS),
            latency_ns: AtomicU64::new(0),
            reply_delay_ns: AtomicU64::new(0),
            subscriber_delay_ns: AtomicU64::new(0),
            replay_after_ns: AtomicU64::new(0),
            open: AtomicUsize::new(0),
            last_reply_ns: AtomicU64::new(0),
            born: std::time::Instant::now(),
            kill_gen,
            heal_gen,
        });
        let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), TestbedError>>();
        let ctl = control.clone();
        let thread = std::thread::Builder::new()
            .name(format!("lock-testbed-proxy-{}", addr.port()))
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(TestbedError::io("proxy: tokio runtime", e)));
                        return;
                    }
                };
                rt.block_on(async move {
                    let listener = match TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = ready_tx.send(Err(TestbedError::io("proxy: listener", e)));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    accept_loop(listener, upstream, ctl, shutdown_rx).await;
                });
                // Dropping the runtime here cancels every connection task: sockets close.
            })
            .map_err(|e| TestbedError::io("proxy: spawning its thread", e))?;
        let ready = ready_rx.recv().unwrap_or_else(|_| {
            Err(TestbedError::protocol(
                "proxy: starting its thread",
                "the thread ended",
            ))
        });
        let proxy = Proxy {
            addr,
            upstream,
            control,
            shutdown: Some(shutdown_tx),
            thread: Some(thread),
        };
        ready.map(|()| proxy)
    }

    /// The address clients connect to: `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address it forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// `redis://127.0.0.1:<port>/`, for a proxy in front of a Redis.
    pub fn redis_url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// Delay every chunk in both directions by `d` (order is preserved), so a round
    /// trip takes at least `2 * d` more. Applies to chunks read from now on.
    pub fn set_latency(&self, d: Duration) {
        self.control
            .latency_ns
            .store(duration_ns(d), Ordering::SeqCst);
    }

    /// Delay only upstream-to-client chunks by `d` (hold replies for a while): the
    /// request reaches the server at once, the client sees the answer `d` later.
    pub fn set_reply_delay(&self, d: Duration) {
        self.control
            .reply_delay_ns
            .store(duration_ns(d), Ordering::SeqCst);
    }

    /// Delay upstream-to-client chunks by `d` more, only on connections whose
    /// client sent a Redis subscribe command (`SUBSCRIBE`, `PSUBSCRIBE`,
    /// `SSUBSCRIBE`): pub/sub messages arrive late while requests on other
    /// connections are answered at once. Applies to chunks read from now on.
    pub fn set_subscriber_delay(&self, d: Duration) {
        self.control
            .subscriber_delay_ns
            .store(duration_ns(d), Ordering::SeqCst);
    }

    /// On connections whose client sent a Redis subscribe command, deliver
    /// every pub/sub message (`message`, `pmessage`, `smessage`) a second
    /// time, `d` after the first: a message delivered twice, the copy late.
    /// Frames are never cut: copies go between whole frames. Applies to
    /// messages read from now on; [`heal`](Self::heal) stops it (copies
    /// already due are still delivered).
    pub fn replay_messages(&self, d: Duration) {
        self.control
            .replay_after_ns
            .store(duration_ns(d), Ordering::SeqCst);
    }

    /// Open and new connections: client bytes are swallowed, replies (already
    /// in flight or new) still pass; connects succeed. A one-way partition:
    /// requests never reach the server. [`heal`](Self::heal) ends it and
    /// resets every connection that lost a request.
    pub fn drop_requests(&self) {
        self.control.mode.store(DROP_REQUESTS, Ordering::SeqCst);
    }

    /// Open and new connections: client bytes reach the server, which applies
    /// them, but every reply (also those in flight) is swallowed: a reply
    /// lost after the server applied the request. [`heal`](Self::heal) ends it
    /// and resets every connection that lost a reply.
    pub fn drop_replies(&self) {
        self.control.mode.store(DROP_REPLIES, Ordering::SeqCst);
    }

    /// Open and new connections: client bytes are swallowed, nothing is forwarded and
    /// nothing answered (also replies already in flight); connects still succeed. A
    /// client sees timeouts. [`heal`](Self::heal) resets the connections that lost
    /// bytes; those that sent and received nothing meanwhile work again.
    pub fn blackhole(&self) {
        self.control.mode.store(BLACKHOLE, Ordering::SeqCst);
    }

    /// Reset (RST, `SO_LINGER` 0) every connection open now, on both sides; new
    /// connections work as before.
    pub fn reset_all(&self) {
        self.control.reset_open();
    }

    /// Reset every open connection and reset each new one at once, until [`heal`](Self::heal).
    pub fn cut(&self) {
        self.control.mode.store(CUT, Ordering::SeqCst);
        self.control.reset_open();
    }

    /// Back to plain pass-through with zero latency, reply delay and
    /// subscriber delay, and no replayed messages. Connections that lost
    /// bytes to a blackhole or a one-way drop are reset.
    pub fn heal(&self) {
        self.control.replay_after_ns.store(0, Ordering::SeqCst);
        self.control.latency_ns.store(0, Ordering::SeqCst);
        self.control.reply_delay_ns.store(0, Ordering::SeqCst);
        self.control.subscriber_delay_ns.store(0, Ordering::SeqCst);
        self.control.mode.store(PASS, Ordering::SeqCst);
        self.control.heal_gen.send_modify(|g| *g += 1);
    }

    /// When the upstream last sent anything on any connection (whether or
    /// not the proxy passed it on), or `None` if it never did. On a quiet
    /// link this shows when the server speaks of its own accord, e.g. a
    /// ZooKeeper leader's pings to a follower.
    pub fn last_reply_at(&self) -> Option<std::time::Instant> {
        match self.control.last_reply_ns.load(Ordering::SeqCst) {
            0 => None,
            ns => Some(self.control.born + Duration::from_nanos(ns)),
        }
    }

    /// Client connections open now (a connection reset a moment ago may still count
    /// for a millisecond or so).
    pub fn connections(&self) -> usize {
        self.control.open.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Resets both sides of a proxied connection.
fn reset_both(client: TcpStream, upstream: Option<TcpStream>) {
    reset(client);
    if let Some(u) = upstream {
        reset(u);
    }
}

/// Close `stream` with RST instead of FIN.
fn reset(stream: TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a valid, open fd with a correctly sized linger struct.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(stream);
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    control: Arc<Control>,
    mut shutdown: tokio::sync::oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    if control.mode() == CUT {
                        reset(client);
                        continue;
                    }
                    let _ = client.set_nodelay(true);
                    let kill = control.kill_gen.subscribe();
                    let healed = control.heal_gen.subscribe();
                    control.open.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(serve(client, upstream, control.clone(), kill, healed));
                }
                Err(e) => {
                    tracing::debug!(error = %e, "lock-testbed proxy: accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
}

struct OpenGuard(Arc<Control>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn connect_upstream(upstream: SocketAddr) -> Option<TcpStream> {
    match tokio::time::timeout(UPSTREAM_CONNECT_TIMEOUT, TcpStream::connect(upstream)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Some(s)
        }
        _ => None,
    }
}

async fn read_some(stream: &mut Option<TcpStream>, buf: &mut [u8]) -> std::io::Result<usize> {
    match stream {
        Some(s) => s.read(buf).await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Write `data`, unless a reset comes first. Ok(false) = killed.
async fn write_or_kill(
    stream: &mut TcpStream,
    data: &[u8],
    kill: &mut watch::Receiver<u64>,
) -> std::io::Result<bool> {
    tokio::select! {
        r = stream.write_all(data) => r.map(|()| true),
        _ = kill.changed() => Ok(false),
    }
}

async fn serve(
    client: TcpStream,
    upstream_addr: SocketAddr,
    control: Arc<Control>,
    mut kill: watch::Receiver<u64>,
    mut healed: watch::Receiver<u64>,
) {
    let _guard = OpenGuard(control.clone());
    kill.borrow_and_update();
    healed.borrow_and_update();
    // Whether bytes were swallowed in either direction: the connection is
    // broken from then on, reset at the next heal (see `Proxy`).
    let mut lost = false;
    let mut client = client;
    let mut upstream: Option<TcpStream> = None;
    let mut subscriber = false;
    if forwards_requests(control.mode()) {
        match connect_upstream(upstream_addr).await {
            Some(s) => upstream = Some(s),
            None => return reset(client),
        }
    }
    let mut to_upstream: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut to_client: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    // Second copies of pub/sub messages (see `Proxy::replay_messages`).
    let mut replays: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    // On a subscriber connection, what the server sends is queued in whole
    // frames, so that a copy never lands inside another frame.
    let mut frames = Frames::default();
    let (mut client_eof, mut upstream_eof) = (false, false);
    // The client reset its connection: what it sent before is still on its
    // way (delayed chunks reach the server, as bytes on the wire arrive
    // before the reset behind them); then the upstream side is reset too.
    let mut client_gone = false;
    let (mut upstream_shut, mut client_shut) = (false, false);
    let mut cbuf = vec![0u8; 16 * 1024];
    let mut ubuf = vec![0u8; 16 * 1024];
    loop {
        if lost && control.mode() == PASS {
            // Healed (the wake-up below may not have been seen yet).
            reset_both(client, upstream);
            return;
        }
        let up_due = to_upstream.front().map(|c| c.0);
        let client_due = to_client.front().map(|c| c.0);
        let replay_due = replays.front().map(|c| c.0);
        tokio::select! {
            _ = kill.changed() => {
                reset_both(client, upstream);
                return;
            }
            _ = healed.changed() => {
                if lost {
                    reset_both(client, upstream);
                    return;
                }
            }
            r = client.read(&mut cbuf), if !client_eof && !client_gone => match r {
                Ok(0) => client_eof = true,
                Ok(n) => match control.mode() {
                    PASS | DROP_REPLIES => {
                        subscriber = subscriber || holds_subscribe(&cbuf[..n]);
                        if upstream.is_none() {
                            match connect_upstream(upstream_addr).await {
                                Some(s) => upstream = Some(s),
                                None => return reset(client),
                            }
                        }
                        let due = Instant::now() + control.latency();
                        to_upstream.push_back((due, cbuf[..n].to_vec()));
                    }
                    BLACKHOLE | DROP_REQUESTS => lost = true,
                    _ => {
                        reset_both(client, upstream);
                        return;
                    }
                },
                Err(_) => {
                    client_gone = true;
                    to_client.clear();
                    replays.clear();
                }
            },
            r = read_some(&mut upstream, &mut ubuf), if !upstream_eof => match r {
                Ok(0) => upstream_eof = true,
                Ok(_) if client_gone => control.saw_reply(),
                Ok(n) => {
                    control.saw_reply();
                    if !forwards_replies(control.mode()) {
                        lost = true;
                    } else {
                        let now = Instant::now();
                        let mut due = now + control.latency() + control.reply_delay();
                        if !subscriber {
                            to_client.push_back((due, ubuf[..n].to_vec()));
                        } else {
                            due += control.subscriber_delay();
                            let replay = control.replay_after();
                            for frame in frames.push(&ubuf[..n]) {
                                if !replay.is_zero() && is_message(&frame) {
                                    replays.push_back((due + replay, frame.clone()));
                                }
                                to_client.push_back((due, frame));
                            }
                        }
                    }
                }
                Err(_) => return reset(client),
            },
            _ = sleep_until_opt(up_due) => {
                if let Some((_, data)) = to_upstream.pop_front() {
                    if !forwards_requests(control.mode()) {
                        lost = true;
                    } else {
                        if let Some(u) = upstream.as_mut() {
                            match write_or_kill(u, &data, &mut kill).await {
                                Ok(true) => {}
                                Ok(false) | Err(_) => {
                                    reset_both(client, upstream);
                                    return;
                                }
                            }
                        }
                    }
                }
            }
            _ = sleep_until_opt(replay_due) => {
                if let Some((_, data)) = replays.pop_front() {
                    if !forwards_replies(control.mode()) {
                        lost = true;
                    } else {
                        match write_or_kill(&mut client, &data, &mut kill).await {
                            Ok(true) => {}
                            Ok(false) | Err(_) => {
                                reset_both(client, upstream);
                                return;
                            }
                        }
                    }
                }
            }
            _ = sleep_until_opt(client_due) => {
                if let Some((_, data)) = to_client.pop_front() {
                    if !forwards_replies(control.mode()) {
                        lost = true;
                    } else {
                        match write_or_kill(&mut client, &data, &mut kill).await {
                            Ok(true) => {}
                            Ok(false) | Err(_) => {
                                reset_both(client, upstream);
                                return;
                            }
                        }
                    }
                }
            }
        }
        if client_gone && to_upstream.is_empty() {
            if let Some(u) = upstream {
                reset(u);
            }
            return;
        }
        // Propagate half-closes once everything queued in that direction is written.
        if client_eof && to_upstream.is_empty() && !upstream_shut {
            if let Some(u) = upstream.as_mut() {
                let _ = u.shutdown().await;
            }
            upstream_shut = true;
        }
        if upstream_eof && to_client.is_empty() && !client_shut {
            let _ = client.shutdown().await;
            client_shut = true;
        }
        let upstream_done = upstream.is_none() || upstream_eof;
        if client_eof && upstream_done && to_upstream.is_empty() && to_client.is_empty() {
            return;
        }
    }
}
