//! The HTTP side: binding, the accept loop and per-connection serving. Each connection runs
//! until the client closes it or the listener's token is cancelled (stop/shutdown).
//!
//! With [`Config::tls`](crate::Config::tls) the accepted stream is wrapped by a TLS handshake
//! (`tls.rs` holds the material) before [`serve_connection`] serves it.

mod discovery;
mod handlers;
mod list_options;
mod pipeline;
mod request_info;
mod response;
mod table;
mod watch;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Weak;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::state::Shared;

/// A TLS handshake that takes longer than this is dropped (the connection is closed).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds `addr` with `SO_REUSEADDR`, so a restarted listener gets the same port back.
pub(crate) fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    let err = |source| Error::Bind { addr, source };
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(err)?;
    socket.set_reuseaddr(true).map_err(err)?;
    socket.bind(addr).map_err(err)?;
    socket.listen(1024).map_err(err)
}

/// Accepts connections until `token` is cancelled; holds only a `Weak` to the shared state.
pub(crate) fn spawn_listener(
    shared: Weak<Shared>,
    listener: TcpListener,
    token: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = token.cancelled() => break,
                a = listener.accept() => a,
            };
            let Ok((stream, _peer)) = accepted else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(serve(shared.clone(), stream, token.clone()));
        }
    })
}

/// Serves one accepted connection, after a TLS handshake when TLS is on.
async fn serve(shared: Weak<Shared>, stream: TcpStream, token: CancellationToken) {
    let acceptor = shared
        .upgrade()
        .and_then(|s| s.extras.tls.as_ref().map(crate::tls::TlsMaterial::acceptor));
    let Some(acceptor) = acceptor else {
        return serve_connection(shared, stream, token).await;
    };
    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
    let tls = tokio::select! {
        r = handshake => r,
        () = token.cancelled() => return,
    };
    match tls {
        Ok(Ok(tls)) => serve_connection(shared, tls, token).await,
        // A client that gave up or does not trust the CA: nothing to answer.
        Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
        Err(_) => tracing::debug!("TLS handshake timed out"),
    }
}

/// Serves HTTP/1.1 or HTTP/2 on one connection until it closes or `token` is cancelled;
/// HTTP/2 advertises [`Config::http2_max_streams_per_connection`](crate::Config) streams.
pub(crate) async fn serve_connection<IO>(shared: Weak<Shared>, io: IO, token: CancellationToken)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let conn_token = token.clone();
    let Some(s) = shared.upgrade() else { return };
    // Counted as open (by protocol, for `ServerHandle::open_connections`) until this returns.
    let guard = s.controls.connection_opened();
    let max_streams = s.config.http2_max_streams_per_connection;
    drop(s);
    let protocol = guard.protocol.clone();
    let svc = service_fn(move |req: hyper::Request<Incoming>| {
        let shared = shared.upgrade();
        let token = conn_token.clone();
        crate::control::ConnectionGuard::saw(&protocol, req.version());
        async move {
            Ok::<_, Infallible>(match shared {
                Some(s) => pipeline::handle(s, req, token).await,
                None => response::error(&crate::status::ApiError::injected(503)),
            })
        }
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder.http2().max_concurrent_streams(max_streams);
    let conn = builder.serve_connection(TokioIo::new(io), svc);
    tokio::select! {
        _ = conn => {}
        () = token.cancelled() => {}
    }
    drop(guard);
}
