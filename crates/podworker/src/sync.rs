//! [`ConfigSyncer`]: the config side of the kubelet's SyncPod, SyncTerminatingPod and
//! SyncTerminatedPod (spec PW-4 … PW-7, PW-12 … PW-14).

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, Secret};
use nodelet_core::{AdmittedPod, EventType, PodDirs, PodUid};
use parking_lot::Mutex;
use tracing::{debug, warn};

use crate::env::{EnvOptions, EnvSources, resolve_env};
use crate::error::{SyncError, VolumeError};
use crate::runtime::RuntimeHook;
use crate::seams::{
    ContainerConfigState, ContainerConfigStatus, EventSink, PodConfigStatus, Readiness, StatusSink,
    Volumes, reasons,
};
use crate::workers::{PodSyncer, SyncOutcome, is_terminal};

/// Options of a [`ConfigSyncer`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SyncerConfig {
    /// The agent's root directory (`--root-dir`): pod directories live in `<root>/pods/<uid>`.
    pub root_dir: PathBuf,
    /// Environment resolution options.
    pub env: EnvOptions,
}

impl SyncerConfig {
    /// Defaults with `root_dir`.
    pub fn new(root_dir: &Path) -> Self {
        Self {
            root_dir: root_dir.to_path_buf(),
            env: EnvOptions::default(),
        }
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
/// 6. For every init and regular container the runtime has not created yet: resolve its
///    environment (PW-8 … PW-11) and hand it to the runtime hook; a resolution error → Warning
///    event `Failed` `Error: <text>` and the container waits with
///    `CreateContainerConfigError` (PW-12); the sync fails and is retried.
/// 7. Publish the pod's config status.
///
/// `sync_terminating_pod`: the runtime stops the containers, then the volume manager may tear
/// the volumes down (VM-13). `sync_terminated_pod`: wait for unmount, unregister from the
/// managers (PW-6, PW-14), remove the runtime's files and the empty pod directories, report the
/// pod terminated.
#[derive(Clone)]
pub struct ConfigSyncer {
    config: SyncerConfig,
    parts: SyncerParts,
    /// UIDs whose status was published at least once (the first sync publishes "volumes not
    /// ready" before waiting, as the kubelet's status manager does).
    published: Arc<Mutex<HashSet<PodUid>>>,
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
            config,
            parts,
            published: Arc::default(),
        }
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

    fn publish(&self, pod: &AdmittedPod, status: &PodConfigStatus) {
        self.published.lock().insert(pod.uid().clone());
        self.parts.status.set_status(pod, status);
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

impl PodSyncer for ConfigSyncer {
    fn pod_desired(&self, pod: &AdmittedPod) {
        // PW-4 / PW-13: registered before anything reads objects for it; again on every update
        // so that new references are picked up (PW-14).
        self.parts.sources.secrets.register_pod(pod);
        self.parts.sources.configmaps.register_pod(pod);
        // VM-4 / VM-5: the newest pod object is desired.
        self.parts.volumes.add_pod(pod);
    }

    async fn sync_pod(&self, pod: &AdmittedPod) -> Result<SyncOutcome, SyncError> {
        let uid = pod.uid();
        // (1)
        if is_terminal(pod) {
            return Ok(SyncOutcome::Terminal);
        }
        // (2) done by `pod_desired` when the update arrived.
        let mut status = PodConfigStatus {
            containers: pending_containers(pod),
            ..PodConfigStatus::default()
        };
        // (3)
        if let Err(e) = self.make_pod_dirs(uid) {
            self.event(
                pod,
                EventType::Warning,
                reasons::FAILED_TO_MAKE_POD_DATA_DIRECTORIES,
                format!("error making pod data directories: {e}"),
            );
            return Err(e);
        }
        // (4)
        if !self.published.lock().contains(uid) {
            let mut waiting = status.clone();
            waiting.volumes.message = Some("waiting for volumes to be mounted".to_owned());
            waiting.config.message = Some("waiting for volumes".to_owned());
            self.publish(pod, &waiting);
        }
        match self.parts.volumes.wait_for_attach_and_mount(pod).await {
            Ok(()) => status.volumes.ready = true,
            Err(VolumeError::Interrupted) => {
                return Err(SyncError::Mount {
                    error: VolumeError::Interrupted,
                });
            }
            Err(error) => {
                let err = SyncError::Mount { error };
                self.event(
                    pod,
                    EventType::Warning,
                    reasons::FAILED_MOUNT,
                    err.to_string(),
                );
                status.volumes.message = Some(err.to_string());
                status.config.message = Some("waiting for volumes".to_owned());
                self.publish(pod, &status);
                return Err(err);
            }
        }
        // (5)
        let pull_secrets = self.pull_secrets(pod).await;
        // (6)
        let created = self
            .parts
            .runtime
            .created_containers(pod)
            .await
            .map_err(|source| SyncError::Runtime { source })?;
        let mut failures = Vec::new();
        // fileKeyRef reads the pod's emptyDir volumes under its directory.
        let env_options = EnvOptions {
            pod_dir: Some(self.pod_dir(uid)),
            ..self.config.env.clone()
        };
        for ((container, _), entry) in containers(pod).into_iter().zip(&mut status.containers) {
            if created.contains(&container.name) {
                entry.state = ContainerConfigState::Created;
                continue;
            }
            match resolve_env(pod, container, &self.parts.sources, &env_options).await {
                Ok(env) => {
                    for (reason, message) in &env.warnings {
                        self.event(pod, EventType::Warning, reason, message.clone());
                    }
                    self.parts
                        .runtime
                        .create_container(pod, container, &env, &pull_secrets)
                        .await
                        .map_err(|source| SyncError::Runtime { source })?;
                    debug!(container = %container.name, vars = env.vars.len(), "container created");
                    self.event(
                        pod,
                        EventType::Normal,
                        reasons::CREATED,
                        format!("Created container {}", container.name),
                    );
                    entry.state = ContainerConfigState::Created;
                }
                Err(e) => {
                    self.event(
                        pod,
                        EventType::Warning,
                        reasons::FAILED,
                        format!("Error: {e}"),
                    );
                    entry.state = ContainerConfigState::Waiting {
                        reason: reasons::CREATE_CONTAINER_CONFIG_ERROR.to_owned(),
                        message: e.to_string(),
                    };
                    failures.push((container.name.clone(), e));
                }
            }
        }
        // (7)
        if failures.is_empty() {
            status.config = Readiness {
                ready: true,
                message: None,
            };
            self.publish(pod, &status);
            Ok(SyncOutcome::Running)
        } else {
            let err = SyncError::CreateContainerConfig { failures };
            status.config.message = Some(err.to_string());
            self.publish(pod, &status);
            Err(err)
        }
    }

    async fn sync_terminating_pod(
        &self,
        pod: &AdmittedPod,
        grace_period: Duration,
    ) -> Result<(), SyncError> {
        self.parts
            .runtime
            .kill_pod(pod, grace_period)
            .await
            .map_err(|source| SyncError::Runtime { source })?;
        self.parts.volumes.remove_pod(pod.uid());
        Ok(())
    }

    async fn sync_terminated_pod(&self, pod: &AdmittedPod) -> Result<(), SyncError> {
        let uid = pod.uid();
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
        if let Err(error) = remove_empty_tree(&dir) {
            // Something other than empty directories is left: leave it for an operator.
            warn!(path = %dir.display(), %error, "pod directory not removed");
        }
        self.published.lock().remove(uid);
        self.parts.status.terminated(pod);
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
