//! [`ProcessRuntime`]: starts a pod's containers as local processes, follows them to their
//! end, reports their typed states, and stops them.
//!
//! ```text
//! <root>/pods/<uid>/containers/<name>/       0700, removed with the pod
//!     launch.json     the init process's spec (no environment values)
//!     state.json      pid, start ticks, restart count of the running instance
//!     scratch/        empty on the host; the container's root is built here in its own
//!                     mount namespace, so nothing of it is visible on the host
//! <root>/logs/pods/<namespace>_<name>_<uid>/<name>/<restartCount>.log   (see `logs`)
//! ```
//!
//! Starting one container ([`ProcessRuntime::start_container`]):
//! 1. find the image in the image table (`ErrImageNeverPull` when none matches);
//! 2. resolve its user (`runAsUser`, … `runAsNonRoot`, root only when allowed);
//! 3. merge `command`/`args` with the image's entrypoint and arguments;
//! 4. write `launch.json` and start the init program with exactly the container's
//!    environment, stdout and stderr piped into the log file of this instance;
//! 5. wait until the init process reports an error or its `execve` closes the status socket;
//! 6. record the instance running (state file for a restarted agent); a task follows it to its
//!    end, then records the termination and announces the pod on [`ProcessRuntime::changes`].
//!
//! Which containers start when, restarts and the crash back-off are not decided here: the
//! pod worker decides them over the states reported here (the kubelet's `computePodActions`
//! is on the kubelet's side of the CRI) and asks for each start and stop.
//!
//! A restarted agent cannot follow the processes its previous run started (they are not its
//! children): [`ProcessRuntime::new`] finds them from the state files, kills their process
//! groups and reports them ended (exit code 137), so no process is left running untracked;
//! the restart policy then starts them again.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Container;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use nodelet_core::runtime::{ContainerLaunch, ContainerState, ContainerStatus};
use nodelet_core::{AdmittedPod, PodDirs, PodUid};
use parking_lot::Mutex;
use tokio::sync::{broadcast, watch};
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::config::RuntimeConfig;
use crate::error::{Error, StartError};
use crate::records::{Inner, LAUNCH_FILE};

/// The process runtime. Cheap to clone; every clone is the same runtime.
#[derive(Clone)]
pub struct ProcessRuntime {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ProcessRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessRuntime")
            .field("root_dir", &self.inner.config.root_dir)
            .finish_non_exhaustive()
    }
}

impl ProcessRuntime {
    /// A runtime under `config.root_dir`, its tasks (log copies, the followers of running
    /// instances) on `tasks`. Containers a previous run of the agent
    /// started are killed and reported ended (see the module docs).
    pub fn new(config: RuntimeConfig, tasks: TaskTracker) -> Self {
        let dirs = PodDirs::new(&config.root_dir);
        let inner = Arc::new(Inner {
            config,
            dirs,
            pods: Mutex::default(),
            changes: broadcast::channel(1024).0,
            ipc: crate::ipc::PodIpc::new(nix::unistd::geteuid().is_root()),
            tasks,
        });
        let this = Self { inner };
        crate::recovery::recover(&this.inner);
        this
    }

    /// The runtime's configuration.
    pub(crate) fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// Announces the UID of every pod whose containers changed state (a process ended): the
    /// agent syncs that pod again, as the kubelet's PLEG makes it.
    pub fn changes(&self) -> broadcast::Receiver<PodUid> {
        self.inner.changes.subscribe()
    }

    /// The runtime's view of `pod`'s containers, init containers first; containers never
    /// started are absent.
    pub fn statuses(&self, uid: &PodUid) -> Vec<ContainerStatus> {
        let pods = self.inner.pods.lock();
        let Some(records) = pods.get(uid) else {
            return Vec::new();
        };
        records
            .iter()
            .map(|(name, r)| ContainerStatus {
                name: name.clone(),
                state: r.state.clone(),
                last_state: r.last_state.clone(),
                restart_count: r.restart_count(),
                container_id: r.container_id.clone(),
            })
            .collect()
    }

