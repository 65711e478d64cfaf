//! distlock's own messages: one line on stderr, `distlock: ...`.

use distlock::LockError;

use crate::exit_code;

/// Prints `distlock: <message>` on one line and returns `code`.
pub fn fail(code: i32, message: impl std::fmt::Display) -> i32 {
    eprintln!("distlock: {}", one_line(&message.to_string()));
    code
}

/// [`fail`] with the exit status that `err`'s kind calls for.
pub fn fail_error(context: &str, err: &LockError) -> i32 {
    fail(
        exit_code::for_error(err.kind()),
        format!("{context}: {err}"),
    )
}

/// Prints `distlock: warning: <message>` on one line.
pub fn warn(message: impl std::fmt::Display) {
    eprintln!("distlock: warning: {}", one_line(&message.to_string()));
}

/// `text` with its line breaks turned into spaces.
pub fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}
