//! [`Config`]: the volume manager's options, with the kubelet's timing constants as defaults
//! (VM-1, VM-9).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nodelet_core::{FeatureGates, NodeAllocatable};

use crate::plugins::PluginRegistry;
use crate::pod_certificate::PodCertificateSource;
use crate::trust_bundle::TrustBundleConfig;

/// Where memory-medium volumes (secret, projected, downwardAPI, emptyDir `Memory`) live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoryMedium {
    /// Probe at start-up: a tmpfs when the agent can mount one (root with `CAP_SYS_ADMIN`),
    /// else node disk with one warning.
    #[default]
    Auto,
    /// Always a tmpfs; mounts fail when the agent may not mount.
    Tmpfs,
    /// Always node disk (unprivileged agents, tests).
    Disk,
}

/// Options of a [`VolumeManager`](crate::VolumeManager). Start from [`Config::new`] and set
/// fields; every default is the kubelet's where it has one.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// The agent's root directory (the kubelet's `--root-dir`); volumes live under
    /// `<root_dir>/pods/<uid>/volumes/` (PL-1).
    pub root_dir: PathBuf,
    /// tmpfs or disk for memory-medium volumes (default [`MemoryMedium::Auto`]).
    pub memory_medium: MemoryMedium,
    /// `fsync` disk volumes before their `..data` swap (default `true`; tmpfs is never
    /// synced).
    pub fsync: bool,
    /// VM-1 `podAttachAndMountTimeout`: how long the two waits wait (default 2 min 3 s).
    pub wait_timeout: Duration,
    /// VM-9: first delay before retrying a failed operation (default 500 ms), doubled per
    /// failure.
    pub initial_backoff: Duration,
    /// VM-9: the largest retry delay (default 2 min 2 s).
    pub max_backoff: Duration,
    /// Safety net: every mounted volume is set up again this often even if no change was
    /// notified (default 60 s, the kubelet's pod sync period; `None`: never).
    pub resync_interval: Option<Duration>,
    /// PL-10: fraction of a token's lifetime after which it is refreshed (default 0.8).
    pub token_refresh_fraction: f64,
    /// Node allocatable resources for `resourceFieldRef` (default: detected from the machine).
    pub node_allocatable: Option<NodeAllocatable>,
    /// The volume plugins (default: configMap, secret, projected, downwardAPI, emptyDir).
    pub plugins: PluginRegistry,
    /// Feature gates: `ClusterTrustBundle` + `ClusterTrustBundleProjection` enable the
    /// `clusterTrustBundle` projected source, `PodCertificateRequest` the `podCertificate`
    /// one (default: a v1.36 kubelet's, both off).
    pub feature_gates: FeatureGates,
    /// Where `clusterTrustBundle` sources read ClusterTrustBundles, and the cache's size and
    /// lifetime (PL-17, PL-19; used only with both gates on; default: no source, 220 entries, 5 min).
    pub trust_bundles: TrustBundleConfig,
    /// PL-21: where the `podCertificate` source creates and watches PodCertificateRequests
    /// (`KubePodCertificateSource::new(client, node_name)`). Default `None`: the source is
    /// unsupported even with the `PodCertificateRequest` gate on.
    pub pod_certificates: Option<Arc<dyn PodCertificateSource>>,
    /// PL-22: the largest random delay added to a pod certificate's `beginRefreshAt` and to the
    /// 10 min after which an unseen request is made again (default 5 min, the kubelet's).
    pub pod_certificate_jitter: Duration,
}

impl Config {
    /// The defaults, with volumes under `root_dir`.
    pub fn new(root_dir: impl Into<PathBuf>) -> Self {
        Self {
            root_dir: root_dir.into(),
            memory_medium: MemoryMedium::Auto,
            fsync: true,
            wait_timeout: Duration::from_secs(123),
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(122),
            resync_interval: Some(Duration::from_secs(60)),
            token_refresh_fraction: 0.8,
            node_allocatable: None,
            plugins: PluginRegistry::default(),
            feature_gates: FeatureGates::default(),
            trust_bundles: TrustBundleConfig::default(),
            pod_certificates: None,
            pod_certificate_jitter: Duration::from_secs(300),
        }
    }
}
