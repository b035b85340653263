//! [`ProcessRuntime`]: starts a pod's containers as local processes, follows them to their
//! end, decides restarts as the kubelet does, and stops them on termination.
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
//! Restarts ([`ProcessRuntime::plan`], the kubelet's `computePodActions`): init containers one
//! after the other, each only after the one before it succeeded; then every app container.
//! An ended container is restarted as `restartPolicy` says (`Always`; `OnFailure` for exit
//! codes other than 0; never for `Never`), the first time at once, then after a back-off of
//! 10 s doubling up to 5 min, reset when an instance ran 10 min.
//!
//! A restarted agent cannot follow the processes its previous run started (they are not its
//! children): [`ProcessRuntime::new`] finds them from the state files, kills their process
//! groups and reports them ended (exit code 137), so no process is left running untracked;
//! the restart policy then starts them again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Container;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use nodelet_core::runtime::{ContainerLaunch, ContainerState, ContainerStatus, Termination};
use nodelet_core::{AdmittedPod, PodDirs, PodUid};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;
use tokio::sync::{broadcast, watch};
use tracing::{debug, info, warn};

use crate::error::{Error, StartError};
use crate::images::ImageTable;
use crate::logs::{self, LogConfig};
use crate::spec::{LaunchSpec, MountSpec};
use crate::users::{Identity, format_pod, namespaced};

/// The kubelet's crash back-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay (10 s).
    pub initial: Duration,
    /// The longest delay (5 min).
    pub max: Duration,
    /// An instance that ran this long resets the delay (10 min).
    pub reset_after: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(300),
            reset_after: Duration::from_secs(600),
        }
    }
}

/// Options of a [`ProcessRuntime`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RuntimeConfig {
    /// The agent's root directory.
    pub root_dir: PathBuf,
    /// Images → local programs.
    pub images: ImageTable,
    /// Whether a container may run as root (`--allow-root-containers`).
    pub allow_root: bool,
    /// The program (and its first arguments) that runs [`crate::sandbox::init_main`]; the
    /// spec's path is appended.
    pub init_command: Vec<OsString>,
    /// Log file size and count.
    pub logs: LogConfig,
    /// Crash back-off.
    pub backoff: Backoff,
    /// Host directories hidden from containers (the root directory is always hidden).
    pub masked: Vec<PathBuf>,
}

impl RuntimeConfig {
    /// Defaults under `root_dir`, with `init_command` starting the init process.
    pub fn new(root_dir: &Path, init_command: Vec<OsString>) -> Self {
        Self {
            root_dir: root_dir.to_path_buf(),
            images: ImageTable::default(),
            allow_root: false,
            init_command,
            logs: LogConfig::default(),
            backoff: Backoff::default(),
            masked: Vec::new(),
        }
    }
}

/// What a pod sync should do now ([`ProcessRuntime::plan`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Containers to start now, in order.
    pub start: Vec<String>,
    /// Containers waiting for their back-off to pass, with the kubelet's message.
    pub back_off: Vec<(String, String)>,
}

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

struct Inner {
    config: RuntimeConfig,
    dirs: PodDirs,
    pods: Mutex<HashMap<PodUid, BTreeMap<String, Record>>>,
    changes: broadcast::Sender<PodUid>,
}

struct Record {
    /// Instances started so far (the next instance's log file is `<starts>.log`).
    starts: u32,
    state: ContainerState,
    last_state: Option<Termination>,
    container_id: String,
    /// The process group of the running instance.
    pgid: Option<i32>,
    /// The delay before the next restart.
    backoff: Duration,
    /// No restart before this instant.
    not_before: Option<Instant>,
    /// `true` once the running instance ended (for `kill_pod`).
    ended: watch::Sender<bool>,
}

impl Record {
    fn new() -> Self {
        Self {
            starts: 0,
            state: ContainerState::Waiting {
                reason: "ContainerCreating".to_owned(),
                message: None,
            },
            last_state: None,
            container_id: String::new(),
            pgid: None,
            backoff: Duration::ZERO,
            not_before: None,
            ended: watch::channel(true).0,
        }
    }

    fn restart_count(&self) -> u32 {
        self.starts.saturating_sub(1)
    }
}

/// What `state.json` holds for a running instance.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StateFile {
    pid: i32,
    start_ticks: u64,
    starts: u32,
    container_id: String,
    started_at: SystemTime,
}

