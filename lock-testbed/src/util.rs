//! Ports and names.

use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
static NAME_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A free loopback port never handed out before in this process.
///
/// The port is found by binding `127.0.0.1:0`; the listener is closed again before
/// returning, so another process could in principle take it before the server binds
/// it. Server start-up retries on a new port when the log says "address already in use".
///
/// # Panics
///
/// Panics only if the OS refuses to bind any loopback port 1000 times in a row.
pub fn free_port() -> u16 {
    for _ in 0..1000 {
        let Ok(listener) = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)) else {
            continue;
        };
        let Ok(addr) = listener.local_addr() else {
            continue;
        };
        if reserve_port(addr.port()) {
            return addr.port();
        }
    }
    panic!("lock-testbed: could not find a free loopback port after 1000 tries");
}

/// Mark `port` as handed out; false if it already was.
pub(crate) fn reserve_port(port: u16) -> bool {
    let mut guard = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
    guard.get_or_insert_with(HashSet::new).insert(port)
}

/// `127.0.0.1:port`.
pub(crate) fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// Calls `probe` every `every` until it returns `Ok` or `deadline` has passed,
/// and returns its last answer (the last `Err` says what was still missing).
pub(crate) fn poll_until<T>(
    deadline: Instant,
    every: Duration,
    mut probe: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    loop {
        let answer = probe();
        if answer.is_ok() || Instant::now() >= deadline {
            return answer;
        }
        std::thread::sleep(every);
    }
}

/// A name unique to this call: `prefix-<pid>-<counter>-<random>`.
///
/// Safe as a lock name, Redis key, etcd key or znode name: only `[A-Za-z0-9_-]`
/// (other characters of `prefix` are replaced by `_`). Unique across processes too, so
/// tests sharing one server never collide.
pub fn unique_name(prefix: &str) -> String {
    let clean: String = prefix
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let n = NAME_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(n);
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    let random = hasher.finish() as u32;
    format!("{clean}-{}-{n}-{random:08x}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_names_are_unique_and_clean() {
        let a = unique_name("lock/a b");
        let b = unique_name("lock/a b");
        assert_ne!(a, b);
        assert!(a.starts_with("lock_a_b-"));
        assert!(a
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
    }

    #[test]
    fn free_ports_are_never_repeated() {
        let ports: Vec<u16> = (0..200).map(|_| free_port()).collect();
        let set: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(set.len(), ports.len());
        assert!(!reserve_port(ports[0]));
    }
}
