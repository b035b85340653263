//! [`HttpGet`]: the kubelet's HTTP GET for `httpGet` handlers (its `pkg/probe/http` request
//! and the lifecycle runner's client), over hyper.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Container, HTTPGetAction};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::error::HttpError;
use super::port::resolve_container_port;
use super::tls;

/// How much of a response body is read (the kubelet's 10 KiB); the rest is left unread.
pub const MAX_BODY: usize = 10 * 1024;

/// Redirects followed at most (Go's client).
const MAX_REDIRECTS: usize = 10;

/// The Kubernetes version in the `User-Agent` (`kube-<purpose>/<major>.<minor>`).
const KUBE_VERSION: &str = "1.36";

/// One GET request made from an `HTTPGetAction`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpGet {
    https: bool,
    /// The host, without brackets.
    host: String,
    port: u16,
    /// The path and query as Go's `url.URL` prints them ("" for none).
    path: String,
    /// Headers in order, names in Go's canonical form; `Host` not among them.
    headers: Vec<(String, String)>,
    /// A `Host` header's value, sent instead of the URL's host.
    host_header: Option<String>,
}

/// A response: its status and the start of its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The body, up to [`MAX_BODY`].
    pub body: Vec<u8>,
    /// The URL that answered (after redirects on the same host).
    pub url: String,
}

impl HttpResponse {
    /// The `Location` a redirect to another host pointed at is not followed: the 3xx is the
    /// response, as the kubelet's client returns it.
    pub fn is_redirect(&self) -> bool {
        (300..400).contains(&self.status)
    }
}

