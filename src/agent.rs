//! [`Agent`]: wires the object managers, the volume manager, the pod workers, the pod source,
//! events, status, node registration and the HTTP endpoints together.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use nodelet_core::{
    AdmittedPod, Feature, FeatureGates, NodeAllocatable, ObjectRef, PodDirs, PodUid,
};
use nodelet_object_manager::source::{KubeSource, ObjectSource};
use nodelet_object_manager::{ConfigMapManager, ManagerConfig, SecretManager};
use nodelet_podworker::StatusSink as _;
use nodelet_podworker::{
    ConfigSyncer, EnvFileRuntime, EnvOptions, EnvSources, PodUpdate, PodWorkers, SyncerConfig,
    SyncerParts, UpdateType, WorkerConfig, WorkerPhase,
};
use nodelet_runtime::{ProcessRuntime, RuntimeConfig};
use nodelet_volume_manager::{MemoryMedium, VolumeManager};
use serde_json::Value;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument as _, debug, info, info_span, warn};

use crate::api_client::ApiClient;
use crate::config::{AgentConfig, RuntimeKind};
use crate::events::EventPublisher;
use crate::metrics::Metrics;
use crate::pods_view::PodsView;
use crate::state::AgentState;
use crate::status::StatusWriter;
use crate::views::{metrics_text, pods_view};

/// How often finished workers of pods no longer known are forgotten (the kubelet's
/// housekeeping period).
const HOUSEKEEPING: Duration = Duration::from_secs(2);

/// A running agent. Stop it with [`Agent::shutdown`]: volumes and env files stay on disk and a
/// new agent with the same root directory adopts them.
pub struct Agent {
    pub(crate) state: Arc<AgentState>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    http_addr: Option<SocketAddr>,
    kubelet_addr: Option<SocketAddr>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("node", &self.state.config.node_name)
            .field("root_dir", &self.state.config.root_dir)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Starts the agent against the API server behind `client`. Returns once every task runs
    /// (the HTTP listener is bound); use [`wait_ready`](Self::wait_ready) to wait for the
    /// first pod list.
    ///
    /// # Errors
    /// The root directory cannot be created, or the listen address cannot be bound.
    pub async fn start(config: AgentConfig, client: impl Into<ApiClient>) -> anyhow::Result<Agent> {
        let ApiClient { client, counters } = client.into();
        std::fs::create_dir_all(PodDirs::new(&config.root_dir).pods())
            .with_context(|| format!("creating root directory {}", config.root_dir.display()))?;
        let tasks = Tasks::default();
        let gates = Gates::read(&config.feature_gates);
        // Requests, retries and connections are counted by the transport under `client`.
        let metrics = Metrics::for_transport(counters, config.allocator);
        let (configmaps, secrets) = object_managers(&config, &client)?;
        let events = EventPublisher::start(
            client.clone(),
            &config.node_name,
            metrics.clone(),
            tasks.shutdown.clone(),
            &tasks.tracker,
        );
        // One detection for env vars, volumes and the Node status' quantities.
        let allocatable = NodeAllocatable::detect(&config.root_dir);
        let volumes = volume_manager(
            &config,
            allocatable,
            &client,
            (&configmaps, &secrets),
            &events,
            &tasks,
        )?;
        let host_ips = vec![
            config
                .node_ip
                .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
                .to_string(),
        ];
        let status = StatusWriter::start(
            client.clone(),
            metrics.clone(),
            host_ips.clone(),
            tasks.shutdown.clone(),
            &tasks.tracker,
        );
        let (runtime, processes) = container_runtime(&config)?;
        let syncer = ConfigSyncer::new(
            SyncerConfig::new(&config.root_dir)
                .with_env(gates.env_options(allocatable))
                .with_host_ips(host_ips),
            SyncerParts {
                sources: EnvSources {
                    configmaps: configmaps.clone(),
                    secrets: secrets.clone(),
                },
                volumes: Arc::new(volumes.clone()),
                runtime,
                events: Arc::new(events),
                status: Arc::new(status.clone()),
            },
        );
        let workers = PodWorkers::new(
            Arc::new(syncer),
            WorkerConfig::default()
                .with_resync_interval(config.sync_frequency)
                .with_backoff_period(config.sync_error_backoff),
        );
        let (ready_tx, ready) = watch::channel(false);
        let state = Arc::new(AgentState {
            config: config.clone(),
            workers,
            volumes,
            configmaps,
            secrets,
            metrics,
            ready,
            pod_watch: crate::pod_watch::PodWatchHealth::default(),
            status,
            processes,
            known_pods: parking_lot::RwLock::default(),
        });
        // The kubelet's API (logs through the API server), before the Node publishes its port.
        let kubelet_addr = kubelet_api(&state, &client, &tasks).await?;
        tasks.spawn_in(
            pod_source(
                state.clone(),
                client.clone(),
                gates.admission,
                ready_tx,
                tasks.shutdown.clone(),
            ),
            info_span!("pod source", node = %config.node_name),
        );
        tasks.tracker.spawn(crate::propagation::track(
            state.clone(),
            tasks.shutdown.clone(),
        ));
        if config.register_node {
            let mut node_config = config.clone();
            node_config.kubelet_advertised_port = kubelet_addr.map(|a| a.port());
            tasks.spawn_in(
                crate::node::run(
                    node_config,
                    client,
                    state.metrics.clone(),
                    tasks.shutdown.clone(),
                ),
                info_span!("node", node = %config.node_name),
            );
        }
        let http_addr = match config.listen {
            Some(addr) => Some(
                crate::http::serve(addr, state.clone(), tasks.shutdown.clone(), &tasks.tracker)
                    .await?,
            ),
            None => None,
        };
        let Tasks { shutdown, tracker } = tasks;
        Ok(Agent {
            state,
            shutdown,
            tracker,
            http_addr,
            kubelet_addr,
        })
    }

