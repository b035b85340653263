//! [`ConfigSyncer`]: the config side of the kubelet's SyncPod, SyncTerminatingPod and
//! SyncTerminatedPod (spec PW-4 … PW-7, PW-12 … PW-14).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Container, Pod, Secret};
use nodelet_core::backoff::Schedule;
use nodelet_core::runtime::{ContainerLaunch, ContainerStatus, PodNetwork, PodSandbox};
use nodelet_core::{AdmittedPod, EventType, PodDirs, PodUid};
use nodelet_runtime::StartError;
use parking_lot::Mutex;
use tracing::{debug, warn};

use crate::deadline::{
    DEADLINE_EXCEEDED, DEADLINE_EXCEEDED_MESSAGE, deadline_eviction, past_active_deadline,
};
use crate::env::{ContainerEnv, EnvOptions, EnvSources, resolve_env};
use crate::env_context::EnvContext;
use crate::error::RuntimeError;
use crate::error::{SyncError, VolumeError};
use crate::hooks::Lifecycle;
use crate::phase::pod_phase;
use crate::plan::{PlanInput, Planner, PodActions};
use crate::probe::ProbeManager;
use crate::runtime::RuntimeHook;
use crate::seams::{
    ContainerConfigState, ContainerConfigStatus, EventSink, PodConfigStatus, Readiness, StatusSink,
    Volumes, reasons,
};
use crate::status::generate_pod_status;
use crate::workers::{PodSyncer, SyncOutcome, TerminatingPod, is_terminal};

/// The kubelet's managed hosts file, in the pod directory.
const HOSTS_FILE: &str = "etc-hosts";
/// The container's `/etc/hostname`, in the pod directory.
const HOSTNAME_FILE: &str = "etc-hostname";

/// Options of a [`ConfigSyncer`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SyncerConfig {
    /// The agent's root directory (`--root-dir`): pod directories live in `<root>/pods/<uid>`.
    pub root_dir: PathBuf,
    /// Environment resolution options.
    pub env: EnvOptions,
    /// The node's addresses. A pod whose sandbox is on the host's network has them as its
    /// IPs (`status.podIP(s)`, `/etc/hosts`).
    pub host_ips: Vec<String>,
    /// The crash back-off of containers that ended ([`Schedule::CRASH_LOOP`] by default).
    pub crash_backoff: Schedule,
}

impl SyncerConfig {
    /// Defaults with `root_dir`.
    pub fn new(root_dir: &Path) -> Self {
        Self {
            root_dir: root_dir.to_path_buf(),
            env: EnvOptions::default(),
            host_ips: Vec::new(),
            crash_backoff: Schedule::CRASH_LOOP,
        }
    }

    /// Sets [`crash_backoff`](Self::crash_backoff).
    #[must_use]
    pub fn with_crash_backoff(mut self, schedule: Schedule) -> Self {
        self.crash_backoff = schedule;
        self
    }

    /// What environment resolution needs of this configuration: a start and a check of a
    /// followed environment (FC-10) resolve with the same.
    pub fn env_context(&self) -> EnvContext {
        EnvContext {
            root_dir: self.root_dir.clone(),
            env: self.env.clone(),
            host_ips: self.host_ips.clone(),
        }
    }

    /// Sets [`host_ips`](Self::host_ips).
    #[must_use]
    pub fn with_host_ips(mut self, ips: Vec<String>) -> Self {
        self.host_ips = ips;
        self
    }

    /// Sets [`env`](Self::env).
    #[must_use]
    pub fn with_env(mut self, env: EnvOptions) -> Self {
        self.env = env;
        self
    }
}

/// The seams a [`ConfigSyncer`] drives.
#[derive(Clone)]
pub struct SyncerParts {
    /// The shared ConfigMap and Secret managers (PW-13).
    pub sources: EnvSources,
    /// The volume manager.
    pub volumes: Arc<dyn Volumes>,
    /// The runtime hook (default [`EnvFileRuntime`](crate::EnvFileRuntime)).
    pub runtime: Arc<dyn RuntimeHook>,
    /// Pod events.
    pub events: Arc<dyn EventSink>,
    /// Pod status.
    pub status: Arc<dyn StatusSink>,
    /// The prober, for a runtime that runs processes (none: no probes run, a running
    /// container is started and ready).
    pub probes: Option<ProbeManager>,
    /// Configuration that follows a change, with the process runtime (none: no pod gets the
    /// condition [`CONFIG_CURRENT_CONDITION`](crate::CONFIG_CURRENT_CONDITION), FC-20).
    pub follow: Option<crate::follow::FollowChange>,
    /// Environments that follow a change (FC-10 … FC-14): told of each container started,
    /// and the restarts it queued are made before the plan. None: nothing follows.
    pub env_follow: Option<crate::follow::EnvFollow>,
}

