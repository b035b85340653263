//! One accepted connection: HTTP/1.1 or HTTP/2 served until the client closes it, the
//! listener's token is cancelled, or a drawn GOAWAY has let its open streams end. HTTP/1.1
//! upgrades are let through (`pods/exec`, `pods/attach`): the upgraded connection then belongs
//! to its handler and no longer counts as open.

use std::convert::Infallible;
use std::sync::{Arc, Weak};

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

use super::{pipeline, response};
use crate::state::Shared;

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
    let mut conn = std::pin::pin!(builder.serve_connection_with_upgrades(TokioIo::new(io), svc));
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
