//! The vocabulary between a pod worker and a container runtime: what the pod worker hands
//! the runtime to start one container ([`ContainerLaunch`], [`ContainerMount`]) and what the
//! runtime reports back ([`ContainerStatus`], [`ContainerState`], [`Termination`]) and what a
//! pod's containers share ([`PodSandbox`]). What a sync does is decided on the pod worker's
//! side over these states (as the kubelet's `computePodActions`), not by the runtime.
//!
//! The split is the kubelet's: the kubelet computes a container's mounts (subPath included),
//! its expanded `command`/`args` and its environment; the runtime merges them with the image's
//! entrypoint and runs the process. Times are [`SystemTime`]s; statuses are what the kubelet
//! publishes in `containerStatuses`.

use std::path::PathBuf;
use std::time::SystemTime;

/// Whether `container`, one of a pod's `initContainers`, is a sidecar: a restartable init
/// container (`restartPolicy: Always`, PW-60), which keeps running beside the app containers.
pub fn is_sidecar(container: &k8s_openapi::api::core::v1::Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// One bind mount of a container: a host path shown at a path inside the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerMount {
    /// The host path (a volume directory, a file or directory inside one for `subPath`, or a
    /// pod file such as `etc-hosts`).
    pub host_path: PathBuf,
    /// The absolute path inside the container (`volumeMounts[].mountPath`).
    pub container_path: PathBuf,
    /// Mounted read-only.
    pub read_only: bool,
}

/// What the pod worker computed for starting one container, besides its environment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerLaunch {
    /// `command` after `$(VAR)` expansion; empty when the container sets none (the image's
    /// entrypoint is used).
    pub command: Vec<String>,
    /// `args` after `$(VAR)` expansion; empty when the container sets none.
    pub args: Vec<String>,
    /// Whether the container sets a non-empty `command` (an empty one keeps the image's
    /// entrypoint, as container runtimes do).
    pub has_command: bool,
    /// Whether the container sets non-empty `args`.
    pub has_args: bool,
    /// Mounts in order: volumes, then `/etc/hosts` and `/etc/hostname`.
    pub mounts: Vec<ContainerMount>,
    /// The pod's host name (the kubelet's `GeneratePodHostNameAndDomain`).
    pub hostname: String,
}

/// The termination reason of an instance nodelet stopped because the environment it was
/// started with changed (FC-12): it is started again at once, with no crash back-off,
/// whatever `restartPolicy` says.
pub const CONFIG_CHANGED: &str = "ConfigChanged";

/// Why and when a container's process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Termination {
    /// Exit code (128 + signal for a process killed by a signal).
    pub exit_code: i32,
    /// The signal that killed it, if any.
    pub signal: Option<i32>,
    /// `Completed` (exit 0), `Error`, `StartError`, `OOMKilled`...
    pub reason: String,
    /// Detail (a start error's text).
    pub message: Option<String>,
    /// When the process started.
    pub started_at: SystemTime,
    /// When it ended.
    pub finished_at: SystemTime,
}

/// The state of a container, as the kubelet reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerState {
    /// Not running: not started yet, waiting for a restart (`CrashLoopBackOff`) or for an image
    /// (`ErrImageNeverPull`).
    Waiting {
        /// The waiting reason.
        reason: String,
        /// Detail.
        message: Option<String>,
    },
    /// Running since `started_at`.
    Running {
        /// When the process started.
        started_at: SystemTime,
    },
    /// Ended.
    Terminated(Termination),
}

/// One container's status from the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerStatus {
    /// The container's name.
    pub name: String,
    /// Its current state.
    pub state: ContainerState,
    /// The state of its previous instance, if it ran before.
    pub last_state: Option<Termination>,
    /// How often it was restarted.
    pub restart_count: u32,
    /// `<runtime>://<id>` of the current (or last) instance; empty before the first start.
    pub container_id: String,
}

impl ContainerStatus {
    /// Whether the current instance is running.
    pub fn is_running(&self) -> bool {
        matches!(self.state, ContainerState::Running { .. })
    }

    /// The termination of the current instance, if it ended.
    pub fn terminated(&self) -> Option<&Termination> {
        match &self.state {
            ContainerState::Terminated(t) => Some(t),
            _ => None,
        }
    }
}

/// The network a pod's sandbox is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodNetwork {
    /// The node's network namespace: the pod's addresses are the node's.
    Host,
}

/// What a runtime made for a pod before its containers (the CRI's `RunPodSandbox`): what they
/// share. A runtime without sandboxes (the config-only one) makes none: its containers get no
/// mounts, host files or command lines, and the pod no addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodSandbox {
    /// Its network.
    pub network: PodNetwork,
}
