//! [`serve`]: binds the kubelet API's port and serves [`KubeletApiConfig`]'s routes over TLS,
//! every request authenticated and authorized first (go-restful's container filter in the
//! kubelet, which runs for unknown paths too).

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse as _, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::authn::Authenticator;
use crate::authz::{Authorizer, Decision};
use crate::error::Error;
use crate::exec::exec;
use crate::host::Host;
use crate::logs::container_logs;
use crate::pods::NodePods;
use crate::state::{ApiState, text};
use crate::tls::{Peer, TlsFiles, TlsListener, server_tls};

/// The kubelet's port (`--kubelet-port`, `KubeletConfiguration.port`).
pub const DEFAULT_PORT: u16 = 10250;

/// How the kubelet API is served. [`KubeletApiConfig::new`] gives the kubelet's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KubeletApiConfig {
    /// Where to listen; port 0 picks a free one ([`serve`] returns it).
    pub addr: SocketAddr,
    /// The serving certificate chain, PEM (`--tls-cert-file`); with `tls_private_key_file`.
    /// Without both, a certificate is made at start for `node_name` and `node_ips`.
    pub tls_cert_file: Option<PathBuf>,
    /// The serving key, PEM (`--tls-private-key-file`).
    pub tls_private_key_file: Option<PathBuf>,
    /// The CAs of client certificates, PEM (`--client-ca-file`); without it no client
    /// certificate is accepted and only bearer tokens authenticate.
    pub client_ca_file: Option<PathBuf>,
    /// The node's name: the `nodes/<name>` access is reviewed for, and the certificate's name.
    pub node_name: String,
    /// The node's addresses, in the certificate made at start.
    pub node_ips: Vec<IpAddr>,
    /// The agent's root directory: containers' log files are under its `pods/`
    /// (`nodelet_core::PodDirs::pod_logs`).
    pub root_dir: PathBuf,
    /// How `kubectl exec` runs a command: the program and first arguments (the agent's program
    /// and `container-exec`), followed by `PID SPEC -- CMD...`. Empty (the default): no
    /// container can be exec'd into.
    pub exec_command: Vec<OsString>,
    /// How long a token review's answer is kept (`authentication.webhook.cacheTTL`, 2 min).
    pub authentication_cache_ttl: Duration,
    /// How long an allowed access review is kept
    /// (`authorization.webhook.cacheAuthorizedTTL`, 5 min).
    pub authorized_cache_ttl: Duration,
    /// How long a denied access review is kept
    /// (`authorization.webhook.cacheUnauthorizedTTL`, 30 s).
    pub unauthorized_cache_ttl: Duration,
}

impl KubeletApiConfig {
    /// Serving on `addr` for `node_name` with a certificate made at start, no client CA, the
    /// kubelet's cache TTLs, logs under `root_dir` and no exec.
    pub fn new(addr: SocketAddr, node_name: &str, root_dir: impl Into<PathBuf>) -> Self {
        Self {
            addr,
            tls_cert_file: None,
            tls_private_key_file: None,
            client_ca_file: None,
            node_name: node_name.to_owned(),
            node_ips: Vec::new(),
            root_dir: root_dir.into(),
            exec_command: Vec::new(),
            authentication_cache_ttl: Duration::from_secs(120),
            authorized_cache_ttl: Duration::from_secs(300),
            unauthorized_cache_ttl: Duration::from_secs(30),
        }
    }
}

/// Binds `config.addr` and serves the kubelet API over what `host` runs until `shutdown` (the
/// server, its handshakes and its log streams are tasks of `tracker`); returns the bound
/// address. Token and access reviews are made with `client`, the node's identity.
///
/// Routes: `GET /healthz` (`ok`), `GET /pods` (a v1 `PodList` of [`Host::pods`]), `GET
/// /containerLogs/{namespace}/{pod}/{container}` (see `logs.rs`), `GET|POST
/// /exec/{namespace}/{pod}/{container}` (a WebSocket, see `exec.rs`). Unknown paths are `404
/// 404: Page Not Found`, other methods `405 405: Method Not Allowed`, as go-restful answers.
///
/// # Errors
/// The certificate, key or client CA files cannot be used (named in the error); the address
/// cannot be bound.
pub async fn serve(
    config: KubeletApiConfig,
    client: kube::Client,
    host: Arc<dyn Host>,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) -> Result<SocketAddr, Error> {
    let pods = NodePods::new(&config.root_dir, host, &config.exec_command);
    let files = TlsFiles {
        cert: config.tls_cert_file.as_deref(),
        key: config.tls_private_key_file.as_deref(),
        client_ca: config.client_ca_file.as_deref(),
    };
    let tls = server_tls(&files, &config.node_name, &config.node_ips)?;
    let listener = tokio::net::TcpListener::bind(config.addr)
        .await
        .map_err(|source| Error::Bind {
            addr: config.addr,
            source,
        })?;
    let listener = TlsListener::start(listener, tls.acceptor, shutdown.clone(), tracker)
        .map_err(Error::LocalAddr)?;
    let bound = axum::serve::Listener::local_addr(&listener).map_err(Error::LocalAddr)?;
    let state = Arc::new(ApiState {
        pods,
        authn: Authenticator::new(
            client.clone(),
            tls.client_ca,
            config.authentication_cache_ttl,
        ),
        authz: Authorizer::new(
            client,
            &config.node_name,
            config.authorized_cache_ttl,
            config.unauthorized_cache_ttl,
        ),
        shutdown: shutdown.clone(),
        tracker: tracker.clone(),
    });
    let app = router(state).into_make_service_with_connect_info::<Peer>();
    tracker.spawn(async move {
        let server = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned());
        if let Err(error) = server.await {
            tracing::warn!(%error, "kubelet API server failed");
        }
    });
    tracing::info!(addr = %bound, "kubelet API serving");
    Ok(bound)
}

fn router(state: Arc<ApiState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { text(StatusCode::OK, "ok") }))
        .route("/pods", get(pods))
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            get(container_logs),
        )
        .route("/exec/{namespace}/{pod}/{container}", get(exec).post(exec))
        .fallback(|| async { text(StatusCode::NOT_FOUND, "404: Page Not Found") })
        .method_not_allowed_fallback(|| async {
            text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed")
        })
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// Authenticates and authorizes every request (`authn.rs`, `authz.rs`).
async fn guard(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    request: Request,
    next: Next,
) -> Response {
    let Some(user) = state.authn.authenticate(&peer, request.headers()).await else {
        return text(StatusCode::UNAUTHORIZED, "Unauthorized");
    };
    let path = request.uri().path();
    match state.authz.authorize(&user, request.method(), path).await {
        Decision::Allowed => next.run(request).await,
        Decision::Forbidden(message) => text(StatusCode::FORBIDDEN, message),
        Decision::Failed(message) => text(StatusCode::INTERNAL_SERVER_ERROR, message),
    }
}

/// `GET /pods`: the pods the agent runs, as a v1 `PodList` (each whole, `spec.volumes`
/// included: `AdmittedPod::to_pod`).
async fn pods(State(state): State<Arc<ApiState>>) -> Response {
    let list = k8s_openapi::List {
        items: state
            .pods
            .pods()
            .iter()
            .map(nodelet_core::AdmittedPod::to_pod)
            .collect(),
        metadata: Default::default(),
    };
    match serde_json::to_vec(&list) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
    }
}
