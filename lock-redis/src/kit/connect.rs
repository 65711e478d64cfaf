//! Opening a `redis::Client` for a URL with the TLS files of a
//! [`TlsConfig`], and showing a URL without its password; shared by
//! `lock-redis` and `lock-redlock`.

use lock_core::{LockError, LockErrorKind, TlsConfig};
use redis::{ClientTlsConfig, TlsCertificates};

use crate::kit::errors::error_kind;

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
    let secure = url.trim_start().starts_with("rediss://");
    if secure && !crypto_provider_available() {
        return Err(LockError::new(
            LockErrorKind::Unsupported,
            format!(
                "{shown:?} needs TLS, and rustls has no crypto provider: enable the \
                 rustls-aws-lc or rustls-ring feature, or install a provider at startup"
            ),
        ));
    }
    if *tls == TlsConfig::default() {
        // Without a CA the server is checked against the system's roots.
        return redis::Client::open(url).map_err(invalid);
    }
    if !secure {
        return Err(LockError::invalid(format!(
            "TLS files are given for {shown:?}: use a rediss:// URL"
        )));
    }
    let material = tls.load()?;
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

/// Whether rustls can build a TLS client for this process: with the
/// provider the application installed, else with the one this crate's
/// feature (`rustls-aws-lc` or `rustls-ring`) compiled in, which rustls
/// then takes by itself. Nothing here installs a process-wide provider.
/// A build with several providers and none installed has none: rustls
/// cannot choose between them.
fn crypto_provider_available() -> bool {
    rustls::crypto::CryptoProvider::get_default().is_some()
        || cfg!(any(
            all(feature = "rustls-aws-lc", not(feature = "rustls-ring")),
            all(feature = "rustls-ring", not(feature = "rustls-aws-lc"))
        ))
}

/// `scheme://user:password@host...` -> `scheme://user:***@host...`: how
/// every Redis URL or node address is shown in logs, errors and `Debug`
/// output. Everything before the last `@` after the scheme is taken for
/// credentials (a malformed URL, a bare `password@host:port`, or a password
/// holding `/` or `@` is hidden too); only the user name stays visible.
pub fn redact_url(url: &str) -> String {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[scheme_end..];
    let Some(at) = rest.rfind('@') else {
        return url.to_string();
    };
    let userinfo = &rest[..at];
    let hidden = match userinfo.split_once(':') {
        Some((user, _)) if !user.contains('/') => format!("{user}:***"),
        _ => "***".to_string(),
    };
    format!("{}{hidden}{}", &url[..scheme_end], &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("redis://127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
        assert_eq!(redact_url("redis://:pw@h:1/2"), "redis://:***@h:1/2");
        assert_eq!(redact_url("redis://u:pw@h:1"), "redis://u:***@h:1");
        assert_eq!(redact_url("redis://pw@h"), "redis://***@h");
        assert_eq!(redact_url("not a url"), "not a url");
        // Malformed or unusual forms never show the password either.
        assert_eq!(redact_url("pw@127.0.0.1:1"), "***@127.0.0.1:1");
        assert_eq!(redact_url(":pw@127.0.0.1:1"), ":***@127.0.0.1:1");
        assert_eq!(redact_url("redis://:p/w@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact_url("redis://u:p@w@h:1"), "redis://u:***@h:1");
        assert_eq!(redact_url("redis://:pw@[::1/"), "redis://:***@[::1/");
    }
}
