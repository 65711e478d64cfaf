//! etcd over https against a real member that requires client
//! certificates: a client without one, or trusting another CA, is refused;
//! unreadable files are an `InvalidArgument` naming the file.

use std::time::Duration;

use lock_core::{LockErrorKind, TlsConfig};
use lock_etcd::{EtcdConfig, EtcdLock};
use lock_testbed::{EtcdCluster, TlsFiles};

fn config(cluster: &EtcdCluster, tls: TlsConfig) -> EtcdConfig {
    EtcdConfig::new(cluster.tls_endpoints())
        .tls(tls)
        .connect_timeout(Duration::from_secs(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_missing_is_refused() {
    let cluster = tokio::task::block_in_place(|| EtcdCluster::start_tls(1)).expect("etcd with TLS");
    let files = cluster.tls_files().unwrap();
    let good = TlsConfig::new()
        .ca(files.ca())
        .identity(files.client_cert(), files.client_key());
    EtcdLock::connect(config(&cluster, good.clone()))
        .await
        .expect("connect over mutual TLS");

    // The member requires a client certificate.
    let err = EtcdLock::connect(config(&cluster, TlsConfig::new().ca(files.ca())))
        .await
        .unwrap_err();
    assert_ne!(err.kind(), LockErrorKind::Internal, "{err}");

    // A CA that did not sign the member's certificate.
    let other = tokio::task::block_in_place(TlsFiles::generate).unwrap();
    let err = EtcdLock::connect(config(&cluster, good.clone().ca(other.ca())))
        .await
        .unwrap_err();
    assert_ne!(err.kind(), LockErrorKind::Internal, "{err}");

    // Files that cannot be read.
    let err = EtcdLock::connect(config(&cluster, good.clone().key("/nonexistent/key.pem")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), LockErrorKind::InvalidArgument);
    assert!(err.to_string().contains("/nonexistent/key.pem"), "{err}");

    // No key material in Debug output.
    let key = std::fs::read_to_string(files.client_key()).unwrap();
    let secret_line = key.lines().nth(1).unwrap();
    assert!(!format!("{:?}", config(&cluster, good)).contains(secret_line));
    tokio::task::block_in_place(|| drop(cluster));
}
