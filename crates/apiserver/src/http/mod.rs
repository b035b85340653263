//! The HTTP side: binding, the accept loop, per-connection serving, and the listener's
//! stop, restart and simulated process restart. Each connection runs until the client closes
//! it or the listener's token is cancelled (stop/shutdown); after a GOAWAY
//! ([`Config::goaway_chance`](crate::Config::goaway_chance)) it runs until its open streams end.
//!
//! With [`Config::tls`](crate::Config::tls) the accepted stream is wrapped by a TLS handshake
//! (`tls.rs` holds the material) before `connection.rs` serves it. A restart asked over HTTP
//! (`POST /nodelet/restart`) is not run by the request path: `pipeline.rs` hands it to the
//! server's restarter task (`server.rs`), which owns the listener's lifecycle.

mod connection;
mod discovery;
mod handlers;
mod list_options;
mod listener;
mod pipeline;
mod request_info;
mod response;
mod table;
mod watch;

pub(crate) use listener::{bind, restart, restart_listener, spawn_listener, stop_listener};
