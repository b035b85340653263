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

use crate::config::{Negotiated, Protocol, TransportConfig};
use crate::counters::{Counters, OpenConnection};
use crate::error::TransportError;

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
    /// Set when the server sent GOAWAY (HTTP/2), or when the pool found a stream refused on
    /// it or a request it could not write to it: streams already open finish, no new request
    /// is placed on it.
    pub(crate) draining: Arc<AtomicBool>,
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
    /// HTTP/2 receive window of each stream (bytes).
    stream_window: u32,
    /// HTTP/2 receive window of each connection (bytes): room for every stream's window
    /// ([`TransportConfig::connection_window`]).
    connection_window: u32,
    /// Where open connections are counted.
    counters: Counters,
}

/// How long to wait for the server's first SETTINGS frame after the HTTP/2 handshake when no
/// `connect_timeout` is configured.
const SETTINGS_WAIT: Duration = Duration::from_secs(10);

impl Connector {
    pub(crate) fn new(
        config: &kube::Config,
        transport: &TransportConfig,
        counters: Counters,
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
            stream_window: transport.effective_stream_window(),
            connection_window: transport.connection_window(),
            counters,
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
        let closed = Arc::new(AtomicBool::new(false));
        let draining = Arc::new(AtomicBool::new(false));
        let http = |source| TransportError::Http { source };
        if h2 {
            let mut builder = http2::Builder::new(TokioExecutor::new());
            builder
                .timer(TokioTimer::new())
                // 0 until the server's SETTINGS arrive: then its value, or unlimited.
                .initial_max_send_streams(0)
                // Flow control (README, "Flow control"): what the server may send ahead of
                // the readers. Data a reader has not taken stays buffered in h2 and counts
                // against both its stream's window and the connection's, so the connection
                // window holds every stream's window: streams whose reader stopped can never
                // stop the others. hyper's defaults (2 MiB per stream, 5 MiB per connection)
                // let three such streams stop the whole connection. Setting these also keeps
                // hyper's adaptive window off: it would size the connection window like one
                // stream's.
                .initial_stream_window_size(self.stream_window)
                .initial_connection_window_size(self.connection_window)
                .keep_alive_interval(self.keep_alive_interval)
                .keep_alive_timeout(self.keep_alive_timeout)
                .keep_alive_while_idle(true);
            // hyper tells nobody about a GOAWAY: the frames it reads are watched for one.
            let io: Pin<Box<dyn Io>> = Box::pin(GoawayWatch::new(io, draining.clone()));
            let (sender, conn) = builder.handshake(TokioIo::new(io)).await.map_err(http)?;
            let max_streams = Arc::new(AtomicUsize::new(0));
            let conn = Http2Conn::new(conn, max_streams.clone());
            spawn_connection(
                conn,
                closed.clone(),
                self.counters.connection_opened(Negotiated::Http2),
            );
            self.await_settings(&max_streams, &closed).await?;
            Ok(Established {
                sender: Sender::Http2(sender),
                closed,
                max_streams,
                draining,
            })
        } else {
            let (sender, conn) = http1::Builder::new()
                .handshake(TokioIo::new(io))
                .await
                .map_err(http)?;
            spawn_connection(
                conn,
                closed.clone(),
                self.counters.connection_opened(Negotiated::Http1),
            );
            Ok(Established {
                sender: Sender::Http1(tokio::sync::Mutex::new(sender)),
                closed,
                max_streams: Arc::new(AtomicUsize::new(1)),
                draining,
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
/// [`Counters::open_connections`] meanwhile.
fn spawn_connection<F>(conn: F, closed: Arc<AtomicBool>, open: OpenConnection)
where
    F: std::future::Future + Send + 'static,
{
    tokio::spawn(async move {
        let _ = conn.await;
        closed.store(true, Ordering::Release);
        drop(open);
    });
}

type H2Connection = http2::Connection<TokioIo<Pin<Box<dyn Io>>>, Body, TokioExecutor>;

/// HTTP/2 frame type of GOAWAY (RFC 9113 §6.8).
const GOAWAY: u8 = 0x7;

/// The read side of an HTTP/2 connection, watched for the server's GOAWAY.
///
/// The server-to-client byte stream is a sequence of frames, each a 9-byte header (24-bit
/// payload length, type, flags, stream id) and its payload; this follows the headers as the
/// bytes pass to hyper and sets `draining` at the first GOAWAY. Go's client stops placing
/// requests on such a connection at once; hyper would keep sending them, and a request sent
/// after the server's last GOAWAY is never answered (the server ignores its stream).
struct GoawayWatch {
    inner: Pin<Box<dyn Io>>,
    draining: Arc<AtomicBool>,
    /// The frame header being read, and how much of it has arrived.
    header: [u8; 9],
    have: usize,
    /// Payload bytes of the current frame still to pass.
    skip: usize,
}

impl GoawayWatch {
    fn new(inner: Pin<Box<dyn Io>>, draining: Arc<AtomicBool>) -> Self {
        GoawayWatch {
            inner,
            draining,
            header: [0; 9],
            have: 0,
            skip: 0,
        }
    }

    /// Follows the frame boundaries across `bytes`, just read.
    fn scan(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (self.header.len() - self.have).min(bytes.len());
            self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have == self.header.len() {
                let [a, b, c, kind, ..] = self.header;
                self.skip = usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c);
                self.have = 0;
                if kind == GOAWAY && !self.draining.swap(true, Ordering::AcqRel) {
                    tracing::debug!(
                        "the API server sent GOAWAY; no new requests on this connection"
                    );
                }
            }
        }
    }
}

impl AsyncRead for GoawayWatch {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let polled = this.inner.as_mut().poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            this.scan(&buf.filled()[before..]);
        }
        polled
    }
}

impl AsyncWrite for GoawayWatch {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.inner.as_mut().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.inner.as_mut().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.as_mut().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.as_mut().poll_shutdown(cx)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            kind,
            0,
            0,
            0,
            0,
            1,
        ];
        f.extend_from_slice(payload);
        f
    }

    fn watch() -> GoawayWatch {
        GoawayWatch::new(Box::pin(tokio::io::empty()), Arc::default())
    }

    #[test]
    fn a_goaway_is_seen_after_frames_whose_payload_holds_its_type_byte() {
        let mut w = watch();
        // SETTINGS, then DATA full of 0x07 bytes (a payload is never read as a header).
        w.scan(&frame(0x4, &[0; 12]));
        w.scan(&frame(0x0, &[GOAWAY; 300]));
        assert!(!w.draining.load(Ordering::Acquire));
        w.scan(&frame(GOAWAY, &[0, 0, 0, 5, 0, 0, 0, 0]));
        assert!(w.draining.load(Ordering::Acquire));
    }

    #[test]
    fn frames_split_across_reads_at_any_byte_are_followed() {
        let mut stream = frame(0x1, &[GOAWAY; 70_000]);
        stream.extend(frame(0x8, &[0, 0, 1, 0]));
        stream.extend(frame(GOAWAY, &[0; 8]));
        // The GOAWAY's header ends here: only then may the connection be draining.
        let seen_at = stream.len() - 8;
        for chunk in [1, 2, 5, 9, 4096] {
            let mut w = watch();
            for (i, piece) in stream.chunks(chunk).enumerate() {
                assert!(
                    !w.draining.load(Ordering::Acquire) || i * chunk >= seen_at,
                    "draining before the GOAWAY (chunk {chunk})"
                );
                w.scan(piece);
            }
            assert!(w.draining.load(Ordering::Acquire), "chunk {chunk}");
        }
    }
}