/// The config side of a kubelet's pod sync, as a [`PodSyncer`] for [`PodWorkers`](crate::PodWorkers).
///
/// `pod_desired` (called by [`PodWorkers::update_pod`](crate::PodWorkers::update_pod) for
/// every update of a live pod, before it returns): register the pod with the Secret manager,
/// then the ConfigMap manager (PW-4, PW-13: before anything reads objects for it; each update
/// registers again, so new references are picked up, PW-14), then
/// [`Volumes::add_pod`] (VM-4, VM-5: the newest pod object is desired). This is the only
/// registration and the only `add_pod` of a pod.
///
/// `sync_pod` steps, mirrored by `// (n)` markers; it registers nothing and adds nothing:
/// 1. A pod in a terminal phase (Succeeded, Failed) → [`SyncOutcome::Terminal`]; nothing is
///    mounted.
/// 2. (Registration and the desired state were done by `pod_desired`, before this sync was
///    queued.)
/// 3. Create `pods/<uid>`, `pods/<uid>/volumes`, `pods/<uid>/plugins` (0750); failure → event
///    `FailedToMakePodDataDirectories`.
/// 4. On the pod's first sync, publish a status saying volumes are not ready yet. Wait for its
///    volumes ([`Volumes::wait_for_attach_and_mount`]: the kubelet's `ReprocessPod` and wait,
///    VM-11); failure → Warning event `FailedMount` `Unable to attach or mount volumes: <err>`,
///    unless interrupted (PW-4).
/// 5. Image pull secrets (PW-7): missing ones → one Warning event
///    `FailedToRetrieveImagePullSecret`; never fatal.
/// 6. For every init, regular and ephemeral container the runtime has not created yet
///    (PW-57: ephemeral containers are started once, never again): resolve its
///    environment (PW-8 … PW-11) and hand it to the runtime hook; a resolution error → Warning
///    event `Failed` `Error: <text>` and the container waits with
///    `CreateContainerConfigError` (PW-12); the sync fails and is retried. The runtime's plan
///    is told which sidecar instances started (PW-60); sidecars it lists to stop (every app
///    container done, PW-63) are stopped first, as a pod's termination stops them (PW-62).
/// 7. Publish the pod's config status.
///
/// `sync_terminating_pod`: the runtime stops the containers (a `Killing` event for each one
/// running, their final states published), then the volume manager may tear the volumes down
/// (VM-13). `sync_terminated_pod`: wait for unmount, unregister from the managers (PW-6,
/// PW-14), remove the runtime's files and the empty pod directories, report the pod
/// terminated. A pod known only on disk ([`TerminatingPod::object`] is `None`) goes through
/// the same steps by its UID, without events and without status.
#[derive(Clone)]
pub struct ConfigSyncer {
    config: SyncerConfig,
    parts: SyncerParts,
    /// The last status published per pod, with the pod it was for: the first sync publishes
    /// "volumes not ready" before waiting, as the kubelet's status manager does, and a probe
    /// result change publishes it again with new readiness. Its lock orders publications.
    published: Arc<Mutex<HashMap<PodUid, Published>>>,
    /// What each sync does to the containers, and their crash back-offs.
    planner: Arc<Planner>,
}

impl std::fmt::Debug for ConfigSyncer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigSyncer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ConfigSyncer {
    /// A syncer with `config` driving `parts`.
    pub fn new(config: SyncerConfig, parts: SyncerParts) -> Self {
        Self {
            planner: Arc::new(Planner::new(config.crash_backoff)),
            config,
            parts,
            published: Arc::default(),
        }
    }

    /// Asks for the running `container` of pod `uid` to be stopped and started again by the
    /// pod's next sync, for a reason that is not a crash (PW-70: no crash back-off, whatever
    /// `restartPolicy` says); `message` is its `Killing` event's. The caller syncs the pod
    /// (through its [`PodWorkers`](crate::PodWorkers)). A container not running then is left
    /// alone: its next instance starts with what is current anyway.
    pub fn restart_container(&self, uid: &PodUid, container: &str, message: String) {
        self.planner.request_restart(uid, container, message);
    }

    /// The runtime's states of pod `uid`'s containers as the kubelet reports them: one held
    /// back by its crash back-off waits with `CrashLoopBackOff`.
    fn statuses(&self, uid: &PodUid) -> Vec<ContainerStatus> {
        let mut statuses = self.parts.runtime.statuses(uid);
        self.planner.show_waiting(uid, &mut statuses);
        statuses
    }

    /// `<root>/pods/<uid>`.
    pub fn pod_dir(&self, uid: &PodUid) -> PathBuf {
        PodDirs::new(&self.config.root_dir).pod(uid)
    }

    fn event(&self, pod: &AdmittedPod, type_: EventType, reason: &str, message: String) {
        self.parts.events.event(pod, type_, reason, message);
    }

