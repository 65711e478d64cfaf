//! Opening a `redis::Client` for a URL with the TLS files of a
//! [`TlsConfig`], shared by `lock-redis` and `lock-redlock`.

use lock_core::{LockError, TlsConfig};
use redis::{ClientTlsConfig, TlsCertificates};

use crate::config::redact_url;
use crate::scripts::error_kind;

/// A client for `url` (`redis://` or `rediss://`; the password in the URL
/// never appears in an error). With TLS files in `tls` the URL must be
/// `rediss://`: the server is checked against `tls.ca` (else the system's
/// roots) and presented `tls.cert`/`tls.key` (mutual TLS) if given.
pub fn open_client(url: &str, tls: &TlsConfig) -> Result<redis::Client, LockError> {
    let shown = redact_url(url);
    let invalid = |e: redis::RedisError| {
        LockError::new(
            error_kind(&e),
            format!("invalid Redis URL {shown:?}: {}", e.category()),
        )
    };
    if *tls == TlsConfig::default() {
        return redis::Client::open(url).map_err(invalid);
    }
    if !url.trim_start().starts_with("rediss://") {
        return Err(LockError::invalid(format!(
            "TLS files are given for {shown:?}: use a rediss:// URL"
        )));
    }
    let material = tls.load()?;
    // The process-wide rustls provider, unless the application chose one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client_tls = match (material.cert, material.key) {
        (Some(client_cert), Some(client_key)) => Some(ClientTlsConfig {
            client_cert,
            client_key,
        }),
        _ => None,
    };
    redis::Client::build_with_tls(
        url,
        TlsCertificates {
            client_tls,
            root_cert: material.ca,
        },
    )
    .map_err(invalid)
}
