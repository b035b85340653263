//! Optional TLS ([`Config::tls`](crate::Config::tls)): a self-signed CA and a server
//! certificate for `localhost`, `127.0.0.1` and `::1` generated at start (ECDSA P-256, rcgen),
//! served with rustls on ring; HTTP/2 and HTTP/1.1 are offered by ALPN.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::error::Error;

/// The generated CA and the acceptor serving the server certificate it signed.
pub(crate) struct TlsMaterial {
    ca_pem: String,
    #[cfg_attr(not(feature = "client"), allow(dead_code))]
    ca_der: Vec<u8>,
    acceptor: tokio_rustls::TlsAcceptor,
}

fn keygen(what: &'static str) -> impl Fn(rcgen::Error) -> Error {
    move |e| Error::Keygen {
        what,
        source: Box::new(e),
    }
}

impl TlsMaterial {
    /// (1) a CA key and self-signed CA certificate, (2) a server key and certificate signed by
    /// it, (3) a rustls server configuration presenting the chain.
    pub(crate) fn generate() -> Result<TlsMaterial, Error> {
        // (1)
        let ca_key = KeyPair::generate().map_err(keygen("TLS CA key"))?;
        let mut ca_params =
            CertificateParams::new(Vec::<String>::new()).map_err(keygen("TLS CA certificate"))?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "nodelet-apiserver-ca");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params
            .self_signed(&ca_key)
            .map_err(keygen("TLS CA certificate"))?;
        let issuer = Issuer::new(ca_params, ca_key);
        // (2)
        let key = KeyPair::generate().map_err(keygen("TLS server key"))?;
        let mut params = CertificateParams::new(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ])
        .map_err(keygen("TLS server certificate"))?;
        params
            .distinguished_name
            .push(DnType::CommonName, "nodelet-apiserver");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(keygen("TLS server certificate"))?;
        // (3)
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls_err = |e: rustls::Error| Error::Keygen {
            what: "TLS server configuration",
            source: Box::new(e),
        };
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(tls_err)?
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone(), ca_cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .map_err(tls_err)?;
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(TlsMaterial {
            ca_pem: ca_cert.pem(),
            ca_der: ca_cert.der().to_vec(),
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
        })
    }

    /// The CA certificate, DER.
    #[cfg_attr(not(feature = "client"), allow(dead_code))]
    pub(crate) fn ca_der(&self) -> Vec<u8> {
        self.ca_der.clone()
    }

    /// The acceptor serving the server certificate.
    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        self.acceptor.clone()
    }

    /// The CA certificate, PEM.
    pub(crate) fn ca_pem(&self) -> &str {
        &self.ca_pem
    }
}