    fn make_pod_dirs(&self, uid: &PodUid) -> Result<(), SyncError> {
        let dirs = PodDirs::new(&self.config.root_dir);
        for dir in [dirs.pod(uid), dirs.volumes(uid), dirs.plugins(uid)] {
            let err = |source| SyncError::MakePodDirectories {
                path: dir.clone(),
                source,
            };
            if dir.is_dir() {
                continue;
            }
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o750)
                .create(&dir)
                .map_err(err)?;
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o750)).map_err(err)?;
        }
        Ok(())
    }

    /// PW-7: the pull secrets that could be read, in order.
    async fn pull_secrets(&self, pod: &AdmittedPod) -> Vec<Arc<Secret>> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let mut found = Vec::new();
        let mut failed = Vec::new();
        let refs = pod
            .spec
            .as_ref()
            .and_then(|s| s.image_pull_secrets.as_ref());
        for r in refs.into_iter().flatten() {
            if r.name.is_empty() {
                continue;
            }
            match self.parts.sources.secrets.get(namespace, &r.name).await {
                Ok(secret) => found.push(secret),
                Err(error) => {
                    warn!(secret = %r.name, %error, "Unable to retrieve pull secret, the image pull may not succeed.");
                    failed.push(r.name.clone());
                }
            }
        }
        if !failed.is_empty() {
            self.event(
                pod,
                EventType::Warning,
                reasons::FAILED_TO_RETRIEVE_IMAGE_PULL_SECRET,
                format!(
                    "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                    failed.join(", ")
                ),
            );
        }
        found
    }

    /// `<pod dir>/etc-hosts` (the kubelet's managed hosts file, written once) and
    /// `<pod dir>/etc-hostname`.
    fn write_host_files(&self, pod: &AdmittedPod) -> Result<(), SyncError> {
        let dir = self.pod_dir(pod.uid());
        let hosts = dir.join(HOSTS_FILE);
        let (hostname, _) = crate::mounts::pod_hostname(pod);
        let write = |path: &Path, content: String| {
            if path.exists() {
                return Ok(());
            }
            fs::write(path, content).map_err(|source| SyncError::MakePodDirectories {
                path: path.to_path_buf(),
                source,
            })
        };
        let host_hosts = fs::read_to_string("/etc/hosts").unwrap_or_default();
        write(
            &hosts,
            crate::mounts::hosts_file_content(pod, &self.config.host_ips, &host_hosts),
        )?;
        write(&dir.join(HOSTNAME_FILE), format!("{hostname}\n"))
    }

    /// The mounts, expanded command line and host name of `container` (the kubelet's
    /// `makeMounts` and `ExpandContainerCommandAndArgs`).
    fn launch(
        &self,
        pod: &AdmittedPod,
        container: &Container,
        env: &crate::env::ContainerEnv,
    ) -> Result<ContainerLaunch, crate::mounts::MountError> {
        let dir = self.pod_dir(pod.uid());
        let hosts = crate::mounts::should_mount_hosts_file(pod, &self.config.host_ips)
            .then(|| dir.join(HOSTS_FILE));
        let volumes = self.parts.volumes.mounted_volumes(pod.uid());
        let mut mounts =
            crate::mounts::make_mounts(pod, container, &volumes, env, hosts.as_deref())?;
        if !mounts
            .iter()
            .any(|m| m.container_path == Path::new("/etc/hostname"))
        {
            mounts.push(nodelet_core::runtime::ContainerMount {
                host_path: dir.join(HOSTNAME_FILE),
                container_path: PathBuf::from("/etc/hostname"),
                read_only: false,
            });
        }
        let expand = |items: &Option<Vec<String>>| -> Vec<String> {
            items
                .iter()
                .flatten()
                .map(|item| {
                    let out = crate::expand::expand(item.as_bytes(), |name| {
                        env.vars
                            .iter()
                            .rev()
                            .find(|v| v.name == name)
                            .map(|v| v.value.clone())
                    });
                    String::from_utf8_lossy(&out).into_owned()
                })
                .collect()
        };
        let node_hostname = fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let hostname = crate::mounts::kernel_hostname(pod, node_hostname.trim())?;
        Ok(ContainerLaunch {
            command: expand(&container.command),
            args: expand(&container.args),
            has_command: container.command.as_ref().is_some_and(|c| !c.is_empty()),
            has_args: container.args.as_ref().is_some_and(|a| !a.is_empty()),
            mounts,
            hostname,
        })
    }

    /// The pod's addresses in `sandbox`: the node's, for a pod on the host's network; none
    /// without a sandbox.
    fn sandbox_ips(&self, sandbox: Option<PodSandbox>) -> Vec<String> {
        match sandbox.map(|s| s.network) {
            Some(PodNetwork::Host) => self.config.host_ips.clone(),
            None => Vec::new(),
        }
    }

    /// The addresses of pod `uid` as last published: non-empty once the runtime gave it a
    /// sandbox.
    fn published_ips(&self, uid: &PodUid) -> Vec<String> {
        self.published
            .lock()
            .get(uid)
            .map(|p| p.status.pod_ips.clone())
            .unwrap_or_default()
    }

    /// The lifecycle hook runner over this syncer's runtime and events.
    fn lifecycle(&self) -> Lifecycle {
        Lifecycle::new(
            self.parts.runtime.clone(),
            self.parts.events.clone(),
            self.config.host_ips.first().cloned(),
        )
    }

    /// Creates `container` of `pod` (step 6 for one container): its configuration
    /// ([`container_config`](Self::container_config)), then the runtime, with the kubelet's
    /// events. Returns the container's config state; a configuration error is added to
    /// `results.failures`, a container the runtime could not start to `results.not_started`.
    async fn create(
        &self,
        pod: &AdmittedPod,
        container: &Container,
        cx: &CreateContext<'_>,
        results: &mut StartResults,
    ) -> Result<ContainerConfigState, SyncError> {
        let (env, launch) = match self.container_config(pod, container, cx).await {
            Ok(config) => config,
            Err(message) => return Ok(self.config_failed(pod, container, message, results)),
        };
        let created = self
            .parts
            .runtime
            .create_container(pod, container, &env, &launch, cx.pull_secrets)
            .await;
        match created {
            Ok(()) => {
                debug!(container = %container.name, vars = env.vars.len(), "container created");
                if let Some(follow) = &self.parts.env_follow {
                    let statuses = self.parts.runtime.statuses(pod.uid());
                    let id = statuses.iter().find(|s| s.name == container.name);
                    let id = id.map(|s| s.container_id.as_str()).unwrap_or_default();
                    follow.started(pod, container, id, &env);
                }
                Ok(self
                    .container_started(pod, container, cx.sandbox.is_some(), results)
                    .await)
            }
            Err(RuntimeError::NotStarted {
                container: _,
                error,
            }) => self.not_started(pod, container, error, results),
            Err(source) => Err(SyncError::Runtime { source }),
        }
    }

    /// The environment of `container` and, in a sandbox, its launch (mounts, command line,
    /// host name); the error's text when either cannot be made (PW-12).
    async fn container_config(
        &self,
        pod: &AdmittedPod,
        container: &Container,
        cx: &CreateContext<'_>,
    ) -> Result<(ContainerEnv, ContainerLaunch), String> {
        let env = resolve_env(cx.env_pod, container, &self.parts.sources, cx.env_options)
            .await
            .map_err(|e| e.to_string())?;
        for (reason, message) in &env.warnings {
            self.event(pod, EventType::Warning, reason, message.clone());
        }
        if cx.sandbox.is_none() {
            return Ok((env, ContainerLaunch::default()));
        }
        let launch = self
            .launch(pod, container, &env)
            .map_err(|e| e.to_string())?;
        Ok((env, launch))
    }

    /// PW-12: `container`'s configuration failed with `message`: the `Failed` event, and the
    /// container waits with `CreateContainerConfigError`.
    fn config_failed(
        &self,
        pod: &AdmittedPod,
        container: &Container,
        message: String,
        results: &mut StartResults,
    ) -> ContainerConfigState {
        self.event(
            pod,
            EventType::Warning,
            reasons::FAILED,
            format!("Error: {message}"),
        );
        results
            .failures
            .push((container.name.clone(), message.clone()));
        ContainerConfigState::Waiting {
            reason: reasons::CREATE_CONTAINER_CONFIG_ERROR.to_owned(),
            message,
        }
    }

    /// The runtime took `container`: without a sandbox its configuration was written
    /// (`Created`); in one its process started (`Pulled`, `Created`, `Started`) and its
    /// `postStart` hook runs (PW-20: it counts as started once its hook ran).
    async fn container_started(
        &self,
        pod: &AdmittedPod,
        container: &Container,
        sandbox: bool,
        results: &mut StartResults,
    ) -> ContainerConfigState {
        let name = &container.name;
        if !sandbox {
            let message = format!("Created container {name}");
            self.event(pod, EventType::Normal, reasons::CREATED, message);
            return ContainerConfigState::Created;
        }
        let image = container.image.as_deref().unwrap_or_default();
        self.event(
            pod,
            EventType::Normal,
            reasons::PULLED,
            format!(
                "Container image {image:?} already present on machine and can be accessed by the pod"
            ),
        );
        let message = format!("Created container: {name}");
        self.event(pod, EventType::Normal, reasons::CREATED, message);
        let message = format!("Started container {name}");
        self.event(pod, EventType::Normal, reasons::STARTED, message);
        if let Err(message) = self.lifecycle().post_start(pod, container).await {
            results.not_started.push((name.clone(), message.clone()));
            return ContainerConfigState::Waiting {
                reason: crate::hooks::POST_START_HOOK_ERROR.to_owned(),
                message,
            };
        }
        ContainerConfigState::Created
    }

    /// The runtime did not start `container` (`error`, typed): its event, and the state it is
    /// left in; an error the runtime could not attribute to the container fails the sync.
    fn not_started(
        &self,
        pod: &AdmittedPod,
        container: &Container,
        error: StartError,
        results: &mut StartResults,
    ) -> Result<ContainerConfigState, SyncError> {
        let name = container.name.clone();
        let message = error.to_string();
        let waiting = |error: &StartError| ContainerConfigState::Waiting {
            reason: error.reason().to_owned(),
            message: message.clone(),
        };
        match error {
            StartError::Config { .. } => {
                let state = waiting(&error);
                let event = format!("Error: {message}");
                self.event(pod, EventType::Warning, reasons::FAILED, event);
                results.failures.push((name, message));
                Ok(state)
            }
            StartError::ImageNotMapped { .. } => {
                let state = waiting(&error);
                let reason = reasons::ERR_IMAGE_NEVER_PULL;
                self.event(pod, EventType::Warning, reason, message.clone());
                results.not_started.push((name, message));
                Ok(state)
            }
            // It ran and ended at once: the runtime shows it terminated.
            StartError::Start { .. } => {
                let event = format!("Error: {message}");
                self.event(pod, EventType::Warning, reasons::FAILED, event);
                results.not_started.push((name, message));
                Ok(ContainerConfigState::Created)
            }
            error => Err(SyncError::Runtime {
                source: RuntimeError::NotStarted {
                    container: name,
                    error,
                },
            }),
        }
    }

    /// (1b) PW-26: past its active deadline, the pod is failed (and then terminated).
    fn fail_past_deadline(&self, pod: &AdmittedPod) {
        self.event(
            pod,
            EventType::Normal,
            DEADLINE_EXCEEDED,
            DEADLINE_EXCEEDED_MESSAGE.to_owned(),
        );
        let ips = self.published_ips(pod.uid());
        self.publish(pod, &final_status(pod, ips));
    }

    /// (3) The pod's data directories; failure → event `FailedToMakePodDataDirectories`.
    fn prepare_pod_dirs(&self, pod: &AdmittedPod) -> Result<(), SyncError> {
        self.make_pod_dirs(pod.uid()).inspect_err(|e| {
            self.event(
                pod,
                EventType::Warning,
                reasons::FAILED_TO_MAKE_POD_DATA_DIRECTORIES,
                format!("error making pod data directories: {e}"),
            );
        })
    }

    /// (4) On the pod's first sync, a status saying volumes are not ready yet; then the wait
    /// for its volumes (VM-11): a failure is the `FailedMount` event and a published status,
    /// unless the volume manager shut down.
    async fn mount_volumes(
        &self,
        pod: &AdmittedPod,
        status: &mut PodConfigStatus,
    ) -> Result<(), SyncError> {
        if !self.published.lock().contains_key(pod.uid()) {
            let mut waiting = status.clone();
            waiting.volumes.message = Some("waiting for volumes to be mounted".to_owned());
            waiting.config.message = Some("waiting for volumes".to_owned());
            self.publish(pod, &waiting);
        }
        let error = match self.parts.volumes.wait_for_attach_and_mount(pod).await {
            Ok(()) => {
                status.volumes.ready = true;
                return Ok(());
            }
            Err(VolumeError::Interrupted) => {
                return Err(SyncError::Mount {
                    error: VolumeError::Interrupted,
                });
            }
            Err(error) => SyncError::Mount { error },
        };
        let message = error.to_string();
        self.event(
            pod,
            EventType::Warning,
            reasons::FAILED_MOUNT,
            message.clone(),
        );
        status.volumes.message = Some(message);
        status.config.message = Some("waiting for volumes".to_owned());
        self.publish(pod, status);
        Err(error)
    }

    /// (6, first half) The kubelet's side of SyncPod before containers start: containers
    /// whose liveness (or startup) probe failed are killed, the runtime makes the pod's
    /// sandbox (PW-41: `FailedCreatePodSandBox` when it cannot), the [`Planner`] decides (the
    /// kubelet's `computePodActions`, over the runtime's typed states); the sidecars it lists
    /// are stopped (PW-63), the containers it restarts stopped and the plan made again
    /// (PW-70); each container in back-off is a `BackOff` event.
    async fn compute_actions(&self, pod: &AdmittedPod) -> Result<Actions, SyncError> {
        if let Some(probes) = &self.parts.probes {
            probes.add_pod(pod);
            self.kill_failed_containers(pod, probes).await?;
        }
        self.restart_for_new_env(pod);
        let sandbox = self
            .parts
            .runtime
            .run_pod_sandbox(pod)
            .await
            .map_err(|source| {
                if let RuntimeError::Sandbox { message } = &source {
                    self.event(
                        pod,
                        EventType::Warning,
                        crate::admission::rejection_reasons::FAILED_CREATE_POD_SANDBOX,
                        format!("Failed to create pod sandbox: {message}"),
                    );
                }
                SyncError::Runtime { source }
            })?;
        let mut plan = self.plan(pod, sandbox);
        // PW-63: every app container ended for good: the sidecars stop as on termination.
        if !plan.stop.is_empty() {
            self.lifecycle()
                .stop_running(pod, crate::hooks::kill_grace(pod))
                .await
                .map_err(|source| SyncError::Runtime { source })?;
        }
        // PW-70: stopped now, started again by the plan made after.
        if !plan.restart.is_empty() {
            for restart in &plan.restart {
                let Some((container, _)) = containers(pod)
                    .into_iter()
                    .find(|(c, _)| c.name == restart.container)
                else {
                    continue;
                };
                self.lifecycle()
                    .kill_container(
                        pod,
                        container,
                        &restart.message,
                        crate::hooks::kill_grace(pod),
                    )
                    .await
                    .map_err(|source| SyncError::Runtime { source })?;
            }
            plan = self.plan(pod, sandbox);
        }
        for (name, _) in &plan.back_off {
            self.event(
                pod,
                EventType::Warning,
                reasons::BACK_OFF,
                format!(
                    "Back-off restarting failed container {name} in pod {}",
                    nodelet_runtime::format_pod(pod)
                ),
            );
        }
        Ok(Actions { sandbox, plan })
    }

    /// The planner's actions for `pod` now, over the runtime's states of its containers.
    fn plan(&self, pod: &AdmittedPod, sandbox: Option<PodSandbox>) -> PodActions {
        let statuses = self.parts.runtime.statuses(pod.uid());
        let started = self.started_sidecars(pod, &statuses);
        let input = PlanInput {
            statuses: &statuses,
            started: &started,
            sandbox: sandbox.is_some(),
        };
        self.planner.plan(pod, &input)
    }

    /// (6, second half) Every init, regular and ephemeral container the plan starts is
    /// created ([`create`](Self::create)); the others keep their state. In a sandbox, the
    /// pod's host files are written first and its addresses known to the environment. When a
    /// container just created has already completed (an init container of a runtime without
    /// processes, or one that ran to its end meanwhile), the plan is made again and what it
    /// starts now is created in this sync too.
    async fn start_containers(
        &self,
        pod: &AdmittedPod,
        actions: &Actions,
        pull_secrets: &[Arc<Secret>],
        status: &mut PodConfigStatus,
    ) -> Result<StartResults, SyncError> {
        let sandbox = actions.sandbox;
        status.pod_ips = self.sandbox_ips(sandbox);
        if sandbox.is_some() {
            self.write_host_files(pod)?;
        }
        let (env_pod, env_options) = self.config.env_context().resolve(pod, sandbox.is_some());
        let cx = CreateContext {
            env_pod: &env_pod,
            env_options: &env_options,
            sandbox,
            pull_secrets,
        };
        let mut results = StartResults::default();
        // PW-57: ephemeral containers, which the runtime starts once and never again.
        let ephemeral = crate::ephemeral::containers(pod);
        let all: Vec<&Container> = containers(pod)
            .into_iter()
            .map(|(c, _)| c)
            .chain(ephemeral.iter())
            .collect();
        let mut created: Vec<String> = Vec::new();
        let mut start = actions.plan.start.clone();
        // At most one round per container, each starting at least one more.
        for _ in 0..=all.len() {
            let entries = status.containers.iter_mut().chain(&mut status.ephemeral);
            let mut round = Vec::new();
            for (container, entry) in all.iter().zip(entries) {
                if created.contains(&container.name) {
                    continue;
                }
                entry.state = if start.contains(&container.name) {
                    round.push(container.name.clone());
                    self.create(pod, container, &cx, &mut results).await?
                } else {
                    ContainerConfigState::Created
                };
            }
            created.extend(round.iter().cloned());
            if round.is_empty() || !results.is_clean() || !self.any_completed(pod, &round) {
                break;
            }
            start = self.plan(pod, sandbox).start;
        }
        Ok(results)
    }

    /// Whether one of `names`, containers of `pod` just created, has already completed.
    fn any_completed(&self, pod: &AdmittedPod, names: &[String]) -> bool {
        self.parts
            .runtime
            .statuses(pod.uid())
            .iter()
            .filter(|s| names.contains(&s.name))
            .any(|s| s.terminated().is_some_and(|t| t.exit_code == 0))
    }

    /// (7) Publishes the pod's status after its containers were handled: `Terminal` when the
    /// runtime's states make the phase terminal; a configuration or start failure fails the
    /// sync (retried).
    fn finish_sync(
        &self,
        pod: &AdmittedPod,
        mut status: PodConfigStatus,
        results: StartResults,
    ) -> Result<SyncOutcome, SyncError> {
        let terminal = pod_phase(pod, &self.statuses(pod.uid())).is_terminal();
        if results.failures.is_empty() {
            status.config = Readiness {
                ready: true,
                message: None,
            };
        }
        self.publish(pod, &status);
        if terminal {
            return Ok(SyncOutcome::Terminal);
        }
        if !results.failures.is_empty() {
            let err = SyncError::CreateContainerConfig {
                failures: results.failures,
            };
            status.config.message = Some(err.to_string());
            self.publish(pod, &status);
            return Err(err);
        }
        if !results.not_started.is_empty() {
            return Err(SyncError::StartContainers {
                failures: results.not_started,
            });
        }
        Ok(SyncOutcome::Running)
    }

    /// Publishes `status` of `pod`, with the probes' view of its containers (PW-33).
    fn publish(&self, pod: &AdmittedPod, status: &PodConfigStatus) {
        let mut published = self.published.lock();
        self.publish_locked(&mut published, pod, status.clone());
    }

    /// Publishes under the lock of `published`: one publication at a time, so the newest
    /// readiness is always the one published last. The runtime's container states and the
    /// probes' verdicts are read now, so every publication carries the newest.
    fn publish_locked(
        &self,
        published: &mut HashMap<PodUid, Published>,
        pod: &AdmittedPod,
        mut status: PodConfigStatus,
    ) {
        status.statuses = self.statuses(pod.uid());
        if let Some(probes) = &self.parts.probes {
            status.probes = probes.container_states(pod, &status.statuses);
        }
        // FC-20: what the running containers see, for a pod that follows changes.
        status.freshness = self
            .parts
            .follow
            .as_ref()
            .filter(|f| f.settings(pod).any())
            .map(|f| f.freshness(pod, &self.parts.volumes.volume_snapshot(pod.uid())));
        let start_time = published
            .get(pod.uid())
            .map_or_else(SystemTime::now, |p| p.start_time);
        let api = generate_pod_status(pod, &status, start_time);
        self.parts.status.set_status(pod, &api);
        published.insert(
            pod.uid().clone(),
            Published {
                pod: pod.clone(),
                status,
                start_time,
            },
        );
    }

    /// A probe result of pod `uid` changed ([`ProbeManager::updates`]): its last status is
    /// published again with the runtime's current view and the probes' new `started` and
    /// `ready` (the kubelet's status manager does this at once, whatever its pod worker is
    /// doing: a readiness change reaches the API also while the pod's containers are being
    /// stopped). Nothing for a pod never published or already terminated.
    pub fn probe_result_changed(&self, uid: &PodUid) {
        self.publish_again(uid);
    }

    /// What the running containers of pod `uid` see of their configuration may have changed
    /// (an object it reads changed, a volume was written, FC-20): its last status is published
    /// again with the freshness of now, at once, as for a probe result. Nothing for a pod never
    /// published or already terminated.
    pub fn config_seen_changed(&self, uid: &PodUid) {
        self.publish_again(uid);
    }

    /// Publishes the last status of pod `uid` again with the runtime's, the probes' and the
    /// freshness' view of now.
    fn publish_again(&self, uid: &PodUid) {
        let mut published = self.published.lock();
        let Some(Published { pod, status, .. }) = published.get(uid).cloned() else {
            return;
        };
        self.publish_locked(&mut published, &pod, status);
    }

    /// The container IDs of `pod`'s running sidecar instances that have started (PW-60),
    /// among `statuses`: as the prober says, or, without one, every running sidecar.
    fn started_sidecars(&self, pod: &AdmittedPod, statuses: &[ContainerStatus]) -> Vec<String> {
        if let Some(probes) = &self.parts.probes {
            return probes.started_sidecars(pod, statuses);
        }
        pod.spec
            .iter()
            .flat_map(|s| s.init_containers.iter().flatten())
            .filter(|c| nodelet_core::runtime::is_sidecar(c))
            .filter_map(|c| statuses.iter().find(|s| s.name == c.name && s.is_running()))
            .map(|s| s.container_id.clone())
            .collect()
    }

    /// FC-12: each running container whose environment changed is asked of the planner as
    /// a restart that is not a crash (PW-70: `Killing` naming the objects and keys, `preStop`,
    /// SIGTERM, the grace period, then started again at once); the runtime marks the instance
    /// so that its end shows `ConfigChanged`.
    fn restart_for_new_env(&self, pod: &AdmittedPod) {
        let Some(follow) = &self.parts.env_follow else {
            return;
        };
        let statuses = self.parts.runtime.statuses(pod.uid());
        for restart in follow.take_restarts(pod, &statuses) {
            let runtime = &self.parts.runtime;
            if runtime.restart_for_new_env(pod.uid(), &restart.container, &restart.container_id) {
                let (uid, name) = (pod.uid(), &restart.container);
                self.planner.request_restart(uid, name, restart.message);
            }
        }
    }

    /// PW-34: kills each running container whose liveness (or startup) probe failed, as the
    /// kubelet kills it (`Killing` with the probe's text, its `preStop` hook, SIGTERM, SIGKILL
    /// after the grace period); the plan then restarts it as `restartPolicy` and the crash
    /// back-off say.
    async fn kill_failed_containers(
        &self,
        pod: &AdmittedPod,
        probes: &ProbeManager,
    ) -> Result<(), SyncError> {
        let statuses = self.statuses(pod.uid());
        for kill in probes.kills(pod, &statuses) {
            let Some((container, _)) = containers(pod)
                .into_iter()
                .find(|(c, _)| c.name == kill.container)
            else {
                continue;
            };
            self.lifecycle()
                .kill_container(pod, container, &kill.message, kill.grace_period)
                .await
                .map_err(|source| SyncError::Runtime { source })?;
        }
        Ok(())
    }
}

