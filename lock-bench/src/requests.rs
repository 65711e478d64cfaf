//! Client requests, as our backends count them: a `metrics` recorder that
//! keeps lock-core's [`lock_core::metrics::REQUESTS`] counter per backend
//! label and drops every other metric. The server counters cannot show what
//! a client sends: Redis counts the commands a script runs as commands too.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

/// The counters, one per `backend` label.
#[derive(Default)]
struct Requests {
    by_backend: Mutex<HashMap<String, Arc<AtomicU64>>>,
}

impl Requests {
    fn counter(&self, backend: &str) -> Arc<AtomicU64> {
        let mut map = self.by_backend.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = map.get(backend) {
            return c.clone();
        }
        map.entry(backend.to_string()).or_default().clone()
    }
}

/// The recorder installed by [`install`].
struct CountRequests(Arc<Requests>);

impl Recorder for CountRequests {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        if key.name() != lock_core::metrics::REQUESTS {
            return Counter::noop();
        }
        match key.labels().find(|l| l.key() == "backend") {
            Some(label) => Counter::from_arc(self.0.counter(label.value())),
            None => Counter::noop(),
        }
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

static INSTALLED: OnceLock<Result<Arc<Requests>, String>> = OnceLock::new();

/// Installs the counting recorder as the process's `metrics` recorder
/// (once; later calls return the first outcome).
pub fn install() -> Result<(), String> {
    INSTALLED
        .get_or_init(|| {
            let requests = Arc::new(Requests::default());
            metrics::set_global_recorder(CountRequests(requests.clone()))
                .map(|()| requests)
                .map_err(|e| format!("cannot install the request counter: {e}"))
        })
        .as_ref()
        .map(|_| ())
        .map_err(Clone::clone)
}

/// Requests the clients of `backend` (its metrics label: `redis`,
/// `redlock`, `etcd`, `zookeeper`) have sent so far; `None` if the counter
/// is not installed.
pub fn sent(backend: &str) -> Option<u64> {
    match INSTALLED.get() {
        Some(Ok(r)) => Some(r.counter(backend).load(Ordering::Relaxed)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_requests_per_backend_and_nothing_else() {
        install().expect("the first recorder of this test process");
        let before = sent("test-backend").unwrap();
        lock_core::metrics::count_request("test-backend", "renew");
        lock_core::metrics::count_request("test-backend", "acquire");
        lock_core::metrics::count_request("other-backend", "renew");
        metrics::counter!(lock_core::metrics::ATTEMPTS, "backend" => "test-backend").increment(5);
        assert_eq!(sent("test-backend").unwrap() - before, 2);
        assert!(install().is_ok(), "a second install is the first's outcome");
    }
}
