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
use nodelet_core::{AdmittedPod, NodeAllocatable, ObjectRef, PodDirs, PodUid};
use nodelet_object_manager::source::{KubeSource, ObjectSource};
use nodelet_object_manager::{
    ConfigMapManager, ManagerConfig, SecretManager, referenced_config_map_names,
    referenced_secret_names,
};
use nodelet_podworker::StatusSink as _;
use nodelet_podworker::{
    ConfigSyncer, EnvFileRuntime, EnvOptions, EnvSources, PodUpdate, PodWorkers, SyncerConfig,
    SyncerParts, UpdateType, WorkerConfig, WorkerPhase,
};
use nodelet_runtime::{ProcessRuntime, RuntimeConfig};
use nodelet_volume_manager::{KubeTokenSource, MemoryMedium, VolumeManager};
use serde_json::Value;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument as _, debug, info, info_span, warn};

use crate::api_client::ApiClient;
use crate::config::{AgentConfig, RuntimeKind};
use crate::events::EventPublisher;
use crate::metrics::Metrics;
use crate::state::AgentState;
use crate::status::StatusWriter;
use crate::views::{metrics_text, pods_json};

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
        let shutdown = CancellationToken::new();
        let tracker = TaskTracker::new();
        // Requests, retries and connections are counted by the transport under `client`.
        let metrics = Metrics::for_transport(counters);
        let manager_config = ManagerConfig::new(config.strategy)
            .with_node_name(config.node_name.clone())
            .with_resync_interval(config.sync_frequency);
        let nodes: Arc<dyn ObjectSource<Node>> =
            Arc::new(KubeSource::<Node>::cluster(client.clone()));
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
        let events = EventPublisher::start(
            client.clone(),
            &config.node_name,
            metrics.clone(),
            shutdown.clone(),
            &tracker,
        );
        let mut vm_config = nodelet_volume_manager::Config::new(config.root_dir.clone());
        let allocatable = NodeAllocatable::detect(&config.root_dir);
        vm_config.node_allocatable = Some(allocatable);
        if config.volumes_on_disk {
            vm_config.memory_medium = MemoryMedium::Disk;
        }
        vm_config.fsync = config.fsync;
        vm_config.resync_interval = Some(config.sync_frequency);
        vm_config.feature_gates = config.feature_gates.clone();
        // PL-17: ClusterTrustBundles through the node's client (only read with both gates on,
        // watched from the first volume that reads one).
        vm_config.trust_bundles.source = Some(Arc::new(
            nodelet_volume_manager::KubeTrustBundleSource::new(client.clone()),
        ));
        // PL-21: PodCertificateRequests are made and watched with the node's own client.
        if config
            .feature_gates
            .enabled(nodelet_core::Feature::PodCertificateRequest)
        {
            vm_config.pod_certificates = Some(Arc::new(
                nodelet_volume_manager::pod_certificate::KubePodCertificateSource::new(
                    client.clone(),
                    config.node_name.clone(),
                ),
            ));
        }
        if !config.feature_gates.ignored().is_empty() {
            tracing::info!(
                gates = ?config.feature_gates.ignored(),
                "feature gates nodelet does not follow are ignored"
            );
        }
        let volumes = VolumeManager::new(
            vm_config,
            configmaps.clone(),
            secrets.clone(),
            Arc::new(KubeTokenSource::new(client.clone())),
            Arc::new(events.clone()),
        )?;
        {
            let vm = volumes.clone();
            let token = shutdown.clone();
            tracker.spawn(async move { vm.run(token).await });
        }
        // After each burst of mounts (first start, a relist), freed memory goes back.
        tracker.spawn(crate::memory::trim_after_bursts(
            volumes.subscribe(),
            shutdown.clone(),
            crate::allocator::release_free_memory,
        ));
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
            shutdown.clone(),
            &tracker,
        );
        let (runtime, processes): (Arc<dyn nodelet_podworker::RuntimeHook>, _) =
            match config.runtime {
                RuntimeKind::Config => (Arc::new(EnvFileRuntime::new(&config.root_dir)), None),
                RuntimeKind::Process => {
                    let processes = process_runtime(&config)?;
                    (Arc::new(processes.clone()), Some(processes))
                }
            };
        let mut env = EnvOptions::default();
        // One detection for env vars, volumes (set above) and the Node status' quantities.
        env.node_allocatable = crate::node::quantities(&allocatable);
        let syncer = ConfigSyncer::new(
            SyncerConfig::new(&config.root_dir)
                .with_env(env)
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
        let mut node_config = config.clone();
        let kubelet_addr = if let Some(listen) = config.kubelet_listen {
            let mut api = crate::kubelet_api::KubeletApiConfig::new(listen, &config.node_name);
            api.tls_cert_file = config.tls_cert_file.clone();
            api.tls_private_key_file = config.tls_private_key_file.clone();
            api.client_ca_file = config.client_ca_file.clone();
            api.node_ips = config.node_ip.into_iter().collect();
            let weak = Arc::downgrade(&state);
            let pods = crate::kubelet_api::NodePods::new(
                &config.root_dir,
                move || {
                    weak.upgrade()
                        .map(|s| s.known_pods.read().values().cloned().collect())
                        .unwrap_or_default()
                },
                state.processes.clone(),
            )
            .with_exec_command(exec_command(&config)?);
            let bound =
                crate::kubelet_api::serve(api, client.clone(), pods, shutdown.clone(), &tracker)
                    .await
                    .context("starting the kubelet API (--kubelet-port)")?;
            node_config.kubelet_advertised_port = Some(bound.port());
            Some(bound)
        } else {
            None
        };
        tracker.spawn(
            pod_source(state.clone(), client.clone(), ready_tx, shutdown.clone())
                .instrument(info_span!("pod source", node = %config.node_name)),
        );
        tracker.spawn(crate::propagation::track(state.clone(), shutdown.clone()));
        if config.register_node {
            tracker.spawn(
                crate::node::run(node_config, client, state.metrics.clone(), shutdown.clone())
                    .instrument(info_span!("node", node = %config.node_name)),
            );
        }
        let http_addr = match config.listen {
            Some(addr) => {
                Some(crate::http::serve(addr, state.clone(), shutdown.clone(), &tracker).await?)
            }
            None => None,
        };
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
    pub fn pods_json(&self) -> Value {
        pods_json(&self.state)
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
/// The pod's `managedFields` are dropped here: nothing on a node reads them (the downward API
/// cannot name them) and they are often the largest part of a pod object, held for every pod
/// as long as it runs.
fn admit(mut pod: Pod) -> Option<AdmittedPod> {
    pod.metadata.managed_fields = None;
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
                retry_failed_pods(&state, change, referenced_config_map_names);
                continue;
            }
            change = secret_changes.recv() => {
                retry_failed_pods(&state, change, referenced_secret_names);
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
                let Some(pod) = admit(pod) else {
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
                let Some(pod) = admit(pod) else {
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
                let Some(pod) = admit(pod) else {
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
/// instead of after the 10 s sync back-off. `Lagged` (notifications dropped) retries every
/// failed pod. Successful pods are untouched: their volumes follow changes through the volume
/// manager, and a running container's environment never changes (UP-3).
fn retry_failed_pods(
    state: &AgentState,
    change: Result<ObjectRef, broadcast::error::RecvError>,
    references: fn(&Pod) -> Vec<String>,
) {
    let key = match change {
        Ok(key) => Some(key),
        Err(broadcast::error::RecvError::Lagged(_)) => None,
        Err(broadcast::error::RecvError::Closed) => return,
    };
    let failed: HashSet<PodUid> = state
        .workers
        .snapshot()
        .into_iter()
        .filter(|w| w.phase == WorkerPhase::Syncing && w.last_error.is_some())
        .map(|w| w.uid)
        .collect();
    let candidates: Vec<AdmittedPod> = state
        .known_pods
        .read()
        .iter()
        .filter(|(uid, _)| failed.contains(uid.as_str()))
        .map(|(_, pod)| pod.clone())
        .collect();
    for pod in &candidates {
        let uid = pod.uid();
        let affected = key.as_ref().is_none_or(|key| {
            pod.metadata.namespace.as_deref() == Some(key.namespace.as_str())
                && references(pod).contains(&key.name)
        });
        if affected {
            debug!(pod.uid = %uid, "retrying a failed pod after a referenced object changed");
            state
                .workers
                .update_pod(PodUpdate::new(UpdateType::Sync, pod.clone()));
        }
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
        let admitted = admit(pod).unwrap();
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
            assert!(admit(pod(bad)).is_none(), "{bad:?}");
        }
        assert_eq!(
            admit(pod(Some("6f1c-42"))).map(|p| p.uid().to_string()),
            Some("6f1c-42".to_owned())
        );
    }
}