/// The last status published for a pod ([`ConfigSyncer::publish`]).
#[derive(Clone)]
struct Published {
    /// The pod object it was for.
    pod: AdmittedPod,
    /// What the sync knew.
    status: PodConfigStatus,
    /// When the pod was first published (`status.startTime`).
    start_time: SystemTime,
}

/// What step 6 decided: the pod's sandbox and the actions on its containers.
struct Actions {
    /// The runtime's sandbox of the pod (`None`: a runtime without sandboxes).
    sandbox: Option<PodSandbox>,
    /// What to start now.
    plan: PodActions,
}

/// What one sync hands every container it creates ([`ConfigSyncer::create`]).
struct CreateContext<'a> {
    /// The pod as environment resolution sees it (its IPs filled in in a sandbox).
    env_pod: &'a Arc<Pod>,
    env_options: &'a EnvOptions,
    /// The pod's sandbox: launches are computed and the events are a CRI runtime's; `None`
    /// for a runtime without sandboxes.
    sandbox: Option<PodSandbox>,
    pull_secrets: &'a [Arc<Secret>],
}

/// What the containers one sync created came to (step 6).
#[derive(Default)]
struct StartResults {
    /// Configuration errors (PW-12), by container.
    failures: Vec<(String, String)>,
    /// Containers the runtime did not start, by container.
    not_started: Vec<(String, String)>,
}

