//! The agent's parts, each built from its configuration by one function here, and the
//! feature gates, read once ([`Gates`]) where the parts are built.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret, Taint};
use nodelet_core::{Feature, FeatureGates, NodeAllocatable};
use nodelet_kubelet_api::KubeletApiConfig;
use nodelet_object_manager::source::{KubeSource, ObjectSource};
use nodelet_object_manager::{ConfigMapManager, ManagerConfig, ReadLimiter, SecretManager};
use nodelet_podworker::{
    ConfigSyncer, EnvFileRuntime, EnvOptions, PodWorkers, ProbeConfig, ProbeManager, SyncerConfig,
    SyncerParts, WorkerConfig,
};
use nodelet_runtime::{ProcessRuntime, RuntimeConfig};
use nodelet_volume_manager::{MemoryMedium, VolumeManager};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument as _, info};

use crate::kubelet_host::AgentHost;
use crate::pod_source::Admission;
use crate::state::AgentState;
use nodelet_config::{AgentConfig, RuntimeKind};
use nodelet_reporting::{EventPublisher, NodeConfig};

/// The agent's background tasks: one cancellation token and one tracker for all.
#[derive(Default)]
pub(crate) struct Tasks {
    pub(crate) shutdown: CancellationToken,
    pub(crate) tracker: TaskTracker,
}