    /// The address the kubelet API is served on, if any (the bound port when port 0 was
    /// asked).
    pub fn kubelet_addr(&self) -> Option<SocketAddr> {
        self.kubelet_addr
    }

    /// The address `/healthz` etc. are served on, if any (the bound port when `:0` was asked).
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// The configuration the agent runs with.
    pub fn config(&self) -> &AgentConfig {
        &self.state.config
    }

    /// Waits until the first pod list has been handed to the pod workers.
    pub async fn wait_ready(&self) {
        let mut ready = self.state.ready.clone();
        let _ = ready.wait_for(|r| *r).await;
    }

    /// The `/pods` document: every pod with its worker state and volumes.
    pub fn pods_view(&self) -> PodsView {
        pods_view(&self.state)
    }

    /// [`pods_view`](Self::pods_view) as JSON, as `/pods` serves it.
    pub fn pods_json(&self) -> Value {
        serde_json::to_value(self.pods_view()).unwrap_or_default()
    }

    /// The `/metrics` text.
    pub fn metrics_text(&self) -> String {
        metrics_text(&self.state)
    }

    /// Stops every task (in-flight syncs are dropped, volumes stay in place) and waits for
    /// them, at most `shutdown_timeout` (default 5 s).
    pub async fn shutdown(self) {
        let timeout = self.state.config.shutdown_timeout;
        let stop = async {
            self.shutdown.cancel();
            self.state.workers.shutdown().await;
            // Containers do not outlive the agent that follows them (half the time allowed
            // for SIGTERM, the rest for SIGKILL).
            if let Some(processes) = &self.state.processes {
                processes.stop_all(timeout / 2).await;
            }
            self.tracker.close();
            self.tracker.wait().await;
            self.state.configmaps.shutdown().await;
            self.state.secrets.shutdown().await;
        };
        if tokio::time::timeout(timeout, stop).await.is_err() {
            warn!(?timeout, "agent tasks did not stop in time");
        }
    }
}