impl StartResults {
    /// Whether every container was created and started.
    fn is_clean(&self) -> bool {
        self.failures.is_empty() && self.not_started.is_empty()
    }
}

fn containers(pod: &Pod) -> Vec<(&Container, bool)> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.init_containers
        .iter()
        .flatten()
        .map(|c| (c, true))
        .chain(spec.containers.iter().map(|c| (c, false)))
        .collect()
}

/// The status of a pod whose containers are stopping or stopped (their runtime states are
/// read when it is published; `pod_ips` the pod's addresses), and `Failed` with the node's
/// reason when the pod is past its active deadline (PW-26).
fn final_status(pod: &AdmittedPod, pod_ips: Vec<String>) -> PodConfigStatus {
    let mut status = PodConfigStatus {
        containers: pending_containers(pod),
        ephemeral: pending_ephemeral(pod),
        ..PodConfigStatus::default()
    };
    for c in status.containers.iter_mut().chain(&mut status.ephemeral) {
        c.state = ContainerConfigState::Created;
    }
    status.volumes.ready = true;
    status.config.ready = true;
    status.pod_ips = pod_ips;
    if past_active_deadline(pod, SystemTime::now()) {
        status.eviction = Some(deadline_eviction());
    }
    status
}

fn pending_containers(pod: &Pod) -> Vec<ContainerConfigStatus> {
    containers(pod)
        .into_iter()
        .map(|(c, init)| ContainerConfigStatus {
            name: c.name.clone(),
            init,
            state: ContainerConfigState::Pending,
        })
        .collect()
}

