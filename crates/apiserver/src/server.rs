//! `Config`, `ApiServer` and the shared state behind the listener, the pipeline and
//! `TestHandle`: startup (seed namespaces, bind, spawn), listener stop/restart, shutdown.

use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::json;
use tokio::sync::Mutex as AsyncMutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::auth::{AllowAll, Authenticator, Authorizer};
use crate::control::{Controls, TestHandle};
use crate::error::Error;
use crate::registry::{Registry, WriteOptions};
use crate::resources::NAMESPACES;
use crate::store::{Notice, Store};

/// Server options. `Config::default()` suits tests.
#[derive(Clone)]
#[non_exhaustive]
pub struct Config {
    /// Address to bind. Default `127.0.0.1:0` (a free loopback port).
    pub listen: SocketAddr,
    /// Events kept for watch resumption and exact reads. Default 10 000: enough for any test
    /// and for an offline node, small enough (a few MiB) to keep memory flat.
    pub history_limit: usize,
    /// Interval of the periodic BOOKMARK sent to watches with `allowWatchBookmarks=true`.
    /// Default 60 s, as a real server sends them about once a minute.
    pub bookmark_interval: Duration,
    /// Watch duration when the client gives no `timeoutSeconds`. Default 30 min.
    pub default_watch_timeout: Duration,
    /// Namespaces created at start. Default `default`, `kube-system`, `kube-public`,
    /// `kube-node-lease`.
    pub initial_namespaces: Vec<String>,
    /// Who a request is. Default [`AllowAll`] (everyone is `system:admin`).
    pub authenticator: Arc<dyn Authenticator>,
    /// What a user may do. Default [`AllowAll`].
    pub authorizer: Arc<dyn Authorizer>,
    /// Bearer-token authentication and the Node authorizer (see [`Config::with_auth`]); when
    /// on, it replaces [`Config::authenticator`] and [`Config::authorizer`]. Default off.
    pub auth: bool,
    /// Serve HTTPS with a CA and server certificate generated at start (see
    /// [`Config::with_tls`]). Default off (plain HTTP).
    pub tls: bool,
    /// Create the `default` ServiceAccount in every new namespace, as the controller manager
    /// does. Default on.
    pub auto_service_accounts: bool,
    /// `iss` of service account tokens and the OIDC discovery issuer. Default
    /// `https://kubernetes.default.svc`.
    pub service_account_issuer: String,
    /// Publish ConfigMap `kube-root-ca.crt` (key `ca.crt`) in every namespace, as a cluster's
    /// root-ca-cert-publisher does: the TLS CA with [`Config::tls`], else a CA generated for
    /// the purpose. Default off (existing tests count the objects in their namespaces).
    pub publish_root_ca: bool,
    /// HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS` advertised on every connection: how many
    /// requests (watches included) one connection may have open at once; further streams wait
    /// in the client. Default 100, kube-apiserver's `--http2-max-streams-per-connection`.
    pub http2_max_streams_per_connection: u32,
    /// ServiceAccount admission on pod create: the pod's account must exist, and the
    /// `kube-api-access-*` token volume and its mounts are injected unless
    /// `automountServiceAccountToken: false` (pod, else account) says otherwise. Default off:
    /// a bare server keeps a created pod's spec as the test wrote it (many tests assert on
    /// volumes and mounts); the binary and the agent's embedded mode turn it on.
    pub service_account_admission: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            history_limit: 10_000,
            bookmark_interval: Duration::from_secs(60),
            default_watch_timeout: Duration::from_secs(1800),
            initial_namespaces: ["default", "kube-system", "kube-public", "kube-node-lease"]
                .map(String::from)
                .to_vec(),
            authenticator: Arc::new(AllowAll),
            authorizer: Arc::new(AllowAll),
            auth: false,
            tls: false,
            auto_service_accounts: true,
            service_account_issuer: "https://kubernetes.default.svc".into(),
            publish_root_ca: false,
            http2_max_streams_per_connection: 100,
            service_account_admission: false,
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("history_limit", &self.history_limit)
            .field("bookmark_interval", &self.bookmark_interval)
            .field("default_watch_timeout", &self.default_watch_timeout)
            .field("initial_namespaces", &self.initial_namespaces)
            .field(
                "http2_max_streams_per_connection",
                &self.http2_max_streams_per_connection,
            )
            .finish_non_exhaustive()
    }
}

impl Config {
    /// Sets [`Config::publish_root_ca`].
    #[must_use]
    pub fn publish_root_ca(mut self, on: bool) -> Self {
        self.publish_root_ca = on;
        self
    }

    /// Sets [`Config::http2_max_streams_per_connection`] (at least 1).
    #[must_use]
    pub fn http2_max_streams_per_connection(mut self, n: u32) -> Self {
        self.http2_max_streams_per_connection = n.max(1);
        self
    }

