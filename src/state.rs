//! [`AgentState`]: what the agent's background tasks, the propagation tracker and the HTTP
//! endpoints share. Its own module so that `agent.rs` (which builds it), `http.rs`,
//! `propagation.rs` and `views.rs` (which read it) depend on it and not on each other.

use nodelet_object_manager::{ConfigMapManager, SecretManager};
use nodelet_podworker::{ConfigSyncer, PodWorkers};
use nodelet_volume_manager::VolumeManager;
use tokio::sync::watch;

use nodelet_config::AgentConfig;
use nodelet_metrics::Metrics;

/// What the background tasks and the HTTP endpoints share.
pub(crate) struct AgentState {
    pub(crate) config: AgentConfig,
    pub(crate) workers: PodWorkers<ConfigSyncer>,
    pub(crate) volumes: VolumeManager,
    pub(crate) configmaps: ConfigMapManager,
    pub(crate) secrets: SecretManager,
    /// The node's Service watch (containers' service variables).
    pub(crate) services: nodelet_object_manager::ServiceLister,
    pub(crate) metrics: Metrics,
    pub(crate) ready: watch::Receiver<bool>,
    /// The pod watch's health (`/metrics`, `/pods`).
    pub(crate) pod_watch: crate::pod_watch::PodWatchHealth,
    /// Pod status patches and deletions.
    pub(crate) status: nodelet_reporting::StatusWriter,
    /// The buckets of the node's paced client and of its events' client (OM-33), for
    /// `/metrics`.
    pub(crate) paced: [(&'static str, nodelet_object_manager::ReadLimiter); 2],
    /// The process runtime, when containers run as processes (`--runtime process`).
    pub(crate) processes: Option<nodelet_runtime::ProcessRuntime>,
    /// Configuration that follows a change (FC-1 … FC-8), with the process runtime.
    pub(crate) follow: Option<nodelet_podworker::follow::FollowChange>,
    /// Environments that follow a change (FC-10 … FC-14), with either runtime (shared with
    /// the syncer).
    pub(crate) env_follow: nodelet_podworker::follow::EnvFollow,
    /// The pods' follow annotations, checked under either runtime (bad values as events).
    pub(crate) follow_annotations: nodelet_podworker::follow::AnnotationCheck,
    /// The prober of the process runtime's containers.
    pub(crate) probes: Option<nodelet_podworker::ProbeManager>,
    /// Which sysctls pods may set (PW-56), checked when a pod is first seen.
    pub(crate) sysctls: nodelet_podworker::SysctlPolicy,
    /// The pods bound to this node, as the pod source last saw them: written only by the pod
    /// source; read by it and by the kubelet API (`/pods`, `/containerLogs`, `/exec`).
    pub(crate) known_pods: parking_lot::RwLock<
        std::collections::HashMap<nodelet_core::PodUid, nodelet_core::AdmittedPod>,
    >,
}