const STATE_FILE: &str = "state.json";
const LAUNCH_FILE: &str = "launch.json";
const SCRATCH_DIR: &str = "scratch";
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl ProcessRuntime {
    /// A runtime under `config.root_dir`. Containers a previous run of the agent started are
    /// killed and reported ended (see the module docs).
    pub fn new(config: RuntimeConfig) -> Self {
        let dirs = PodDirs::new(&config.root_dir);
        let inner = Arc::new(Inner {
            config,
            dirs,
            pods: Mutex::default(),
            changes: broadcast::channel(1024).0,
        });
        let this = Self { inner };
        this.recover();
        this
    }

    /// Announces the UID of every pod whose containers changed state (a process ended, a
    /// back-off passed): the agent syncs that pod again, as the kubelet's PLEG makes it.
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

    /// Which containers of `pod` to start now (the kubelet's `computePodActions`; module docs).
    /// A container in back-off is shown waiting with `CrashLoopBackOff`, and the pod is
    /// announced on [`changes`](Self::changes) when the back-off ends.
    pub fn plan(&self, pod: &AdmittedPod) -> Plan {
        let Some(spec) = pod.spec.as_ref() else {
            return Plan::default();
        };
        let policy = spec.restart_policy.as_deref().unwrap_or("Always");
        let now = Instant::now();
        let mut plan = Plan::default();
        let mut wake: Option<Instant> = None;
        let mut pods = self.inner.pods.lock();
        let records = pods.entry(pod.uid().clone()).or_default();
        let mut consider = |c: &Container, init: bool, plan: &mut Plan| -> bool {
            // Returns whether the container has succeeded (for init containers).
            let Some(r) = records.get_mut(&c.name) else {
                plan.start.push(c.name.clone());
                return false;
            };
            let ended = match &r.state {
                ContainerState::Running { .. } => return false,
                ContainerState::Terminated(t) => Some(t.clone()),
                ContainerState::Waiting { .. } => r.last_state.clone(),
            };
            let Some(t) = ended else {
                // Waiting for its first start (a config or image error): try again.
                plan.start.push(c.name.clone());
                return false;
            };
            if t.exit_code == 0 && (init || policy != "Always") {
                return true;
            }
            let restart = match policy {
                "Never" => false,
                "OnFailure" => t.exit_code != 0,
                _ => true,
            };
            if !restart {
                return false;
            }
            match r.not_before {
                Some(at) if at > now => {
                    let message = format!(
                        "back-off {} restarting failed container={} pod={}",
                        go_duration(r.backoff),
                        c.name,
                        format_pod(pod)
                    );
                    if let ContainerState::Terminated(t) = &r.state {
                        r.last_state = Some(t.clone());
                    }
                    r.state = ContainerState::Waiting {
                        reason: "CrashLoopBackOff".to_owned(),
                        message: Some(message.clone()),
                    };
                    plan.back_off.push((c.name.clone(), message));
                    wake = Some(wake.map_or(at, |w: Instant| w.min(at)));
                }
                _ => plan.start.push(c.name.clone()),
            }
            false
        };
        let mut initialized = true;
        for c in spec.init_containers.iter().flatten() {
            if !consider(c, true, &mut plan) {
                initialized = false;
                break;
            }
        }
        if initialized {
            for c in &spec.containers {
                consider(c, false, &mut plan);
            }
        }
        drop(pods);
        if let Some(at) = wake {
            let tx = self.inner.changes.clone();
            let uid = pod.uid().clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(at.into()).await;
                let _ = tx.send(uid);
            });
        }
        plan
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
        let result = self.try_start(pod, container, env, launch).await;
        if let Err(e) = &result {
            let mut pods = self.inner.pods.lock();
            let r = pods
                .entry(pod.uid().clone())
                .or_default()
                .entry(container.name.clone())
                .or_insert_with(Record::new);
            if !matches!(e, StartError::Start { .. }) {
                // Not started at all: the container waits with the reason.
                if let ContainerState::Terminated(t) = &r.state {
                    r.last_state = Some(t.clone());
                }
                r.state = ContainerState::Waiting {
                    reason: e.reason().to_owned(),
                    message: Some(e.to_string()),
                };
            }
        }
        result
    }

    async fn try_start(
        &self,
        pod: &AdmittedPod,
        container: &Container,
        env: &[(String, Vec<u8>)],
        launch: &ContainerLaunch,
    ) -> Result<(), StartError> {
        let config = &self.inner.config;
        let uid = pod.uid();
        // (1)
        let image_ref = container.image.clone().unwrap_or_default();
        let image = config
            .images
            .find(&image_ref)
            .ok_or_else(|| StartError::ImageNotMapped {
                image: image_ref.clone(),
            })?;
        // (2)
        let identity = Identity::resolve(pod, container, image, config.allow_root)?;
        // (3)
        let (program, args) = image
            .command_line(launch)
            .ok_or_else(|| StartError::Start {
                message: format!(
                    "no command specified: container {} sets no command and image {image_ref:?} \
                     has no entrypoint in the image table",
                    container.name
                ),
            })?;
        // (4)
        let dir = self.inner.dirs.container(uid, &container.name);
        let scratch = dir.join(SCRATCH_DIR);
        make_private_dir(&self.inner.dirs.containers(uid))?;
        make_private_dir(&dir)?;
        match fs::remove_dir(&scratch) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(StartError::Io {
                    step: "removing the previous scratch directory",
                    path: scratch,
                    source,
                });
            }
        }
        make_private_dir(&scratch)?;
        let mut vars: Vec<(String, Vec<u8>)> = env.to_vec();
        let mut path = image
            .path
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
            .into_bytes();
        let existing = vars.iter().position(|(n, _)| n == "PATH");
        let base = existing
            .map(|i| vars[i].1.clone())
            .unwrap_or_else(|| DEFAULT_PATH.as_bytes().to_vec());
        if !path.is_empty() {
            path.push(b':');
        }
        path.extend_from_slice(&base);
        match existing {
            Some(i) => vars[i].1 = path,
            None => vars.push(("PATH".to_owned(), path)),
        }
        if !vars.iter().any(|(n, _)| n == "HOSTNAME") {
            vars.push(("HOSTNAME".to_owned(), launch.hostname.clone().into_bytes()));
        }
        let socket_name = format!("nodelet-start-{:016x}", rand::random::<u64>());
        let mut masked = config.masked.clone();
        masked.push(fs::canonicalize(&config.root_dir).unwrap_or_else(|_| config.root_dir.clone()));
        let spec = LaunchSpec {
            program,
            args,
            uid: identity.uid,
            gid: identity.gid,
            groups: identity.groups.clone(),
            working_dir: container
                .working_dir
                .clone()
                .map(PathBuf::from)
                .or_else(|| image.working_dir.clone())
                .unwrap_or_else(|| PathBuf::from("/")),
            hostname: launch.hostname.clone(),
            mounts: launch
                .mounts
                .iter()
                .map(|m| MountSpec {
                    source: m.host_path.clone(),
                    target: m.container_path.clone(),
                    read_only: m.read_only,
                })
                .collect(),
            scratch: scratch.clone(),
            masked,
            status_socket: socket_name.clone(),
        };
        let spec_path = dir.join(LAUNCH_FILE);
        write_private(
            &spec_path,
            &serde_json::to_vec_pretty(&spec).unwrap_or_default(),
        )?;
        let (starts, log_dir) = {
            let mut pods = self.inner.pods.lock();
            let r = pods
                .entry(uid.clone())
                .or_default()
                .entry(container.name.clone())
                .or_insert_with(Record::new);
            let log_dir = self.inner.dirs.pod_logs(
                pod.metadata.namespace.as_deref().unwrap_or_default(),
                pod.metadata.name.as_deref().unwrap_or_default(),
                uid,
            );
            (r.starts, log_dir)
        };
        let log_path = logs::container_log_path(&log_dir, &container.name, starts);
        if starts > 0
            && let Err(error) = logs::prune_instances(&log_dir.join(&container.name), starts - 1)
        {
            warn!(%error, "log files of older instances not removed");
        }
        let listener = bind_abstract(&socket_name).map_err(|source| StartError::Io {
            step: "binding the status socket of",
            path: dir.clone(),
            source,
        })?;
        let mut command =
            tokio::process::Command::new(config.init_command.first().cloned().unwrap_or_default());
        command
            .args(config.init_command.iter().skip(1))
            .arg(&spec_path)
            .env_clear()
            .envs(vars.iter().map(|(n, v)| {
                use std::os::unix::ffi::OsStringExt;
                (OsString::from(n), OsString::from_vec(v.clone()))
            }))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started_at = SystemTime::now();
        let started_instant = Instant::now();
        let mut child = command.spawn().map_err(|e| StartError::Start {
            message: format!(
                "starting the container's init process {:?}: {e}",
                config.init_command.first()
            ),
        })?;
        let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let log_config = config.logs.clone();
        let log_task = tokio::spawn(async move {
            match (stdout, stderr) {
                (Some(out), Some(err)) => {
                    if let Err(error) = logs::copy_streams(out, err, log_path, log_config).await {
                        warn!(%error, "container log not written");
                    }
                }
                _ => warn!("container output not captured"),
            }
        });
        // (5)
        let report = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((mut stream, _)) => {
                    let mut text = String::new();
                    let _ = stream.read_to_string(&mut text).await;
                    text.trim().to_owned()
                }
                Err(e) => format!("status socket: {e}"),
            },
            status = child.wait() => {
                let status = status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                format!("the container's init process ended before it started the program ({status})")
            }
        };
        drop(listener);
        if !report.is_empty() {
            // The init process failed before `execve`: reap it, record a StartError.
            let _ = child.wait().await;
            let _ = log_task.await;
            self.record_end(
                uid,
                &container.name,
                Termination {
                    exit_code: 128,
                    signal: None,
                    reason: "StartError".to_owned(),
                    message: Some(report.clone()),
                    started_at,
                    finished_at: SystemTime::now(),
                },
                Duration::ZERO,
                true,
            );
            return Err(StartError::Start { message: report });
        }
        // (6)
        let container_id = format!("nodelet://{:032x}", rand::random::<u128>());
        let (ended_rx, starts) = {
            let mut pods = self.inner.pods.lock();
            let r = pods
                .entry(uid.clone())
                .or_default()
                .entry(container.name.clone())
                .or_insert_with(Record::new);
            match &r.state {
                ContainerState::Terminated(t) => r.last_state = Some(t.clone()),
                ContainerState::Waiting { .. } | ContainerState::Running { .. } => {}
            }
            r.starts += 1;
            r.state = ContainerState::Running { started_at };
            r.container_id = container_id.clone();
            r.pgid = Some(pid);
            r.not_before = None;
            r.ended.send_replace(false);
            (r.ended.subscribe(), r.starts)
        };
        drop(ended_rx);
        let state = StateFile {
            pid,
            start_ticks: start_ticks(pid).unwrap_or(0),
            starts,
            container_id,
            started_at,
        };
        if let Err(e) = write_private(
            &dir.join(STATE_FILE),
            &serde_json::to_vec(&state).unwrap_or_default(),
        ) {
            warn!(error = %e, "container state not written; a restarted agent will not find it");
        }
        debug!(container = %container.name, pid, "container started");
        let this = self.clone();
        let uid = uid.clone();
        let name = container.name.clone();
        tokio::spawn(async move {
            let status = child.wait().await;
            let _ = log_task.await;
            let finished_at = SystemTime::now();
            let (exit_code, signal) = exit_code(status.ok());
            let termination = Termination {
                exit_code,
                signal,
                reason: if exit_code == 0 { "Completed" } else { "Error" }.to_owned(),
                message: None,
                started_at,
                finished_at,
            };
            let _ = fs::remove_file(dir.join(STATE_FILE));
            this.record_end(&uid, &name, termination, started_instant.elapsed(), false);
        });
        Ok(())
    }

    /// Records the end of an instance and its next back-off, and announces the pod.
    fn record_end(
        &self,
        uid: &PodUid,
        name: &str,
        termination: Termination,
        ran: Duration,
        start_error: bool,
    ) {
        let backoff = self.inner.config.backoff;
        {
            let mut pods = self.inner.pods.lock();
            let Some(r) = pods.get_mut(uid).and_then(|p| p.get_mut(name)) else {
                return;
            };
            if start_error {
                if let ContainerState::Terminated(t) = &r.state {
                    r.last_state = Some(t.clone());
                }
                r.starts += 1;
                r.container_id = format!("nodelet://{:032x}", rand::random::<u128>());
            }
            r.state = ContainerState::Terminated(termination);
            r.pgid = None;
            r.ended.send_replace(true);
            // The first restart is immediate, then 10 s doubling to 5 min; a long run resets.
            r.backoff = if ran >= backoff.reset_after || r.backoff.is_zero() && r.starts <= 1 {
                Duration::ZERO
            } else if r.backoff.is_zero() {
                backoff.initial
            } else {
                (r.backoff * 2).min(backoff.max)
            };
            r.not_before = Some(Instant::now() + r.backoff);
        }
        let _ = self.inner.changes.send(uid.clone());
    }

    /// Stops `pod`'s running containers: SIGTERM to each container's process group, SIGKILL
    /// to those still running after `grace_period`. Returns the names of the containers it
    /// signalled (for the kubelet's `Killing` events). No container of the pod starts again.
    ///
    /// # Errors
    /// [`Error::NotStopped`] when a container outlived SIGKILL by 10 s.
    pub async fn kill_pod(
        &self,
        pod: &AdmittedPod,
        grace_period: Duration,
    ) -> Result<Vec<String>, Error> {
        let running: Vec<(String, i32, watch::Receiver<bool>)> = {
            let pods = self.inner.pods.lock();
            pods.get(pod.uid())
                .into_iter()
                .flatten()
                .filter_map(|(name, r)| {
                    r.pgid
                        .filter(|_| r.state_is_running())
                        .map(|pgid| (name.clone(), pgid, r.ended.subscribe()))
                })
                .collect()
        };
        for (_, pgid, _) in &running {
            let _ = killpg(Pid::from_raw(*pgid), Signal::SIGTERM);
        }
        let wait_all = |deadline: Duration| {
            let mut waits = Vec::new();
            for (_, _, rx) in &running {
                let mut rx = rx.clone();
                waits.push(async move {
                    let _ = rx.wait_for(|ended| *ended).await;
                });
            }
            tokio::time::timeout(deadline, futures_join_all(waits))
        };
        if wait_all(grace_period).await.is_err() {
            for (name, pgid, rx) in &running {
                if !*rx.borrow() {
                    info!(container = %name, "grace period over: SIGKILL");
                    let _ = killpg(Pid::from_raw(*pgid), Signal::SIGKILL);
                }
            }
            if wait_all(Duration::from_secs(10)).await.is_err() {
                return Err(Error::NotStopped {
                    pod: namespaced(pod),
                    containers: running
                        .iter()
                        .filter(|(_, _, rx)| !*rx.borrow())
                        .map(|(n, _, _)| n.clone())
                        .collect(),
                });
            }
        }
        Ok(running.into_iter().map(|(n, _, _)| n).collect())
    }

    /// Stops every running container of every pod (the agent is stopping): SIGTERM, SIGKILL
    /// after `grace_period`, each waited for at most 5 s more. Nothing is left running behind
    /// the agent; its next start starts the pods' containers again.
    pub async fn stop_all(&self, grace_period: Duration) {
        let running: Vec<(i32, watch::Receiver<bool>)> = {
            let pods = self.inner.pods.lock();
            pods.values()
                .flat_map(|p| p.values())
                .filter(|r| r.state_is_running())
                .filter_map(|r| r.pgid.map(|pgid| (pgid, r.ended.subscribe())))
                .collect()
        };
        for (pgid, _) in &running {
            let _ = killpg(Pid::from_raw(*pgid), Signal::SIGTERM);
        }
        let wait = |deadline: Duration| {
            let waits: Vec<_> = running
                .iter()
                .map(|(_, rx)| {
                    let mut rx = rx.clone();
                    async move {
                        let _ = rx.wait_for(|ended| *ended).await;
                    }
                })
                .collect();
            tokio::time::timeout(deadline, futures_join_all(waits))
        };
        if wait(grace_period).await.is_err() {
            for (pgid, rx) in &running {
                if !*rx.borrow() {
                    let _ = killpg(Pid::from_raw(*pgid), Signal::SIGKILL);
                }
            }
            let _ = wait(Duration::from_secs(5)).await;
        }
    }

    /// Forgets `pod`: kills what still runs, removes its runtime directories and, with
    /// `remove_logs` (the pod was deleted), its log files. Idempotent.
    ///
    /// # Errors
    /// [`Error`] when a container would not stop or a directory would not go.
    pub async fn remove_pod(&self, pod: &AdmittedPod, remove_logs: bool) -> Result<(), Error> {
        self.kill_pod(pod, Duration::ZERO).await?;
        self.inner.pods.lock().remove(pod.uid());
        let containers = self.inner.dirs.containers(pod.uid());
        remove_tree(&containers)?;
        if remove_logs {
            let logs = self.inner.dirs.pod_logs(
                pod.metadata.namespace.as_deref().unwrap_or_default(),
                pod.metadata.name.as_deref().unwrap_or_default(),
                pod.uid(),
            );
            remove_tree(&logs)?;
        }
        Ok(())
    }

    /// Removes the log directories of pods not in `known` (pods deleted after they finished).
    pub fn remove_logs_except(&self, known: &HashSet<PodUid>) {
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

    /// Kills the containers a previous run of the agent started and records them ended.
    fn recover(&self) {
        let Ok(pods) = fs::read_dir(self.inner.dirs.pods()) else {
            return;
        };
        for pod in pods.flatten() {
            let Ok(uid) = PodUid::new(pod.file_name().to_string_lossy().into_owned()) else {
                continue;
            };
            let Ok(containers) = fs::read_dir(self.inner.dirs.containers(&uid)) else {
                continue;
            };
            for container in containers.flatten() {
                let path = container.path().join(STATE_FILE);
                let Ok(bytes) = fs::read(&path) else {
                    continue;
                };
                let _ = fs::remove_file(&path);
                let Ok(state) = serde_json::from_slice::<StateFile>(&bytes) else {
                    continue;
                };
                let name = container.file_name().to_string_lossy().into_owned();
                let alive = state.pid > 0 && start_ticks(state.pid) == Some(state.start_ticks);
                let (reason, message) = if alive {
                    let _ = killpg(Pid::from_raw(state.pid), Signal::SIGKILL);
                    wait_gone(state.pid);
                    info!(pod.uid = %uid, container = %name, pid = state.pid,
                        "killed a container the agent's previous run started");
                    (
                        "Error",
                        "the agent restarted and stopped this container: it cannot follow a \
                         process its previous run started",
                    )
                } else {
                    (
                        "ContainerStatusUnknown",
                        "the container ended while the agent was not running; its exit code is \
                         unknown",
                    )
                };
                let mut record = Record::new();
                record.starts = state.starts;
                record.container_id = state.container_id;
                record.state = ContainerState::Terminated(Termination {
                    exit_code: 137,
                    signal: alive.then_some(9),
                    reason: reason.to_owned(),
                    message: Some(message.to_owned()),
                    started_at: state.started_at,
                    finished_at: SystemTime::now(),
                });
                self.inner
                    .pods
                    .lock()
                    .entry(uid.clone())
                    .or_default()
                    .insert(name, record);
            }
        }
    }
}

