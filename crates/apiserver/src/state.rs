//! The state one running server shares between its listener, the request pipeline, the
//! capabilities and every `ServerHandle`: data only; `server.rs` builds it, `http` reads it.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::Mutex as AsyncMutex;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::access::auth::{Authenticator, Authorizer};
use crate::access::token_auth::TokenAuthenticator;
use crate::config::Config;
use crate::control::{Controls, Restart};
use crate::extras::Extras;
use crate::registry::Registry;
use crate::store::Notice;

/// The running listener: its token ends the accept loop and every connection on it.
pub(crate) struct Listener {
    pub(crate) token: CancellationToken,
    pub(crate) task: Option<JoinHandle<()>>,
}

/// State shared by the listener, the pipeline and every `ServerHandle`.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) registry: Arc<Registry>,
    /// Who a request is, built at start from [`Config::authenticator`].
    pub(crate) authenticator: Arc<dyn Authenticator>,
    /// The server's own tokens (minted, service-account), which a TokenReview always checks.
    pub(crate) tokens: TokenAuthenticator,
    /// What a user may do, built at start from [`Config::authorizer`].
    pub(crate) authorizer: Arc<dyn Authorizer>,
    pub(crate) controls: Arc<Controls>,
    /// The bound address (fixed for the server's life, so restarts reuse the port).
    pub(crate) addr: SocketAddr,
    pub(crate) listener: AsyncMutex<Listener>,
    /// Cancelled on shutdown: ends the listener, connections, watches and the bookmark ticker.
    pub(crate) shutdown: CancellationToken,
    /// Tokens, the service-account token signer and TLS material (`extras.rs`).
    pub(crate) extras: Arc<Extras>,
    /// Restarts asked over HTTP, run by the server's restarter task: the request path never
    /// drives the listener that serves it.
    pub(crate) restarts: mpsc::UnboundedSender<Restart>,
}

impl Shared {
    /// `http://ADDR` or, with TLS, `https://ADDR`.
    pub(crate) fn url(&self) -> String {
        let scheme = if self.extras.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// Asks the restarter task for a simulated process restart (see `http::restart`).
    pub(crate) fn request_restart(&self, r: Restart) {
        // The receiver lives as long as the server: a send fails only during its shutdown.
        let _ = self.restarts.send(r);
    }

    /// Sends a BOOKMARK at the current resourceVersion to every watch that allows bookmarks.
    pub(crate) fn bookmark_now(&self) {
        let s = self.registry.store.inner.lock();
        s.notify(Notice::Bookmark(s.rv));
    }

    /// Ends every open watch cleanly (the client sees the stream end and resumes).
    pub(crate) fn close_watches(&self) {
        self.registry
            .store
            .inner
            .lock()
            .notify(Notice::CloseWatches);
    }

    /// Drops the event history (see `ServerHandle::compact`).
    pub(crate) fn compact(&self) {
        self.registry.store.inner.lock().compact();
    }
}
