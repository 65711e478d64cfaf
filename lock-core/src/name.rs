//! Validated lock names.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::LockError;

/// The longest lock name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 200;

/// A validated lock name. Cheap to clone (the text is shared).
///
/// Rules, chosen so that every backend can use the name as-is as a Redis key,
/// an etcd key prefix and a ZooKeeper path:
/// - 1 to [`MAX_NAME_LEN`] bytes of UTF-8;
/// - no control characters (including NUL, tab, newline) and no whitespace;
/// - `/` may separate segments, but the name neither starts nor ends with `/`,
///   has no empty segment (`a//b`) and no `.` or `..` segment.
///
/// ```
/// use lock_core::LockName;
/// let name = LockName::new("billing/nightly-report").unwrap();
/// assert_eq!(name.as_str(), "billing/nightly-report");
/// assert!(LockName::new("").is_err());
/// assert!(LockName::new("a\nb").is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockName(Arc<str>);

impl LockName {
    /// Validates `name` against the rules above.
    pub fn new(name: impl Into<String>) -> Result<Self, LockError> {
        let name = name.into();
        if name.is_empty() {
            return Err(LockError::invalid("lock name is empty"));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(LockError::invalid(format!(
                "lock name is {} bytes long; at most {MAX_NAME_LEN} are allowed",
                name.len()
            )));
        }
        if let Some(c) = name.chars().find(|c| c.is_control() || c.is_whitespace()) {
            return Err(LockError::invalid(format!(
                "lock name contains the character {c:?}; control characters and whitespace are not allowed"
            )));
        }
        if name
            .split('/')
            .any(|seg| seg.is_empty() || seg == "." || seg == "..")
        {
            return Err(LockError::invalid(format!(
                "lock name {name:?} has an empty, '.' or '..' segment, or starts or ends with '/'"
            )));
        }
        Ok(Self(name.into()))
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for LockName {
    type Err = LockError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<&str> for LockName {
    type Error = LockError;
    fn try_from(s: &str) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl TryFrom<String> for LockName {
    type Error = LockError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl AsRef<str> for LockName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LockErrorKind;

    #[test]
    fn accepts_usual_names() {
        for ok in [
            "a",
            "jobs:nightly",
            "billing/report-1",
            "ünïcödé",
            "x".repeat(200).as_str(),
        ] {
            assert!(LockName::new(ok).is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn rejects_bad_names() {
        let long = "x".repeat(201);
        for bad in [
            "",
            " ",
            "a b",
            "a\0b",
            "a\tb",
            "/a",
            "a/",
            "a//b",
            "a/./b",
            "..",
            long.as_str(),
        ] {
            let err = LockName::new(bad).unwrap_err();
            assert_eq!(err.kind(), LockErrorKind::InvalidArgument, "{bad:?}");
        }
    }
}
