//! The server's client for kubelets, as kube-apiserver's (`pkg/kubelet/client`): HTTPS,
//! presenting a client certificate the cluster CA signed (common name
//! `kube-apiserver-kubelet-client`, organization `system:masters`, as kube-apiserver's
//! `--kubelet-client-certificate`), and not verifying the kubelet's serving certificate
//! (kube-apiserver's behaviour without `--kubelet-certificate-authority`). HTTP/1.1, one
//! connection per request; `GET`s for `pods/log`, upgrade requests for `pods/exec` and
//! `pods/attach`.
//!
//! # Errors
//! Failures read as Go's `net/http` words them (kube-apiserver answers them as they are):
//! `dial tcp 127.0.0.1:10250: connect: connection refused`, `dial tcp 10.0.0.1:10250: i/o
//! timeout` (30 s, client-go's dial timeout), `net/http: TLS handshake timeout` (10 s),
//! `remote error: tls: bad certificate`, `EOF`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{AlertDescription, DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::credentials::cluster_ca::ClusterCa;
use crate::error::Error;

/// The common name of the client certificate presented to kubelets.
pub(crate) const CLIENT_CN: &str = "kube-apiserver-kubelet-client";
/// Its organization (the group a kubelet's authorizer sees).
pub(crate) const CLIENT_ORG: &str = "system:masters";

/// client-go's dial timeout (`utilnet.SetTransportDefaults`).
const DIAL_TIMEOUT: Duration = Duration::from_secs(30);
/// client-go's TLS handshake timeout.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects to kubelets with the server's kubelet client certificate.
pub(crate) struct KubeletClient {
    connector: tokio_rustls::TlsConnector,
}

/// Why a request to a kubelet failed; `Display` is Go's text for the same failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum KubeletError {
    /// The host name did not resolve.
    #[error("dial tcp: lookup {host}: no such host")]
    Lookup {
        /// The host asked for.
        host: String,
    },
    /// No TCP connection could be made.
    #[error("dial tcp {addr}: {reason}")]
    Dial {
        /// `host:port` (IPv6 in brackets).
        addr: String,
        /// Go's words: `connect: connection refused`, `i/o timeout`.
        reason: String,
    },
    /// The TLS handshake did not finish in time.
    #[error("net/http: TLS handshake timeout")]
    HandshakeTimeout,
    /// The TLS handshake or the exchange failed (`remote error: tls: bad certificate`).
    #[error("{0}")]
    Tls(String),
    /// The HTTP exchange failed (`EOF`: the connection closed before an answer).
    #[error("{0}")]
    Http(String),
}

/// Accepts any serving certificate, but still checks the handshake signatures made with it
/// (what Go's `InsecureSkipVerify` does).
#[derive(Debug)]
struct AnyServerCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

impl KubeletClient {
    /// A client presenting a new certificate from `ca`.
    pub(crate) fn new(ca: &ClusterCa) -> Result<KubeletClient, Error> {
        let cert = ca.issue_client(CLIENT_CN, &[CLIENT_ORG])?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls_err = |e: rustls::Error| Error::Keygen {
            what: "kubelet client TLS configuration",
            source: Box::new(e),
        };
        let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(tls_err)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServerCertificate(provider)))
            .with_client_auth_cert(vec![cert.der.clone()], cert.private_key())
            .map_err(tls_err)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(KubeletClient {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    /// `GET https://{host}:{port}{path_and_query}`: the kubelet's response head, with a body
    /// that streams as the kubelet writes it. The connection closes when the body is dropped
    /// (the returned guard goes with it) or `stop` is cancelled.
    ///
    /// # Errors
    /// [`KubeletError`] with Go's text when resolving, connecting, the handshake or the
    /// exchange fails.
    pub(crate) async fn get(
        &self,
        host: &str,
        port: u16,
        path_and_query: &str,
        stop: CancellationToken,
    ) -> Result<(http::Response<Incoming>, DropGuard), KubeletError> {
        let req = http::Request::get(path_and_query)
            .header(http::header::HOST, join_host_port(host, port))
            .header(http::header::USER_AGENT, "Go-http-client/1.1")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .map_err(|e| KubeletError::Http(e.to_string()))?;
        self.send(host, port, req, stop).await
    }

    /// `{method} https://{host}:{port}{path_and_query}` carrying `upgrade_headers` (an
    /// `Upgrade`, `Connection` and `Sec-WebSocket-*` request): the kubelet's response head.
    /// On `101 Switching Protocols`, `hyper::upgrade::on(response)` yields the kubelet's side
    /// of the upgraded connection (hold the guard until it has: dropping it earlier closes the
    /// connection), which stays open while it is held. Otherwise the connection closes when
    /// the body and the guard are dropped or `stop` is cancelled.
    ///
    /// # Errors
    /// As [`KubeletClient::get`].
    pub(crate) async fn upgrade(
        &self,
        host: &str,
        port: u16,
        method: &http::Method,
        path_and_query: &str,
        upgrade_headers: &http::HeaderMap,
        stop: CancellationToken,
    ) -> Result<(http::Response<Incoming>, DropGuard), KubeletError> {
        let mut req = http::Request::builder()
            .method(method.clone())
            .uri(path_and_query)
            .header(http::header::HOST, join_host_port(host, port))
            .header(http::header::USER_AGENT, "Go-http-client/1.1")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .map_err(|e| KubeletError::Http(e.to_string()))?;
        for (name, value) in upgrade_headers {
            req.headers_mut().append(name, value.clone());
        }
        self.send(host, port, req, stop).await
    }

    /// Dials, shakes hands and sends `req` on a new HTTP/1.1 connection (upgrades allowed).
    async fn send(
        &self,
        host: &str,
        port: u16,
        req: http::Request<http_body_util::Empty<bytes::Bytes>>,
        stop: CancellationToken,
    ) -> Result<(http::Response<Incoming>, DropGuard), KubeletError> {
        let tcp = dial(host, port).await?;
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| KubeletError::Tls(format!("tls: {e}")))?;
        let tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, self.connector.connect(name, tcp))
            .await
            .map_err(|_| KubeletError::HandshakeTimeout)?
            .map_err(|e| KubeletError::Tls(io_text(&e)))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| http_error(&e))?;
        let done = CancellationToken::new();
        let ended = done.clone();
        tokio::spawn(async move {
            // `with_upgrades`: after a 101 the connection's I/O is handed to the upgrade
            // instead of being closed.
            tokio::select! {
                _ = conn.with_upgrades() => {}
                () = ended.cancelled() => {}
                () = stop.cancelled() => {}
            }
        });
        let guard = done.drop_guard();
        let resp = sender.send_request(req).await.map_err(|e| http_error(&e))?;
        Ok((resp, guard))
    }
}

