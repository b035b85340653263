//! `ApiServer`: builds everything a running server is (the store and registry, the
//! capabilities, the shared state, the listener and the bookmark ticker) and shuts it down.

use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::json;
use tokio::sync::{Mutex as AsyncMutex, mpsc};
use tokio_util::sync::CancellationToken;

use crate::access::auth::{Authenticator, Authorizer, User};
use crate::access::node_authorizer::NodeAuthorizer;
use crate::access::token_auth::TokenAuthenticator;
use crate::config::{Authentication, Authorization, Config};
use crate::control::{Controls, Restart};
use crate::error::Error;
use crate::extras::Extras;
use crate::handle::ServerHandle;
use crate::registry::{Registry, WriteOptions};
use crate::resources::NAMESPACES;
use crate::state::{Listener, Shared};
use crate::store::Store;

/// A running in-memory API server. Dropping it stops every background task.
pub struct ApiServer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("url", &self.url())
            .finish()
    }
}

impl ApiServer {
    /// Seeds the initial namespaces, binds [`Config::listen`] and serves in background tasks.
    ///
    /// # Errors
    /// [`Error::Bind`] when the address cannot be bound; [`Error::UnknownFeatureGate`] and
    /// [`Error::UnknownGroupVersion`] for a gate or group/version this server does not know.
    pub async fn start(config: Config) -> Result<ApiServer, Error> {
        let served = config.served()?;
        let extras = Arc::new(Extras::prepare(&config)?);
        let listener = crate::http::bind(config.listen)?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: config.listen,
            source,
        })?;
        let mut store = Store::new(
            config.history_limit,
            config.history_limit.clamp(1024, 65_536),
        );
        store
            .inner
            .get_mut()
            .node_graph
            .set_lag(config.node_authorizer_lag);
        let mut registry = Registry::new(store);
        registry.served = served;
        registry.auto_service_accounts = config.auto_service_accounts;
        registry.service_account_admission = config.service_account_admission;
        registry.service_account_access = config.service_account_access;
        if config.publish_root_ca {
            registry.root_ca = Some(extras.ca.pem());
        }
        for ns in &config.initial_namespaces {
            registry
                .create(
                    NAMESPACES,
                    "",
                    json!({"metadata": {"name": ns}}),
                    WriteOptions::default(),
                )
                .map_err(Error::Rejected)?;
        }
        if config.master_service && config.initial_namespaces.iter().any(|n| n == "default") {
            registry
                .create(
                    crate::resources::SERVICES,
                    "default",
                    crate::objects::services::master_service(addr.port()),
                    WriteOptions::default(),
                )
                .map_err(Error::Rejected)?;
        }
        let registry = Arc::new(registry);
        // The capabilities get the registry and the token state they read at construction.
        let tokens = TokenAuthenticator::for_server(
            registry.clone(),
            extras.clone(),
            config.service_account_issuer.clone(),
        );
        let authenticator: Arc<dyn Authenticator> = match &config.authenticator {
            Authentication::Given(a) => a.clone(),
            Authentication::BearerTokens => Arc::new(tokens.clone()),
        };
        let authorizer: Arc<dyn Authorizer> = match &config.authorizer {
            Authorization::Given(a) => a.clone(),
            Authorization::Node => Arc::new(NodeAuthorizer::for_registry(registry.clone())),
        };
        let shutdown = CancellationToken::new();
        let token = shutdown.child_token();
        let controls = Arc::new(Controls::new(&config));
        let (restarts, restart_requests) = tokio::sync::mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            config,
            registry,
            authenticator,
            tokens,
            authorizer,
            controls,
            addr,
            listener: AsyncMutex::new(Listener {
                token: token.clone(),
                task: None,
            }),
            shutdown,
            extras,
            restarts,
        });
        let task = crate::http::spawn_listener(Arc::downgrade(&shared), listener, token);
        shared.listener.lock().await.task = Some(task);
        spawn_bookmark_ticker(Arc::downgrade(&shared));
        if let Some(node) = shared.config.schedule_to.clone() {
            crate::offline::scheduler::spawn(&shared, node);
        }
        spawn_restarter(Arc::downgrade(&shared), restart_requests);
        tracing::debug!(%addr, "API server listening");
        Ok(ApiServer { shared })
    }

    /// `http://127.0.0.1:PORT`, or `https://...` with [`Config::tls`].
    pub fn url(&self) -> String {
        self.shared.url()
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// A cloneable remote control for tests and seeding.
    pub fn handle(&self) -> ServerHandle {
        ServerHandle::new(self.shared.clone())
    }

    /// The PEM of the CA that signed the server certificate, with [`Config::tls`](crate::Config::tls).
    /// It is the cluster CA of [`ApiServer::kubelet_client_ca_pem`].
    pub fn ca_pem(&self) -> Option<String> {
        self.handle().ca_pem()
    }

    /// The PEM of the cluster CA that signs the client certificate this server presents to
    /// kubelets (`pods/log`: common name `kube-apiserver-kubelet-client`, organization
    /// `system:masters`) and those of [`ApiServer::issue_client_certificate`]: what a kubelet
    /// takes as `--client-ca-file`. Generated at start, with or without TLS (with TLS it also
    /// signed the serving certificate).
    pub fn kubelet_client_ca_pem(&self) -> String {
        self.handle().kubelet_client_ca_pem()
    }

    /// A new client certificate signed by the cluster CA, for user `cn` in groups `orgs`
    /// (the X.509 subject a kubelet's authenticator reads: common name, organizations):
    /// `(certificate PEM, PKCS#8 private key PEM)`.
    ///
    /// # Errors
    /// [`Error::Keygen`] if generating the key or signing fails.
    pub fn issue_client_certificate(
        &self,
        cn: &str,
        orgs: &[&str],
    ) -> Result<(String, String), Error> {
        self.handle().issue_client_certificate(cn, orgs)
    }

    /// A bearer token that authenticates as `user` for this server's life (with
    /// [`Config::with_auth`] not set every request is admin anyway).
    pub fn token_for(&self, user: &User) -> String {
        self.handle().token_for(user)
    }

    /// Stops the listener, open connections, watches and background tasks, and waits for the
    /// accept loop to end (the port is free afterwards).
    pub async fn shutdown(self) {
        self.shared.shutdown.cancel();
        let task = self.shared.listener.lock().await.task.take();
        if let Some(t) = task {
            let _ = t.await;
        }
    }

    #[cfg(feature = "client")]
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
    }
}

/// Runs the restarts asked over HTTP (`POST /nodelet/restart`), each in its own task as a
/// `ServerHandle::restart` would; ends with the server.
fn spawn_restarter(shared: Weak<Shared>, mut requests: mpsc::UnboundedReceiver<Restart>) {
    let Some(s) = shared.upgrade() else { return };
    let stop = s.shutdown.clone();
    drop(s);
    tokio::spawn(async move {
        loop {
            let r = tokio::select! {
                () = stop.cancelled() => break,
                r = requests.recv() => r,
            };
            let Some(r) = r else { break };
            let Some(s) = shared.upgrade() else { break };
            tokio::spawn(async move {
                if let Err(error) = crate::http::restart(&s, r).await {
                    tracing::warn!(%error, "restart asked over HTTP failed");
                }
            });
        }
    });
}

fn spawn_bookmark_ticker(shared: Weak<Shared>) {
    let Some(s) = shared.upgrade() else { return };
    let interval = s.config.bookmark_interval.max(Duration::from_millis(10));
    let stop = s.shutdown.clone();
    drop(s);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => {
                    let Some(s) = shared.upgrade() else { break };
                    s.bookmark_now();
                }
            }
        }
    });
}