/// Admits a watched pod: its UID is validated here, once, where pods enter the node. A pod
/// without a UID, or with one that is not a single path component (`../x`), is skipped with a
/// warning naming its namespace/name. It never reaches the workers, the managers, the volume
/// manager or `<root>/pods`; everything after this takes the [`AdmittedPod`].
///
/// With the `PodLevelResources` gate off, the pod's `spec.resources` is dropped here too
/// ([`Admission`]).
///
/// The pod's `managedFields` are dropped here: nothing on a node reads them (the downward API
/// cannot name them) and they are often the largest part of a pod object, held for every pod
/// as long as it runs.
fn admit(mut pod: Pod, admission: Admission) -> Option<AdmittedPod> {
    pod.metadata.managed_fields = None;
    if !admission.pod_level_resources
        && let Some(spec) = pod.spec.as_mut()
    {
        spec.resources = None;
    }
    // The decoder grows lists by doubling, and a k8s-openapi `Volume` is over 3 KB inline: a
    // pod's 9 volumes sat in room for 16. The pod is kept for its life; keep it tight.
    if let Some(spec) = pod.spec.as_mut() {
        if let Some(volumes) = spec.volumes.as_mut() {
            volumes.shrink_to_fit();
        }
        spec.containers.shrink_to_fit();
        for c in &mut spec.containers {
            if let Some(mounts) = c.volume_mounts.as_mut() {
                mounts.shrink_to_fit();
            }
        }
    }
    match AdmittedPod::new(pod) {
        Ok(pod) => Some(pod),
        Err(error) => {
            warn!(%error, "pod skipped: unusable metadata.uid");
            None
        }
    }
}

/// The agent's background tasks: one cancellation token and one tracker for all.
#[derive(Default)]
struct Tasks {
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl Tasks {
    /// Runs `task` in `span` until it ends (each task watches `shutdown` itself).
    fn spawn_in(
        &self,
        task: impl std::future::Future<Output = ()> + Send + 'static,
        span: tracing::Span,
    ) {
        self.tracker.spawn(task.instrument(span));
    }
}

/// The feature gates, read once here: each part is built with what its gates say, and no part
/// reads a gate again.
#[derive(Debug, Clone, Copy)]
struct Gates {
    /// `EnvFiles`: `fileKeyRef` followed.
    env_files: bool,
    /// How the pod source admits pods (`PodLevelResources`).
    admission: Admission,
}

impl Gates {
    fn read(gates: &FeatureGates) -> Self {
        if !gates.ignored().is_empty() {
            info!(
                gates = ?gates.ignored(),
                "feature gates nodelet does not follow are ignored"
            );
        }
        Self {
            env_files: gates.enabled(Feature::EnvFiles),
            admission: Admission {
                pod_level_resources: gates.enabled(Feature::PodLevelResources),
            },
        }
    }

