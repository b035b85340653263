//! Optional TLS ([`Config::tls`](crate::Config::tls)): a server certificate for `localhost`,
//! `127.0.0.1` and `::1` signed at start by the cluster CA (`cluster_ca.rs`), served with
//! rustls on ring; HTTP/2 and HTTP/1.1 are offered by ALPN.

use std::sync::Arc;

use crate::credentials::cluster_ca::ClusterCa;
use crate::error::Error;

/// The acceptor serving the server certificate the cluster CA signed.
pub(crate) struct TlsMaterial {
    acceptor: tokio_rustls::TlsAcceptor,
}

impl TlsMaterial {
    /// (1) a server key and certificate signed by `ca`, (2) a rustls server configuration
    /// presenting the chain.
    pub(crate) fn generate(ca: &ClusterCa) -> Result<TlsMaterial, Error> {
        // (1)
        let cert = ca.issue_server("nodelet-apiserver", &["localhost", "127.0.0.1", "::1"])?;
        // (2)
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls_err = |e: rustls::Error| Error::Keygen {
            what: "TLS server configuration",
            source: Box::new(e),
        };
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(tls_err)?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der.clone(), ca.der().clone()], cert.private_key())
            .map_err(tls_err)?;
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(TlsMaterial {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
        })
    }

    /// The acceptor serving the server certificate.
    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        self.acceptor.clone()
    }
}