    /// Where to run a command in `container` of pod `uid` (`kubectl exec`): the pid of its
    /// running instance's process and the path of its `launch.json`, for
    /// [`crate::sandbox::exec_main`]. `None` when the container has no running instance.
    pub fn exec_target(&self, uid: &PodUid, container: &str) -> Option<(i32, PathBuf)> {
        let pods = self.inner.pods.lock();
        let record = pods.get(uid)?.get(container)?;
        let pid = record.pgid.filter(|_| record.state_is_running())?;
        let dir = self.inner.dirs.containers(uid).join(container);
        Some((pid, dir.join(LAUNCH_FILE)))
    }

    /// Whether pods that do not ask for `hostIPC` get an IPC namespace of their own (the agent
    /// runs as root; PW-58).
    pub fn pod_ipc_namespaces(&self) -> bool {
        self.inner.ipc.enabled()
    }

    /// Makes what `pod`'s containers share before the first of them starts (the kubelet's
    /// sandbox): its IPC namespace with its IPC sysctls (PW-58). Idempotent.
    ///
    /// # Errors
    /// [`PodSandboxError`](crate::PodSandboxError): nothing of the pod can start yet.
    pub fn prepare_sandbox(&self, pod: &AdmittedPod) -> Result<(), crate::PodSandboxError> {
        self.inner.ipc.prepare(pod)
    }

    /// Starts `container` of `pod` (module docs, steps 1–6) with environment `env` and the
    /// mounts, command and arguments of `launch`.
    ///
    /// # Errors
    /// [`StartError`]; its [`reason`](StartError::reason) is what the container shows.
    pub async fn start_container(
        &self,
        pod: &AdmittedPod,
        container: &Container,
        env: &[(String, Vec<u8>)],
        launch: &ContainerLaunch,
    ) -> Result<(), StartError> {
        let result = crate::launch::start(&self.inner, pod, container, env, launch).await;
        if let Err(e) = result.as_ref()
            && !matches!(e, StartError::Start { .. })
        {
            // Not started at all: the container waits with the reason.
            self.inner.with_record(pod.uid(), &container.name, |r| {
                if let ContainerState::Terminated(t) = &r.state {
                    r.last_state = Some(t.clone());
                }
                r.state = ContainerState::Waiting {
                    reason: e.reason().to_owned(),
                    message: Some(e.to_string()),
                };
            });
        }
        result
    }
    /// Stops pod `uid`'s running containers: SIGTERM to each container's process group,
    /// SIGKILL to those still running after `grace_period`. Returns the names of the
    /// containers it signalled. No container of the pod starts again. Needs only the UID: a
    /// pod whose API object is gone is stopped too.
    ///
    /// # Errors
    /// [`Error::NotStopped`] when a container outlived SIGKILL by 10 s.
    pub async fn kill_pod(
        &self,
        uid: &PodUid,
        grace_period: Duration,
    ) -> Result<Vec<String>, Error> {
        let running: Vec<(String, i32, watch::Receiver<bool>)> = {
            let pods = self.inner.pods.lock();
            pods.get(uid)
                .into_iter()
                .flatten()
                .filter_map(|(name, r)| {
                    r.pgid
                        .filter(|_| r.state_is_running())
                        .map(|pgid| (name.clone(), pgid, r.ended.subscribe()))
                })
                .collect()
        };
        let still_running = stop(&running, grace_period, Duration::from_secs(10)).await;
        if !still_running.is_empty() {
            return Err(Error::NotStopped {
                pod_uid: uid.clone(),
                containers: still_running,
            });
        }
        Ok(running.into_iter().map(|(n, _, _)| n).collect())
    }

    /// Marks the running instance `container_id` of `container` of pod `uid` as stopped for a
    /// new environment (FC-12): when it ends, its termination shows [`CONFIG_CHANGED`] (the
    /// caller's planner starts it again at once, a restart that is not a crash). Whether that
    /// instance runs (nothing is marked otherwise). The caller stops it
    /// ([`stop_container`](Self::stop_container)).
    ///
    /// [`CONFIG_CHANGED`]: nodelet_core::runtime::CONFIG_CHANGED
    pub fn restart_for_new_env(&self, uid: &PodUid, container: &str, container_id: &str) -> bool {
        let mut pods = self.inner.pods.lock();
        let record = pods.get_mut(uid).and_then(|p| p.get_mut(container));
        match record {
            Some(r) if r.state_is_running() && r.container_id == container_id => {
                r.config_restart = true;
                true
            }
            _ => false,
        }
    }

