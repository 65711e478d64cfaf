//! [`Holder`]: who holds a lock (host, process id, a note of the caller's),
//! stored with the holder's entry on the server as a small JSON object so
//! that `inspect`, `list` and other tools can tell who holds it.

use std::io::Write as _;
use std::sync::OnceLock;

use crate::error::LockError;

/// The longest note accepted by [`crate::AcquireOptions::note`], in bytes: 256.
pub const MAX_NOTE_LEN: usize = 256;

/// The longest host name kept, in bytes: 255 (the DNS limit).
const MAX_HOST_LEN: usize = 255;

/// The longest stored text read back as a holder: 64 KiB (a description
/// with a backend's own fields, such as ZooKeeper's identifier of up to
/// 4 KiB, escaped). Anything longer is not read.
const MAX_TEXT_LEN: usize = 64 * 1024;

/// Who holds a lock, as the holder described itself when it acquired:
/// the machine's host name, its process id and the note it passed
/// ([`crate::AcquireOptions::note`]).
///
/// Every field is optional: a lock taken by another client (redis-py,
/// kazoo, Curator, `etcdctl lock`) carries no description, or one in
/// which only some fields can be read; what cannot be read is `None`.
///
/// On the server it is a JSON object, `{"host":"…","note":"…","pid":…}`
/// ([`Holder::to_json`]); [`Holder::from_json`] reads it back leniently.
///
/// ```
/// use lock_core::Holder;
/// let me = Holder::this_process().with_note("nightly report");
/// let back = Holder::from_json(me.to_json().as_bytes()).unwrap();
/// assert_eq!(back, me);
/// assert_eq!(back.pid, Some(std::process::id()));
/// assert_eq!(Holder::from_json(b"kazoo-identifier"), None);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The host name of the holder's machine.
    pub host: Option<String>,
    /// The holder's process id.
    pub pid: Option<u32>,
    /// The note the holder passed when it acquired.
    pub note: Option<String>,
}

impl Holder {
    /// A description with no field set.
    pub fn new() -> Self {
        Self::default()
    }

    /// This process: its machine's host name (read once per process with
    /// `gethostname`) and its process id.
    pub fn this_process() -> Self {
        Self {
            host: host_name().map(str::to_owned),
            pid: Some(std::process::id()),
            note: None,
        }
    }

    /// Sets the host name.
    pub fn with_host(mut self, host: impl Into<String>) -> Self {
        self.host = Some(host.into());
        self
    }

    /// Sets the process id.
    pub fn with_pid(mut self, pid: u32) -> Self {
        self.pid = Some(pid);
        self
    }

    /// Sets the note.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        self.host.is_none() && self.pid.is_none() && self.note.is_none()
    }

    /// The JSON text stored on the server: an object with the fields that
    /// are set (`host`, `note`, `pid`), compact, on one line.
    pub fn to_json(&self) -> String {
        self.to_json_with(&[])
    }

    /// [`Holder::to_json`] with some string fields of the backend's own
    /// (ZooKeeper's contender identifier, `id`), which [`Holder::from_json`]
    /// ignores. The fields are in the order of their names.
    ///
    /// Written field by field into one string (every acquisition writes
    /// one); a field of the description replaces an extra field of the
    /// same name, and of two extra fields of one name the last is kept.
    pub fn to_json_with(&self, extra: &[(&str, &str)]) -> String {
        // The description's own fields, in the order of their names.
        let own = [
            self.host.as_deref().map(|host| ("host", Field::Text(host))),
            self.note.as_deref().map(|note| ("note", Field::Text(note))),
            self.pid.map(|pid| ("pid", Field::Number(pid))),
        ];
        if extra.is_empty() {
            let mut fields = [("", Field::Number(0)); 3];
            let mut n = 0;
            for field in own.into_iter().flatten() {
                fields[n] = field;
                n += 1;
            }
            return write_object(&fields[..n]);
        }
        let mut fields: Vec<(&str, Field<'_>)> = Vec::with_capacity(extra.len() + own.len());
        fields.extend(extra.iter().map(|(key, value)| (*key, Field::Text(value))));
        fields.extend(own.into_iter().flatten());
        // By name; of one name, the one added last (a stable sort, then the
        // last of each run).
        fields.sort_by(|a, b| a.0.cmp(b.0));
        write_object(&fields)
    }

    /// Reads a stored description back: `None` unless `text` is a JSON
    /// object (of at most 64 KiB) with at least one of the fields; a field of
    /// the wrong type is left out, other fields are ignored, and a host
    /// or note longer than this crate writes is cut to its bound. Never
    /// fails on what another client stored there.
    pub fn from_json(text: &[u8]) -> Option<Self> {
        if text.len() > MAX_TEXT_LEN || text.first() != Some(&b'{') {
            return None;
        }
        let serde_json::Value::Object(object) = serde_json::from_slice(text).ok()? else {
            return None;
        };
        let string = |key: &str, max: usize| {
            object
                .get(key)
                .and_then(serde_json::Value::as_str)
                .map(|s| cut(s, max).to_owned())
        };
        let holder = Self {
            host: string("host", MAX_HOST_LEN),
            pid: object
                .get("pid")
                .and_then(serde_json::Value::as_u64)
                .and_then(|p| u32::try_from(p).ok()),
            note: string("note", MAX_NOTE_LEN),
        };
        (!holder.is_empty()).then_some(holder)
    }
}

