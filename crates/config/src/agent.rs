//! [`AgentConfig`], everything the agent runs with besides its client, and the values its
//! fields take: the runtime, the image table's defaults, taints, where the service variables
//! point.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use nodelet_object_manager::Strategy;

/// Node name in `--manifests` mode when `--node-name` is not given; the examples bind their
/// pods to it.
pub const DEFAULT_EMBEDDED_NODE_NAME: &str = "nodelet";
/// Root directory in `--manifests` mode when `--root-dir` is not given: the offline mode is
/// a developer's, run from a checkout without root, so its files land beside it.
pub const DEFAULT_EMBEDDED_ROOT_DIR: &str = "./nodelet-data";
/// Root directory against a cluster when `--root-dir` is not given, and `nodelet reset`'s
/// default: the agent as a service (`contrib/systemd/nodelet.service`), as the kubelet's
/// `/var/lib/kubelet`.
pub const DEFAULT_ROOT_DIR: &str = "/var/lib/nodelet";
/// The lock file's name inside the root directory: one agent per directory holds an
/// exclusive `flock(2)` on it while it runs, with its pid inside (`nodelet reset` refuses
/// while it is held).
pub const LOCK_FILE_NAME: &str = "nodelet.lock";
/// The `--listen` default with `--manifests`: a port no Kubernetes component uses (the kubelet
/// has 10248, 10250 and 10255, kube-proxy 10249 and 10256, the controller managers 10257 and
/// 10258, the scheduler 10259), so the agent runs beside a kubelet on a dev node.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:10271";