    /// Stops the running instance of `container` of pod `uid` (the CRI's `StopContainer`):
    /// SIGTERM to its process group, SIGKILL after `grace_period`. Returns whether it was
    /// running. The pod worker decides, as for any other end, whether it starts again.
    ///
    /// # Errors
    /// [`Error::NotStopped`] when it outlived SIGKILL by 10 s.
    pub async fn stop_container(
        &self,
        uid: &PodUid,
        container: &str,
        grace_period: Duration,
    ) -> Result<bool, Error> {
        let running: Vec<(String, i32, watch::Receiver<bool>)> = {
            let pods = self.inner.pods.lock();
            pods.get(uid)
                .and_then(|p| p.get(container))
                .filter(|r| r.state_is_running())
                .and_then(|r| {
                    r.pgid
                        .map(|pgid| (container.to_owned(), pgid, r.ended.subscribe()))
                })
                .into_iter()
                .collect()
        };
        let still_running = stop(&running, grace_period, Duration::from_secs(10)).await;
        if !still_running.is_empty() {
            return Err(Error::NotStopped {
                pod_uid: uid.clone(),
                containers: still_running,
            });
        }
        Ok(!running.is_empty())
    }

    /// Stops every running container of every pod (the agent is stopping): SIGTERM, SIGKILL
    /// after `grace_period`, each waited for at most 5 s more. Nothing is left running behind
    /// the agent; its next start starts the pods' containers again.
    pub async fn stop_all(&self, grace_period: Duration) {
        let running: Vec<(String, i32, watch::Receiver<bool>)> = {
            let pods = self.inner.pods.lock();
            pods.values()
                .flat_map(|p| p.iter())
                .filter(|(_, r)| r.state_is_running())
                .filter_map(|(name, r)| {
                    r.pgid.map(|pgid| (name.clone(), pgid, r.ended.subscribe()))
                })
                .collect()
        };
        let still_running = stop(&running, grace_period, Duration::from_secs(5)).await;
        if !still_running.is_empty() {
            warn!(containers = ?still_running, "containers outlived SIGKILL at shutdown");
        }
    }

    /// Forgets pod `uid`: kills what still runs, removes its runtime directories and, with
    /// `remove_logs` (the pod was deleted), its statuses and log files. Needs only the UID
    /// (the log directory `<namespace>_<name>_<uid>` is found by it), so a pod whose API
    /// object is gone is removed too. Idempotent.
    ///
    /// # Errors
    /// [`Error`] when a container would not stop or a directory would not go.
    pub async fn remove_pod(&self, uid: &PodUid, remove_logs: bool) -> Result<(), Error> {
        self.kill_pod(uid, Duration::ZERO).await?;
        self.inner.ipc.remove(uid);
        if remove_logs {
            self.inner.pods.lock().remove(uid);
        }
        // Else the pod finished on its own: its containers' statuses stay (the kubelet keeps
        // dead containers until their pod is deleted), for `kubectl logs`, until
        // `remove_logs_except` finds the pod gone.
        let containers = self.inner.dirs.containers(uid);
        remove_tree(&containers)?;
        if remove_logs {
            for logs in self.pod_log_dirs(uid) {
                remove_tree(&logs)?;
            }
        }
        Ok(())
    }

    /// Pod `uid`'s log directories, `<root>/logs/pods/<namespace>_<name>_<uid>` (one, unless
    /// the pod was renamed, which the API forbids). Namespaces and names are DNS names, which
    /// have no `_`: the UID is everything after the second `_`.
    fn pod_log_dirs(&self, uid: &PodUid) -> Vec<PathBuf> {
        let Ok(entries) = fs::read_dir(self.inner.dirs.logs()) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|name| name.splitn(3, '_').nth(2))
                    .is_some_and(|u| u == uid.as_str())
            })
            .map(|e| e.path())
            .collect()
    }

    /// Forgets the pods not in `known` (pods deleted after they finished): their container
    /// statuses and their log directories.
    pub fn remove_logs_except(&self, known: &HashSet<PodUid>) {
        self.inner.pods.lock().retain(|uid, _| known.contains(uid));
        let Ok(entries) = fs::read_dir(self.inner.dirs.logs()) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(uid) = name.rsplit('_').next() else {
                continue;
            };
            if known.iter().any(|k| k.as_str() == uid) {
                continue;
            }
            if let Err(error) = remove_tree(&entry.path()) {
                warn!(%error, "log directory of a deleted pod not removed");
            }
        }
    }
}

