//! [`NodePods`]: the [`Host`] as the handlers read it — a pod by name, its containers' statuses
//! (the runtime's, else its API status), where each container instance's log file is and when
//! an instance has ended, and how to run a command in a running container.

use std::ffi::OsString;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nodelet_core::runtime::ContainerStatus;
use nodelet_core::{AdmittedPod, PodDirs, PodUid};
use nodelet_runtime::logs::container_log_path;
use tokio::sync::broadcast;

use crate::host::{ExecTarget, Host};

/// The [`Host`] as the handlers read it, with the pods' log directories and the exec command.
/// Cheap to clone.
#[derive(Clone)]
pub(crate) struct NodePods {
    host: Arc<dyn Host>,
    /// The program and first arguments of `container-exec` (empty: no exec).
    exec_command: Arc<[OsString]>,
    dirs: PodDirs,
}

impl std::fmt::Debug for NodePods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodePods")
            .field("root", &self.dirs.root())
            .finish_non_exhaustive()
    }
}

impl NodePods {
    /// The pods and containers of `host`; log files under `root_dir` (`PodDirs::pod_logs`);
    /// `kubectl exec` commands run with `exec_command` (the agent's program and
    /// `container-exec`, then `PID SPEC -- CMD...`; empty: no container can be exec'd into).
    pub(crate) fn new(root_dir: &Path, host: Arc<dyn Host>, exec_command: &[OsString]) -> Self {
        Self {
            host,
            exec_command: exec_command.into(),
            dirs: PodDirs::new(root_dir),
        }
    }

    /// Where to run a command in `container` of pod `uid`, and the `container-exec` command
    /// line's start; `None` when the container has no running instance or exec is not set up.
    pub(crate) fn exec_target(
        &self,
        uid: &PodUid,
        container: &str,
    ) -> Option<(ExecTarget, Arc<[OsString]>)> {
        if self.exec_command.is_empty() {
            return None;
        }
        self.host
            .exec_target(uid, container)
            .map(|t| (t, self.exec_command.clone()))
    }

    /// Every pod the agent runs (`/pods`).
    pub(crate) fn pods(&self) -> Vec<AdmittedPod> {
        self.host.pods()
    }

    /// The pod `namespace/name`, if the agent runs it.
    pub(crate) fn find(&self, namespace: &str, name: &str) -> Option<AdmittedPod> {
        self.pods()
            .into_iter()
            .find(|p| p.namespace() == namespace && p.name() == name)
    }

    /// The runtime's statuses of `uid`'s containers (empty when it has none).
    fn statuses(&self, uid: &PodUid) -> Vec<ContainerStatus> {
        self.host.container_statuses(uid)
    }

    /// The statuses of `pod`'s containers: the runtime's, else what the pod's API status says
    /// (as the kubelet reads it; the runtime forgets a pod when the agent restarts).
    pub(crate) fn statuses_of(&self, pod: &AdmittedPod) -> Vec<ContainerStatus> {
        let mut statuses = self.statuses(pod.uid());
        for s in api_statuses(pod) {
            if !statuses.iter().any(|x| x.name == s.name) {
                statuses.push(s);
            }
        }
        statuses
    }

    /// The current log file of instance `restart_count` of `container` of `pod`.
    pub(crate) fn log_path(
        &self,
        pod: &AdmittedPod,
        container: &str,
        restart_count: u32,
    ) -> PathBuf {
        let dir = self.dirs.pod_logs(pod.namespace(), pod.name(), pod.uid());
        container_log_path(&dir, container, restart_count)
    }

    /// Resolves once instance `restart_count` of `container` of pod `uid` is over and its log
    /// complete: the container shows a later instance, or this one not running, or no status
    /// at all (the pod was removed). The runtime records an end only after the instance's
    /// output was copied to its log file, so a reader that reads to the end after this
    /// resolved has every line.
    ///
    /// Subscribes to the changes before returning, so no change after this call is missed.
    pub(crate) fn instance_ended(
        &self,
        uid: PodUid,
        container: String,
        restart_count: u32,
    ) -> impl Future<Output = ()> + Send + 'static {
        let mut changes = self.host.status_changes();
        let host = self.host.clone();
        async move {
            loop {
                let over = host
                    .container_statuses(&uid)
                    .iter()
                    .find(|s| s.name == container)
                    .is_none_or(|s| s.restart_count != restart_count || !s.is_running());
                if over {
                    return;
                }
                match changes.recv().await {
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    // The runtime is gone: nothing will run any more.
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    }
}

/// `pod`'s `status.initContainerStatuses` and `containerStatuses` as runtime statuses (times
/// are not needed to pick a log file, and left at the epoch).
fn api_statuses(pod: &AdmittedPod) -> Vec<ContainerStatus> {
    use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus as Api};
    use nodelet_core::runtime::{ContainerState, Termination};
    let termination = |t: &ContainerStateTerminated| Termination {
        exit_code: t.exit_code,
        signal: t.signal,
        reason: t.reason.clone().unwrap_or_default(),
        message: t.message.clone(),
        started_at: std::time::SystemTime::UNIX_EPOCH,
        finished_at: std::time::SystemTime::UNIX_EPOCH,
    };
    let convert = |s: &Api| {
        let state = s.state.as_ref();
        let state = if let Some(t) = state.and_then(|st| st.terminated.as_ref()) {
            ContainerState::Terminated(termination(t))
        } else if state.and_then(|st| st.running.as_ref()).is_some() {
            ContainerState::Running {
                started_at: std::time::SystemTime::UNIX_EPOCH,
            }
        } else {
            let waiting = state.and_then(|st| st.waiting.as_ref());
            ContainerState::Waiting {
                reason: waiting
                    .and_then(|w| w.reason.clone())
                    .unwrap_or_else(|| "ContainerCreating".to_owned()),
                message: waiting.and_then(|w| w.message.clone()),
            }
        };
        ContainerStatus {
            name: s.name.clone(),
            state,
            last_state: s
                .last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .map(termination),
            restart_count: u32::try_from(s.restart_count).unwrap_or(0),
            container_id: s.container_id.clone().unwrap_or_default(),
        }
    };
    pod.status
        .iter()
        .flat_map(|st| {
            st.init_container_statuses
                .iter()
                .flatten()
                .chain(st.container_statuses.iter().flatten())
        })
        .map(convert)
        .collect()
}