impl HttpGet {
    /// The request for `action` of `container`: scheme `HTTP` unless `HTTPS`, host the
    /// action's or `pod_ip`, port resolved by [`resolve_container_port`], the action's path
    /// and headers, `User-Agent: kube-<purpose>/1.36` and `Accept: */*` unless given (an
    /// empty `Accept` is dropped), a `Host` header as the request's host.
    ///
    /// # Errors
    /// [`HttpError::Port`] when the port does not resolve.
    pub fn from_action(
        action: &HTTPGetAction,
        container: &Container,
        pod_ip: &str,
        purpose: &str,
    ) -> Result<Self, HttpError> {
        let port = resolve_container_port(&action.port, container)?;
        let host = match action.host.as_deref() {
            Some(h) if !h.is_empty() => h.to_owned(),
            _ => pod_ip.to_owned(),
        };
        let https = action
            .scheme
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case("https"));
        let mut headers: Vec<(String, String)> = action
            .http_headers
            .iter()
            .flatten()
            .map(|h| (canonical_header(&h.name), h.value.clone()))
            .collect();
        let first = |headers: &[(String, String)], name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        if first(&headers, "User-Agent").is_none() {
            headers.push((
                "User-Agent".into(),
                format!("kube-{purpose}/{KUBE_VERSION}"),
            ));
        }
        match first(&headers, "Accept") {
            None => headers.push(("Accept".into(), "*/*".into())),
            Some(v) if v.is_empty() => headers.retain(|(n, _)| n != "Accept"),
            Some(_) => {}
        }
        let host_header = first(&headers, "Host").filter(|h| !h.is_empty());
        headers.retain(|(n, _)| n != "Host");
        // Go sends no `User-Agent` when it is set empty.
        headers.retain(|(n, v)| n != "User-Agent" || !v.is_empty());
        Ok(Self {
            https,
            host,
            port,
            path: url_path(action.path.as_deref().unwrap_or_default()),
            headers,
            host_header,
        })
    }

    /// The same request over plain HTTP (the kubelet's lifecycle fallback when an `https`
    /// hook is answered in HTTP), without an `Authorization` header.
    #[must_use]
    pub fn over_http(&self) -> Self {
        let mut plain = self.clone();
        plain.https = false;
        plain.headers.retain(|(n, _)| n != "Authorization");
        plain
    }

    /// `<scheme>://<host>:<port><path>`, as Go prints the URL.
    pub fn url(&self) -> String {
        format!(
            "{}://{}{}",
            if self.https { "https" } else { "http" },
            self.authority(),
            self.path
        )
    }

    /// `host:port` (an IPv6 host in brackets).
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The request's headers as sent besides `Host`, in order.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// Sends the request and reads the response (redirects on the same host followed, at
    /// most 10), all within `timeout` (none: no limit).
    ///
    /// # Errors
    /// [`HttpError`]: no response (connection, TLS, protocol, too many redirects, timeout).
    pub async fn send(&self, timeout: Option<Duration>) -> Result<HttpResponse, HttpError> {
        let exchange = self.follow();
        match timeout {
            None => exchange.await,
            Some(limit) => tokio::time::timeout(limit, exchange)
                .await
                .unwrap_or_else(|_| {
                    Err(HttpError::Timeout {
                        url: self.url(),
                        timeout: limit,
                    })
                }),
        }
    }

    async fn follow(&self) -> Result<HttpResponse, HttpError> {
        let mut request = self.clone();
        for redirects in 0.. {
            let (response, location) = request.once().await?;
            let next = location.and_then(|l| request.redirect(&l));
            let Some(next) = next else {
                return Ok(response);
            };
            if next.host != self.host {
                // Another host: the redirect itself is the answer (the kubelet's checker).
                return Ok(response);
            }
            if redirects + 1 >= MAX_REDIRECTS {
                return Err(HttpError::TooManyRedirects { url: next.url() });
            }
            request = next;
        }
        Err(HttpError::TooManyRedirects { url: self.url() })
    }

    /// One exchange: the response and, for a redirect status, its `Location`.
    async fn once(&self) -> Result<(HttpResponse, Option<String>), HttpError> {
        let url = self.url();
        let addr = self.resolve().await?;
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| HttpError::Connect {
                url: url.clone(),
                addr: addr.to_string(),
                cause: go_cause(&e),
            })?;
        if !self.https {
            return self.exchange(tcp).await;
        }
        let connector = tls::insecure_connector().map_err(|e| HttpError::Tls {
            url: url.clone(),
            message: e.to_string(),
        })?;
        let name = tls::server_name(&self.host).ok_or_else(|| HttpError::Request {
            url: url.clone(),
            message: format!("invalid host {:?}", self.host),
        })?;
        let (recording, first) = tls::Recording::new(tcp);
        match connector.connect(name, recording).await {
            Ok(stream) => self.exchange(stream).await,
            Err(e) if first.lock().as_slice() == b"HTTP/" => {
                let _ = e;
                Err(HttpError::HttpResponseToHttps { url })
            }
            Err(e) => Err(HttpError::Tls {
                url,
                message: e.to_string(),
            }),
        }
    }

    async fn resolve(&self) -> Result<SocketAddr, HttpError> {
        if let Ok(ip) = self.host.parse::<IpAddr>() {
            return Ok(SocketAddr::new(ip, self.port));
        }
        let not_found = || HttpError::Resolve {
            url: self.url(),
            host: self.host.clone(),
        };
        tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|_| not_found())?
            .next()
            .ok_or_else(not_found)
    }

    async fn exchange<S>(&self, stream: S) -> Result<(HttpResponse, Option<String>), HttpError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let url = self.url();
        let protocol = |e: hyper::Error| HttpError::Protocol {
            url: url.clone(),
            message: e.to_string(),
        };
        let mut builder = http::Request::get(if self.path.is_empty() {
            "/"
        } else {
            self.path.as_str()
        })
        .header(
            http::header::HOST,
            self.host_header.clone().unwrap_or_else(|| self.authority()),
        );
        for (name, value) in &self.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let request = builder
            .body(Empty::<Bytes>::new())
            .map_err(|e| HttpError::Request {
                url: url.clone(),
                message: e.to_string(),
            })?;
        let (mut sender, connection) = http1::Builder::new()
            .title_case_headers(true)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(protocol)?;
        let exchange = async {
            let response = sender.send_request(request).await.map_err(protocol)?;
            let status = response.status().as_u16();
            let location = response
                .headers()
                .get(http::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .filter(|_| matches!(status, 301 | 302 | 303 | 307 | 308))
                .map(str::to_owned);
            let mut body = response.into_body();
            let mut kept = Vec::new();
            while kept.len() < MAX_BODY {
                match body.frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            let room = MAX_BODY - kept.len();
                            kept.extend_from_slice(&data[..data.len().min(room)]);
                        }
                    }
                    Some(Err(e)) => return Err(protocol(e)),
                    None => break,
                }
            }
            Ok((
                HttpResponse {
                    status,
                    body: kept,
                    url: url.clone(),
                },
                location,
            ))
        };
        let mut exchange = std::pin::pin!(exchange);
        let mut connection = std::pin::pin!(connection);
        tokio::select! {
            result = &mut exchange => result,
            ended = &mut connection => match ended {
                // The connection ended first: what the exchange got is all there is.
                Ok(()) => exchange.await,
                Err(e) => Err(protocol(e)),
            },
        }
    }

    /// The request a redirect to `location` makes (`None` when it cannot be followed).
    fn redirect(&self, location: &str) -> Option<Self> {
        let mut next = self.clone();
        let absolute = location.starts_with("http://") || location.starts_with("https://");
        if absolute || location.starts_with("//") {
            let full = if absolute {
                location.to_owned()
            } else {
                format!("{}:{location}", if self.https { "https" } else { "http" })
            };
            let uri: http::Uri = full.parse().ok()?;
            next.https = uri.scheme_str() == Some("https");
            next.host = uri.host()?.trim_matches(['[', ']']).to_owned();
            next.port = uri.port_u16().unwrap_or(if next.https { 443 } else { 80 });
            next.path = uri
                .path_and_query()
                .map(|p| p.as_str().to_owned())
                .filter(|p| p != "/" || full.ends_with('/'))
                .unwrap_or_default();
            // An absolute redirect drops a `Host` override (Go's client).
            next.host_header = None;
        } else if location.starts_with('/') {
            next.path = url_path(location);
        } else {
            let current = self.path.split(['?', '#']).next().unwrap_or_default();
            let dir = current.rsplit_once('/').map_or("", |(d, _)| d);
            next.path = url_path(&format!("{dir}/{location}"));
        }
        Some(next)
    }
}

