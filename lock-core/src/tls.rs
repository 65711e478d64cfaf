//! TLS settings shared by the remote backends: which CA to trust and which
//! client certificate to present, as file paths (the URL options `ca`,
//! `cert` and `key` of every backend).

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{LockError, Result};

/// Where a client finds its TLS material. Paths only: the files are read
/// when connecting, and their contents never reach logs, errors or `Debug`.
///
/// ```
/// use lock_core::TlsConfig;
/// let tls = TlsConfig::new()
///     .ca("/etc/ssl/etcd-ca.pem")
///     .identity("/etc/ssl/client.pem", "/etc/ssl/client-key.pem");
/// assert!(tls.validate().is_ok());
/// assert!(TlsConfig::new().cert("/etc/ssl/client.pem").validate().is_err());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsConfig {
    /// The CA certificate(s) to trust, PEM; `None`: the system's roots.
    pub ca: Option<PathBuf>,
    /// The client certificate (chain), PEM, for mutual TLS; with `key`.
    pub cert: Option<PathBuf>,
    /// The client certificate's private key, PEM; with `cert`.
    pub key: Option<PathBuf>,
}

/// The contents of a [`TlsConfig`]'s files, read. Its `Debug` never shows
/// the private key.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsMaterial {
    /// The CA certificate(s), PEM.
    pub ca: Option<Vec<u8>>,
    /// The client certificate, PEM.
    pub cert: Option<Vec<u8>>,
    /// The client key, PEM.
    pub key: Option<Vec<u8>>,
}

impl fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("ca", &self.ca.as_ref().map(|c| c.len()))
            .field("cert", &self.cert.as_ref().map(|c| c.len()))
            .field("key", &self.key.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}

impl TlsConfig {
    /// No CA (the system's roots) and no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`TlsConfig::ca`].
    pub fn ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca = Some(path.into());
        self
    }

    /// Sets [`TlsConfig::cert`].
    pub fn cert(mut self, path: impl Into<PathBuf>) -> Self {
        self.cert = Some(path.into());
        self
    }

    /// Sets [`TlsConfig::key`].
    pub fn key(mut self, path: impl Into<PathBuf>) -> Self {
        self.key = Some(path.into());
        self
    }

    /// Sets the client certificate and its key (mutual TLS).
    pub fn identity(self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.cert(cert).key(key)
    }

    /// Checks that `cert` and `key` come together.
    pub fn validate(&self) -> Result<()> {
        match (&self.cert, &self.key) {
            (Some(_), None) => Err(LockError::invalid(
                "a TLS client certificate needs its key (`key`)",
            )),
            (None, Some(_)) => Err(LockError::invalid(
                "a TLS client key needs its certificate (`cert`)",
            )),
            _ => Ok(()),
        }
    }

    /// Reads the files (an `InvalidArgument` error naming the path of one
    /// that cannot be read, or that is not PEM).
    pub fn load(&self) -> Result<TlsMaterial> {
        self.validate()?;
        let read = |p: &Option<PathBuf>, what: &str| -> Result<Option<Vec<u8>>> {
            p.as_deref().map(|p| read_pem(p, what)).transpose()
        };
        Ok(TlsMaterial {
            ca: read(&self.ca, "CA certificate")?,
            cert: read(&self.cert, "client certificate")?,
            key: read(&self.key, "client key")?,
        })
    }
}

fn read_pem(path: &Path, what: &str) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|e| {
        LockError::invalid(format!(
            "cannot read the TLS {what} {}: {e}",
            path.display()
        ))
    })?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(LockError::invalid(format!(
            "the TLS {what} {} is not PEM (no -----BEGIN line)",
            path.display()
        )));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_read_and_keys_hidden() {
        let dir = std::env::temp_dir().join(format!("distlock-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("c.pem"), dir.join("k.pem"));
        std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\nAA\n").unwrap();
        std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\nsecret\n").unwrap();
        let m = TlsConfig::new().identity(&cert, &key).load().unwrap();
        assert!(m.key.is_some() && m.ca.is_none());
        assert!(!format!("{m:?}").contains("secret"));
        let missing = TlsConfig::new()
            .ca(dir.join("none.pem"))
            .load()
            .unwrap_err();
        assert_eq!(missing.kind(), crate::LockErrorKind::InvalidArgument);
        assert!(missing.to_string().contains("none.pem"));
        std::fs::write(&key, "not pem secret").unwrap();
        let bad = TlsConfig::new().identity(&cert, &key).load().unwrap_err();
        assert!(!bad.to_string().contains("secret"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
