//! [`TransportError`]: why the transport could not be built or a request could not be sent.

use std::sync::Arc;
use std::time::Duration;

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
    /// [`Protocol::Http2`](crate::Protocol::Http2) was required and the server did not select `h2` by ALPN.
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
    /// Every connection the request was handed to closed before it was written: the
    /// connections were lost, the request was not sent (so it was not processed either).
    #[error(
        "the request was not sent: each connection to the API server it was handed to \
         ({connections}) closed before it was written"
    )]
    NotSent {
        /// How many connections closed under the request.
        connections: u32,
        /// hyper's error for the last of them.
        #[source]
        source: hyper::Error,
    },
    /// No response (head) within the config's `read_timeout`.
    #[error("no response from the API server within {timeout:?}")]
    ReadTimeout {
        /// The time-out.
        timeout: Duration,
    },
    /// The task opening a connection for this request ended before the connection was open
    /// (the runtime is shutting down).
    #[error("opening a connection to the API server at {authority} was aborted")]
    ConnectAborted {
        /// host:port.
        authority: String,
    },
    /// A connection attempt made for this request by another caller just failed.
    #[error("connecting to the API server failed: {message}")]
    Shared {
        /// The failure of the attempt this request waited for.
        message: String,
    },
}

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A shared, cloneable error message (a failed connect seen by several waiters).
#[derive(Debug, Clone)]
pub(crate) struct SharedFailure(pub(crate) Arc<str>);