/// The path (and query) Go's `url.URL` prints for `path` set on a URL with a host: a leading
/// `/` added to a relative path, the fragment dropped, bytes a request line cannot carry
/// escaped.
fn url_path(path: &str) -> String {
    let path = path.split('#').next().unwrap_or_default();
    if path.is_empty() {
        return String::new();
    }
    let mut out = String::with_capacity(path.len() + 1);
    if !path.starts_with('/') {
        out.push('/');
    }
    for b in path.bytes() {
        if b <= 0x20 || b >= 0x7f || b"\"<>\\^`{|}".contains(&b) {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

/// Go's canonical header name: the first letter and each letter after `-` upper case, the
/// rest lower case; a name with a byte outside HTTP's token characters stays as it is.
fn canonical_header(name: &str) -> String {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return name.to_owned();
    }
    let mut upper = true;
    name.chars()
        .map(|c| {
            let out = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            out
        })
        .collect()
}

/// The system's reason as Go prints it (`connection refused`).
fn go_cause(error: &std::io::Error) -> String {
    match error.raw_os_error() {
        Some(code) => {
            let desc = nix::errno::Errno::from_raw(code).desc();
            let mut chars = desc.chars();
            match chars.next() {
                Some(first) => first.to_lowercase().chain(chars).collect(),
                None => desc.to_owned(),
            }
        }
        None => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerPort, HTTPHeader};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    fn action(value: serde_json::Value) -> HTTPGetAction {
        serde_json::from_value(value).unwrap()
    }

    fn container() -> Container {
        Container {
            name: "c".into(),
            ports: Some(vec![ContainerPort {
                name: Some("web".into()),
                container_port: 8080,
                ..ContainerPort::default()
            }]),
            ..Container::default()
        }
    }

    #[test]
    fn a_request_is_made_as_the_kubelet_makes_it() {
        let get = HttpGet::from_action(
            &action(serde_json::json!({"path": "/echo?msg=poststart", "port": "web"})),
            &container(),
            "10.0.0.7",
            "lifecycle",
        )
        .unwrap();
        assert_eq!(get.url(), "http://10.0.0.7:8080/echo?msg=poststart");
        assert_eq!(
            get.headers(),
            [
                ("User-Agent".to_owned(), "kube-lifecycle/1.36".to_owned()),
                ("Accept".to_owned(), "*/*".to_owned())
            ]
        );
        let get = HttpGet::from_action(
            &action(
                serde_json::json!({"path": "healthz", "port": 443, "scheme": "HTTPS",
                "host": "::1", "httpHeaders": [
                    {"name": "x-custom", "value": "1"}, {"name": "accept", "value": ""},
                    {"name": "host", "value": "example.com"}]}),
            ),
            &container(),
            "10.0.0.7",
            "probe",
        )
        .unwrap();
        assert_eq!(get.url(), "https://[::1]:443/healthz");
        assert_eq!(
            get.headers(),
            [
                ("X-Custom".to_owned(), "1".to_owned()),
                ("User-Agent".to_owned(), "kube-probe/1.36".to_owned())
            ]
        );
        assert_eq!(get.host_header.as_deref(), Some("example.com"));
        assert_eq!(get.over_http().url(), "http://[::1]:443/healthz");
        let no_path = HttpGet::from_action(
            &HTTPGetAction {
                port: IntOrString::Int(80),
                http_headers: Some(vec![HTTPHeader {
                    name: "User-Agent".into(),
                    value: "mine".into(),
                }]),
                ..HTTPGetAction::default()
            },
            &container(),
            "10.0.0.7",
            "probe",
        )
        .unwrap();
        assert_eq!(no_path.url(), "http://10.0.0.7:80");
        assert_eq!(no_path.headers()[0].1, "mine");
    }

    #[test]
    fn header_names_are_canonical_as_in_go() {
        assert_eq!(canonical_header("x-forwarded-for"), "X-Forwarded-For");
        assert_eq!(canonical_header("ACCEPT"), "Accept");
        assert_eq!(canonical_header("bad header"), "bad header");
    }

    /// A one-request server on loopback answering each connection with `answer(request)`.
    async fn server(answers: Vec<String>) -> (u16, tokio::task::JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let mut seen = Vec::new();
            for answer in answers {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let mut request = Vec::new();
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = stream.read(&mut buf).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    request.extend_from_slice(&buf[..n]);
                }
                seen.push(String::from_utf8_lossy(&request).into_owned());
                stream.write_all(answer.as_bytes()).await.unwrap();
                let _ = stream.shutdown().await;
            }
            seen
        });
        (port, task)
    }

    fn get(port: u16, path: &str) -> HttpGet {
        HttpGet::from_action(
            &action(serde_json::json!({"path": path, "port": port})),
            &container(),
            "127.0.0.1",
            "probe",
        )
        .unwrap()
    }

    #[tokio::test]
    async fn a_response_is_read_and_redirects_on_the_same_host_followed() {
        let (port, seen) = server(vec![
            "HTTP/1.1 302 Found\r\nLocation: /final\r\nContent-Length: 0\r\n\r\n".into(),
            "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\nboom".into(),
        ])
        .await;
        let response = get(port, "/start").send(None).await.unwrap();
        assert_eq!(response.status, 500);
        assert_eq!(response.body, b"boom");
        assert_eq!(response.url, format!("http://127.0.0.1:{port}/final"));
        let seen = seen.await.unwrap();
        assert!(
            seen[0].starts_with("GET /start HTTP/1.1\r\n"),
            "{}",
            seen[0]
        );
        assert!(seen[0].contains(&format!("Host: 127.0.0.1:{port}\r\n")));
        assert!(seen[0].contains("User-Agent: kube-probe/1.36\r\n"));
        assert!(seen[0].contains("Accept: */*\r\n"));
        assert!(
            seen[1].starts_with("GET /final HTTP/1.1\r\n"),
            "{}",
            seen[1]
        );
    }

    #[tokio::test]
    async fn a_redirect_to_another_host_is_the_response() {
        let (port, _seen) = server(vec![
            "HTTP/1.1 301 Moved\r\nLocation: http://example.invalid/x\r\nContent-Length: 0\r\n\r\n"
                .into(),
        ])
        .await;
        let response = get(port, "/").send(None).await.unwrap();
        assert_eq!(response.status, 301);
        assert!(response.is_redirect());
    }

    #[tokio::test]
    async fn only_the_first_ten_kib_of_a_body_are_read() {
        let body = "x".repeat(MAX_BODY * 2);
        let (port, _seen) = server(vec![format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )])
        .await;
        let response = get(port, "/").send(None).await.unwrap();
        assert_eq!(response.body.len(), MAX_BODY);
    }

    #[tokio::test]
    async fn a_refused_connection_reads_as_go_reports_it() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let error = get(port, "/x").send(None).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "Get \"http://127.0.0.1:{port}/x\": dial tcp 127.0.0.1:{port}: connect: \
                 connection refused"
            )
        );
    }

    #[tokio::test]
    async fn an_https_request_answered_in_plain_http_is_recognised() {
        // A plain HTTP server answers the ClientHello (no request line) with a 400.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let _served = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let _ = stream.read(&mut buf).await.unwrap();
            stream
                .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                .await
                .unwrap();
            let _ = stream.shutdown().await;
        });
        let mut https = get(port, "/");
        https.https = true;
        let error = https.send(None).await.unwrap_err();
        assert!(error.is_http_response_to_https(), "{error}");
        assert_eq!(
            error.to_string(),
            format!(
                "Get \"https://127.0.0.1:{port}/\": http: server gave HTTP response to HTTPS client"
            )
        );
    }

    // The kubelet checks no certificate of a pod: a self-signed one for another name will do.
    #[tokio::test]
    async fn https_accepts_any_certificate() {
        use std::sync::Arc;

        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["someone.else".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut tls = acceptor.accept(tcp).await.unwrap();
            let mut buf = vec![0u8; 4096];
            let n = tls.read(&mut buf).await.unwrap();
            tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await
                .unwrap();
            let _ = tls.shutdown().await;
            String::from_utf8_lossy(&buf[..n]).into_owned()
        });
        let mut https = get(port, "/secure");
        https.https = true;
        let response = https.send(None).await.unwrap();
        assert_eq!(
            (response.status, response.body.as_slice()),
            (200, &b"ok"[..])
        );
        assert!(served.await.unwrap().starts_with("GET /secure HTTP/1.1"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_never_answers_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let error = get(port, "/")
            .send(Some(Duration::from_secs(1)))
            .await
            .unwrap_err();
        assert!(matches!(error, HttpError::Timeout { .. }), "{error}");
        drop(listener);
    }
}