    /// Sets [`Config::service_account_admission`].
    #[must_use]
    pub fn service_account_admission(mut self, on: bool) -> Self {
        self.service_account_admission = on;
        self
    }

    /// What a cluster's controllers and admission do for pods: [`Config::auto_service_accounts`],
    /// [`Config::publish_root_ca`] and [`Config::service_account_admission`], all on.
    #[must_use]
    pub fn like_a_cluster(mut self) -> Self {
        self.auto_service_accounts = true;
        self.publish_root_ca = true;
        self.service_account_admission = true;
        self
    }

    /// Sets [`Config::listen`].
    #[must_use]
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Sets [`Config::history_limit`].
    #[must_use]
    pub fn history_limit(mut self, n: usize) -> Self {
        self.history_limit = n;
        self
    }

    /// Sets [`Config::bookmark_interval`].
    #[must_use]
    pub fn bookmark_interval(mut self, d: Duration) -> Self {
        self.bookmark_interval = d;
        self
    }

    /// Sets [`Config::authenticator`].
    #[must_use]
    pub fn authenticator(mut self, a: Arc<dyn Authenticator>) -> Self {
        self.authenticator = a;
        self
    }

    /// Sets [`Config::authorizer`].
    #[must_use]
    pub fn authorizer(mut self, a: Arc<dyn Authorizer>) -> Self {
        self.authorizer = a;
        self
    }
}

/// The running listener: its token ends the accept loop and every connection on it.
pub(crate) struct Listener {
    pub(crate) token: CancellationToken,
    pub(crate) task: Option<JoinHandle<()>>,
}

/// State shared by the listener, the pipeline and every `TestHandle`.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) registry: Registry,
    pub(crate) controls: Controls,
    /// The bound address (fixed for the server's life, so restarts reuse the port).
    pub(crate) addr: SocketAddr,
    pub(crate) listener: AsyncMutex<Listener>,
    /// Cancelled on shutdown: ends the listener, connections, watches and the bookmark ticker.
    pub(crate) shutdown: CancellationToken,
    /// Tokens, the service-account token signer and TLS material (`extras.rs`).
    pub(crate) extras: crate::extras::Extras,
}

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
    /// [`Error::Bind`] when the address cannot be bound.
    pub async fn start(mut config: Config) -> Result<ApiServer, Error> {
        let extras = crate::extras::Extras::prepare(&mut config)?;
        let listener = crate::http::bind(config.listen)?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: config.listen,
            source,
        })?;
        let store = Store::new(
            config.history_limit,
            config.history_limit.clamp(1024, 65_536),
        );
        let mut registry = Registry::new(store);
        registry.auto_service_accounts = config.auto_service_accounts;
        registry.service_account_admission = config.service_account_admission;
        if config.publish_root_ca {
            registry.root_ca = Some(match &extras.tls {
                Some(tls) => tls.ca_pem().to_string(),
                None => crate::tls::TlsMaterial::generate()?.ca_pem().to_string(),
            });
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
        let shutdown = CancellationToken::new();
        let token = shutdown.child_token();
        let shared = Arc::new(Shared {
            config,
            registry,
            controls: Controls::default(),
            addr,
            listener: AsyncMutex::new(Listener {
                token: token.clone(),
                task: None,
            }),
            shutdown,
            extras,
        });
        crate::extras::started(&shared);
        let task = crate::http::spawn_listener(Arc::downgrade(&shared), listener, token);
        shared.listener.lock().await.task = Some(task);
        spawn_bookmark_ticker(Arc::downgrade(&shared));
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
    pub fn handle(&self) -> TestHandle {
        TestHandle::new(self.shared.clone())
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

impl Shared {
    /// Ends the accept loop and every connection accepted by it.
    pub(crate) async fn stop_listener(&self) {
        let mut l = self.listener.lock().await;
        l.token.cancel();
        if let Some(t) = l.task.take() {
            let _ = t.await;
        }
    }

    /// Binds the same address again and serves.
    pub(crate) async fn restart_listener(self: &Arc<Self>) -> Result<(), Error> {
        if self.shutdown.is_cancelled() {
            return Err(Error::ShutDown);
        }
        let mut l = self.listener.lock().await;
        if l.task.as_ref().is_some_and(|t| !t.is_finished()) && !l.token.is_cancelled() {
            return Ok(());
        }
        l.token.cancel();
        if let Some(t) = l.task.take() {
            let _ = t.await;
        }
        let listener = crate::http::bind(self.addr)?;
        let token = self.shutdown.child_token();
        l.task = Some(crate::http::spawn_listener(
            Arc::downgrade(self),
            listener,
            token.clone(),
        ));
        l.token = token;
        Ok(())
    }

    /// Sends a BOOKMARK at the current resourceVersion to every watch that allows bookmarks.
    pub(crate) fn bookmark_now(&self) {
        let s = self.registry.store.lock();
        s.notify(Notice::Bookmark(s.rv));
    }
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
