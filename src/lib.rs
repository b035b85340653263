//! nodelet, the agent: a node agent that runs the pods bound to its node — their ConfigMaps,
//! Secrets and other volumes as files, their environment, and with the process runtime their
//! containers as local processes — as a library, so tests and other programs can run it
//! in-process. The `nodelet` binary adds the command line, logging, its subcommands and the
//! global allocator.
//!
//! # Principal types
//!
//! * [`AgentConfig`]: node name, root directory, strategy, sync frequency, node registration,
//!   listen addresses, runtime. [`RunArgs`] parses the agent's command line (clap) and
//!   [`RunArgs::settings`] adds a KubeletConfiguration subset to give [`Settings`].
//! * [`Agent`]: started with an [`ApiClient`] (a `kube::Client`, and the counters of the
//!   `nodelet-transport` under it for `/metrics`; a plain `kube::Client` converts); runs the
//!   object managers, the volume manager, the pod workers (`nodelet-podworker`), the pod source
//!   (a watch of pods with `spec.nodeName=<node>`), the event publisher and Node registration
//!   (`nodelet-reporting`), the pod-status writer, the kubelet API (`nodelet-kubelet-api`) and
//!   the HTTP endpoints; stopped with [`Agent::shutdown`]. [`Agent::pods_view`] is what `/pods`
//!   serves ([`PodsView`]).
//! * [`run`]: what the binary does: connect (or start the embedded API server for
//!   `--manifests`), start an [`Agent`], tell systemd when its first pod list is synced, wait
//!   for a stop signal, shut down within 5 s (`nodelet_volume_manager::remove_pods` after it with
//!   `--cleanup-on-exit`).
//!
//! # Features
//!
//! * `embedded` (default): the offline mode, `--manifests DIR` and [`start_embedded`], which
//!   link `nodelet-apiserver` (HTTP server, CA, token signer, directory watcher) into the agent.
//!   Built with `--no-default-features`, the agent has none of them and refuses `--manifests`.
//! * `jemalloc`, `mimalloc`: the binary's global allocator instead of the system's (glibc);
//!   `dhat-heap`: a heap profile written when the agent is told to stop. One wins when
//!   several are enabled. They concern the `nodelet` binary only: the library holds no
//!   allocator code and learns what the binary's allocator reports through
//!   `nodelet_core::AllocatorHooks` ([`AgentConfig::allocator`]).
//!
//! ```text
//! pods (watch spec.nodeName=N) ─► PodWorkers ─► ConfigSyncer ─► VolumeManager (files)
//!                                              │             └► EnvFileRuntime (env files)
//!                                              └► StatusWriter (pods/status), EventPublisher (events)
//! Node + Lease (--register-node)      /healthz /readyz /metrics /pods (--listen), kubelet API
//! ```
//!
//! # Invariants
//!
//! * Every API request is one a node identity may make under the Node authorizer: pods by
//!   `spec.nodeName` field selector, objects by name, its own Node and Lease, events, the
//!   status of its own pods.
//! * The pod watch hands every pod to `PodWorkers::update_pod` and nothing else: the pod
//!   workers own "this pod is desired" (they register it with the object managers and add it
//!   to the volume manager before `update_pod` returns); the agent never does either itself.
//! * Shutdown leaves volumes and env files in place; a restarted agent adopts them (the volume
//!   manager reconstructs volumes, the env-file runtime reports existing containers) and
//!   terminates pods found on disk that the API no longer has.
//!
//! # Example
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> anyhow::Result<()> {
//! let agent = nodelet::Agent::start(nodelet::AgentConfig::new("dev-1", "./var"), client).await?;
//! agent.wait_ready().await;
//! agent.shutdown().await;
//! # Ok(())
//! # }
//! ```

mod agent;
mod api_client;
mod api_health;
mod follow;
mod http;
mod kubelet_host;
mod lock;
mod parts;
mod pod_source;
mod pod_watch;
mod pods_view;
mod propagation;
mod service;
mod state;
mod views;

use std::future::Future;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
#[cfg(feature = "embedded")]
use nodelet_apiserver::{ApiServer, ManifestSync, User};
use nodelet_transport::{Protocol, TransportConfig};
use tracing::info;
#[cfg(feature = "embedded")]
use tracing::warn;

pub use agent::Agent;
pub use api_client::ApiClient;
/// The configuration [`Agent::start`] and [`run`] take, from `nodelet-config` (its other
/// types, the flags' values and defaults, are that crate's).
pub use nodelet_config::{AgentConfig, RunArgs, Settings};
use nodelet_config::{ApiSource, KubernetesServiceEnv};
pub use pods_view::{ApiView, ObjectView, PodView, PodsView, VolumeView, WatchView};

/// An embedded API server seeded from a manifests directory, with the agent's client.
#[cfg(feature = "embedded")]
pub struct Embedded {
    /// The server.
    pub server: ApiServer,
    /// Keeps the store in sync with the directory until dropped.
    pub sync: ManifestSync,
    /// A client with the node identity `system:node:<node>`, with its transport's counters.
    pub node_client: ApiClient,
}

#[cfg(feature = "embedded")]
impl std::fmt::Debug for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedded")
            .field("url", &self.server.url())
            .finish_non_exhaustive()
    }
}

