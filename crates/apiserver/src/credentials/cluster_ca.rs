//! The cluster CA, generated at start (ECDSA P-256, rcgen): it signs the TLS serving
//! certificate (`tls.rs`), the client certificate the server presents to kubelets
//! (`kubelet_client.rs`, like kube-apiserver's `--kubelet-client-certificate`) and the client
//! certificates [`ApiServer::issue_client_certificate`](crate::ApiServer::issue_client_certificate)
//! hands out; it is what ConfigMap `kube-root-ca.crt` publishes. One CA for all of them, as
//! kubeadm's `ca.crt`.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::error::Error;

/// The common name of the cluster CA certificate, before its `@<unix seconds>-<random>`
/// suffix (as Kubernetes names its self-signed CAs, `host-ca@1700000000`): two servers' CAs
/// never share a subject, so a peer trusting one names the other unknown.
const CA_NAME: &str = "nodelet-apiserver-ca";

/// The generated CA: its key never leaves this type.
pub(crate) struct ClusterCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate signed by the cluster CA and its private key.
pub(crate) struct IssuedCert {
    /// The certificate, DER.
    pub(crate) der: CertificateDer<'static>,
    /// The certificate, PEM.
    pub(crate) pem: String,
    /// The private key, PKCS#8 DER.
    key_der: Vec<u8>,
    /// The private key, PKCS#8 PEM.
    pub(crate) key_pem: String,
}

impl std::fmt::Debug for IssuedCert {
    /// The key is a secret: only the certificate's size is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedCert")
            .field("der_bytes", &self.der.len())
            .finish_non_exhaustive()
    }
}

pub(crate) fn keygen(what: &'static str) -> impl Fn(rcgen::Error) -> Error {
    move |e| Error::Keygen {
        what,
        source: Box::new(e),
    }
}

impl ClusterCa {
    /// A new CA key and self-signed CA certificate.
    pub(crate) fn generate() -> Result<ClusterCa, Error> {
        let key = KeyPair::generate().map_err(keygen("cluster CA key"))?;
        let mut params = CertificateParams::new(Vec::<String>::new())
            .map_err(keygen("cluster CA certificate"))?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let suffix: u32 = rand::random();
        let cn = format!("{CA_NAME}@{}-{suffix:08x}", chrono::Utc::now().timestamp());
        params.distinguished_name.push(DnType::CommonName, cn);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer =
            CertifiedIssuer::self_signed(params, key).map_err(keygen("cluster CA certificate"))?;
        Ok(ClusterCa { issuer })
    }

    /// The CA certificate, PEM.
    pub(crate) fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA certificate, DER.
    pub(crate) fn der(&self) -> &CertificateDer<'static> {
        self.issuer.der()
    }

    /// A client certificate (`clientAuth`) with common name `cn` and one organization per
    /// entry of `orgs`: the user name and groups an X.509 authenticator reads.
    pub(crate) fn issue_client(&self, cn: &str, orgs: &[&str]) -> Result<IssuedCert, Error> {
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(keygen("client certificate"))?;
        params.distinguished_name.push(DnType::CommonName, cn);
        for o in orgs {
            params.distinguished_name.push(DnType::OrganizationName, *o);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        self.issue(params, "client certificate")
    }

    /// A serving certificate (`serverAuth`) for these DNS names and IP addresses.
    pub(crate) fn issue_server(&self, cn: &str, sans: &[&str]) -> Result<IssuedCert, Error> {
        let sans: Vec<String> = sans.iter().map(|s| (*s).to_string()).collect();
        let mut params = CertificateParams::new(sans).map_err(keygen("TLS server certificate"))?;
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        self.issue(params, "TLS server certificate")
    }

    fn issue(&self, params: CertificateParams, what: &'static str) -> Result<IssuedCert, Error> {
        let key = KeyPair::generate().map_err(keygen(what))?;
        let cert = params.signed_by(&key, &self.issuer).map_err(keygen(what))?;
        Ok(IssuedCert {
            der: cert.der().clone(),
            pem: cert.pem(),
            key_der: key.serialize_der(),
            key_pem: key.serialize_pem(),
        })
    }
}

impl IssuedCert {
    /// The private key, as rustls takes it.
    pub(crate) fn private_key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }
}
