//! An HTTP/2, stream-aware transport for `kube::Client`: one connection for many watches.
//!
//! kube-client's default stack speaks HTTP/1.1 only, so every watch holds a TCP (and TLS)
//! connection of its own: 1,000 watched objects are 1,000 connections to the API server. This
//! module builds a `kube::Client` over its own connection pool instead, through kube's public
//! seams: [`kube::Client::new`] over kube's [`ConfigExt`] layers (base URI, authentication with
//! token refresh and exec plugins, extra and impersonation headers, the default retry policy),
//! with TLS from [`ConfigExt::rustls_client_config`] (the kubeconfig's CA, client certificate,
//! `tls-server-name` and `insecure-skip-tls-verify`), offering `h2` and `http/1.1` by ALPN.
//!
//! # Sharding (why a pool of our own)
//!
//! An HTTP/2 server limits the streams one connection may have open
//! (`SETTINGS_MAX_CONCURRENT_STREAMS`; kube-apiserver: 100). hyper does not open a second
//! connection when that limit is reached: the next request waits, forever behind watches
//! (hyperium/hyper#2197; kubernetes#74302 is Go kubelets stalling this way). So the pool:
//!
//! 1. classifies each request: a *watch* (`watch=true` / `watch=1` in the query) is long-lived,
//!    anything else is *short*;
//! 2. places a watch on the oldest watch connection with room: at most
//!    `min(max_streams_per_connection, advertised − headroom)` streams, where `advertised` is the
//!    server's `SETTINGS_MAX_CONCURRENT_STREAMS` (read from hyper once the server's SETTINGS
//!    arrived) and `headroom` is 5 % of it (at least 1);
//! 3. opens a new connection when every watch connection is at its limit (one connection is
//!    opened at a time per class, and requests waiting for it share it);
//! 4. sends short requests on a connection of their own, which watches never use, so a status
//!    patch or a lease renewal never queues behind watches (past the server's limit, short
//!    requests wait in hyper for one another, briefly);
//! 5. counts each stream until its response body ends or is dropped, and closes connections that
//!    stayed empty for [`TransportConfig::idle_timeout`];
//! 6. stops placing requests on a connection whose server sent GOAWAY (streams already open on
//!    it, watches included, run until they end), and sends a request the server refused
//!    without processing it — its stream above a graceful GOAWAY's last stream, reset with
//!    `REFUSED_STREAM`, or never handed to a connection that closed — again on another
//!    connection (up to 4 times), as Go's HTTP/2 client does; a request the server may have
//!    processed is never sent twice;
//! 7. sends a request answered 429, 503 or 504 with `Retry-After` again after that delay
//!    (capped at 10 s, at most 10 times, as client-go), in place of kube's default retry policy
//!    (when the `kube::Config` has `default_retry`); answers without `Retry-After` go back to
//!    the caller.
//!
//! [`retries`] counts the requests sent again by (6) and (7).
//!
//! A connection whose ALPN (or `http://` URL) says HTTP/1.1 holds one request at a time; the
//! same pool then behaves like kube's: one connection per watch, idle connections reused for
//! short requests. [`Protocol::Http1`] forces that.
//!
//! # What a crate user configures
//!
//! [`TransportConfig`]: the protocol policy, the per-connection stream cap, the idle time-out
//! and HTTP/2 keep-alive pings. The `kube::Config`'s `connect_timeout` bounds connecting (TCP,
//! TLS and the HTTP/2 handshake), `read_timeout` bounds the wait for a response and every gap
//! between two body chunks. A `proxy_url` is not supported here: [`client`] then falls back to
//! kube's default stack (HTTP/1.1). [`open_connections`] reports the connections this process
//! holds, by protocol.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use nodelet_object_manager::transport::{self, TransportConfig};
//! let config = kube::Config::infer().await?;
//! let (client, transport) = transport::connect(config, TransportConfig::default()).await?;
//! if let Some(transport) = &transport {
//!     println!("API server protocol: {:?}", transport.protocol());
//! }
//! # drop(client);
//! # Ok(())
//! # }
//! ```

mod body;
mod connect;
mod pool;
mod retry;
mod slot;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use kube::client::ConfigExt;
use tower::ServiceBuilder;

pub use pool::Transport;

/// Which HTTP version the transport speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Protocol {
    /// HTTP/2 wherever the server offers it by ALPN (`https://`), else HTTP/1.1; `http://`
    /// URLs use HTTP/1.1 (no prior knowledge). The default.
    #[default]
    Auto,
    /// HTTP/1.1 only: one connection per watch, as kube's default stack.
    Http1,
    /// HTTP/2 only: ALPN must pick `h2`; on `http://`, HTTP/2 with prior knowledge.
    Http2,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Auto => "auto",
            Protocol::Http1 => "http1",
            Protocol::Http2 => "http2",
        })
    }
}

impl FromStr for Protocol {
    type Err = TransportError;

