//! TLS of the kubelet API: the serving certificate (from `--tls-cert-file` and
//! `--tls-private-key-file`, else one made at start), client certificates asked for but judged
//! per request, and [`TlsListener`], which completes handshakes concurrently.
//!
//! # Client certificates
//!
//! As the kubelet (Go's `tls.RequestClientCert`), the handshake asks for a client certificate
//! and accepts any, checking only that the client holds its key; whether the chain leads to
//! the client CA is decided per request by [`verify_client`] (the kubelet's x509
//! authenticator). A certificate of another CA therefore gets `401 Unauthorized` (or the
//! request goes on to the bearer token), not a failed handshake. Without a client CA no
//! certificate is asked for.
//!
//! # The certificate made at start
//!
//! As the kubelet's `GenerateSelfSignedCertKey`: a CA `<node>-ca@<unix time>` and, signed by
//! it, a server certificate `<node>@<unix time>` for the node name (a DNS name, or an IP
//! address if it is one) and the node's IP addresses, valid from the day before for a year.
//! The kubelet writes the pair to its certificate directory; nodelet keeps it in memory, so
//! each start presents a new one.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use chrono::{Datelike as _, Days, Utc};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::debug;

use crate::error::Error;

/// A client that has not completed its handshake after this long is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS side of the server: the acceptor and the client CA's verifier (if any).
pub(super) struct ServerTls {
    /// Presents the serving certificate.
    pub(super) acceptor: TlsAcceptor,
    /// Verifies a client's chain against `--client-ca-file`; `None` without one.
    pub(super) client_ca: Option<Arc<dyn ClientCertVerifier>>,
}

/// Where the serving certificate and the client CA come from.
pub(super) struct TlsFiles<'a> {
    pub(super) cert: Option<&'a Path>,
    pub(super) key: Option<&'a Path>,
    pub(super) client_ca: Option<&'a Path>,
}

/// Accepts TCP connections and hands over those whose TLS handshake completed; handshakes run
/// in tasks of their own, so a slow client holds up no other.
pub(super) struct TlsListener {
    connections: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

/// A connection's client: its address and the certificates it presented (the handshake only
/// proved that it holds the first one's key).
#[derive(Debug, Clone)]
pub(super) struct Peer {
    pub(super) addr: SocketAddr,
    pub(super) certificates: Arc<[CertificateDer<'static>]>,
}

/// The acceptor for `files`, with a certificate made for `node_name` and `node_ips` when no
/// serving certificate is given.
///
/// # Errors
/// Only one of the certificate and key files given; a file unreadable or without a PEM block of
/// its kind; a key that does not match the certificate.
pub(super) fn server_tls(
    files: &TlsFiles<'_>,
    node_name: &str,
    node_ips: &[IpAddr],
) -> Result<ServerTls, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let (chain, key) = match (files.cert, files.key) {
        (Some(cert), Some(key)) => (read_chain(cert, "--tls-cert-file")?, read_key(key)?),
        (None, None) => self_signed(node_name, node_ips)?,
        _ => return Err(Error::CertificateWithoutKey),
    };
    let client_ca = match files.client_ca {
        Some(path) => Some(client_ca_verifier(path, provider.clone())?),
        None => None,
    };
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error("TLS protocol versions", e))?;
    let builder = match &client_ca {
        Some(verifier) => {
            builder.with_client_cert_verifier(Arc::new(RequestClientCert(verifier.clone())))
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| tls_error("the serving certificate and key do not go together", e))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(ServerTls {
        acceptor: TlsAcceptor::from(Arc::new(config)),
        client_ca,
    })
}

/// Whether `peer`'s certificate chain leads to the client CA and may be used by a client
/// (the kubelet's x509 authenticator). Returns the verified certificate, `None` when the client
/// presented none.
///
/// # Errors
/// The chain does not verify (unknown issuer, expired, not for client use), as rustls says.
pub(super) fn verify_client<'a>(
    verifier: &dyn ClientCertVerifier,
    peer: &'a Peer,
) -> Result<Option<&'a CertificateDer<'static>>, rustls::Error> {
    let Some((end_entity, intermediates)) = peer.certificates.split_first() else {
        return Ok(None);
    };
    verifier.verify_client_cert(end_entity, intermediates, UnixTime::now())?;
    Ok(Some(end_entity))
}