/// Starts `nodelet-apiserver` over HTTPS (a CA generated at start, published as
/// `kube-root-ca.crt` in every namespace) with authentication, the Node authorizer, a `default`
/// ServiceAccount per namespace and ServiceAccount admission (pods get the `kube-api-access-*`
/// token volume a cluster gives them), binds every pod that names no node to `node` (with the
/// `Scheduled` event, as a scheduler of this one-node cluster would), loads `manifests` (edits
/// apply live), and builds a client for `node` with a node identity that trusts that CA.
///
/// # Errors
/// The server cannot start, the directory cannot be read or watched.
#[cfg(feature = "embedded")]
pub async fn start_embedded(manifests: &std::path::Path, node: &str) -> anyhow::Result<Embedded> {
    start_embedded_with(manifests, node, Protocol::Auto).await
}

/// [`start_embedded`] with the node client speaking `protocol`.
///
/// # Errors
/// As [`start_embedded`].
#[cfg(feature = "embedded")]
pub async fn start_embedded_with(
    manifests: &std::path::Path,
    node: &str,
    protocol: Protocol,
) -> anyhow::Result<Embedded> {
    // The certificates.k8s.io kinds are served so manifests may hold ClusterTrustBundles
    // (and PodCertificateRequests) for `clusterTrustBundle` / `podCertificate` volumes.
    let config = nodelet_apiserver::Config::default()
        .with_auth()
        .with_tls()
        .like_a_cluster()
        .with_certificates()
        // One node: a pod that names none is bound to it, as a scheduler would.
        .schedule_to(node);
    let server = ApiServer::start(config)
        .await
        .context("starting the embedded API server")?;
    let sync = ManifestSync::start(server.handle(), manifests)
        .await
        .with_context(|| format!("loading manifests from {}", manifests.display()))?;
    // Its problems are logged by the sync itself, once per content of their file.
    let yaml = server.kubeconfig_yaml(&User::node(node));
    let node_client = client_from_yaml(&yaml, protocol).await?;
    Ok(Embedded {
        server,
        sync,
        node_client,
    })
}

#[cfg(feature = "embedded")]
async fn client_from_yaml(yaml: &str, protocol: Protocol) -> anyhow::Result<ApiClient> {
    let kubeconfig = Kubeconfig::from_yaml(yaml).context("parsing kubeconfig")?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .context("loading kubeconfig")?;
    api_client(config, protocol).await
}

/// A client over `nodelet-transport` (HTTP/2; HTTP/1.1 where the server offers no h2, or with
/// [`Protocol::Http1`]) and its counters; logs the protocol the first connection negotiated.
async fn api_client(mut config: kube::Config, protocol: Protocol) -> anyhow::Result<ApiClient> {
    let url = config.cluster_url.to_string();
    identify(&mut config);
    let (client, transport) = nodelet_transport::connect(config, TransportConfig::new(protocol))
        .await
        .context("building the kube client")?;
    match transport.as_ref().and_then(|t| t.protocol()) {
        Some(negotiated) => {
            info!(api_server = %url, %protocol, %negotiated, "API server transport")
        }
        None if transport.is_some() => info!(
            api_server = %url,
            %protocol,
            "API server transport; not reachable yet, protocol chosen on first connection"
        ),
        None => info!(api_server = %url, "API server transport: kube's HTTP/1.1 stack (proxy)"),
    }
    Ok(ApiClient::from((client, transport)))
}

/// Names the agent in the `User-Agent` of every request made with `config`, as the kubelet
/// names itself (`kubelet/v1.36.2 (linux/amd64) …`): `nodelet/v<version> (<os>/<arch>)`. The
/// API server records the part before the first `/` as the field manager of what the agent
/// writes (its Node, pod statuses, events).
pub fn identify(config: &mut kube::Config) {
    let agent = format!(
        "nodelet/v{} ({}/{})",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        nodelet_core::go::arch(),
    );
    if let Ok(value) = ::http::HeaderValue::from_str(&agent) {
        config.headers.push((::http::header::USER_AGENT, value));
    }
}

/// A client for the cluster: `path`, else what kube-rs infers (`KUBECONFIG`, in-cluster,
/// `~/.kube/config`), over `nodelet-transport` with `protocol`. Returns the client (with its
/// transport's counters) and the server URL.
///
/// # Errors
/// No usable configuration.
pub async fn cluster_client(
    path: Option<&std::path::Path>,
    protocol: Protocol,
) -> anyhow::Result<(ApiClient, String)> {
    let config = match path {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig given and none could be inferred")?,
    };
    let url = config.cluster_url.to_string();
    Ok((api_client(config, protocol).await?, url))
}