    /// `auto`, `http1` (also `http/1.1`, `1.1`) or `http2` (also `h2`, `2`).
    fn from_str(s: &str) -> Result<Self, TransportError> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Protocol::Auto),
            "http1" | "http/1.1" | "1.1" | "h1" => Ok(Protocol::Http1),
            "http2" | "h2" | "2" => Ok(Protocol::Http2),
            _ => Err(TransportError::UnknownProtocol {
                value: s.to_owned(),
            }),
        }
    }
}

/// The protocol one connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Negotiated {
    /// HTTP/1.1.
    Http1,
    /// HTTP/2.
    Http2,
}

impl fmt::Display for Negotiated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Negotiated::Http1 => "HTTP/1.1",
            Negotiated::Http2 => "HTTP/2",
        })
    }
}

/// Options of the transport. Start from `TransportConfig::default()`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TransportConfig {
    /// HTTP version policy (default [`Protocol::Auto`]).
    pub protocol: Protocol,
    /// Most watches one HTTP/2 connection carries (default 95). The effective limit is the
    /// smaller of this and the server's advertised `SETTINGS_MAX_CONCURRENT_STREAMS` less 5 %
    /// headroom (kube-apiserver's default 100 → 95); this cap alone applies to a server that
    /// advertises no limit.
    pub max_streams_per_connection: usize,
    /// A connection with no open stream for this long is closed (default 60 s).
    pub idle_timeout: Duration,
    /// HTTP/2 PING interval that detects a dead connection (default 30 s; `None`: off).
    pub keep_alive_interval: Option<Duration>,
    /// How long a PING may go unanswered before the connection is closed (default 20 s).
    pub keep_alive_timeout: Duration,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            protocol: Protocol::Auto,
            max_streams_per_connection: 95,
            idle_timeout: Duration::from_secs(60),
            keep_alive_interval: Some(Duration::from_secs(30)),
            keep_alive_timeout: Duration::from_secs(20),
        }
    }
}

impl TransportConfig {
    /// The defaults with `protocol`.
    pub fn new(protocol: Protocol) -> Self {
        TransportConfig {
            protocol,
            ..TransportConfig::default()
        }
    }

    /// Sets [`max_streams_per_connection`](Self::max_streams_per_connection) (at least 1).
    #[must_use]
    pub fn with_max_streams_per_connection(mut self, n: usize) -> Self {
        self.max_streams_per_connection = n.max(1);
        self
    }
}

/// Why the transport could not be built, or a request could not be sent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// kube could not build a layer (authentication, headers, TLS configuration).
    #[error("building the kube client stack")]
    Stack {
        /// kube's error.
        #[source]
        source: kube::Error,
    },
    /// The cluster URL has no host, or a scheme other than `http`/`https`.
    #[error("unsupported API server URL {url:?}")]
    Url {
        /// The URL.
        url: String,
    },
    /// `tls-server-name` (or the URL's host) is not a valid TLS server name.
    #[error("invalid TLS server name {name:?}")]
    ServerName {
        /// The name.
        name: String,
    },
    /// The protocol policy string is not `auto`, `http1` or `http2`.
    #[error("unknown HTTP protocol {value:?}: expected auto, http1 or http2")]
    UnknownProtocol {
        /// What was given.
        value: String,
    },
    /// TCP connect, TLS or the HTTP handshake failed.
    #[error("connecting to the API server at {authority}")]
    Connect {
        /// host:port.
        authority: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Connecting took longer than the config's `connect_timeout`.
    #[error("connecting to the API server at {authority} timed out")]
    ConnectTimeout {
        /// host:port.
        authority: String,
    },
    /// [`Protocol::Http2`] was required and the server did not select `h2` by ALPN.
    #[error("the API server at {authority} does not offer HTTP/2")]
    NoHttp2 {
        /// host:port.
        authority: String,
    },
    /// The HTTP handshake or the request failed on an established connection.
    #[error("HTTP request failed")]
    Http {
        /// hyper's error.
        #[source]
        source: hyper::Error,
    },
    /// No response (head) within the config's `read_timeout`.
    #[error("no response from the API server within {timeout:?}")]
    ReadTimeout {
        /// The time-out.
        timeout: Duration,
    },
    /// A connection attempt made for this request by another caller just failed.
    #[error("connecting to the API server failed: {message}")]
    Shared {
        /// The failure of the attempt this request waited for.
        message: String,
    },
}

/// Connections this process holds to API servers through this transport, by protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionCounts {
    /// HTTP/1.1 connections.
    pub http1: usize,
    /// HTTP/2 connections.
    pub http2: usize,
}

/// Requests this process's transports sent again (see the module docs, (6) and (7)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryCounts {
    /// Requests the server refused without processing them (GOAWAY, `REFUSED_STREAM`), sent
    /// again on another connection.
    pub refused: u64,
    /// Requests answered 429/503/504 with `Retry-After`, sent again after that delay.
    pub throttled: u64,
}