    /// Environment resolution for the pod workers.
    fn env_options(&self, allocatable: NodeAllocatable) -> EnvOptions {
        let mut env = EnvOptions::default();
        env.node_allocatable = allocatable;
        env.env_files = self.env_files;
        env
    }
}

/// What the pod source does to a pod object as it admits it.
#[derive(Debug, Clone, Copy)]
struct Admission {
    /// `PodLevelResources` on: `spec.resources` kept. Off, it is dropped at admission, so no
    /// part sees pod-level resources: a `resourceFieldRef` (env or downwardAPI volume) to a
    /// limit the container does not set is the node's allocatable, as a kubelet with the gate
    /// off resolves it.
    pod_level_resources: bool,
}

/// The ConfigMap and Secret managers, reading through the node's client.
fn object_managers(
    config: &AgentConfig,
    client: &kube::Client,
) -> anyhow::Result<(ConfigMapManager, SecretManager)> {
    let manager_config = ManagerConfig::new(config.strategy)
        .with_node_name(config.node_name.clone())
        .with_resync_interval(config.sync_frequency);
    let nodes: Arc<dyn ObjectSource<Node>> = Arc::new(KubeSource::<Node>::cluster(client.clone()));
    let configmaps = ConfigMapManager::with_sources(
        Arc::new(KubeSource::<ConfigMap>::namespaced(client.clone())),
        Some(nodes.clone()),
        manager_config.clone(),
    )?;
    let secrets = SecretManager::with_sources(
        Arc::new(KubeSource::<Secret>::namespaced(client.clone())),
        Some(nodes),
        manager_config,
    )?;
    Ok((configmaps, secrets))
}

/// The volume manager with its sources, running; after each burst of its work (first start, a
/// relist) freed memory goes back to the operating system, where the binary said how.
fn volume_manager(
    config: &AgentConfig,
    allocatable: NodeAllocatable,
    client: &kube::Client,
    (configmaps, secrets): (&ConfigMapManager, &SecretManager),
    events: &EventPublisher,
    tasks: &Tasks,
) -> anyhow::Result<VolumeManager> {
    let mut vm_config = nodelet_volume_manager::Config::new(config.root_dir.clone());
    vm_config.node_allocatable = Some(allocatable);
    if config.volumes_on_disk {
        vm_config.memory_medium = MemoryMedium::Disk;
    }
    vm_config.fsync = config.fsync;
    vm_config.resync_interval = Some(config.sync_frequency);
    // The sources volumes read besides objects, each built only when its feature gates are on
    // (the one place they are read for volumes): tokens always; ClusterTrustBundles (PL-17,
    // watched from the first volume that reads one) and PodCertificateRequests (PL-21, cargo
    // feature `pod-certificates`) through the node's own client.
    let gates = &config.feature_gates;
    let tokens = nodelet_sources::KubeTokenSource::new(client.clone());
    let mut sources =
        nodelet_sources::Sources::new(nodelet_sources::TokenManager::new(Arc::new(tokens)));
    if gates.enabled(nodelet_core::Feature::ClusterTrustBundle)
        && gates.enabled(nodelet_core::Feature::ClusterTrustBundleProjection)
    {
        let mut bundles = nodelet_sources::TrustBundleConfig::default();
        bundles.source = Some(Arc::new(nodelet_sources::KubeTrustBundleSource::new(
            client.clone(),
        )));
        sources = sources.with_trust_bundles(nodelet_sources::TrustBundleManager::new(bundles));
    }
    if gates.enabled(nodelet_core::Feature::PodCertificateRequest) {
        #[cfg(feature = "pod-certificates")]
        {
            use nodelet_sources::pod_certificate as certificates;
            let source = certificates::KubePodCertificateSource::new(
                client.clone(),
                config.node_name.clone(),
            );
            let manager = certificates::PodCertificateManager::new(
                Arc::new(source),
                Arc::new(events.clone()),
                certificates::MAX_JITTER,
            );
            sources = sources.with_pod_certificates(manager);
        }
        #[cfg(not(feature = "pod-certificates"))]
        tracing::warn!(
            "the PodCertificateRequest gate is on, but this agent was built without pod certificates (cargo feature pod-certificates): podCertificate volumes fail to mount"
        );
    }
    #[cfg(not(feature = "pod-certificates"))]
    {
        sources = sources.built_without_pod_certificates();
    }
    let volumes = VolumeManager::new(
        vm_config,
        configmaps.clone(),
        secrets.clone(),
        sources,
        Arc::new(events.clone()),
    )?;
    {
        let vm = volumes.clone();
        let token = tasks.shutdown.clone();
        tasks.tracker.spawn(async move { vm.run(token).await });
    }
    if let Some(allocator) = config.allocator {
        tasks.tracker.spawn(crate::memory::trim_after_bursts(
            volumes.subscribe(),
            tasks.shutdown.clone(),
            allocator.release_free_memory,
        ));
    }
    Ok(volumes)
}

/// What runs containers: env files, or processes (also returned, for the PLEG and the kubelet
/// API).
fn container_runtime(
    config: &AgentConfig,
) -> anyhow::Result<(
    Arc<dyn nodelet_podworker::RuntimeHook>,
    Option<ProcessRuntime>,
)> {
    Ok(match config.runtime {
        RuntimeKind::Config => (Arc::new(EnvFileRuntime::new(&config.root_dir)), None),
        RuntimeKind::Process => {
            let processes = process_runtime(config)?;
            (Arc::new(processes.clone()), Some(processes))
        }
    })
}

/// The kubelet API, when `--kubelet-port` asks for it: the bound address.
async fn kubelet_api(
    state: &Arc<AgentState>,
    client: &kube::Client,
    tasks: &Tasks,
) -> anyhow::Result<Option<SocketAddr>> {
    let config = &state.config;
    let Some(listen) = config.kubelet_listen else {
        return Ok(None);
    };
    let mut api = crate::kubelet_api::KubeletApiConfig::new(listen, &config.node_name);
    api.tls_cert_file = config.tls_cert_file.clone();
    api.tls_private_key_file = config.tls_private_key_file.clone();
    api.client_ca_file = config.client_ca_file.clone();
    api.node_ips = config.node_ip.into_iter().collect();
    let weak = Arc::downgrade(state);
    let pods = crate::kubelet_api::NodePods::new(
        &config.root_dir,
        move || {
            weak.upgrade()
                .map(|s| s.known_pods.read().values().cloned().collect())
                .unwrap_or_default()
        },
        state.processes.clone(),
    )
    .with_exec_command(exec_command(config)?);
    let bound = crate::kubelet_api::serve(
        api,
        client.clone(),
        pods,
        tasks.shutdown.clone(),
        &tasks.tracker,
    )
    .await
    .context("starting the kubelet API (--kubelet-port)")?;
    Ok(Some(bound))
}

/// The agent's own program (the first element of `--container-init`'s command, else this
/// program) with the `container-exec` subcommand: how the kubelet API runs `kubectl exec`.
fn exec_command(config: &AgentConfig) -> anyhow::Result<Vec<std::ffi::OsString>> {
    let program = match config.container_init.as_ref().and_then(|c| c.first()) {
        Some(program) => program.clone(),
        None => std::env::current_exe()
            .context("finding the agent's own program for container-exec")?
            .into_os_string(),
    };
    Ok(vec![program, "container-exec".into()])
}

/// The process runtime of `config`, after checking that this machine can run it.
fn process_runtime(config: &AgentConfig) -> anyhow::Result<ProcessRuntime> {
    nodelet_runtime::sandbox::check_support()
        .map_err(|e| anyhow::anyhow!("--runtime process cannot run here: {e}"))?;
    let init_command = match &config.container_init {
        Some(command) => command.clone(),
        None => vec![
            std::env::current_exe()
                .context("finding the agent's own program for container-init")?
                .into_os_string(),
            "container-init".into(),
        ],
    };
    let mut runtime_config = RuntimeConfig::new(&config.root_dir, init_command);
    runtime_config.images = config.images.clone();
    runtime_config.allow_root = config.allow_root_containers;
    runtime_config.backoff = config.crash_backoff;
    Ok(ProcessRuntime::new(runtime_config))
}

/// The pod source: a watch of pods with `spec.nodeName=<node>` feeding the pod workers, and
/// housekeeping (forget finished workers of pods no longer known; terminate pods found only on
/// disk after a restart).
async fn pod_source(
    state: Arc<AgentState>,
    client: kube::Client,
    admission: Admission,
    ready: watch::Sender<bool>,
    shutdown: CancellationToken,
) {
    let api: Api<Pod> = Api::all(client.clone());
    let selector = format!("spec.nodeName={}", state.config.node_name);
    let mut probe = tokio::time::interval(crate::pod_watch::PROBE_INTERVAL);
    // Ticks missed while healthy (the branch is off) must not burst when the watch fails.
    probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let watch_pods = || {
        watcher::watcher(api.clone(), watcher::Config::default().fields(&selector))
            .default_backoff()
            .boxed()
    };
    let mut stream = watch_pods();
    // The probe found the API server unreachable since the pod watch last answered.
    let mut unreachable = false;
    let workers = &state.workers;
    let mut configmap_changes = state.configmaps.subscribe();
    let mut secret_changes = state.secrets.subscribe();
    let mut listing: Option<HashSet<PodUid>> = None;
    let mut housekeeping = tokio::time::interval(HOUSEKEEPING);
    let mut first_list = true;
    let mut container_changes = state.processes.as_ref().map(|p| p.changes());
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => break,
            _ = housekeeping.tick() => {
                let desired: HashSet<PodUid> = state.known_pods.read().keys().cloned().collect();
                workers.sync_known_pods(&desired);
                // Not before the first list: every pod would look deleted.
                if let (Some(processes), false) = (&state.processes, first_list) {
                    processes.remove_logs_except(&desired);
                }
                continue;
            }
            // The kubelet's PLEG: a container changed state (ended, back-off over): sync its pod.
            uid = async { match container_changes.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            } } => {
                match uid {
                    Ok(uid) => {
                        let pod = state.known_pods.read().get(&uid).cloned();
                        if let Some(pod) = pod {
                            workers.update_pod(PodUpdate::new(UpdateType::Sync, pod));
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let pods: Vec<AdmittedPod> =
                            state.known_pods.read().values().cloned().collect();
                        for pod in pods {
                            workers.update_pod(PodUpdate::new(UpdateType::Sync, pod));
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => container_changes = None,
                }
                continue;
            }
            change = configmap_changes.recv() => {
                retry_failed_pods(&state, change, |o| state.configmaps.referencing_pods(o));
                continue;
            }
            change = secret_changes.recv() => {
                retry_failed_pods(&state, change, |o| state.secrets.referencing_pods(o));
                continue;
            }
            _ = probe.tick(), if state.pod_watch.is_failing() => {
                let answered = probe_api_server(&state, &client).await;
                if answered && std::mem::take(&mut unreachable) {
                    // Back after an outage: watch again now, not when the watch's own
                    // back-off (grown through the outage) runs out.
                    stream = watch_pods();
                }
                unreachable |= !answered;
                continue;
            }
            e = stream.next() => e,
        };
        let Some(event) = event else { break };
        match &event {
            Ok(_) => {
                state.pod_watch.success();
                unreachable = false;
            }
            Err(error) => state.pod_watch.failure(&error.to_string()),
        }
        match event {
            Ok(Event::Init) => {
                listing = Some(HashSet::new());
            }
            Ok(Event::InitApply(pod)) => {
                let Some(pod) = admit(pod, admission) else {
                    continue;
                };
                if let Some(l) = listing.as_mut() {
                    l.insert(pod.uid().clone());
                }
                state
                    .known_pods
                    .write()
                    .insert(pod.uid().clone(), pod.clone());
                workers.update_pod(PodUpdate::new(UpdateType::Update, pod));
            }
            Ok(Event::InitDone) => {
                state.metrics.set_watches("pods", 1);
                let listed = listing.take().unwrap_or_default();
                let gone: Vec<AdmittedPod> = {
                    let mut known = state.known_pods.write();
                    let gone: Vec<PodUid> = known
                        .keys()
                        .filter(|u| !listed.contains(*u))
                        .cloned()
                        .collect();
                    gone.iter().filter_map(|u| known.remove(u)).collect()
                };
                for pod in gone {
                    workers.update_pod(PodUpdate::new(UpdateType::Kill, pod));
                }
                if first_list {
                    first_list = false;
                    terminate_orphans(&state, &listed);
                    // Every listed live pod is desired by now: `update_pod` made it so before
                    // returning, so reconstructed volumes of listed pods are adopted, never torn
                    // down and set up again.
                    state.volumes.pods_synced();
                    let _ = ready.send(true);
                    info!(pods = listed.len(), "initial pods synced");
                }
            }
            Ok(Event::Apply(pod)) => {
                let Some(pod) = admit(pod, admission) else {
                    continue;
                };
                state
                    .known_pods
                    .write()
                    .insert(pod.uid().clone(), pod.clone());
                // A pod that finished on its own and is now being deleted: its worker is done,
                // so the agent completes the deletion (as the kubelet's status manager does).
                if pod.metadata.deletion_timestamp.is_some()
                    && workers.phase(pod.uid()) == Some(WorkerPhase::Finished)
                {
                    state.status.terminated(&pod);
                }
                workers.update_pod(PodUpdate::new(UpdateType::Update, pod));
            }
            Ok(Event::Delete(pod)) => {
                let Some(pod) = admit(pod, admission) else {
                    continue;
                };
                state.known_pods.write().remove(pod.uid());
                workers.update_pod(PodUpdate::new(UpdateType::Kill, pod));
            }
            Err(error) => {
                state.metrics.set_watches("pods", 0);
                warn!(%error, "pod watch failed; retrying");
            }
        }
    }
    state.metrics.set_watches("pods", 0);
}

/// While the pod watch fails: `GET /version` (any authenticated user may), whether the API
/// server answers. Not a LIST: through a 13 s outage a list a second was 13 LISTs at every
/// restart. Whether it answered.
async fn probe_api_server(state: &AgentState, client: &kube::Client) -> bool {
    match tokio::time::timeout(crate::pod_watch::PROBE_INTERVAL, client.apiserver_version()).await {
        Ok(Ok(_)) => {
            state.pod_watch.success();
            true
        }
        Ok(Err(error)) => {
            state.pod_watch.failure(&error.to_string());
            false
        }
        Err(_elapsed) => {
            state.pod_watch.failure("probe timed out");
            false
        }
    }
}

/// Beyond the kubelet: a pod whose last sync failed (a missing object or key for its
/// environment, an unmountable volume) is retried as soon as an object it references changes,
/// instead of after the 10 s sync back-off. Which pods reference the object is asked of its
/// manager (`referencing_pods`), which keeps that index; `Lagged` (notifications dropped)
/// retries every failed pod. Successful pods are untouched: their volumes follow changes
/// through the volume manager, and a running container's environment never changes (UP-3).
fn retry_failed_pods(
    state: &AgentState,
    change: Result<ObjectRef, broadcast::error::RecvError>,
    referencing: impl FnOnce(&ObjectRef) -> Vec<PodUid>,
) {
    let candidates: Option<HashSet<PodUid>> = match change {
        Ok(key) => {
            let uids = referencing(&key);
            if uids.is_empty() {
                return;
            }
            Some(uids.into_iter().collect())
        }
        Err(broadcast::error::RecvError::Lagged(_)) => None,
        Err(broadcast::error::RecvError::Closed) => return,
    };
    let failed: Vec<PodUid> = state
        .workers
        .snapshot()
        .into_iter()
        .filter(|w| w.phase == WorkerPhase::Syncing && w.last_error.is_some())
        .filter(|w| candidates.as_ref().is_none_or(|c| c.contains(&w.uid)))
        .map(|w| w.uid)
        .collect();
    let pods: Vec<AdmittedPod> = {
        let known = state.known_pods.read();
        failed
            .iter()
            .filter_map(|uid| known.get(uid).cloned())
            .collect()
    };
    for pod in pods {
        debug!(pod.uid = %pod.uid(), "retrying a failed pod after a referenced object changed");
        state
            .workers
            .update_pod(PodUpdate::new(UpdateType::Sync, pod));
    }
}

/// Pods with a directory under `<root>/pods` that the API no longer has (deleted while the
/// agent was down) are terminated: volumes torn down, directories removed.
fn terminate_orphans(state: &AgentState, listed: &HashSet<PodUid>) {
    let dir = PodDirs::new(&state.config.root_dir).pods();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        // A directory that is no pod UID (`PodUid` refuses it) was never a pod's.
        let Ok(uid) = PodUid::new(&name) else {
            continue;
        };
        if listed.contains(&uid) || state.workers.phase(&uid).is_some() {
            continue;
        }
        info!(pod.uid = %name, "terminating pod found only on disk");
        state.workers.update_pod(PodUpdate::new(
            UpdateType::Kill,
            AdmittedPod::known_by_uid(uid),
        ));
    }
}

