//! Certificates made at test time for the TLS-enabled servers: one CA, a
//! server certificate for `127.0.0.1` and `localhost`, and a client
//! certificate (for mutual TLS), as PEM files in a directory of their own.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::error::TestbedError;
use crate::process::ManagedDir;

/// A CA and the certificates it signed, written as PEM files. The files
/// (and their directory) are removed when this is dropped.
pub struct TlsFiles {
    dir: ManagedDir,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsFiles")
            .field("dir", &self.dir.path())
            .finish()
    }
}

fn failed(what: &str, e: rcgen::Error) -> TestbedError {
    TestbedError::protocol(format!("making the test {what}"), e.to_string())
}

impl TlsFiles {
    /// A fresh CA, a server certificate (`127.0.0.1`, `localhost`; server
    /// and client auth, as etcd's members also dial each other with it)
    /// and a client certificate (CN `distlock-test`), all signed by the CA.
    pub fn generate() -> Result<TlsFiles, TestbedError> {
        let dir = ManagedDir::new("tls")?;
        let mut ca_params =
            CertificateParams::new(Vec::<String>::new()).map_err(|e| failed("CA", e))?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "distlock test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().map_err(|e| failed("CA key", e))?;
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(|e| failed("CA", e))?;
        let leaf = |names: Vec<String>, cn: &str| -> Result<(String, String), TestbedError> {
            let mut params = CertificateParams::new(names).map_err(|e| failed(cn, e))?;
            params.distinguished_name.push(DnType::CommonName, cn);
            params.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            params.extended_key_usages = vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ];
            let key = KeyPair::generate().map_err(|e| failed(cn, e))?;
            let cert = params.signed_by(&key, &ca).map_err(|e| failed(cn, e))?;
            Ok((cert.pem(), key.serialize_pem()))
        };
        let (server_cert, server_key) = leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            "distlock test server",
        )?;
        let (client_cert, client_key) = leaf(vec!["localhost".into()], "distlock-test")?;
        let files = TlsFiles { dir };
        for (path, contents) in [
            (files.ca(), ca.pem()),
            (files.server_cert(), server_cert.clone()),
            (files.server_key(), server_key.clone()),
            (files.client_cert(), client_cert),
            (files.client_key(), client_key),
            // Key and certificate in one file, for servers that want that.
            (files.server_pem(), format!("{server_key}{server_cert}")),
        ] {
            std::fs::write(&path, contents)
                .map_err(|e| TestbedError::io(format!("writing {}", path.display()), e))?;
        }
        Ok(files)
    }

    /// One set for the whole test process, made on first use, that every
    /// TLS server of the testbed uses (so that one client configuration
    /// reaches all the nodes of a Redlock set or a cluster).
    pub fn shared() -> Result<&'static TlsFiles, TestbedError> {
        static SHARED: std::sync::OnceLock<TlsFiles> = std::sync::OnceLock::new();
        if let Some(files) = SHARED.get() {
            return Ok(files);
        }
        let files = TlsFiles::generate()?;
        Ok(SHARED.get_or_init(|| files))
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate (PEM): what clients trust.
    pub fn ca(&self) -> PathBuf {
        self.file("ca.pem")
    }

    /// The server certificate (PEM).
    pub fn server_cert(&self) -> PathBuf {
        self.file("server.pem")
    }

    /// The server's private key (PEM, PKCS#8).
    pub fn server_key(&self) -> PathBuf {
        self.file("server-key.pem")
    }

    /// The server's key followed by its certificate, in one PEM file.
    pub fn server_pem(&self) -> PathBuf {
        self.file("server-key-and-cert.pem")
    }

    /// The client certificate (PEM), for mutual TLS.
    pub fn client_cert(&self) -> PathBuf {
        self.file("client.pem")
    }

    /// The client's private key (PEM, PKCS#8).
    pub fn client_key(&self) -> PathBuf {
        self.file("client-key.pem")
    }
}
