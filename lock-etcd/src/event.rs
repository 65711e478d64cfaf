//! What a watch tells its users.

/// What a watch reports to its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WatchEvent {
    /// The server created the watch: events after `revision` will come.
    Created {
        /// The store's revision when the watch was created.
        revision: i64,
    },
    /// A watched key was put (only for watches that want puts).
    Put {
        /// The key.
        key: Vec<u8>,
        /// Its value now.
        value: Vec<u8>,
        /// Its create revision.
        create: i64,
        /// The revision of the put.
        revision: i64,
    },
    /// A watched key was deleted (or expired with its lease).
    Deleted {
        /// The key.
        key: Vec<u8>,
        /// The revision of the deletion.
        revision: i64,
    },
    /// The watch is gone and events may have been missed (its history was
    /// compacted, or the server refused it): read again.
    Lost {
        /// Why, in words.
        reason: String,
    },
}
