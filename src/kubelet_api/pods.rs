//! [`NodePods`]: what the kubelet API reads of the agent — the pods it runs, their containers'
//! statuses, where each container instance's log file is and when an instance has ended, and
//! how to run a command in a running container.

use std::ffi::OsString;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nodelet_core::runtime::ContainerStatus;
use nodelet_core::{AdmittedPod, PodDirs, PodUid};
use nodelet_runtime::ProcessRuntime;
use nodelet_runtime::logs::container_log_path;
use tokio::sync::broadcast;

type PodList = dyn Fn() -> Vec<AdmittedPod> + Send + Sync;
type Statuses = dyn Fn(&PodUid) -> Vec<ContainerStatus> + Send + Sync;
type Changes = dyn Fn() -> broadcast::Receiver<PodUid> + Send + Sync;
type ExecTargets = dyn Fn(&PodUid, &str) -> Option<ExecTarget> + Send + Sync;

/// Where a command for a running container is run (`ProcessRuntime::exec_target`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExecTarget {
    /// The pid of the container's process.
    pub(crate) pid: i32,
    /// Its `launch.json`.
    pub(crate) spec: PathBuf,
}

/// The agent's pods and containers as the kubelet API serves them. Cheap to clone.
///
/// Pods come from a function the agent gives (its pod map, read at each request); container
/// statuses and their changes from the process runtime. Without one (`--runtime config`), no
/// pod has a container status, so `/containerLogs` answers as the kubelet does for a container
/// it has no status of.
#[derive(Clone)]
pub(crate) struct NodePods {
    pods: Arc<PodList>,
    statuses: Arc<Statuses>,
    changes: Arc<Changes>,
    exec_targets: Arc<ExecTargets>,
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
    /// The pods `pods` lists, with the containers of `runtime` (none without one); log files
    /// under `root_dir` (`PodDirs::pod_logs`).
    pub(crate) fn new(
        root_dir: &Path,
        pods: impl Fn() -> Vec<AdmittedPod> + Send + Sync + 'static,
        runtime: Option<ProcessRuntime>,
    ) -> Self {
        match runtime {
            Some(runtime) => {
                let changes = runtime.clone();
                let exec = runtime.clone();
                let mut this = Self::from_parts(
                    root_dir,
                    pods,
                    move |uid| runtime.statuses(uid),
                    move || changes.changes(),
                );
                this.exec_targets = Arc::new(move |uid, container| {
                    exec.exec_target(uid, container)
                        .map(|(pid, spec)| ExecTarget { pid, spec })
                });
                this
            }
            None => Self::from_parts(root_dir, pods, |_| Vec::new(), || broadcast::channel(1).1),
        }
    }

    /// The pods `pods` lists; container statuses from `statuses`, which must announce every
    /// change of a pod's statuses on the receivers `changes` makes (as
    /// `ProcessRuntime::changes` does).
    pub(crate) fn from_parts(
        root_dir: &Path,
        pods: impl Fn() -> Vec<AdmittedPod> + Send + Sync + 'static,
        statuses: impl Fn(&PodUid) -> Vec<ContainerStatus> + Send + Sync + 'static,
        changes: impl Fn() -> broadcast::Receiver<PodUid> + Send + Sync + 'static,
    ) -> Self {
        Self {
            pods: Arc::new(pods),
            statuses: Arc::new(statuses),
            changes: Arc::new(changes),
            exec_targets: Arc::new(|_, _| None),
            exec_command: Arc::new([]),
            dirs: PodDirs::new(root_dir),
        }
    }

    /// Runs `kubectl exec` commands with `command` (the agent's program and `container-exec`,
    /// then `PID SPEC -- CMD...`). Without it, no container can be exec'd into.
    pub(crate) fn with_exec_command(mut self, command: Vec<OsString>) -> Self {
        self.exec_command = command.into();
        self
    }

    /// Finds running containers with `targets` instead of the runtime (tests).
    #[cfg(test)]
    pub(crate) fn with_exec_targets(
        mut self,
        targets: impl Fn(&PodUid, &str) -> Option<ExecTarget> + Send + Sync + 'static,
    ) -> Self {
        self.exec_targets = Arc::new(targets);
        self
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
        (self.exec_targets)(uid, container).map(|t| (t, self.exec_command.clone()))
    }

    /// Every pod the agent runs (`/pods`).
    pub(crate) fn pods(&self) -> Vec<AdmittedPod> {
        (self.pods)()
    }

    /// The pod `namespace/name`, if the agent runs it.
    pub(crate) fn find(&self, namespace: &str, name: &str) -> Option<AdmittedPod> {
        self.pods()
            .into_iter()
            .find(|p| p.namespace() == namespace && p.name() == name)
    }

    /// The runtime's statuses of `uid`'s containers (empty when it has none).
    pub(crate) fn statuses(&self, uid: &PodUid) -> Vec<ContainerStatus> {
        (self.statuses)(uid)
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
        let mut changes = (self.changes)();
        let statuses = self.statuses.clone();
        async move {
            loop {
                let over = statuses(&uid)
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
