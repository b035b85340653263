//! Opening one connection: TCP, TLS with ALPN (kube's rustls configuration), then the HTTP/1.1
//! or HTTP/2 handshake, all within the config's `connect_timeout`.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use kube::client::{Body, ConfigExt};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::{Negotiated, Protocol, TransportConfig, TransportError};

/// An established connection's request sender.
pub(crate) enum Sender {
    /// One request at a time; the mutex is never contended (the pool gives an HTTP/1.1
    /// connection to one request at a time), it only lets the sender be shared.
    Http1(tokio::sync::Mutex<http1::SendRequest<Body>>),
    /// Multiplexed; cloned per request.
    Http2(http2::SendRequest<Body>),
}

/// An established connection.
pub(crate) struct Established {
    pub(crate) sender: Sender,
    /// Set when the connection's task ended (closed by either side, or failed).
    pub(crate) closed: Arc<AtomicBool>,
    /// The server's current `SETTINGS_MAX_CONCURRENT_STREAMS` (HTTP/2), `usize::MAX` when
    /// unlimited, updated whenever the connection is polled; 1 for HTTP/1.1.
    pub(crate) max_streams: Arc<AtomicUsize>,
}

impl Established {
    pub(crate) fn protocol(&self) -> Negotiated {
        match self.sender {
            Sender::Http1(_) => Negotiated::Http1,
            Sender::Http2(_) => Negotiated::Http2,
        }
    }
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// Connects to the cluster URL of one `kube::Config`.
pub(crate) struct Connector {
    host: String,
    port: u16,
    authority: String,
    /// `None` for `http://`.
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
    protocol: Protocol,
    connect_timeout: Option<Duration>,
    keep_alive_interval: Option<Duration>,
    keep_alive_timeout: Duration,
}

/// How long to wait for the server's first SETTINGS frame after the HTTP/2 handshake when no
/// `connect_timeout` is configured.
const SETTINGS_WAIT: Duration = Duration::from_secs(10);

impl Connector {
    pub(crate) fn new(
        config: &kube::Config,
        transport: &TransportConfig,
    ) -> Result<Connector, TransportError> {
        let url = &config.cluster_url;
        let bad_url = || TransportError::Url {
            url: url.to_string(),
        };
        let https = match url.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(bad_url()),
        };
        let host = url
            .host()
            .ok_or_else(bad_url)?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = url.port_u16().unwrap_or(if https { 443 } else { 80 });
        let authority = url
            .authority()
            .map(|a| a.to_string())
            .unwrap_or_else(|| format!("{host}:{port}"));
        let tls = if https {
            let mut rustls = config
                .rustls_client_config()
                .map_err(|source| TransportError::Stack { source })?;
            rustls.alpn_protocols = match transport.protocol {
                Protocol::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
                Protocol::Http1 => vec![b"http/1.1".to_vec()],
                Protocol::Http2 => vec![b"h2".to_vec()],
            };
            let name = config
                .tls_server_name
                .clone()
                .unwrap_or_else(|| host.clone());
            let server_name = ServerName::try_from(name.clone())
                .map_err(|_| TransportError::ServerName { name })?;
            Some((
                tokio_rustls::TlsConnector::from(Arc::new(rustls)),
                server_name,
            ))
        } else {
            None
        };
        Ok(Connector {
            host,
            port,
            authority,
            tls,
            protocol: transport.protocol,
            connect_timeout: config.connect_timeout,
            keep_alive_interval: transport.keep_alive_interval,
            keep_alive_timeout: transport.keep_alive_timeout,
        })
    }

    pub(crate) fn authority(&self) -> &str {
        &self.authority
    }

    /// Opens one connection (TCP, TLS, HTTP handshake, and for HTTP/2 the server's SETTINGS).
    pub(crate) async fn connect(&self) -> Result<Established, TransportError> {
        let attempt = self.connect_inner();
        match self.connect_timeout {
            Some(limit) => tokio::time::timeout(limit, attempt).await.map_err(|_| {
                TransportError::ConnectTimeout {
                    authority: self.authority.clone(),
                }
            })?,
            None => attempt.await,
        }
    }