impl Tasks {
    /// Runs `task` in `span` until it ends (each task watches `shutdown` itself).
    pub(crate) fn spawn_in(
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
pub(crate) struct Gates {
    /// `EnvFiles`: `fileKeyRef` followed.
    pub(crate) env_files: bool,
    /// How the pod source admits pods (`PodLevelResources`).
    pub(crate) admission: Admission,
}

impl Gates {
    pub(crate) fn read(gates: &FeatureGates) -> Self {
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
    pub(crate) fn env_options(&self, allocatable: NodeAllocatable) -> EnvOptions {
        let mut env = EnvOptions::default();
        env.node_allocatable = allocatable;
        env.env_files = self.env_files;
        env
    }
}

/// The node's addresses as pods see them (`status.hostIPs`): `--node-ip`, else 127.0.0.1.
pub(crate) fn host_ips(config: &AgentConfig) -> Vec<String> {
    vec![
        config
            .node_ip
            .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
            .to_string(),
    ]
}

/// The pod workers, syncing pods with `parts` and resolving environments with `env`.
pub(crate) fn pod_workers(
    syncer: SyncerConfig,
    config: &AgentConfig,
    parts: SyncerParts,
) -> PodWorkers<ConfigSyncer> {
    let syncer = ConfigSyncer::new(syncer, parts);
    PodWorkers::new(
        Arc::new(syncer),
        WorkerConfig::default()
            .with_resync_interval(config.sync_frequency)
            .with_backoff_period(config.sync_error_backoff),
    )
}

/// The syncer's configuration: the root directory, environment options, the node's addresses.
pub(crate) fn syncer_config(config: &AgentConfig, env: EnvOptions) -> SyncerConfig {
    SyncerConfig::new(&config.root_dir)
        .with_env(env)
        .with_host_ips(host_ips(config))
        .with_crash_backoff(config.crash_backoff)
}

/// What the environments that follow a change (FC-10) read and drive: the syncer's sources,
/// context and runtime (no sandbox: the caller says).
pub(crate) fn env_follow(
    config: &AgentConfig,
    sources: &nodelet_podworker::EnvSources,
    syncer: &SyncerConfig,
    runtime: &Arc<dyn nodelet_podworker::RuntimeHook>,
    events: &EventPublisher,
) -> nodelet_podworker::follow::EnvFollowParts {
    nodelet_podworker::follow::EnvFollowParts {
        defaults: config.follow.clone(),
        sources: sources.clone(),
        context: syncer.env_context(),
        sandbox: false,
        runtime: runtime.clone(),
        events: Arc::new(events.clone()),
    }
}

/// Node registration (`--register-node`): the Node, advertising the kubelet API on `port`,
/// and its Lease.
pub(crate) fn register_node(
    config: &AgentConfig,
    port: Option<u16>,
    client: kube::Client,
    state: &AgentState,
    tasks: &Tasks,
) {
    let mut node = NodeConfig::new(&config.node_name, &config.root_dir);
    node.labels = config.node_labels.clone();
    node.taints = config.register_with_taints.as_ref().map(|taints| {
        taints
            .iter()
            .map(|t| Taint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
                time_added: None,
            })
            .collect()
    });
    node.lease_renew_interval = config.lease_renew_interval;
    node.lease_duration_seconds = config.lease_duration_seconds;
    node.node_ip = config.node_ip;
    node.kubelet_listen = config.kubelet_listen;
    node.kubelet_port = port;
    match config.runtime {
        RuntimeKind::Config => node.runtime_name = "nodelet-env-file".to_owned(),
        RuntimeKind::Process => {
            node.runtime_name = "nodelet-process".to_owned();
            // The process runtime needs its namespaces.
            node.runtime_ready =
                || nodelet_runtime::sandbox::check_support().map_err(|e| e.to_string());
        }
    }
    tasks.spawn_in(
        nodelet_reporting::run_node(
            node,
            client,
            state.metrics.reporting(),
            tasks.shutdown.clone(),
        ),
        tracing::info_span!("node", node = %config.node_name),
    );
}

/// The ConfigMap and Secret managers, reading through the node's client.
pub(crate) fn object_managers(
    config: &AgentConfig,
    client: &kube::Client,
    first_reads: ReadLimiter,
) -> anyhow::Result<(ConfigMapManager, SecretManager)> {
    // One bucket for both managers: the node's first reads together (OM-30); `client` is
    // unpaced, each first read takes its own token (OM-33).
    let manager_config = ManagerConfig::new(config.strategy)
        .with_node_name(config.node_name.clone())
        .with_resync_interval(config.sync_frequency)
        .with_first_reads(first_reads);
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
pub(crate) fn volume_manager(
    config: &AgentConfig,
    allocatable: NodeAllocatable,
    client: &kube::Client,
    (configmaps, secrets): (&ConfigMapManager, &SecretManager),
    events: &EventPublisher,
    tasks: &Tasks,
    follow: &Arc<std::sync::OnceLock<nodelet_podworker::follow::FollowChange>>,
) -> anyhow::Result<VolumeManager> {
    let mut vm_config = nodelet_volume_manager::Config::new(config.root_dir.clone());
    // FC-3: running containers' subPath binds move between a volume's switch and the removal
    // of its old data.
    if config.runtime == RuntimeKind::Process {
        let follow = follow.clone();
        vm_config.after_swap = Some(nodelet_volume_manager::AfterSwap(Arc::new(
            move |pod, volume, dir| {
                if let Some(follow) = follow.get() {
                    follow.after_swap(pod, volume, dir);
                }
            },
        )));
    }
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
        tasks
            .tracker
            .spawn(nodelet_volume_manager::memory::trim_after_bursts(
                volumes.subscribe(),
                tasks.shutdown.clone(),
                allocator.release_free_memory,
            ));
    }
    Ok(volumes)
}

/// What runs containers: env files, or processes (also returned, for the PLEG and the kubelet
/// API).
pub(crate) fn container_runtime(
    config: &AgentConfig,
    tasks: &Tasks,
) -> anyhow::Result<(
    Arc<dyn nodelet_podworker::RuntimeHook>,
    Option<ProcessRuntime>,
)> {
    Ok(match config.runtime {
        RuntimeKind::Config => (Arc::new(EnvFileRuntime::new(&config.root_dir)), None),
        RuntimeKind::Process => {
            let processes = process_runtime(config, tasks)?;
            (Arc::new(processes.clone()), Some(processes))
        }
    })
}

/// The prober of the process runtime's containers: probes connect to the pods' IP (the
/// node's), exec probes run through the runtime, events go to `events`.
pub(crate) fn probe_manager(
    config: &AgentConfig,
    processes: &ProcessRuntime,
    events: &EventPublisher,
    tasks: &Tasks,
) -> ProbeManager {
    let pod_ip = host_ips(config).into_iter().next().unwrap_or_default();
    ProbeManager::new(
        ProbeConfig::new(pod_ip),
        Arc::new(processes.clone()),
        Arc::new(events.clone()),
        tasks.tracker.clone(),
        tasks.shutdown.clone(),
    )
}

/// The kubelet API, when `--kubelet-port` asks for it: the bound address.
pub(crate) async fn kubelet_api(
    state: &Arc<AgentState>,
    client: &kube::Client,
    tasks: &Tasks,
) -> anyhow::Result<Option<SocketAddr>> {
    let config = &state.config;
    let Some(listen) = config.kubelet_listen else {
        return Ok(None);
    };
    let mut api = KubeletApiConfig::new(listen, &config.node_name, &config.root_dir);
    api.tls_cert_file = config.tls_cert_file.clone();
    api.tls_private_key_file = config.tls_private_key_file.clone();
    api.client_ca_file = config.client_ca_file.clone();
    api.node_ips = config.node_ip.into_iter().collect();
    api.exec_command = exec_command(config)?;
    let host = AgentHost {
        state: Arc::downgrade(state),
        runtime: state.processes.clone(),
    };
    let bound = nodelet_kubelet_api::serve(
        api,
        client.clone(),
        Arc::new(host),
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
fn process_runtime(config: &AgentConfig, tasks: &Tasks) -> anyhow::Result<ProcessRuntime> {
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
    runtime_config.exec_command = exec_command(config)?;
    Ok(ProcessRuntime::new(runtime_config, tasks.tracker.clone()))
}

/// Configuration that follows a change (FC-1 … FC-22), with the process runtime: also the
/// volume manager's swap hook (`hook`, set here).
pub(crate) fn follow_change(
    config: &AgentConfig,
    processes: Option<&ProcessRuntime>,
    events: &EventPublisher,
    hook: &std::sync::OnceLock<nodelet_podworker::follow::FollowChange>,
    env: &nodelet_podworker::follow::EnvFollow,
) -> Option<nodelet_podworker::follow::FollowChange> {
    let follow = nodelet_podworker::follow::FollowChange::new(
        processes?.clone(),
        Arc::new(events.clone()),
        config.follow.clone(),
        Some(env.clone()),
    );
    let _ = hook.set(follow.clone());
    Some(follow)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use nodelet_testutil::PodBuilder;

    use crate::pod_source::admit;

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
}