/// The local address this machine uses to reach the API server at `url` (a UDP "connect"
/// sends nothing; it only picks the route).
fn local_address_towards(url: &str) -> Option<std::net::IpAddr> {
    let authority = url.split("://").nth(1)?.split(['/', ' ']).next()?;
    let host_port = if authority.contains(':') {
        authority.to_owned()
    } else {
        format!("{authority}:443")
    };
    let target = std::net::ToSocketAddrs::to_socket_addrs(&host_port)
        .ok()?
        .next()?;
    let bind: std::net::SocketAddr = if target.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = std::net::UdpSocket::bind(bind).ok()?;
    socket.connect(target).ok()?;
    Some(socket.local_addr().ok()?.ip())
}

/// Runs the agent described by `settings` until `stop` completes, then shuts it down (at most
/// 5 s). Logs a one-line summary at start. Under systemd (`NOTIFY_SOCKET`) it sends `READY=1`
/// once the first pod list is synced (the moment `/readyz` turns 200) and `STOPPING=1` when `stop`
/// completes.
///
/// First locks the root directory (`<root-dir>/nodelet.lock`, `flock(2)`, held until it
/// returns): a second agent on the same directory fails before it writes anything there. The
/// embedded server's `admin.kubeconfig` is written only after the agent started.
///
/// # Errors
/// Start-up failures (root directory in use by another agent, API server, root directory,
/// listen address).
pub async fn run(settings: Settings, stop: impl Future<Output = ()>) -> anyhow::Result<()> {
    let mut config = settings.agent;
    // First of all: one agent per root directory. Held until this function returns.
    let _lock = lock::lock_root_dir(&config.root_dir)?;
    #[cfg(not(feature = "embedded"))]
    let (client, url) = match &settings.api {
        ApiSource::Cluster { kubeconfig } => {
            cluster_client(kubeconfig.as_deref(), settings.api_protocol).await?
        }
        ApiSource::Embedded { .. } => anyhow::bail!(nodelet_config::NO_EMBEDDED),
    };
    #[cfg(feature = "embedded")]
    let (client, url, embedded) = match &settings.api {
        ApiSource::Cluster { kubeconfig } => {
            let (client, url) =
                cluster_client(kubeconfig.as_deref(), settings.api_protocol).await?;
            (client, url, None)
        }
        ApiSource::Embedded { manifests } => {
            let embedded =
                start_embedded_with(manifests, &config.node_name, settings.api_protocol).await?;
            let url = format!(
                "{} (embedded, manifests {})",
                embedded.server.url(),
                manifests.display()
            );
            // The embedded server reaches the kubelet API with a client certificate of its
            // CA (as kube-apiserver's --kubelet-client-certificate): that CA is the API's
            // client CA unless one was given.
            if config.client_ca_file.is_none() {
                let path = config.root_dir.join("kubelet-client-ca.crt");
                std::fs::create_dir_all(&config.root_dir)
                    .and_then(|()| std::fs::write(&path, embedded.server.kubelet_client_ca_pem()))
                    .with_context(|| format!("writing {}", path.display()))?;
                config.client_ca_file = Some(path);
            }
            (embedded.node_client.clone(), url, Some(embedded))
        }
    };
    if config.node_ip.is_none() {
        config.node_ip = local_address_towards(&url);
    }
    if settings.kubernetes_service == KubernetesServiceEnv::ApiServer
        && config.kubernetes_service.is_none()
    {
        // `url` may carry a note after the address (the embedded server's manifests).
        let address = url.split(' ').next().unwrap_or_default();
        config.kubernetes_service = nodelet_config::service_endpoint_of(address);
    }
    let agent = Agent::start(config.clone(), client).await?;
    // Only now that every start-up check passed (root directory lock, API server, listen
    // address): the admin kubeconfig of the embedded server.
    #[cfg(feature = "embedded")]
    if let Some(embedded) = &embedded {
        let admin = config.root_dir.join("admin.kubeconfig");
        if let Err(error) = embedded.server.write_kubeconfig(&admin, &User::admin()) {
            warn!(%error, "admin kubeconfig not written");
        }
    }
    info!(
        node = %config.node_name,
        strategy = %config.strategy,
        root_dir = %config.root_dir.display(),
        api_server = %url,
        listen = ?agent.http_addr(),
        "nodelet started"
    );
    let mut stop = std::pin::pin!(stop);
    let stopped_before_ready = tokio::select! {
        () = agent.wait_ready() => {
            service::notify_ready(agent.http_addr());
            false
        }
        () = &mut stop => true,
    };
    if !stopped_before_ready {
        stop.await;
    }
    service::notify_stopping();
    info!("stopping");
    agent.shutdown().await;
    if settings.cleanup_on_exit {
        // Still under the root directory's lock: no other agent can be adopting these volumes.
        match nodelet_volume_manager::remove_pods(&config.root_dir, false) {
            Ok(report) => info!(
                unmounted = report.unmounted.len(),
                "pods' directories removed (--cleanup-on-exit)"
            ),
            Err(error) => tracing::warn!(
                error = format!("{:#}", anyhow::Error::from(error)),
                "pods' directories not removed"
            ),
        }
    }
    #[cfg(feature = "embedded")]
    if let Some(embedded) = embedded {
        drop(embedded.sync);
        embedded.server.shutdown().await;
    }
    info!("stopped");
    Ok(())
}