static RETRIED_REFUSED: AtomicU64 = AtomicU64::new(0);
static RETRIED_THROTTLED: AtomicU64 = AtomicU64::new(0);

/// Requests sent again so far across every [`Transport`] in this process (for `/metrics`).
pub fn retries() -> RetryCounts {
    RetryCounts {
        refused: RETRIED_REFUSED.load(Ordering::Relaxed),
        throttled: RETRIED_THROTTLED.load(Ordering::Relaxed),
    }
}

fn count_refused_retry() {
    RETRIED_REFUSED.fetch_add(1, Ordering::Relaxed);
}

fn count_throttled_retry() {
    RETRIED_THROTTLED.fetch_add(1, Ordering::Relaxed);
}

static OPEN_HTTP1: AtomicUsize = AtomicUsize::new(0);
static OPEN_HTTP2: AtomicUsize = AtomicUsize::new(0);

/// Connections open right now across every [`Transport`] in this process (for `/metrics`).
pub fn open_connections() -> ConnectionCounts {
    ConnectionCounts {
        http1: OPEN_HTTP1.load(Ordering::Relaxed),
        http2: OPEN_HTTP2.load(Ordering::Relaxed),
    }
}

fn global_counter(p: Negotiated) -> &'static AtomicUsize {
    match p {
        Negotiated::Http1 => &OPEN_HTTP1,
        Negotiated::Http2 => &OPEN_HTTP2,
    }
}

/// A `kube::Client` over this transport (connections are opened on first use), and the
/// transport's handle. With a `proxy_url` in `config`, kube's default stack (HTTP/1.1) instead,
/// and no handle.
///
/// # Errors
/// [`TransportError::Stack`] when kube cannot build its layers or TLS configuration;
/// [`TransportError::Url`] / [`TransportError::ServerName`] for an unusable URL.
pub fn client(
    config: kube::Config,
    transport: TransportConfig,
) -> Result<(kube::Client, Option<Transport>), TransportError> {
    if config.proxy_url.is_some() {
        let client =
            kube::Client::try_from(config).map_err(|source| TransportError::Stack { source })?;
        return Ok((client, None));
    }
    let stack = |source| TransportError::Stack { source };
    let connector = connect::Connector::new(&config, &transport)?;
    let pool = pool::Pool::new(connector, transport, config.read_timeout);
    let handle = Transport::new(pool.clone());
    // kube's own policy retries 15 times from 5 ms with the delay doubling up to 1,000 s, and
    // uses `Retry-After` only while its own delay is shorter: a request could wait minutes.
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(retry::ThrottleRetry::default()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer().map_err(stack)?)
        .layer(config.extra_headers_layer().map_err(stack)?)
        .service(pool::PoolService::new(pool));
    Ok((
        kube::Client::new(service, config.default_namespace.clone()),
        Some(handle),
    ))
}

/// [`client`], then one connection for short requests opened at once, so that
/// [`Transport::protocol`] can be logged at start-up. An unreachable server is not an error
/// here (requests fail and are retried later, as with kube's own client).
///
/// # Errors
/// As [`client`].
pub async fn connect(
    config: kube::Config,
    transport: TransportConfig,
) -> Result<(kube::Client, Option<Transport>), TransportError> {
    let (client, handle) = client(config, transport)?;
    if let Some(h) = &handle {
        h.warm_up().await;
    }
    Ok((client, handle))
}

/// Whether a request is a long-lived watch (`watch=true` or `watch=1` in its query).
pub(crate) fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch=True"))
    })
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A shared, cloneable error message (a failed connect seen by several waiters).
#[derive(Debug, Clone)]
struct SharedFailure(Arc<str>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_requests_are_recognised_by_their_query() {
        let w: http::Uri = "https://h/api/v1/namespaces/d/configmaps?fieldSelector=metadata.name%3Dx&watch=true&timeoutSeconds=290"
            .parse()
            .unwrap_or_default();
        assert!(is_watch(&w));
        let w1: http::Uri = "/api/v1/pods?watch=1".parse().unwrap_or_default();
        assert!(is_watch(&w1));
        let list: http::Uri = "/api/v1/pods?watch=false&limit=1"
            .parse()
            .unwrap_or_default();
        assert!(!is_watch(&list));
        let get: http::Uri = "/api/v1/namespaces/d/configmaps/watch"
            .parse()
            .unwrap_or_default();
        assert!(!is_watch(&get));
    }

    #[test]
    fn protocol_parses_its_names_and_rejects_others_naming_the_value() {
        assert_eq!("auto".parse::<Protocol>().ok(), Some(Protocol::Auto));
        assert_eq!("http1".parse::<Protocol>().ok(), Some(Protocol::Http1));
        assert_eq!("HTTP2".parse::<Protocol>().ok(), Some(Protocol::Http2));
        let err = "spdy".parse::<Protocol>().err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("unknown HTTP protocol \"spdy\": expected auto, http1 or http2")
        );
    }
}