/// The config statuses of `pod`'s ephemeral containers before anything was attempted.
fn pending_ephemeral(pod: &Pod) -> Vec<ContainerConfigStatus> {
    pod.spec
        .iter()
        .flat_map(|s| s.ephemeral_containers.iter().flatten())
        .map(|c| ContainerConfigStatus {
            name: c.name.clone(),
            init: false,
            state: ContainerConfigState::Pending,
        })
        .collect()
}

impl PodSyncer for ConfigSyncer {
    fn next_sync(&self, uid: &PodUid) -> Option<tokio::time::Instant> {
        self.planner.next_sync(uid)
    }

    fn pod_desired(&self, pod: &AdmittedPod) {
        // PW-4 / PW-13: registered before anything reads objects for it; again on every update
        // so that new references are picked up (PW-14).
        self.parts.sources.secrets.register_pod(pod);
        self.parts.sources.configmaps.register_pod(pod);
        // VM-4 / VM-5: the newest pod object is desired.
        self.parts.volumes.add_pod(pod);
    }

    async fn sync_pod(&self, pod: &AdmittedPod) -> Result<SyncOutcome, SyncError> {
        // (1)
        if is_terminal(pod) {
            return Ok(SyncOutcome::Terminal);
        }
        // (1b) PW-26: past its active deadline, the pod is failed and terminated.
        if past_active_deadline(pod, SystemTime::now()) {
            self.fail_past_deadline(pod);
            return Ok(SyncOutcome::Terminal);
        }
        // (2) done by `pod_desired` when the update arrived.
        let mut status = PodConfigStatus {
            containers: pending_containers(pod),
            ephemeral: pending_ephemeral(pod),
            ..PodConfigStatus::default()
        };
        // (3)
        self.prepare_pod_dirs(pod)?;
        // (4)
        self.mount_volumes(pod, &mut status).await?;
        // (5)
        let pull_secrets = self.pull_secrets(pod).await;
        // (6)
        let actions = self.compute_actions(pod).await?;
        let results = self
            .start_containers(pod, &actions, &pull_secrets, &mut status)
            .await?;
        // (7)
        self.finish_sync(pod, status, results)
    }