/// Checks a note for [`crate::AcquireOptions::note`]: at most
/// [`MAX_NOTE_LEN`] bytes, one line of text (no control characters).
pub(crate) fn check_note(note: &str) -> Result<(), LockError> {
    if note.len() > MAX_NOTE_LEN {
        return Err(LockError::invalid(format!(
            "the note is {} bytes long; at most {MAX_NOTE_LEN} are stored with the holder",
            note.len()
        )));
    }
    if note.chars().any(char::is_control) {
        return Err(LockError::invalid(
            "the note contains a control character (a line break, a tab, ...); it must be one line of text",
        ));
    }
    Ok(())
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A JSON object of `fields`, sorted by name; of a run of one name, the
/// last is written.
fn write_object(fields: &[(&str, Field<'_>)]) -> String {
    let mut out = Vec::with_capacity(
        2 + fields
            .iter()
            .map(|(key, value)| key.len() + value.len() + 6)
            .sum::<usize>(),
    );
    out.push(b'{');
    for (i, (key, value)) in fields.iter().enumerate() {
        if fields.get(i + 1).is_some_and(|next| next.0 == *key) {
            continue;
        }
        if out.len() > 1 {
            out.push(b',');
        }
        push_json_string(&mut out, key);
        out.push(b':');
        match value {
            Field::Text(text) => push_json_string(&mut out, text),
            Field::Number(n) => {
                let _ = write!(out, "{n}");
            }
        }
    }
    out.push(b'}');
    // Only whole UTF-8 strings and ASCII were written.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// A field's value in [`Holder::to_json_with`].
#[derive(Clone, Copy)]
enum Field<'a> {
    Text(&'a str),
    Number(u32),
}

impl Field<'_> {
    /// Its length unescaped: what the output needs at least.
    fn len(&self) -> usize {
        match self {
            Field::Text(text) => text.len(),
            Field::Number(_) => 10,
        }
    }
}

/// Appends `text` as a JSON string, escaped as `serde_json` escapes it.
fn push_json_string(out: &mut Vec<u8>, text: &str) {
    // Writing into a Vec cannot fail.
    let _ = serde_json::to_writer(out, text);
}

/// The machine's host name, read once per process: `gethostname(2)` (the
/// kernel's UTS name), which needs no file system (`/proc` may be missing
/// in a container or on another Unix). `None` if it cannot be read or is
/// empty; a name that is not UTF-8 is converted lossily.
fn host_name() -> Option<&'static str> {
    static HOST: OnceLock<Option<String>> = OnceLock::new();
    HOST.get_or_init(|| {
        let mut buf = [0u8; 256];
        // SAFETY: the buffer is valid for `buf.len()` bytes; gethostname
        // writes at most that many and the result is read up to its first
        // NUL (or the whole buffer, if truncated without one).
        let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
        if rc != 0 {
            return None;
        }
        let len = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        let name = String::from_utf8_lossy(&buf[..len]);
        let name = cut(name.trim(), MAX_HOST_LEN);
        (!name.is_empty()).then(|| name.to_owned())
    })
    .as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What [`Holder::to_json_with`] must write: a `serde_json` object of
    /// the fields (sorted by name, a description's field over an extra one).
    fn through_a_json_map(holder: &Holder, extra: &[(&str, &str)]) -> String {
        let mut object = serde_json::Map::new();
        for (key, value) in extra {
            object.insert((*key).to_owned(), (*value).into());
        }
        if let Some(host) = &holder.host {
            object.insert("host".into(), host.as_str().into());
        }
        if let Some(pid) = holder.pid {
            object.insert("pid".into(), pid.into());
        }
        if let Some(note) = &holder.note {
            object.insert("note".into(), note.as_str().into());
        }
        serde_json::Value::Object(object).to_string()
    }

    proptest! {
        #[test]
        fn writes_what_a_json_map_writes(
            host in proptest::option::of(".{0,12}"),
            pid in proptest::option::of(any::<u32>()),
            note in proptest::option::of("(.|\\n|\\u{1}|\"|\\\\){0,12}"),
            extra in proptest::collection::vec(
                (prop_oneof![Just("id"), Just("host"), Just("permits"), Just("pid"), Just("zz"), Just("a\"b")], ".{0,6}"),
                0..4,
            ),
        ) {
            let holder = Holder { host, pid, note };
            let extra: Vec<(&str, &str)> = extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let written = holder.to_json_with(&extra);
            prop_assert_eq!(&written, &through_a_json_map(&holder, &extra));
            prop_assert!(serde_json::from_str::<serde_json::Value>(&written).is_ok());
        }
    }

    #[test]
    fn round_trips_and_sets_only_present_fields() {
        let h = Holder::new()
            .with_host("web-1")
            .with_pid(42)
            .with_note("a \"q\" é");
        assert_eq!(
            h.to_json(),
            r#"{"host":"web-1","note":"a \"q\" é","pid":42}"#
        );
        assert_eq!(Holder::from_json(h.to_json().as_bytes()), Some(h));
        assert_eq!(Holder::new().with_pid(7).to_json(), r#"{"pid":7}"#);
        let with_id = Holder::new().with_pid(7).to_json_with(&[("id", "x")]);
        assert_eq!(with_id, r#"{"id":"x","pid":7}"#);
        assert_eq!(
            Holder::from_json(with_id.as_bytes()),
            Some(Holder::new().with_pid(7))
        );
    }

    #[test]
    fn this_process_names_the_host_and_pid() {
        let me = Holder::this_process();
        assert_eq!(me.pid, Some(std::process::id()));
        let host = me.host.expect("a host name");
        assert!(!host.is_empty() && host.len() <= MAX_HOST_LEN, "{host:?}");
    }

    #[test]
    fn foreign_text_gives_what_can_be_read_or_nothing() {
        for text in [
            &b""[..],
            b"kazoo-interop",
            b"127.0.0.7",
            b"\xff\xfe",
            b"{",
            b"[1,2]",
            b"{}",
            b"{\"other\":1}",
            b"{\"host\":5,\"pid\":\"x\",\"note\":null}",
            b"{\"pid\":4294967296}",
            b"{\"pid\":-1}",
        ] {
            assert_eq!(Holder::from_json(text), None, "{text:?}");
        }
        assert_eq!(
            Holder::from_json(br#"{"host":"h","pid":"oops","x":[1]}"#),
            Some(Holder::new().with_host("h"))
        );
        let long = format!(r#"{{"note":"{}"}}"#, "é".repeat(MAX_NOTE_LEN));
        let note = Holder::from_json(long.as_bytes()).unwrap().note.unwrap();
        assert!(note.len() <= MAX_NOTE_LEN && note.chars().all(|c| c == 'é'));
        let huge = format!(r#"{{"note":"{}"}}"#, "n".repeat(MAX_TEXT_LEN));
        assert_eq!(Holder::from_json(huge.as_bytes()), None);
    }

    #[test]
    fn notes_are_bounded_single_lines() {
        assert!(check_note("").is_ok());
        assert!(check_note(&"n".repeat(MAX_NOTE_LEN)).is_ok());
        let err = check_note(&"n".repeat(MAX_NOTE_LEN + 1)).unwrap_err();
        assert_eq!(err.kind(), crate::LockErrorKind::InvalidArgument);
        assert!(check_note("two\nlines").is_err());
        assert!(check_note("tab\there").is_err());
    }
}