impl Record {
    fn state_is_running(&self) -> bool {
        matches!(self.state, ContainerState::Running { .. })
    }
}

async fn futures_join_all<F: std::future::Future<Output = ()>>(futures: Vec<F>) {
    for f in futures {
        f.await;
    }
}

/// Exit code and signal as the kubelet reports them (128 + signal for a signalled process).
fn exit_code(status: Option<ExitStatus>) -> (i32, Option<i32>) {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => (code, None),
            (None, Some(sig)) => (128 + sig, Some(sig)),
            (None, None) => (255, None),
        },
        None => (255, None),
    }
}

/// `10s`, `5m0s`: Go's duration text, as the kubelet's back-off message prints it.
fn go_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 60 {
        format!("{}m{}s", secs / 60, secs % 60)
    } else {
        format!("{secs}s")
    }
}

/// Field 22 of `/proc/<pid>/stat`: when the process started, in clock ticks since boot (with
/// the pid, it names one process even after the pid is reused).
fn start_ticks(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // After the name: field 3 (state) is index 0, so field 22 is index 19.
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// Waits (at most 5 s) until `pid` is gone or a zombie.
fn wait_gone(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if start_ticks(pid).is_none() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn bind_abstract(name: &str) -> io::Result<tokio::net::UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr)?;
    listener.set_nonblocking(true)?;
    tokio::net::UnixListener::from_std(listener)
}

fn make_private_dir(dir: &Path) -> Result<(), StartError> {
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => Ok(()),
        Err(source) => Err(StartError::Io {
            step: "creating directory",
            path: dir.to_path_buf(),
            source,
        }),
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), StartError> {
    use std::io::Write as _;
    let err = |source| StartError::Io {
        step: "writing",
        path: path.to_path_buf(),
        source,
    };
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    file.write_all(bytes).map_err(err)
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
