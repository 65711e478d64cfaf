//! The eviction policy of each node at connect, on real servers: a node
//! that may evict lock keys (`maxmemory-policy volatile-ttl`) is warned of
//! by name, or refused with `require_noeviction`; nodes with `noeviction`
//! pass.

use std::sync::{Arc, Mutex};

use lock_core::LockErrorKind;
use lock_redlock::{RedlockConfig, RedlockLock};
use lock_testbed::{RedisOptions, RedisServer, RedisSet};
use tracing::{field, span, Event, Level, Metadata, Subscriber};

/// Every event logged while it is the thread's default subscriber: its
/// level and its fields (the message included) as text.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<(Level, String)>>>);

impl Capture {
    fn at(&self, level: Level) -> Vec<String> {
        let events = self.0.lock().unwrap();
        events
            .iter()
            .filter(|(l, _)| *l == level)
            .map(|(_, text)| text.clone())
            .collect()
    }

    fn all(&self) -> String {
        let events = self.0.lock().unwrap();
        events
            .iter()
            .map(|(_, t)| t.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

struct Fields(String);

impl field::Visit for Fields {
    fn record_debug(&mut self, field: &field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }
    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), fields.0));
    }
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}

/// Four `noeviction` nodes and one `volatile-ttl` node: `connect` works and
/// warns once, naming that node and its policy; with `require_noeviction`
/// it is a non-retryable `InvalidArgument` naming them. Five `noeviction`
/// nodes pass the requirement with no warning.
#[tokio::test]
async fn a_node_that_may_evict_lock_keys_is_warned_of_or_refused() {
    let capture = Capture::default();
    let _default = tracing::subscriber::set_default(capture.clone());
    let safe = RedisSet::start(5).unwrap_or_else(|e| panic!("five Redis servers: {e}"));
    let evicting = RedisServer::start_with(RedisOptions {
        maxmemory_policy: Some("volatile-ttl"),
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("redis-server: {e}"));
    let mut urls = safe.urls()[..4].to_vec();
    urls.push(evicting.url());
    let bad = evicting.addr().to_string();

    let lock = RedlockLock::connect(RedlockConfig::new(urls.clone()))
        .await
        .expect("a warning only, by default");
    let warnings = capture.at(Level::WARN);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("volatile-ttl") && warnings[0].contains(&bad),
        "{warnings:?}"
    );
    drop(lock);

    let err = RedlockLock::connect(RedlockConfig::new(urls).require_noeviction(true))
        .await
        .expect_err("refused with require_noeviction");
    assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{err}");
    assert!(!err.is_retryable());
    assert!(
        err.message().contains("volatile-ttl") && err.message().contains(&bad),
        "{err}"
    );

    let before = capture.at(Level::WARN).len();
    RedlockLock::connect(RedlockConfig::new(safe.urls()).require_noeviction(true))
        .await
        .expect("noeviction everywhere passes");
    assert_eq!(capture.at(Level::WARN).len(), before, "{}", capture.all());
}