impl TlsListener {
    /// Accepts on `listener` until `shutdown`; the accept loop and the handshakes are tasks of
    /// `tracker`.
    ///
    /// # Errors
    /// The listener's address cannot be read.
    pub(super) fn start(
        listener: TcpListener,
        acceptor: TlsAcceptor,
        shutdown: CancellationToken,
        tracker: &TaskTracker,
    ) -> io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, connections) = mpsc::channel(64);
        let handshakes = tracker.clone();
        tracker.spawn(async move {
            loop {
                let (tcp, remote) = tokio::select! {
                    () = shutdown.cancelled() => return,
                    accepted = listener.accept() => match accepted {
                        Ok(accepted) => accepted,
                        Err(error) => {
                            // Out of file descriptors, say: let some close.
                            debug!(%error, "kubelet API: accept failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                };
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                let shutdown = shutdown.clone();
                handshakes.spawn(async move {
                    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp));
                    let result = tokio::select! {
                        () = shutdown.cancelled() => return,
                        result = handshake => result,
                    };
                    match result {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, remote)).await;
                        }
                        Ok(Err(error)) => {
                            debug!(%remote, %error, "kubelet API: TLS handshake failed")
                        }
                        Err(_) => debug!(%remote, "kubelet API: TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self { connections, local })
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.connections.recv().await {
            Some(connection) => connection,
            // The accept loop ended (shutdown): the server stops on the same signal.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}

impl Connected<IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        let certificates = stream
            .io()
            .get_ref()
            .1
            .peer_certificates()
            .map(<[CertificateDer<'static>]>::to_vec)
            .unwrap_or_default();
        Self {
            addr: *stream.remote_addr(),
            certificates: certificates.into(),
        }
    }
}

/// Asks for a client certificate and takes any whose key the client holds (Go's
/// `tls.RequestClientCert`); the chain is judged later by [`verify_client`].
#[derive(Debug)]
struct RequestClientCert(Arc<dyn ClientCertVerifier>);

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

fn tls_error(step: &'static str, error: rustls::Error) -> Error {
    Error::Tls {
        step,
        source: Box::new(error),
    }
}

fn read_chain(path: &Path, flag: &'static str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let chain = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| Error::ReadPem {
            flag,
            path: path.to_owned(),
            source: Box::new(e),
        })?;
    if chain.is_empty() {
        return Err(Error::NoCertificate {
            flag,
            path: path.to_owned(),
        });
    }
    Ok(chain)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| Error::ReadPem {
        flag: "--tls-private-key-file",
        path: path.to_owned(),
        source: Box::new(e),
    })
}

fn client_ca_verifier(
    path: &Path,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, Error> {
    let refused = |source: Box<dyn std::error::Error + Send + Sync>| Error::ClientCa {
        path: path.to_owned(),
        source,
    };
    let mut roots = RootCertStore::empty();
    for cert in read_chain(path, "--client-ca-file")? {
        roots.add(cert).map_err(|e| refused(Box::new(e)))?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| refused(Box::new(e)))
}

/// An [`Error::MakeCertificate`] for `step`.
fn making(step: impl Into<String>) -> impl FnOnce(rcgen::Error) -> Error {
    let step = step.into();
    move |e| Error::MakeCertificate {
        step,
        source: Box::new(e),
    }
}

/// A CA and a serving certificate it signed for `node_name` and `node_ips` (module docs).
fn self_signed(
    node_name: &str,
    node_ips: &[IpAddr],
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), Error> {
    let now = Utc::now();
    let stamp = now.timestamp();
    let from = now.checked_sub_days(Days::new(1)).unwrap_or(now);
    let until = from.checked_add_days(Days::new(365)).unwrap_or(from);
    let day = |t: chrono::DateTime<Utc>| {
        let month = u8::try_from(t.month()).unwrap_or(1);
        let day = u8::try_from(t.day()).unwrap_or(1);
        rcgen::date_time_ymd(t.year(), month, day)
    };
    let ca_key = KeyPair::generate().map_err(making("generating the serving CA key"))?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, format!("{node_name}-ca@{stamp}"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    ca.not_before = day(from);
    ca.not_after = day(until);
    let ca_cert = ca
        .self_signed(&ca_key)
        .map_err(making("signing the serving CA certificate"))?;
    let issuer = Issuer::new(ca, ca_key);

    let mut names = vec![node_name.to_owned()];
    for ip in node_ips {
        let ip = ip.to_string();
        if !names.contains(&ip) {
            names.push(ip);
        }
    }
    let key = KeyPair::generate().map_err(making("generating the serving key"))?;
    let mut params = CertificateParams::new(names)
        .map_err(making(format!("node name {node_name:?} in a certificate")))?;
    params
        .distinguished_name
        .push(DnType::CommonName, format!("{node_name}@{stamp}"));
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.not_before = day(from);
    params.not_after = day(until);
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(making("signing the serving certificate"))?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    Ok((vec![cert.der().clone(), ca_cert.der().clone()], key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_parser::prelude::{FromDer as _, GeneralName, X509Certificate};

    #[test]
    fn the_certificate_made_at_start_names_the_node_and_its_ips_and_is_signed_by_its_ca() {
        let ips: Vec<IpAddr> = vec!["10.0.0.7".parse().unwrap(), "fd00::7".parse().unwrap()];
        let (chain, _key) = self_signed("node-7", &ips).unwrap();
        assert_eq!(chain.len(), 2);
        let (_, cert) = X509Certificate::from_der(&chain[0]).unwrap();
        let (_, ca) = X509Certificate::from_der(&chain[1]).unwrap();
        let cn = |c: &X509Certificate<'_>| {
            c.subject()
                .iter_common_name()
                .next()
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        };
        assert!(cn(&cert).starts_with("node-7@"), "{}", cn(&cert));
        assert!(cn(&ca).starts_with("node-7-ca@"), "{}", cn(&ca));
        assert_eq!(cert.issuer(), ca.subject());
        cert.verify_signature(Some(ca.public_key())).unwrap();
        let sans = cert.subject_alternative_name().unwrap().unwrap();
        let names: Vec<String> = sans
            .value
            .general_names
            .iter()
            .map(|n| match n {
                GeneralName::DNSName(d) => format!("dns:{d}"),
                GeneralName::IPAddress(b) => format!("ip:{b:?}"),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            names,
            [
                "dns:node-7".to_owned(),
                format!("ip:{:?}", [10u8, 0, 0, 7]),
                format!(
                    "ip:{:?}",
                    "fd00::7".parse::<std::net::Ipv6Addr>().unwrap().octets()
                ),
            ]
        );
        let validity = cert.validity();
        let days = (validity.not_after.timestamp() - validity.not_before.timestamp()) / 86_400;
        assert_eq!(days, 365);
    }

    #[test]
    fn a_node_name_that_is_an_ip_address_is_an_ip_san() {
        let (chain, _key) = self_signed("192.0.2.1", &["192.0.2.1".parse().unwrap()]).unwrap();
        let (_, cert) = X509Certificate::from_der(&chain[0]).unwrap();
        let sans = cert.subject_alternative_name().unwrap().unwrap();
        assert_eq!(
            sans.value.general_names,
            [GeneralName::IPAddress(&[192, 0, 2, 1])]
        );
    }

    #[test]
    fn a_certificate_file_without_its_key_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("kubelet.crt");
        let files = TlsFiles {
            cert: Some(&cert),
            key: None,
            client_ca: None,
        };
        let error = server_tls(&files, "n", &[]).err().unwrap();
        assert_eq!(
            error.to_string(),
            "--tls-cert-file and --tls-private-key-file must be given together"
        );
    }

    #[test]
    fn a_client_ca_file_without_a_certificate_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.crt");
        std::fs::write(&ca, "not a certificate\n").unwrap();
        let files = TlsFiles {
            cert: None,
            key: None,
            client_ca: Some(&ca),
        };
        let error = server_tls(&files, "n", &[]).err().unwrap();
        assert_eq!(
            error.to_string(),
            format!("--client-ca-file {} holds no certificate", ca.display())
        );
    }
}