    async fn connect_inner(&self) -> Result<Established, TransportError> {
        let io_err = |source: io::Error| TransportError::Connect {
            authority: self.authority.clone(),
            source,
        };
        let tcp = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(io_err)?;
        let _ = tcp.set_nodelay(true);
        let (io, h2): (Pin<Box<dyn Io>>, bool) = match &self.tls {
            Some((connector, name)) => {
                let tls = connector.connect(name.clone(), tcp).await.map_err(io_err)?;
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                if self.protocol == Protocol::Http2 && !h2 {
                    return Err(TransportError::NoHttp2 {
                        authority: self.authority.clone(),
                    });
                }
                (Box::pin(tls), h2)
            }
            None => (Box::pin(tcp), self.protocol == Protocol::Http2),
        };
        let io = TokioIo::new(io);
        let closed = Arc::new(AtomicBool::new(false));
        let http = |source| TransportError::Http { source };
        if h2 {
            let mut builder = http2::Builder::new(TokioExecutor::new());
            builder
                .timer(TokioTimer::new())
                // 0 until the server's SETTINGS arrive: then its value, or unlimited.
                .initial_max_send_streams(0)
                .keep_alive_interval(self.keep_alive_interval)
                .keep_alive_timeout(self.keep_alive_timeout)
                .keep_alive_while_idle(true);
            let (sender, conn) = builder.handshake(io).await.map_err(http)?;
            let max_streams = Arc::new(AtomicUsize::new(0));
            let conn = Http2Conn::new(conn, max_streams.clone());
            spawn_connection(conn, closed.clone(), Negotiated::Http2);
            self.await_settings(&max_streams, &closed).await?;
            Ok(Established {
                sender: Sender::Http2(sender),
                closed,
                max_streams,
            })
        } else {
            let (sender, conn) = http1::Builder::new().handshake(io).await.map_err(http)?;
            spawn_connection(conn, closed.clone(), Negotiated::Http1);
            Ok(Established {
                sender: Sender::Http1(tokio::sync::Mutex::new(sender)),
                closed,
                max_streams: Arc::new(AtomicUsize::new(1)),
            })
        }
    }

    /// Waits until the server's first SETTINGS frame set the stream limit (hyper reports no
    /// event for it; the frame follows the handshake within a round trip, so this checks every
    /// millisecond).
    async fn await_settings(
        &self,
        max_streams: &AtomicUsize,
        closed: &AtomicBool,
    ) -> Result<usize, TransportError> {
        let deadline = tokio::time::Instant::now() + self.connect_timeout.unwrap_or(SETTINGS_WAIT);
        loop {
            let max = max_streams.load(Ordering::Acquire);
            if max > 0 {
                return Ok(max);
            }
            if closed.load(Ordering::Acquire) || tokio::time::Instant::now() >= deadline {
                return Err(TransportError::Connect {
                    authority: self.authority.clone(),
                    source: io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the server sent no HTTP/2 SETTINGS",
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Drives a connection until it ends, then marks it closed; counted in
/// [`open_connections`](super::open_connections) meanwhile.
fn spawn_connection<F>(conn: F, closed: Arc<AtomicBool>, protocol: Negotiated)
where
    F: std::future::Future + Send + 'static,
{
    let open = super::global_counter(protocol);
    open.fetch_add(1, Ordering::Relaxed);
    tokio::spawn(async move {
        let _ = conn.await;
        closed.store(true, Ordering::Release);
        open.fetch_sub(1, Ordering::Relaxed);
    });
}

type H2Connection = http2::Connection<TokioIo<Pin<Box<dyn Io>>>, Body, TokioExecutor>;

/// An HTTP/2 connection future that publishes the server's stream limit (hyper exposes it on
/// the connection, which this task owns, not on the sender; and the frames are processed by a
/// task of hyper's own, so the value is re-read on a timer: every millisecond until the
/// server's first SETTINGS arrived, then every second).
struct Http2Conn {
    conn: Pin<Box<H2Connection>>,
    max_streams: Arc<AtomicUsize>,
    tick: Option<tokio::time::Interval>,
}

impl Http2Conn {
    fn new(conn: H2Connection, max_streams: Arc<AtomicUsize>) -> Self {
        Http2Conn {
            conn: Box::pin(conn),
            max_streams,
            tick: None,
        }
    }
}

impl std::future::Future for Http2Conn {
    type Output = hyper::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<hyper::Result<()>> {
        let this = &mut *self;
        if let Poll::Ready(out) = this.conn.as_mut().poll(cx) {
            return Poll::Ready(out);
        }
        let max = this.conn.current_max_send_streams();
        let previous = this.max_streams.swap(max, Ordering::AcqRel);
        if this.tick.is_none() || (previous == 0 && max > 0) {
            let every = if max == 0 {
                Duration::from_millis(1)
            } else {
                Duration::from_secs(1)
            };
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            this.tick = Some(tick);
        }
        if let Some(tick) = this.tick.as_mut() {
            while tick.poll_tick(cx).is_ready() {}
        }
        Poll::Pending
    }
}
