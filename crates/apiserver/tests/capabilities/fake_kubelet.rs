//! A fake kubelet for the `pods/log` tests: HTTPS on a loopback port that requires a client
//! certificate signed by the CA it is given (as a kubelet's `--client-ca-file`), records what
//! it was asked and by which certificate subject, and answers what the test says: a fixed text
//! or, for `follow`, the chunks a test sends while it holds the stream open; for `pods/exec`,
//! a WebSocket upgrade (the 101 handshake written by hand) that echoes the bytes it gets or
//! plays a minimal `v5.channel.k8s.io` session.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt as _, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::sync::mpsc;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;

/// One request the fake kubelet served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    /// `/containerLogs/ns/pod/container?query`.
    pub(crate) path_and_query: String,
    /// The `Host` header (the address the server dialled).
    pub(crate) host: String,
    /// The client certificate's common name.
    pub(crate) cn: String,
    /// The client certificate's organizations.
    pub(crate) orgs: Vec<String>,
}

/// What the fake kubelet answers.
pub(crate) enum Answer {
    /// Every request: this status and text.
    Text(u16, &'static str),
    /// The first request: 200 and the chunks sent into the channel, ending when its sender
    /// is dropped; later requests: 503.
    Stream(mpsc::Receiver<Bytes>),
    /// Every upgrade request: 101 with the first offered subprotocol, then this session.
    Upgrade(Session),
}

/// What the fake kubelet does on an upgraded connection.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Session {
    /// Writes back every byte it reads until the client closes.
    Echo,
    /// A finished command in `v5.channel.k8s.io`: this text on channel 1 (stdout), a
    /// `Success` status on channel 3, a close frame, then hang up.
    Stdout(&'static str),
}

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key` (RFC 6455 §4.2.2).
pub(crate) fn websocket_accept(key: &str) -> String {
    use base64::Engine as _;
    let mut input = key.as_bytes().to_vec();
    input.extend_from_slice(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &input);
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// An unmasked binary WebSocket frame (server to client) carrying `payload`.
fn server_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x80 | opcode];
    match payload.len() {
        n if n < 126 => f.push(u8::try_from(n).expect("short")),
        n => {
            f.push(126);
            f.extend_from_slice(&u16::try_from(n).expect("fits").to_be_bytes());
        }
    }
    f.extend_from_slice(payload);
    f
}

/// A running fake kubelet; it stops when dropped.
pub(crate) struct FakeKubelet {
    /// The port it listens on (127.0.0.1).
    pub(crate) port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    handshakes_refused: Arc<Mutex<usize>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeKubelet {
    /// Listens on a free loopback port, trusting client certificates from `client_ca_pem`.
    pub(crate) async fn start(client_ca_pem: &str, answer: Answer) -> FakeKubelet {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(client_ca_pem.as_bytes()).expect("CA PEM"))
            .expect("CA root");
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .expect("client verifier");
        let serving =
            rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
                .expect("serving certificate");
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![serving.cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
                    serving.signing_key.serialize_der(),
                )),
            )
            .expect("server config");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handshakes_refused = Arc::new(Mutex::new(0));
        let answer = Arc::new(Mutex::new(Some(answer)));
        let (seen2, refused2) = (seen.clone(), handshakes_refused.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, seen, refused, answer) = (
                    acceptor.clone(),
                    seen2.clone(),
                    refused2.clone(),
                    answer.clone(),
                );
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        *refused.lock().expect("lock") += 1;
                        return;
                    };
                    let (cn, orgs) = subject(tls.get_ref().1.peer_certificates());
                    let service =
                        hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                            let host = req
                                .headers()
                                .get(http::header::HOST)
                                .and_then(|h| h.to_str().ok())
                                .unwrap_or("")
                                .to_string();
                            seen.lock().expect("lock").push(Seen {
                                path_and_query: req
                                    .uri()
                                    .path_and_query()
                                    .map(ToString::to_string)
                                    .unwrap_or_default(),
                                host,
                                cn: cn.clone(),
                                orgs: orgs.clone(),
                            });
                            let resp = match upgrade_session(&answer) {
                                Some(session) => upgrade(req, session),
                                None => respond(&answer),
                            };
                            async move { Ok::<_, std::convert::Infallible>(resp) }
                        });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .with_upgrades()
                        .await;
                });
            }
        });
        FakeKubelet {
            port,
            seen,
            handshakes_refused,
            task,
        }
    }

    /// Every request served so far.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }

    /// TLS handshakes refused so far (a client certificate it does not trust, or none).
    pub(crate) fn handshakes_refused(&self) -> usize {
        *self.handshakes_refused.lock().expect("lock")
    }
}

type Body = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

/// The session to play when the answer is an upgrade.
fn upgrade_session(answer: &Mutex<Option<Answer>>) -> Option<Session> {
    match &*answer.lock().expect("lock") {
        Some(Answer::Upgrade(session)) => Some(*session),
        _ => None,
    }
}

/// 101 with the accept key and the first offered subprotocol; the session runs on the
/// upgraded connection.
fn upgrade(req: hyper::Request<Incoming>, session: Session) -> hyper::Response<Body> {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let accept = websocket_accept(&header("sec-websocket-key"));
    let protocols = header("sec-websocket-protocol");
    let protocol = protocols.split(',').next().unwrap_or("").trim().to_string();
    tokio::spawn(async move {
        let Ok(upgraded) = hyper::upgrade::on(req).await else {
            return;
        };
        let mut io = TokioIo::new(upgraded);
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        match session {
            Session::Echo => {
                let mut buf = [0u8; 4096];
                while let Ok(n) = io.read(&mut buf).await {
                    if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
            Session::Stdout(text) => {
                let mut out = Vec::new();
                out.extend(server_frame(0x2, &[&[1u8][..], text.as_bytes()].concat()));
                let status = br#"{"metadata":{},"status":"Success"}"#;
                out.extend(server_frame(0x2, &[&[3u8][..], &status[..]].concat()));
                out.extend(server_frame(0x8, &1000u16.to_be_bytes()));
                let _ = io.write_all(&out).await;
                let _ = io.flush().await;
                // Let the client read the close frame and answer it before hanging up.
                let mut buf = [0u8; 1024];
                let _ = tokio::time::timeout(super::PATIENCE, io.read(&mut buf)).await;
                let _ = io.shutdown().await;
            }
        }
    });
    let mut resp = hyper::Response::builder()
        .status(101)
        .header(http::header::UPGRADE, "websocket")
        .header(http::header::CONNECTION, "Upgrade")
        .header("sec-websocket-accept", accept);
    if !protocol.is_empty() {
        resp = resp.header("sec-websocket-protocol", protocol);
    }
    resp.body(http_body_util::Empty::new().boxed())
        .expect("response")
}

fn respond(answer: &Mutex<Option<Answer>>) -> hyper::Response<Body> {
    let mut slot = answer.lock().expect("lock");
    let (status, body) = match slot.take() {
        Some(Answer::Text(status, text)) => {
            *slot = Some(Answer::Text(status, text));
            (
                status,
                http_body_util::Full::new(Bytes::from_static(text.as_bytes())).boxed(),
            )
        }
        Some(Answer::Stream(rx)) => {
            let frames = ReceiverStream::new(rx).map(|b| Ok(Frame::data(b)));
            (200, StreamBody::new(frames).boxed())
        }
        Some(Answer::Upgrade(session)) => {
            *slot = Some(Answer::Upgrade(session));
            (
                400,
                http_body_util::Full::new(Bytes::from_static(b"not an upgrade")).boxed(),
            )
        }
        None => (
            503,
            http_body_util::Full::new(Bytes::from_static(b"busy")).boxed(),
        ),
    };
    hyper::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "text/plain")
        .body(body)
        .expect("response")
}

/// The common name and organizations of the client's first certificate.
fn subject(certs: Option<&[CertificateDer<'_>]>) -> (String, Vec<String>) {
    let Some(der) = certs.and_then(<[_]>::first) else {
        return (String::new(), Vec::new());
    };
    let (_, cert) = x509_parser::parse_x509_certificate(der).expect("client certificate");
    let name = cert.subject();
    let cn = name
        .iter_common_name()
        .filter_map(|a| a.as_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    let orgs = name
        .iter_organization()
        .filter_map(|a| a.as_str().ok().map(String::from))
        .collect();
    (cn, orgs)
}
