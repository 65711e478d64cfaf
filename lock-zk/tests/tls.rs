//! ZooKeeper over TLS against a real server that requires client
//! certificates: a client without one, or trusting another CA, gets no
//! session; unreadable files and a missing CA are `InvalidArgument`.

use std::time::Duration;

use lock_core::{LockErrorKind, TlsConfig};
use lock_testbed::{TlsFiles, ZkEnsemble, ZkOptions};
use lock_zk::{ZkConfig, ZkLock};

fn config(server: &ZkEnsemble, tls: TlsConfig) -> ZkConfig {
    ZkConfig::new(server.tls_endpoints().join(","))
        .tls(tls)
        .session_timeout(Duration::from_secs(3))
        .connect_timeout(Duration::from_secs(3))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_missing_is_refused() {
    let server = tokio::task::block_in_place(|| {
        ZkEnsemble::start_with(
            1,
            ZkOptions {
                tls: true,
                ..Default::default()
            },
        )
    })
    .expect("ZooKeeper with TLS");
    let files = server.tls_files().unwrap();
    let good = TlsConfig::new()
        .ca(files.ca())
        .identity(files.client_cert(), files.client_key());
    ZkLock::connect(config(&server, good.clone()))
        .await
        .expect("a session over mutual TLS");

    // The server requires a client certificate.
    let err = ZkLock::connect(config(&server, TlsConfig::new().ca(files.ca())))
        .await
        .unwrap_err();
    assert_ne!(err.kind(), LockErrorKind::Internal, "{err}");

    // A CA that did not sign the server's certificate.
    let other = tokio::task::block_in_place(TlsFiles::generate).unwrap();
    let err = ZkLock::connect(config(&server, good.clone().ca(other.ca())))
        .await
        .unwrap_err();
    assert_ne!(err.kind(), LockErrorKind::Internal, "{err}");

    // Unreadable files; TLS without a CA.
    let err = ZkLock::connect(config(&server, good.clone().cert("/nonexistent/c.pem")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), LockErrorKind::InvalidArgument);
    assert!(err.to_string().contains("/nonexistent/c.pem"), "{err}");
    // Without a CA the server is checked against the system's roots, which
    // do not hold the test CA.
    let no_ca = TlsConfig::new().identity(files.client_cert(), files.client_key());
    let err = ZkLock::connect(config(&server, no_ca)).await.unwrap_err();
    assert_ne!(err.kind(), LockErrorKind::Internal, "{err}");

    // No key material in Debug output.
    let key = std::fs::read_to_string(files.client_key()).unwrap();
    let secret_line = key.lines().nth(1).unwrap();
    assert!(!format!("{:?}", config(&server, good)).contains(secret_line));
    tokio::task::block_in_place(|| drop(server));
}
