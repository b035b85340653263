//! An HTTP/2, stream-aware transport for `kube::Client`: many multiplexed watches over a few
//! connections.
//!
//! kube-client's default stack speaks HTTP/1.1 only, so every watch holds a TCP (and TLS)
//! connection of its own: 1,000 watched objects are 1,000 connections to the API server. This
//! crate builds a `kube::Client` over its own connection pool instead, through kube's public
//! seams: [`kube::Client::new`] over kube's [`ConfigExt`](kube::client::ConfigExt) layers (base URI, authentication with
//! token refresh and exec plugins, extra and impersonation headers, the default retry policy),
//! with TLS from [`ConfigExt::rustls_client_config`](kube::client::ConfigExt::rustls_client_config) (the kubeconfig's CA, client certificate,
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
//!    opened at a time per class, in a task of its own so that it does not depend on the
//!    request that started it being polled, and requests waiting for it share it);
//! 4. sends short requests on a connection of their own, which watches never use, so a status
//!    patch or a lease renewal never queues behind watches (past the server's limit, short
//!    requests wait in hyper for one another, briefly);
//! 5. counts each stream until its response body ends or is dropped, and closes connections that
//!    stayed empty for [`TransportConfig::idle_timeout`];
//! 6. stops placing requests on a connection whose server sent GOAWAY (streams already open on
//!    it, watches included, run until they end), and sends a request again on another
//!    connection, as Go's HTTP/2 client does, when it is known not to have been processed:
//!    one never written to its connection (hyper hands it back: the connection closed while
//!    it was queued) always, whatever it is and spending no retry budget, a server that
//!    closes every connection at once being bounded by 32 connections lost under one request
//!    ([`TransportError::NotSent`]); one the server refused — its stream above a graceful
//!    GOAWAY's last stream, or reset with `REFUSED_STREAM` — up to 8 times. A request the
//!    server may have processed is never sent twice;
//! 7. sends a request answered 429, 503 or 504 with `Retry-After` again after that delay
//!    (capped at 10 s, at most 10 times, as client-go), in place of kube's default retry policy
//!    (when the `kube::Config` has `default_retry`); answers without `Retry-After` go back to
//!    the caller.
//!
//! # Flow control
//!
//! Each HTTP/2 stream may receive [`TransportConfig::stream_window`] bytes (64 KiB) ahead of
//! its reader, each connection [`TransportConfig::connection_window`]: the stream window times
//! the most watches a connection carries. Data not yet read holds both windows, so a watch whose
//! reader stopped holds at most one stream window, and no set of such watches can take the
//! connection window the others on the connection need (hyper's defaults, 2 MiB per stream and
//! 5 MiB per connection, let three do it).
//!
//! # Counting
//!
//! Each transport owns its [`Counters`] ([`Transport::counters`]), shared by its clones and
//! by nothing else: requests by Kubernetes verb (counted once by [`CountLayer`], the outermost
//! layer, before any retry), the requests sent again by (6) and (7), and the connections open
//! right now by protocol.
//!
//! A connection whose ALPN (or `http://` URL) says HTTP/1.1 holds one request at a time; the
//! same pool then behaves like kube's: one connection per watch, idle connections reused for
//! short requests. [`Protocol::Http1`] forces that.
//!
//! # What a crate user configures
//!
//! [`TransportConfig`]: the protocol policy, the per-connection stream cap, the idle time-out,
//! HTTP/2 keep-alive pings and the HTTP/2 stream window. The `kube::Config`'s `connect_timeout`
//! bounds connecting (TCP, TLS and the HTTP/2 handshake), `read_timeout` bounds the wait for a
//! response and every gap between two body chunks. A `proxy_url` is not supported here:
//! [`client`] then falls back to kube's default stack (HTTP/1.1), without a [`Transport`]
//! handle or counters.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use nodelet_transport::TransportConfig;
//! let config = kube::Config::infer().await?;
//! let (client, transport) = nodelet_transport::connect(config, TransportConfig::default()).await?;
//! if let Some(transport) = &transport {
//!     println!("API server protocol: {:?}", transport.protocol());
//!     println!("requests so far: {:?}", transport.counters().requests());
//! }
//! # drop(client);
//! # Ok(())
//! # }
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod body;
mod classify;
mod client;
mod config;
mod connect;
mod counters;
mod error;
mod pool;
mod replay;
mod retry;
mod slot;

pub use client::{client, connect};
pub use config::{DEFAULT_STREAM_WINDOW, Negotiated, Protocol, TransportConfig};
pub use counters::{
    ConnectionCounts, CountLayer, CountService, Counters, RequestCounts, RetryCounts,
};
pub use error::TransportError;
pub use pool::Transport;

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