#[cfg(test)]
mod tests {
    use nodelet_testutil::PodBuilder;

    use super::*;

    /// Admission with every gate at its default.
    const DEFAULTS: Admission = Admission {
        pod_level_resources: true,
    };

    fn gates(off: Feature) -> Gates {
        let mut gates = FeatureGates::default();
        gates.set(off, false);
        Gates::read(&gates)
    }

    #[test]
    fn the_gates_on_by_default_are_followed_as_read_once() {
        let on = Gates::read(&FeatureGates::default());
        assert!(on.env_files && on.admission.pod_level_resources);
        let allocatable = NodeAllocatable {
            memory_bytes: 1 << 30,
            ..NodeAllocatable::default()
        };
        let env = on.env_options(allocatable);
        assert!(env.env_files);
        assert_eq!(env.node_allocatable, allocatable);
    }

    // `EnvFiles` off: the pod workers resolve no `fileKeyRef` (podworker's env tests show the
    // variable empty).
    #[test]
    fn with_the_env_files_gate_off_the_workers_resolve_no_file_key_ref() {
        let off = gates(Feature::EnvFiles);
        assert!(!off.env_options(NodeAllocatable::default()).env_files);
        assert!(off.admission.pod_level_resources, "the other gates stay on");
    }

    // `PodLevelResources` off: no part sees a pod's `spec.resources`, so an unset container
    // limit falls back to the node's allocatable, not to the pod-level limit.
    #[test]
    fn with_the_pod_level_resources_gate_off_admission_drops_pod_level_resources() {
        let with_pod_limits = || {
            let mut pod = pod(Some("u1"));
            if let Some(spec) = pod.spec.as_mut() {
                spec.resources = Some(
                    serde_json::from_value(serde_json::json!(
                        {"limits": {"memory": "1Gi"}}
                    ))
                    .unwrap(),
                );
            }
            pod
        };
        let on = admit(with_pod_limits(), DEFAULTS).unwrap();
        assert!(on.spec.as_ref().unwrap().resources.is_some());
        let off = gates(Feature::PodLevelResources);
        assert!(off.env_files, "the other gates stay on");
        let admitted = admit(with_pod_limits(), off.admission).unwrap();
        assert!(admitted.spec.as_ref().unwrap().resources.is_none());
        assert_eq!(admitted.uid().as_str(), "u1");
    }