/// Everything the agent needs besides a client. Start from [`AgentConfig::new`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AgentConfig {
    /// The Node this agent is; pods with `spec.nodeName` = this are its pods.
    pub node_name: String,
    /// Where pod directories live (`<root>/pods/<uid>/...`).
    pub root_dir: PathBuf,
    /// `configMapAndSecretChangeDetectionStrategy` (default Watch).
    pub strategy: Strategy,
    /// `syncFrequency`: pod resync interval (default 60 s).
    pub sync_frequency: Duration,
    /// Create/update the Node object and renew its Lease (default off).
    pub register_node: bool,
    /// Labels added to the registered Node.
    pub node_labels: BTreeMap<String, String>,
    /// Lease renewal interval (default 10 s).
    pub lease_renew_interval: Duration,
    /// `nodeLeaseDurationSeconds` (default 40).
    pub lease_duration_seconds: i32,
    /// Address of `/healthz`, `/readyz`, `/metrics`, `/pods` (default none).
    pub listen: Option<SocketAddr>,
    /// Put memory-medium volumes on node disk even if tmpfs would be possible.
    pub volumes_on_disk: bool,
    /// fsync volume files before the swap (default on).
    pub fsync: bool,
    /// How long a stop may take before the agent gives up waiting (default 5 s).
    pub shutdown_timeout: Duration,
    /// Delay before a failed pod sync is retried (the kubelet's `backOffPeriod`, 10 s, with
    /// jitter). A change of an object the pod references retries it at once regardless.
    pub sync_error_backoff: Duration,
    /// The KubeletConfiguration's `featureGates` (default: a v1.36 kubelet's defaults).
    pub feature_gates: nodelet_core::FeatureGates,
    /// What runs containers (`--runtime`, config file `runtime`; default [`RuntimeKind::Config`]).
    pub runtime: RuntimeKind,
    /// Images → local programs for the process runtime (config file `images`; default
    /// [`default_images`]).
    pub images: nodelet_runtime::ImageTable,
    /// Let containers run as root (`--allow-root-containers`, config file
    /// `allowRootContainers`; default off).
    pub allow_root_containers: bool,
    /// Unsafe sysctls (names, or prefixes ending in `*`) pods may set besides the safe ones
    /// (config file `allowedUnsafeSysctls`; default none; PW-56). Each must live in a
    /// namespace the kernel keeps per pod; only IPC ones can be set here (pods share the
    /// node's network).
    pub allowed_unsafe_sysctls: Vec<String>,
    /// The program (and first arguments) that runs a container's init process (default: this
    /// program with `container-init`); tests that start the agent in-process name the
    /// `nodelet` binary here.
    pub container_init: Option<Vec<std::ffi::OsString>>,
    /// The node's address: the pods' IPs under the process runtime (they share the host's
    /// network) and the Node's `InternalIP` (default: the local address towards the API server;
    /// 127.0.0.1 when none is known).
    pub node_ip: Option<std::net::IpAddr>,
    /// The crash back-off of containers that ended (default the kubelet's: 10 s doubling to 5 min,
    /// reset after 10 min running).
    pub crash_backoff: nodelet_core::backoff::Schedule,
    /// The taints the Node is created with (`--register-with-taints`); `None`: the
    /// `nodelet.io/agent` NoSchedule taint.
    pub register_with_taints: Option<Vec<NodeTaint>>,
    /// Where the kubelet API listens (`--kubelet-port` and KubeletConfiguration `address` /
    /// `port`; port 0 here: any free port). `None`: not served. [`AgentConfig::new`] leaves it
    /// off; the command line's default is `0.0.0.0:10250` (`--kubelet-port 0` turns it off).
    pub kubelet_listen: Option<SocketAddr>,
    /// The kubelet API's serving certificate and key (`--tls-cert-file`,
    /// `--tls-private-key-file`); none: a self-signed one made at start.
    pub tls_cert_file: Option<PathBuf>,
    /// See [`tls_cert_file`](Self::tls_cert_file).
    pub tls_private_key_file: Option<PathBuf>,
    /// The CA that signs client certificates the kubelet API accepts (`--client-ca-file`,
    /// KubeletConfiguration `authentication.x509.clientCAFile`); none: bearer tokens only.
    pub client_ca_file: Option<PathBuf>,
    /// Where the `kubernetes` service's variables in containers point (PW-15, PW-16): `None`
    /// (the default, the kubelet's) the cluster IP of `default/kubernetes`; `Some` this host
    /// and port, e.g. the address the agent itself uses for the API server, which a process
    /// on the node's network can reach where the cluster IP is not routable
    /// (`--kubernetes-service api-server`, config file `kubernetesService`).
    pub kubernetes_service: Option<nodelet_podworker::ServiceEndpoint>,
    /// What the program's global allocator reports: `nodelet_build_info`'s allocator, the live
    /// heap in `/metrics`, and the trim after each burst of volume work. The `nodelet` binary
    /// sets it; default none.
    pub allocator: Option<nodelet_core::AllocatorHooks>,
    /// What follows a configuration change for pods that do not say (config file
    /// `followChange`; FC-2): default nothing, as the kubelet. Process runtime only, but for
    /// `env` (FC-10, either runtime).
    pub follow: nodelet_podworker::follow::FollowDefaults,
    /// The token bucket of the node's first reads of ConfigMaps and Secrets, shared by both
    /// managers (OM-30): KubeletConfiguration `kubeAPIQPS` / `kubeAPIBurst`
    /// (`--kube-api-qps`, `--kube-api-burst`); default 500 and 250: what a v1.36
    /// kube-apiserver answered per second on the project's benchmark, where the kubelet's 50
    /// and 100 made a 991-object start take 18 s (docs/figures.md).
    pub first_reads: nodelet_object_manager::ReadLimits,
}

/// The first-read bucket when neither `kubeAPIQPS` nor `kubeAPIBurst` is set (OM-30); see
/// docs/figures.md for the measurements behind it.
pub(crate) const DEFAULT_FIRST_READS: nodelet_object_manager::ReadLimits =
    nodelet_object_manager::ReadLimits {
        qps: 500.0,
        burst: 250,
    };

/// One taint of `--register-with-taints` (`key[=value]:Effect`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTaint {
    /// The key.
    pub key: String,
    /// The value, if any.
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// Parses the kubelet's `--register-with-taints` value: comma-separated `key[=value]:Effect`;
/// empty: no taints.
///
/// # Errors
/// The text of the first taint that does not parse.
pub fn parse_taints(text: &str) -> Result<Vec<NodeTaint>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            let (kv, effect) = t
                .rsplit_once(':')
                .ok_or_else(|| format!("invalid taint spec: {t}"))?;
            if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
                return Err(format!(
                    "invalid taint effect: {effect}, unsupported taint effect"
                ));
            }
            let (key, value) = match kv.split_once('=') {
                Some((k, v)) => (k, Some(v.to_owned())),
                None => (kv, None),
            };
            if key.is_empty() {
                return Err(format!("invalid taint spec: {t}"));
            }
            Ok(NodeTaint {
                key: key.to_owned(),
                value,
                effect: effect.to_owned(),
            })
        })
        .collect()
}

