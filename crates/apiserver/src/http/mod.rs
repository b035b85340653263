//! The HTTP side: binding, the accept loop, per-connection serving, and the listener's
//! stop, restart and simulated process restart. Each connection runs until the client closes
//! it or the listener's token is cancelled (stop/shutdown); after a GOAWAY
//! ([`Config::goaway_chance`](crate::Config::goaway_chance)) it runs until its open streams end.
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
use std::sync::{Arc, Weak};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::control::Restart;
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

/// Closes the listening socket and every connection (clients see connection errors).
pub(crate) async fn stop_listener(shared: &Shared) {
    let mut l = shared.listener.lock().await;
    l.token.cancel();
    if let Some(t) = l.task.take() {
        let _ = t.await;
    }
}

/// Listens again on the same port; does nothing while the listener runs.
pub(crate) async fn restart_listener(shared: &Arc<Shared>) -> Result<(), Error> {
    if shared.shutdown.is_cancelled() {
        return Err(Error::ShutDown);
    }
    let mut l = shared.listener.lock().await;
    if l.task.as_ref().is_some_and(|t| !t.is_finished()) && !l.token.is_cancelled() {
        return Ok(());
    }
    l.token.cancel();
    if let Some(t) = l.task.take() {
        let _ = t.await;
    }
    let listener = bind(shared.addr)?;
    let token = shared.shutdown.child_token();
    l.task = Some(spawn_listener(
        Arc::downgrade(shared),
        listener,
        token.clone(),
    ));
    l.token = token;
    Ok(())
}

/// A killed and restarted API server process:
/// 1. close the listener and every connection (watches end);
/// 2. forget the watch history, so every resourceVersion handed out so far is too old to
///    watch from (the new process's watch cache starts at the current revision);
/// 3. stay down (connections refused) for `r.down`;
/// 4. start the not-ready window (`/readyz` fails for `r.not_ready`) and listen again on the
///    same port, serving every request at once.
pub(crate) async fn restart(shared: &Arc<Shared>, r: Restart) -> Result<(), Error> {
    // (1)
    stop_listener(shared).await;
    // (2)
    shared.compact();
    // (3)
    if !r.down.is_zero() {
        tokio::time::sleep(r.down).await;
    }
    // (4) The window opens just before the socket listens: no request sees "ready" early.
    shared.controls.not_ready_for(r.not_ready);
    restart_listener(shared).await?;
    shared.controls.restarted();
    Ok(())
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
///
/// After the response to an HTTP/2 API request, with probability
/// [`Config::goaway_chance`](crate::Config::goaway_chance), the connection is shut down
/// gracefully: GOAWAY (`NO_ERROR`) and a PING, then the final GOAWAY naming the last stream
/// processed; open streams (watches included) finish, later ones are refused, and the
/// connection closes once it has none.
pub(crate) async fn serve_connection<IO>(shared: Weak<Shared>, io: IO, token: CancellationToken)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let conn_token = token.clone();
    let Some(s) = shared.upgrade() else { return };
    // Counted as open (by protocol, for `ServerHandle::open_connections`) until this returns.
    let guard = s.controls.connection_opened();
    let max_streams = s.config.http2_max_streams_per_connection;
    let controls = Arc::downgrade(&s.controls);
    drop(s);
    let protocol = guard.protocol.clone();
    // Cancelled by a request whose response draws a GOAWAY for this connection.
    let goaway = CancellationToken::new();
    let draw = goaway.clone();
    let svc = service_fn(move |req: hyper::Request<Incoming>| {
        let shared = shared.upgrade();
        let token = conn_token.clone();
        let draw = draw.clone();
        crate::control::ConnectionGuard::saw(&protocol, req.version());
        let may_goaway =
            req.version() == http::Version::HTTP_2 && !req.uri().path().starts_with("/nodelet/");
        async move {
            Ok::<_, Infallible>(match shared {
                Some(s) => {
                    let controls = s.controls.clone();
                    let resp = pipeline::handle(s, req, token).await;
                    if may_goaway && controls.draw_goaway() {
                        draw.cancel();
                    }
                    resp
                }
                None => response::error(&crate::status::ApiError::injected(503)),
            })
        }
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder.http2().max_concurrent_streams(max_streams);
    let mut conn = std::pin::pin!(builder.serve_connection(TokioIo::new(io), svc));
    let go_away = tokio::select! {
        _ = conn.as_mut() => false,
        () = token.cancelled() => false,
        () = goaway.cancelled() => true,
    };
    if go_away {
        conn.as_mut().graceful_shutdown();
        if let Some(c) = controls.upgrade() {
            c.goaway_sent();
        }
        tokio::select! {
            _ = conn.as_mut() => {}
            () = token.cancelled() => {}
        }
    }
    drop(guard);
}