    /// Pod `default/web` with `uid` (none: `metadata.uid` unset).
    fn pod(uid: Option<&str>) -> Pod {
        let p = PodBuilder::new("default", "web");
        match uid {
            Some(uid) => p.uid(uid),
            None => p,
        }
        .build()
    }

    // An admitted pod is kept for its life: no managedFields, and its lists of volumes,
    // containers and mounts without the spare room decoding left.
    #[test]
    fn an_admitted_pod_holds_no_managed_fields_nor_spare_list_capacity() {
        let mounts: Vec<_> = (0..9)
            .map(|i| serde_json::json!({"name": format!("v{i}"), "mountPath": format!("/v{i}")}))
            .collect();
        let mut b = PodBuilder::new("default", "web")
            .uid("u1")
            .container(serde_json::json!({"name": "c", "volumeMounts": mounts}));
        for i in 0..9 {
            b = b.config_map_volume(&format!("v{i}"), &format!("cm{i}"));
        }
        let mut json = b.json();
        json["metadata"]["managedFields"] = serde_json::json!([{"manager": "kubectl"}]);
        // Decoded as the pod watch decodes it.
        let pod: Pod = serde_json::from_slice(&serde_json::to_vec(&json).unwrap()).unwrap();
        assert!(
            pod.spec
                .as_ref()
                .unwrap()
                .volumes
                .as_ref()
                .unwrap()
                .capacity()
                > 9
        );
        let admitted = admit(pod, DEFAULTS).unwrap();
        assert!(admitted.metadata.managed_fields.is_none());
        let spec = admitted.spec.as_ref().unwrap();
        assert_eq!(spec.volumes.as_ref().unwrap().capacity(), 9);
        assert_eq!(spec.containers.capacity(), 1);
        assert_eq!(
            spec.containers[0]
                .volume_mounts
                .as_ref()
                .unwrap()
                .capacity(),
            9
        );
    }

    // A UID becomes a directory name: the pod source admits only pods whose UID is one plain path
    // component; the
    // others never reach the workers, the volume manager or `<root>/pods/<uid>/`.
    #[test]
    fn the_pod_source_skips_pods_without_a_usable_uid() {
        for bad in [None, Some(""), Some("../x"), Some(".."), Some("a/b")] {
            assert!(admit(pod(bad), DEFAULTS).is_none(), "{bad:?}");
        }
        assert_eq!(
            admit(pod(Some("6f1c-42")), DEFAULTS).map(|p| p.uid().to_string()),
            Some("6f1c-42".to_owned())
        );
    }
}
