//! TLS as managed services hand it out, through the `distlock` command
//! built with its default features: a server whose certificate is signed by
//! a CA in the trust store the process sees (`SSL_CERT_FILE`) is reached
//! with no `ca` option, on every backend; a server signed by a CA the trust
//! store does not hold is refused with a one-line error, never a panic.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use distlock_cli::exit_code;
use lock_testbed::{
    unique_name, EtcdCluster, RedisOptions, RedisServer, TlsFiles, ZkEnsemble, ZkOptions,
};

const BIN: &str = env!("CARGO_BIN_EXE_distlock");

/// `distlock run --url URL NAME -- true`, trusting the certificates in
/// `roots` (`SSL_CERT_FILE`) and nothing from the environment that names a
/// lock option.
fn run_true(url: &str, roots: &Path) -> Output {
    let name = unique_name("tls-roots");
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "--url", url, "--wait", "10s", &name, "--", "true"]);
    for (var, _) in std::env::vars_os() {
        let var = var.to_string_lossy();
        if var.starts_with("DISTLOCK_") || var.starts_with("SSL_CERT_") {
            cmd.env_remove(&*var);
        }
    }
    cmd.env("SSL_CERT_FILE", roots)
        .stdin(Stdio::null())
        .output()
        .expect("running distlock")
}

/// The command ran (exit 0) with the system's roots holding the server's CA,
/// and was refused with one line (not a panic) when they hold another CA.
fn trusted_by_the_system_roots(url: &str, files: &TlsFiles) {
    let ok = run_true(url, &files.ca());
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{url} with the server's CA in SSL_CERT_FILE: {}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let stranger = TlsFiles::generate().expect("another CA");
    let refused = run_true(url, &stranger.ca());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(
        refused.status.code(),
        Some(exit_code::UNAVAILABLE),
        "{url} with another CA in SSL_CERT_FILE: {stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `SCHEME://ENDPOINTS?tls=true` with the client certificate and key of
/// `files` (the server asks for one) and no `ca`.
fn with_client_files(scheme: &str, endpoints: &[String], files: &TlsFiles) -> String {
    format!(
        "{scheme}://{}?tls=true&cert={}&key={}&connect_timeout=5s",
        endpoints.join(","),
        files.client_cert().display(),
        files.client_key().display()
    )
}

#[test]
fn rediss_without_ca_or_client_files_trusts_the_system_roots() {
    let server = RedisServer::start_with(RedisOptions {
        tls: true,
        tls_client_cert_optional: true,
        ..Default::default()
    })
    .expect("redis-server with TLS");
    let addr = server.tls_addr().expect("a TLS port");
    let url = format!("rediss://localhost:{}/?connect_timeout=5s", addr.port());
    trusted_by_the_system_roots(&url, server.tls_files().expect("TLS files"));
}

#[test]
fn etcd_over_tls_without_ca_trusts_the_system_roots() {
    let cluster = EtcdCluster::start_tls(1).expect("etcd with TLS");
    let files = cluster.tls_files().expect("TLS files");
    let url = with_client_files("etcd", &cluster.tls_endpoints(), files);
    trusted_by_the_system_roots(&url, files);
}

#[test]
fn zookeeper_over_tls_without_ca_trusts_the_system_roots() {
    let ensemble = ZkEnsemble::start_with(
        1,
        ZkOptions {
            tls: true,
            ..Default::default()
        },
    )
    .expect("ZooKeeper with TLS");
    let files = TlsFiles::shared().expect("the testbed's TLS files");
    let url = with_client_files("zk", &ensemble.tls_endpoints(), files);
    trusted_by_the_system_roots(&url, files);
}