/// `host:port`, with an IPv6 address in brackets (Go's `net.JoinHostPort`).
pub(crate) fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Resolves `host` and connects to its first address that answers, within [`DIAL_TIMEOUT`].
async fn dial(host: &str, port: u16) -> Result<TcpStream, KubeletError> {
    let target = join_host_port(host, port);
    let attempt = async {
        let addrs: Vec<SocketAddr> = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((host, port))
                .await
                .map(Iterator::collect)
                .unwrap_or_default(),
        };
        if addrs.is_empty() {
            return Err(KubeletError::Lookup {
                host: host.to_string(),
            });
        }
        let mut last = None;
        for addr in addrs {
            match TcpStream::connect(addr).await {
                Ok(s) => return Ok(s),
                Err(e) => last = Some((addr, e)),
            }
        }
        Err(match last {
            Some((addr, e)) => KubeletError::Dial {
                addr: addr.to_string(),
                reason: format!("connect: {}", errno_text(&e)),
            },
            None => KubeletError::Lookup {
                host: host.to_string(),
            },
        })
    };
    tokio::time::timeout(DIAL_TIMEOUT, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(KubeletError::Dial {
                addr: target,
                reason: "i/o timeout".into(),
            })
        })
}

/// An OS error as Go's `syscall.Errno` prints it: `connection refused`.
fn errno_text(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::ConnectionRefused {
        return "connection refused".into();
    }
    let text = e.to_string();
    let text = match text.find(" (os error") {
        Some(i) => &text[..i],
        None => &text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// An I/O error of the TLS stream: a rustls alert as Go words it, else the error's text.
fn io_text(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        return "EOF".into();
    }
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => tls_text(tls),
        None => errno_text(e),
    }
}

/// A hyper error, with a TLS or I/O cause found in its chain worded as Go does.
fn http_error(e: &hyper::Error) -> KubeletError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(tls) = s.downcast_ref::<rustls::Error>() {
            return KubeletError::Tls(tls_text(tls));
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return KubeletError::Tls(io_text(io));
        }
        source = s.source();
    }
    if e.is_incomplete_message() || e.is_closed() || e.is_canceled() {
        return KubeletError::Http("EOF".into());
    }
    KubeletError::Http(e.to_string())
}

/// A rustls error in Go's words where Go has them (`remote error: tls: bad certificate`).
fn tls_text(e: &rustls::Error) -> String {
    let rustls::Error::AlertReceived(alert) = e else {
        return format!("tls: {e}");
    };
    let words = match alert {
        AlertDescription::BadCertificate => "bad certificate",
        AlertDescription::UnknownCA => "unknown certificate authority",
        AlertDescription::CertificateRequired => "certificate required",
        AlertDescription::CertificateExpired => "expired certificate",
        AlertDescription::CertificateRevoked => "revoked certificate",
        AlertDescription::CertificateUnknown => "unknown certificate",
        AlertDescription::UnsupportedCertificate => "unsupported certificate",
        AlertDescription::HandshakeFailure => "handshake failure",
        AlertDescription::AccessDenied => "access denied",
        AlertDescription::DecryptError => "error decrypting message",
        AlertDescription::ProtocolVersion => "protocol version not supported",
        AlertDescription::InternalError => "internal error",
        AlertDescription::NoApplicationProtocol => "no application protocol",
        other => return format!("remote error: tls: {other:?}"),
    };
    format!("remote error: tls: {words}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_host_is_bracketed_as_go_joins_it() {
        assert_eq!(join_host_port("::1", 10250), "[::1]:10250");
        assert_eq!(join_host_port("node-1", 10250), "node-1:10250");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn os_errors_read_as_go_prints_errno_values() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(errno_text(&refused), "connection refused");
        let unreachable = std::io::Error::from_raw_os_error(101);
        assert_eq!(errno_text(&unreachable), "network is unreachable");
    }

    #[test]
    fn a_received_alert_reads_as_a_go_remote_error() {
        let e = rustls::Error::AlertReceived(AlertDescription::UnknownCA);
        assert_eq!(
            tls_text(&e),
            "remote error: tls: unknown certificate authority"
        );
    }

    #[tokio::test]
    async fn a_refused_connection_reads_as_go_dial_error() {
        // Bind and drop a listener: its port is (very likely) closed afterwards.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let err = dial("127.0.0.1", port).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("dial tcp 127.0.0.1:{port}: connect: connection refused")
        );
    }
}