/// SIGTERM to each container's process group, SIGKILL to those still running after
/// `grace_period`; waits at most `after_kill` more. Returns the containers still running.
async fn stop(
    running: &[(String, i32, watch::Receiver<bool>)],
    grace_period: Duration,
    after_kill: Duration,
) -> Vec<String> {
    for (_, pgid, _) in running {
        let _ = killpg(Pid::from_raw(*pgid), Signal::SIGTERM);
    }
    let all_ended = |deadline: Duration| {
        let receivers: Vec<watch::Receiver<bool>> =
            running.iter().map(|(_, _, rx)| rx.clone()).collect();
        tokio::time::timeout(deadline, async move {
            for mut rx in receivers {
                let _ = rx.wait_for(|ended| *ended).await;
            }
        })
    };
    if all_ended(grace_period).await.is_err() {
        for (name, pgid, rx) in running {
            if !*rx.borrow() {
                info!(container = %name, "grace period over: SIGKILL");
                let _ = killpg(Pid::from_raw(*pgid), Signal::SIGKILL);
            }
        }
        let _ = all_ended(after_kill).await;
    }
    let mut still_running: Vec<String> = running
        .iter()
        .filter(|(_, _, rx)| !*rx.borrow())
        .map(|(name, _, _)| name.clone())
        .collect();
    // A container is its whole process group, as a runtime's cgroup: what its first process
    // started and left behind (a child still exiting, one that ignored SIGTERM) goes too.
    for (name, pgid, rx) in running {
        if *rx.borrow() && !group_emptied(*pgid, after_kill).await {
            still_running.push(name.clone());
        }
    }
    still_running
}

/// SIGKILL to what is left of process group `pgid` (its leader has ended), then waits until
/// no live process is in it (zombies waiting for their new parent to reap them do not count),
/// at most `within`. Whether the group is empty.
async fn group_emptied(pgid: i32, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if !group_has_live_member(pgid) {
            return true;
        }
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether a process of group `pgid` that is not a zombie exists (`/proc/<pid>/stat`: state
/// and process group after the command's closing parenthesis).
fn group_has_live_member(pgid: i32) -> bool {
    let Ok(entries) = fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        if entry
            .file_name()
            .to_str()
            .is_none_or(|n| n.parse::<u32>().is_err())
        {
            return false;
        }
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        let Some((_, after)) = stat.rsplit_once(')') else {
            return false;
        };
        let mut fields = after.split_ascii_whitespace();
        let state = fields.next();
        let group = fields.nth(1).and_then(|g| g.parse::<i32>().ok());
        group == Some(pgid) && state != Some("Z") && state != Some("X")
    })
}

fn remove_tree(dir: &Path) -> Result<(), Error> {
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::Io {
            step: "removing directory",
            path: dir.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A pod deleted while the agent was down is known by its UID alone: its log directory
    // (`<namespace>_<name>_<uid>`) is found by the UID, and only its own.
    #[tokio::test]
    async fn a_pod_is_removed_with_its_logs_by_its_uid_alone() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let runtime = ProcessRuntime::new(
            RuntimeConfig::new(root.path(), Vec::new()),
            TaskTracker::new(),
        );
        let dirs = PodDirs::new(root.path());
        let uid = |u: &str| PodUid::new(u).unwrap_or_else(|e| panic!("{e}"));
        let gone = dirs.pod_logs("ns", "web", &uid("u-1"));
        // A UID that ends like the other: not a match.
        let kept = dirs.pod_logs("ns", "web", &uid("x_u-1"));
        let containers = dirs.containers(&uid("u-1"));
        for dir in [&gone, &kept, &containers] {
            fs::create_dir_all(dir.join("c")).unwrap_or_else(|e| panic!("{e}"));
        }
        let removed = runtime.remove_pod(&uid("u-1"), true).await;
        assert!(removed.is_ok(), "{removed:?}");
        assert!(!gone.exists() && !containers.exists());
        assert!(kept.exists());
        assert!(
            runtime.remove_pod(&uid("u-1"), true).await.is_ok(),
            "idempotent"
        );
    }
}