/// What runs a pod's containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RuntimeKind {
    /// `config`: no processes; each container's resolved environment is written to files.
    #[default]
    Config,
    /// `process`: containers run as local processes (`nodelet_runtime`).
    Process,
}

impl FromStr for RuntimeKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "config" => Ok(Self::Config),
            "process" => Ok(Self::Process),
            other => Err(format!("{other:?} is not a runtime: use config or process")),
        }
    }
}

/// The image table used when the config file has no `images` key: the pause image as a
/// process that sleeps (as user 65535, like the image), busybox as the host's shell and
/// tools (as root, like the image: such a container needs `runAsUser` or
/// `--allow-root-containers`).
pub fn default_images() -> nodelet_runtime::ImageTable {
    let entry = |image: &str, entrypoint: &[&str], args: &[&str], user: Option<u32>| {
        nodelet_runtime::ImageEntry {
            image: image.to_owned(),
            entrypoint: entrypoint.iter().map(|s| (*s).to_owned()).collect(),
            args: args.iter().map(|s| (*s).to_owned()).collect(),
            path: Vec::new(),
            user,
            group: user,
            working_dir: None,
            files: Default::default(),
        }
    };
    nodelet_runtime::ImageTable::new(vec![
        entry(
            "registry.k8s.io/pause:*",
            &["sleep", "infinity"],
            &[],
            Some(65535),
        ),
        entry("docker.io/library/busybox:*", &[], &["sh"], None),
    ])
}

impl AgentConfig {
    /// Defaults for `node_name` with pods under `root_dir`.
    pub fn new(node_name: impl Into<String>, root_dir: impl Into<PathBuf>) -> Self {
        Self {
            node_name: node_name.into(),
            root_dir: root_dir.into(),
            strategy: Strategy::Watch,
            sync_frequency: Duration::from_secs(60),
            register_node: false,
            node_labels: BTreeMap::new(),
            lease_renew_interval: Duration::from_secs(10),
            lease_duration_seconds: 40,
            listen: None,
            volumes_on_disk: false,
            fsync: true,
            shutdown_timeout: Duration::from_secs(5),
            sync_error_backoff: Duration::from_secs(10),
            feature_gates: nodelet_core::FeatureGates::default(),
            runtime: RuntimeKind::Config,
            images: default_images(),
            allow_root_containers: false,
            allowed_unsafe_sysctls: Vec::new(),
            container_init: None,
            node_ip: None,
            crash_backoff: nodelet_core::backoff::Schedule::CRASH_LOOP,
            register_with_taints: None,
            kubelet_listen: None,
            tls_cert_file: None,
            tls_private_key_file: None,
            client_ca_file: None,
            kubernetes_service: None,
            allocator: None,
            follow: nodelet_podworker::follow::FollowDefaults::default(),
            first_reads: DEFAULT_FIRST_READS,
        }
    }
}

/// Where containers' `KUBERNETES_SERVICE_HOST` / `_PORT` (and the other variables of the
/// master service) point (`--kubernetes-service`, config file `kubernetesService`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubernetesServiceEnv {
    /// `cluster`: the cluster IP and port of `default/kubernetes`, as the kubelet (the default
    /// against a cluster).
    Cluster,
    /// `api-server`: the host and port of the URL the agent uses for the API server, so that
    /// an in-cluster client in a process on the node's network reaches it (the default with
    /// `--manifests`, whose cluster IP exists nowhere).
    ApiServer,
}

impl FromStr for KubernetesServiceEnv {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cluster" => Ok(Self::Cluster),
            "api-server" => Ok(Self::ApiServer),
            other => Err(format!("{other:?} is not one of cluster, api-server")),
        }
    }
}

/// The host and port of an API server URL (`https://10.0.0.1:6443/` → `10.0.0.1`, 6443; the
/// scheme's port when the URL has none), as containers' `KUBERNETES_SERVICE_HOST` / `_PORT`.
pub fn service_endpoint_of(url: &str) -> Option<nodelet_podworker::ServiceEndpoint> {
    let uri: ::http::Uri = url.parse().ok()?;
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("http") {
            80
        } else {
            443
        });
    Some(nodelet_podworker::ServiceEndpoint {
        host: host.to_owned(),
        port,
    })
}
