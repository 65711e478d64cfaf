//! Opening a ZooKeeper session: the connector (credentials, TLS), the
//! first answer within the connect timeout, and the monitor that keeps the
//! session alive from then on.

use std::sync::Arc;

use lock_core::backend::add_saturating;
use lock_core::backend::session::Sent;
use lock_core::{LockError, LockErrorKind};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::config::ZkConfig;
use crate::error::{lock_error, Failure};
use crate::monitor::monitor;
use crate::session::{Liveness, Session};

/// Opens a session on `hosts` within the connect timeout, and before
/// `until` (the bound of the call that needs the session). Fails at once
/// when every server refuses the connection.
pub(crate) async fn connect(
    hosts: &str,
    config: &ZkConfig,
    until: Instant,
) -> Result<Arc<Session>, LockError> {
    let what = || format!("connecting to ZooKeeper at {hosts}");
    let mut connector = zk::Client::connector()
        .with_session_timeout(config.session_timeout)
        .with_fail_eagerly();
    for (scheme, auth) in &config.auth {
        connector = connector.with_auth(scheme, auth);
    }
    #[cfg_attr(not(feature = "rustls-aws-lc"), allow(unused_variables))]
    let secure = match &config.tls {
        #[cfg(feature = "rustls-aws-lc")]
        Some(tls) => {
            connector = connector.with_tls(tls_options(tls)?);
            true
        }
        #[cfg(not(feature = "rustls-aws-lc"))]
        Some(_) => return Err(no_tls()),
        None => false,
    };
    // The session is created after this: it lives at least until then
    // plus its timeout.
    let started = Sent::now();
    let give_up = until.min(add_saturating(started.at(), config.connect_timeout));
    let connecting = async {
        #[cfg(feature = "rustls-aws-lc")]
        if secure {
            return connector.secure_connect(hosts).await;
        }
        connector.connect(hosts).await
    };
    let client = match tokio::time::timeout_at(give_up, connecting).await {
        Err(_) => {
            return Err(LockError::new(
                LockErrorKind::Unavailable,
                format!(
                    "{}: no session within {:?}",
                    what(),
                    give_up.saturating_duration_since(started.at())
                ),
            ))
        }
        Ok(Err(err)) => return Err(lock_error(&what(), Failure::Zk(err))),
        Ok(Ok(client)) => client,
    };
    let timeout = client.session_timeout();
    let states = client.state_watcher();
    let live = Liveness::new(&client, started, timeout);
    let session = Session::new(client, live.clone(), config.request_timeout);
    let task = tokio::spawn(monitor(Arc::downgrade(&session), live, states));
    session.monitored_by(task.abort_handle());
    tracing::debug!(session = %session.live.id, ?timeout, "lock-zk: session established");
    Ok(session)
}

/// The client's TLS settings from `tls`'s files (an `InvalidArgument`
/// error naming a file that cannot be read or parsed): the server checked
/// against the CA given, else against the system's roots (`SSL_CERT_FILE`
/// and `SSL_CERT_DIR` are honoured). An `Unsupported` error when the
/// build also has ring (`rustls-ring`) and the application installed no
/// provider: rustls could not choose between the two.
#[cfg(feature = "rustls-aws-lc")]
fn tls_options(tls: &lock_core::TlsConfig) -> Result<zk::TlsOptions, LockError> {
    if cfg!(feature = "rustls-ring") && rustls::crypto::CryptoProvider::get_default().is_none() {
        return Err(LockError::new(
            LockErrorKind::Unsupported,
            "ZooKeeper over TLS in a build with two rustls providers (rustls-aws-lc and \
             rustls-ring) and none installed: enable one feature, or install a provider at startup",
        ));
    }
    let material = tls.load()?;
    let text = |bytes: Vec<u8>, what: &str| {
        String::from_utf8(bytes)
            .map_err(|_| LockError::invalid(format!("the TLS {what} is not PEM text")))
    };
    let mut options = zk::TlsOptions::new();
    options = match material.ca {
        Some(ca) => options
            .with_pem_ca(&text(ca, "CA certificate")?)
            .map_err(|e| LockError::invalid(format!("the TLS CA certificate: {e}")))?,
        None => options
            .with_pem_ca(&system_roots()?)
            .map_err(|e| LockError::invalid(format!("the system's root certificates: {e}")))?,
    };
    if let (Some(cert), Some(key)) = (material.cert, material.key) {
        options = options
            .with_pem_identity(
                &text(cert, "client certificate")?,
                &text(key, "client key")?,
            )
            .map_err(|_| {
                LockError::invalid("the TLS client certificate or key cannot be parsed")
            })?;
    }
    Ok(options)
}

/// The system's root certificates as PEM text (the ZooKeeper client takes
/// its roots only as PEM); an `InvalidArgument` error when there are none.
#[cfg(feature = "rustls-aws-lc")]
fn system_roots() -> Result<String, LockError> {
    use base64::Engine as _;
    let found = rustls_native_certs::load_native_certs();
    if found.certs.is_empty() {
        let why = found
            .errors
            .first()
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        return Err(LockError::invalid(format!(
            "ZooKeeper over TLS without a CA (`ca`), and the system has no root certificates{why}"
        )));
    }
    let mut pem = String::new();
    for cert in &found.certs {
        let b64 = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).unwrap_or_default());
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    Ok(pem)
}

/// Without the `rustls-aws-lc` feature the ZooKeeper client has no TLS.
#[cfg(not(feature = "rustls-aws-lc"))]
fn no_tls() -> LockError {
    LockError::new(
        LockErrorKind::Unsupported,
        "ZooKeeper over TLS needs the rustls-aws-lc feature (the ZooKeeper client's TLS is built on aws-lc-rs)",
    )
}
