//! An application that installs its own rustls crypto provider at startup
//! keeps it: TLS connections use it and nothing replaces it. (Its own test
//! binary: a process has one provider, set once.)

use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockName, TlsConfig};
use lock_redis::{RedisLock, RedisLockConfig};
use lock_testbed::{RedisOptions, RedisServer};
use rustls::crypto::CryptoProvider;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_application_provider_is_used_and_kept() {
    // The application's own choice: aws-lc-rs with only the TLS 1.3 suites.
    let mut mine = rustls::crypto::aws_lc_rs::default_provider();
    mine.cipher_suites
        .retain(|s| matches!(s, rustls::SupportedCipherSuite::Tls13(_)));
    assert!(!mine.cipher_suites.is_empty());
    mine.install_default()
        .expect("nothing installed a provider before the application");
    let installed = CryptoProvider::get_default().expect("installed").clone();

    let server = tokio::task::block_in_place(|| {
        RedisServer::start_with(RedisOptions {
            tls: true,
            ..Default::default()
        })
    })
    .expect("redis-server with TLS");
    let files = server.tls_files().unwrap();
    let lock = RedisLock::connect(
        RedisLockConfig::new(server.tls_url().unwrap())
            .tls(
                TlsConfig::new()
                    .ca(files.ca())
                    .identity(files.client_cert(), files.client_key()),
            )
            .connect_timeout(Duration::from_secs(2)),
    )
    .await
    .expect("connect over TLS with the application's provider");
    let name = LockName::new("tls/app-provider").unwrap();
    let guard = lock.acquire(&name, &AcquireOptions::new()).await.unwrap();
    assert!(guard.release().await.unwrap());

    let now = CryptoProvider::get_default().expect("still installed");
    assert!(
        Arc::ptr_eq(&installed, now),
        "the process-wide provider was replaced"
    );
    assert!(now
        .cipher_suites
        .iter()
        .all(|s| matches!(s, rustls::SupportedCipherSuite::Tls13(_))));
    tokio::task::block_in_place(|| drop(server));
}
