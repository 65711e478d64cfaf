//! A `tracing` subscriber that keeps every event, for tests that check
//! what a library logs (a warning given, a secret never shown).

use std::sync::{Arc, Mutex};

use tracing::{field, span, Event, Level, Metadata, Subscriber};

/// Every event logged while it is the thread's default subscriber
/// (`tracing::subscriber::with_default`, `set_default`): its level and its
/// fields (the message included) as text.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<(Level, String)>>>);

impl LogCapture {
    /// The text of every event logged at `level`, in order.
    pub fn at(&self, level: Level) -> Vec<String> {
        let events = self.0.lock().unwrap_or_else(|p| p.into_inner());
        events
            .iter()
            .filter(|(l, _)| *l == level)
            .map(|(_, text)| text.clone())
            .collect()
    }

    /// Every event's text, one per line.
    pub fn all(&self) -> String {
        let events = self.0.lock().unwrap_or_else(|p| p.into_inner());
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

impl Subscriber for LogCapture {
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
            .unwrap_or_else(|p| p.into_inner())
            .push((*event.metadata().level(), fields.0));
    }
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}
