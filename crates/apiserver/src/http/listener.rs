//! The listening socket: binding, the accept loop, the TLS handshake, and the listener's stop,
//! restart and simulated process restart. Each accepted connection is handed to
//! [`serve_connection`].

use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::connection::serve_connection;
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
/// 4. start the not-ready window (`/readyz` fails for `r.not_ready`), empty the Node
///    authorizer's graph (rebuilt from the stored pods `r.graph_rebuild` later) and listen
///    again on the same port, serving every request at once.
pub(crate) async fn restart(shared: &Arc<Shared>, r: Restart) -> Result<(), Error> {
    // (1)
    stop_listener(shared).await;
    // (2)
    shared.compact();
    // (3)
    if !r.down.is_zero() {
        tokio::time::sleep(r.down).await;
    }
    // (4) The window opens and the graph empties just before the socket listens: no request
    // sees "ready" or the old graph.
    shared.controls.not_ready_for(r.not_ready);
    shared
        .registry
        .store
        .inner
        .lock()
        .restart_node_graph(r.graph_rebuild);
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
    let acceptor = shared.upgrade().and_then(|s| {
        s.extras
            .tls
            .as_ref()
            .map(crate::credentials::tls::TlsMaterial::acceptor)
    });
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