    async fn sync_terminating_pod(
        &self,
        pod: TerminatingPod<'_>,
        grace_period: Duration,
    ) -> Result<(), SyncError> {
        let uid = pod.uid();
        // PW-34: nothing kills a container of a pod that is stopping; readiness goes on.
        if let Some(probes) = &self.parts.probes {
            probes.stop_liveness_and_startup(uid);
        }
        // A pod known only on disk has no object to report on: no events, no status.
        let object = pod.object();
        if let Some(object) = object {
            // PW-21, PW-22: each running container gets its `Killing` event, its preStop
            // hook and its grace period.
            self.lifecycle()
                .stop_running(object, grace_period)
                .await
                .map_err(|source| SyncError::Runtime { source })?;
        }
        // Whatever still runs (a pod known only on disk: all of it) stops here.
        self.parts
            .runtime
            .kill_pod(uid, grace_period)
            .await
            .map_err(|source| SyncError::Runtime { source })?;
        let ips = self.published_ips(uid);
        if let Some(pod) = object.filter(|_| !ips.is_empty()) {
            // A pod in a sandbox: its containers' final states (exit codes after the kill)
            // reach the API.
            self.publish(pod, &final_status(pod, ips));
        }
        self.parts.volumes.remove_pod(uid);
        Ok(())
    }

