//! [`Host`]: what the kubelet API reads of the node agent serving it, and [`ExecTarget`].

use std::path::PathBuf;

use nodelet_core::runtime::ContainerStatus;
use nodelet_core::{AdmittedPod, PodUid};
use tokio::sync::broadcast;

/// Where a command for a running container is run: the process whose namespaces it joins and
/// the container's launch spec (`nodelet container-exec PID SPEC -- CMD…`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExecTarget {
    /// The pid of the container's process.
    pub pid: i32,
    /// Its launch spec (`launch.json`).
    pub spec: PathBuf,
}

impl ExecTarget {
    /// The container whose process is `pid`, launched with the spec at `spec`.
    pub fn new(pid: i32, spec: PathBuf) -> Self {
        Self { pid, spec }
    }
}

/// What the kubelet API reads of the node agent serving it (the kubelet's
/// `server.HostInterface`): the pods it runs, their containers' statuses and changes, where a
/// running container's process is.
///
/// The defaults describe an agent without a container runtime: no container statuses (so
/// `/containerLogs` answers as the kubelet does for a container it has no status of), no
/// changes, nothing to exec into.
pub trait Host: Send + Sync + 'static {
    /// Every pod the agent runs (`/pods`), read at each request.
    fn pods(&self) -> Vec<AdmittedPod>;

    /// The runtime's statuses of pod `uid`'s containers (empty when it has none).
    fn container_statuses(&self, uid: &PodUid) -> Vec<ContainerStatus> {
        let _ = uid;
        Vec::new()
    }

    /// A receiver announcing every change of a pod's container statuses (by its UID); closed
    /// when nothing will change any more.
    fn status_changes(&self) -> broadcast::Receiver<PodUid> {
        broadcast::channel(1).1
    }

    /// The running instance of `container` of pod `uid`, if it has one.
    fn exec_target(&self, uid: &PodUid, container: &str) -> Option<ExecTarget> {
        let _ = (uid, container);
        None
    }
}
