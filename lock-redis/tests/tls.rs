//! `rediss://` against a real redis-server that requires client
//! certificates: the right CA and certificate work; a missing certificate,
//! an unknown CA, unreadable files and TLS files on a `redis://` URL fail
//! with errors that never show a key.

use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockErrorKind, LockName, TlsConfig};
use lock_redis::{RedisLock, RedisLockConfig};
use lock_testbed::{RedisOptions, RedisServer, TlsFiles};

fn tls_server() -> RedisServer {
    RedisServer::start_with(RedisOptions {
        tls: true,
        ..Default::default()
    })
    .expect("redis-server with TLS")
}

fn config(server: &RedisServer, tls: TlsConfig) -> RedisLockConfig {
    RedisLockConfig::new(server.tls_url().unwrap())
        .tls(tls)
        .connect_timeout(Duration::from_secs(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_works_and_what_is_missing_is_refused() {
    let server = tokio::task::block_in_place(tls_server);
    let files = server.tls_files().unwrap();
    let good = TlsConfig::new()
        .ca(files.ca())
        .identity(files.client_cert(), files.client_key());
    let lock = RedisLock::connect(config(&server, good.clone()))
        .await
        .expect("connect over mutual TLS");
    let name = LockName::new("tls/works").unwrap();
    let guard = lock.acquire(&name, &AcquireOptions::new()).await.unwrap();
    assert!(guard.fencing_token().is_some());
    assert!(guard.release().await.unwrap());

    // The server requires a client certificate.
    let err = RedisLock::connect(config(&server, TlsConfig::new().ca(files.ca())))
        .await
        .unwrap_err();
    assert!(
        err.is_retryable() || err.kind() == LockErrorKind::Unauthorized,
        "{err}"
    );

    // A CA that did not sign the server's certificate.
    let other = tokio::task::block_in_place(TlsFiles::generate).unwrap();
    let err = RedisLock::connect(config(&server, good.clone().ca(other.ca())))
        .await
        .unwrap_err();
    assert_ne!(err.kind(), LockErrorKind::Internal, "{err}");

    // Files that cannot be read, and TLS files with a plain URL.
    let err = RedisLock::connect(config(&server, good.clone().ca("/nonexistent/ca.pem")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), LockErrorKind::InvalidArgument);
    assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
    let plain = RedisLockConfig::new(server.url()).tls(good.clone());
    let err = RedisLock::connect(plain).await.unwrap_err();
    assert_eq!(err.kind(), LockErrorKind::InvalidArgument);
    assert!(err.to_string().contains("rediss://"), "{err}");

    // No key material in Debug output or errors.
    let key = std::fs::read_to_string(files.client_key()).unwrap();
    let secret_line = key.lines().nth(1).unwrap();
    assert!(!format!("{:?}", config(&server, good)).contains(secret_line));
    assert!(!format!("{err:?}").contains(secret_line));
    tokio::task::block_in_place(|| drop(server));
}