    async fn sync_terminated_pod(&self, pod: TerminatingPod<'_>) -> Result<(), SyncError> {
        let uid = pod.uid();
        if let Some(probes) = &self.parts.probes {
            probes.remove_pod(uid);
        }
        self.parts.volumes.remove_pod(uid);
        self.parts
            .volumes
            .wait_for_unmount(uid)
            .await
            .map_err(|error| SyncError::Unmount { error })?;
        // PW-6 / PW-14: only now, with the volumes gone.
        self.parts.sources.secrets.unregister_pod(uid);
        self.parts.sources.configmaps.unregister_pod(uid);
        self.parts
            .runtime
            .remove_pod(pod)
            .await
            .map_err(|source| SyncError::Runtime { source })?;
        let dir = self.pod_dir(uid);
        for file in [HOSTS_FILE, HOSTNAME_FILE] {
            match fs::remove_file(dir.join(file)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(error) => {
                    warn!(path = %dir.join(file).display(), %error, "pod file not removed")
                }
            }
        }
        if let Err(error) = remove_empty_tree(&dir) {
            // Something other than empty directories is left: leave it for an operator.
            warn!(path = %dir.display(), %error, "pod directory not removed");
        }
        self.published.lock().remove(uid);
        self.planner.forget(uid);
        if let Some(object) = pod.object() {
            self.parts.status.terminated(object);
        }
        Ok(())
    }
}

/// Removes `dir` if it holds nothing but (recursively) empty directories.
fn remove_empty_tree(dir: &Path) -> io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            remove_empty_tree(&entry.path())?;
        }
    }
    fs::remove_dir(dir)
}
