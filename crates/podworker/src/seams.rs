//! The seams of the config syncer: [`Volumes`] (the volume manager, implemented here for
//! [`VolumeManager`]), [`EventSink`] (Kubernetes Events), [`StatusSink`] (pod status, both
//! from `nodelet-core`) and what a sync knows of a pod ([`PodConfigStatus`]), with fakes for
//! tests.

use std::collections::BTreeMap;
use std::path::PathBuf;

use async_trait::async_trait;
use nodelet_core::{AdmittedPod, PodUid};
use nodelet_volume_manager::{Error as VolumeManagerError, VolumeManager, WaitCause};

use crate::error::VolumeError;

/// The event seam is the volume manager's: one trait for the whole agent, which implements it
/// once for both crates. Implementations must not block (queue and return).
pub use nodelet_core::events::{EventSink, NoEvents};
/// The status seam, in `nodelet-core` beside the event seam.
pub use nodelet_core::status::{NoStatus, StatusSink};

/// The volume manager as the pod worker sees it (spec VM-11, VM-12, VM-13): [`VolumeManager`]
/// in production, `FakeVolumes` (feature `test-util`) in tests.
#[async_trait]
pub trait Volumes: Send + Sync + 'static {
    /// Put `pod` (its newest object) in the desired state of the world (VM-4, VM-5).
    /// Idempotent, non-blocking. Called only by
    /// [`ConfigSyncer`](crate::ConfigSyncer)'s [`pod_desired`](crate::PodSyncer::pod_desired),
    /// which [`PodWorkers::update_pod`](crate::PodWorkers::update_pod) calls for each update of
    /// a live pod: the one place a pod becomes desired.
    fn add_pod(&self, pod: &AdmittedPod);

    /// Termination of pod `uid` was requested and its containers are stopped: its volumes may
    /// be torn down. Idempotent, non-blocking.
    fn remove_pod(&self, uid: &PodUid);

    /// Wait until every volume `pod` uses is mounted (VM-11). Like the kubelet's
    /// `WaitForAttachAndMount` it first reprocesses the pod (its mounted volumes are remounted
    /// so pod and object changes reach them, its failed volumes are retried) but never adds a
    /// pod: `pod` was made desired by [`add_pod`](Self::add_pod) before this sync was queued.
    ///
    /// # Errors
    /// [`VolumeError::Failed`] with the volume manager's error (also for a pod that is not in
    /// the desired state), or [`VolumeError::Interrupted`] (the volume manager shut down).
    async fn wait_for_attach_and_mount(&self, pod: &AdmittedPod) -> Result<(), VolumeError>;

    /// The mounted volumes of pod `uid` by name, each with the path a container mounts (the
    /// kubelet's `GetMountedVolumesForPod`, VM-7): what `make_mounts` binds.
    fn mounted_volumes(&self, uid: &PodUid) -> BTreeMap<String, PathBuf>;

    /// What the volume manager knows of each volume of pod `uid` now (its directory, the
    /// objects of its last SetUp, a pending remount): what the freshness a pod status shows is
    /// computed from (FC-20). Empty for a pod not desired.
    fn volume_snapshot(&self, uid: &PodUid) -> Vec<nodelet_volume_manager::VolumeSnapshot>;

    /// Wait until no volume of pod `uid` is mounted any more (VM-12).
    ///
    /// # Errors
    /// As [`wait_for_attach_and_mount`](Self::wait_for_attach_and_mount).
    async fn wait_for_unmount(&self, uid: &PodUid) -> Result<(), VolumeError>;
}

/// The volume manager itself is the production [`Volumes`]. A wait that ends because the
/// manager shut down is an interruption (no event); a time-out is a failure with the kubelet's
/// text, so the `FailedMount` summary event is emitted (the older kubelets' behaviour).
#[async_trait]
impl Volumes for VolumeManager {
    fn add_pod(&self, pod: &AdmittedPod) {
        VolumeManager::add_pod(self, pod);
    }

    fn remove_pod(&self, uid: &PodUid) {
        VolumeManager::remove_pod(self, uid);
    }

    async fn wait_for_attach_and_mount(&self, pod: &AdmittedPod) -> Result<(), VolumeError> {
        VolumeManager::wait_for_attach_and_mount(self, pod)
            .await
            .map_err(volume_error)
    }

    fn mounted_volumes(&self, uid: &PodUid) -> BTreeMap<String, PathBuf> {
        VolumeManager::mounted_volumes(self, uid)
    }

    fn volume_snapshot(&self, uid: &PodUid) -> Vec<nodelet_volume_manager::VolumeSnapshot> {
        VolumeManager::pod_snapshot(self, uid)
    }

    async fn wait_for_unmount(&self, uid: &PodUid) -> Result<(), VolumeError> {
        VolumeManager::wait_for_unmount(self, uid)
            .await
            .map_err(volume_error)
    }
}

/// A shut-down manager interrupts the wait; every other error is kept as it is.
fn volume_error(err: VolumeManagerError) -> VolumeError {
    match &err {
        VolumeManagerError::VolumesNotMounted {
            cause: WaitCause::ShutDown,
            ..
        }
        | VolumeManagerError::VolumesStillMounted {
            cause: WaitCause::ShutDown,
            ..
        } => VolumeError::Interrupted,
        _ => VolumeError::Failed(err),
    }
}

/// Event reasons the config syncer emits, with the kubelet's spelling.
pub mod reasons {
    /// PW-4: `Unable to attach or mount volumes: <err>`.
    pub const FAILED_MOUNT: &str = "FailedMount";
    /// PW-4: creating the pod's data directories failed.
    pub const FAILED_TO_MAKE_POD_DATA_DIRECTORIES: &str = "FailedToMakePodDataDirectories";
    /// PW-7: some image pull secrets could not be read.
    pub const FAILED_TO_RETRIEVE_IMAGE_PULL_SECRET: &str = "FailedToRetrieveImagePullSecret";
    /// PW-12: `Error: <text>` when a container's config could not be generated.
    pub const FAILED: &str = "Failed";
    /// A container was created (its environment written).
    pub const CREATED: &str = "Created";
    /// PW-12: the waiting reason of a container whose config failed.
    pub const CREATE_CONTAINER_CONFIG_ERROR: &str = "CreateContainerConfigError";
    /// The container's image is present (process runtime: mapped to a local program).
    pub const PULLED: &str = "Pulled";
    /// A container's process started.
    pub const STARTED: &str = "Started";
    /// A container is being stopped.
    pub const KILLING: &str = "Killing";
    /// A crashed container waits for its back-off to pass.
    pub const BACK_OFF: &str = "BackOff";
    /// The image is absent and will not be pulled (process runtime: not in the image table).
    pub const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
}

/// Whether one part of a pod's configuration is ready, and why not.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Readiness {
    /// Ready.
    pub ready: bool,
    /// Why not (the error text), if not ready.
    pub message: Option<String>,
}

/// The state of one container as far as configuration goes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContainerConfigState {
    /// Not attempted yet (volumes not mounted).
    Pending,
    /// Configuration resolved and handed to the runtime hook.
    Created,
    /// Waiting with a reason (`CreateContainerConfigError`) and the error text.
    Waiting {
        /// The waiting reason.
        reason: String,
        /// The error text.
        message: String,
    },
}

/// One container's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerConfigStatus {
    /// The container's name.
    pub name: String,
    /// Whether it is an init container.
    pub init: bool,
    /// Its state.
    pub state: ContainerConfigState,
}

/// What the config syncer knows about a pod after a sync: the input of
/// [`generate_pod_status`](crate::generate_pod_status).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodConfigStatus {
    /// Every volume is mounted (`PodReadyToStartContainers`).
    pub volumes: Readiness,
    /// Every container's environment and the pull secrets resolved.
    pub config: Readiness,
    /// Per container, init containers first.
    pub containers: Vec<ContainerConfigStatus>,
    /// Per ephemeral container, in the pod's order (PW-57).
    pub ephemeral: Vec<ContainerConfigStatus>,
    /// The runtime's states of the pod's containers, init containers first (containers it
    /// never created are absent).
    pub statuses: Vec<nodelet_core::runtime::ContainerStatus>,
    /// `started` and `ready` of the regular containers in `statuses`, as their probes make
    /// them (PW-33); empty without a prober (a running container is then started and ready).
    pub probes: Vec<crate::ContainerProbeStatus>,
    /// The pod's addresses, once the runtime gave it a sandbox (on the host's network: the
    /// node's); empty before, and for a runtime without sandboxes.
    pub pod_ips: Vec<String>,
    /// The node fails the pod (`activeDeadlineSeconds` passed, PW-26): phase `Failed` with
    /// this reason and message, whatever the containers say.
    pub eviction: Option<crate::PodEviction>,
    /// What each running container sees of the configuration it reads (FC-8), for a pod that
    /// asks for a follow behaviour (FC-1, FC-2): the condition
    /// [`CONFIG_CURRENT_CONDITION`](crate::CONFIG_CURRENT_CONDITION) (FC-20). `None` for any
    /// other pod, which gets no such condition.
    pub freshness: Option<Vec<crate::follow::ContainerFreshness>>,
}

#[cfg(any(test, feature = "test-util"))]
pub use fakes::{FakeVolumes, RecordedEvent, RecordingEvents, RecordingStatus};

#[cfg(any(test, feature = "test-util"))]
mod fakes {
    use std::collections::{BTreeMap, BTreeSet, VecDeque};
    use std::sync::{Arc, Mutex};

    use async_trait::async_trait;
    use nodelet_core::{AdmittedPod, EventType, PodUid};
    use nodelet_volume_manager::Error as VolumeManagerError;
    use tokio::sync::watch;

    use k8s_openapi::api::core::v1::PodStatus;

    use super::{EventSink, StatusSink, Volumes};
    use crate::error::VolumeError;

    /// A [`Volumes`] fake: mounts succeed unless failures are queued; records calls. Like the
    /// volume manager, a wait for a pod that is not desired fails at once.
    #[derive(Debug, Clone, Default)]
    pub struct FakeVolumes {
        state: Arc<Mutex<FakeVolumesState>>,
    }

    #[derive(Debug, Default)]
    struct FakeVolumesState {
        desired: BTreeSet<String>,
        mount_failures: VecDeque<VolumeManagerError>,
        calls: Vec<String>,
    }

    impl FakeVolumes {
        /// A fake where every wait succeeds.
        pub fn new() -> Self {
            Self::default()
        }
        /// The next `wait_for_attach_and_mount` fails with `error`.
        pub fn fail_next_mount(&self, error: VolumeManagerError) {
            if let Ok(mut s) = self.state.lock() {
                s.mount_failures.push_back(error);
            }
        }
        /// UIDs in the desired state.
        pub fn desired(&self) -> BTreeSet<String> {
            self.state
                .lock()
                .map(|s| s.desired.clone())
                .unwrap_or_default()
        }
        /// Every call, as `"<method> <uid>"`, oldest first.
        pub fn calls(&self) -> Vec<String> {
            self.state
                .lock()
                .map(|s| s.calls.clone())
                .unwrap_or_default()
        }
        /// How many calls of `method` (`"add"`, `"mount"`, `"remove"`, `"unmount"`) so far.
        pub fn count(&self, method: &str) -> usize {
            self.calls()
                .iter()
                .filter(|c| c.split(' ').next() == Some(method))
                .count()
        }
        fn record(&self, call: &str, uid: &str) {
            if let Ok(mut s) = self.state.lock() {
                s.calls.push(format!("{call} {uid}"));
            }
        }
    }

    #[async_trait]
    impl Volumes for FakeVolumes {
        fn add_pod(&self, pod: &AdmittedPod) {
            let uid = pod.uid().to_string();
            self.record("add", &uid);
            if let Ok(mut s) = self.state.lock() {
                s.desired.insert(uid);
            }
        }
        fn remove_pod(&self, uid: &PodUid) {
            self.record("remove", uid.as_str());
            if let Ok(mut s) = self.state.lock() {
                s.desired.remove(uid.as_str());
            }
        }
        async fn wait_for_attach_and_mount(&self, pod: &AdmittedPod) -> Result<(), VolumeError> {
            let uid = pod.uid();
            self.record("mount", uid.as_str());
            let failure = self.state.lock().ok().and_then(|mut s| {
                if s.desired.contains(uid.as_str()) {
                    s.mount_failures.pop_front()
                } else {
                    Some(VolumeManagerError::PodNotDesired {
                        pod: pod.to_string(),
                        uid: uid.clone(),
                    })
                }
            });
            match failure {
                Some(error) => Err(VolumeError::Failed(error)),
                None => Ok(()),
            }
        }
        /// None: the fake mounts nothing on disk.
        fn mounted_volumes(&self, _uid: &PodUid) -> BTreeMap<String, std::path::PathBuf> {
            BTreeMap::new()
        }
        /// None: the fake mounts nothing.
        fn volume_snapshot(&self, _uid: &PodUid) -> Vec<nodelet_volume_manager::VolumeSnapshot> {
            Vec::new()
        }
        async fn wait_for_unmount(&self, uid: &PodUid) -> Result<(), VolumeError> {
            self.record("unmount", uid.as_str());
            Ok(())
        }
    }

    /// One event seen by [`RecordingEvents`].
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct RecordedEvent {
        /// The pod's UID.
        pub pod_uid: String,
        /// Normal or Warning.
        pub type_: EventType,
        /// The reason.
        pub reason: String,
        /// The message.
        pub message: String,
    }

    /// An [`EventSink`] that records events.
    #[derive(Debug, Clone, Default)]
    pub struct RecordingEvents {
        events: Arc<Mutex<Vec<RecordedEvent>>>,
    }

    impl RecordingEvents {
        /// An empty recorder.
        pub fn new() -> Self {
            Self::default()
        }
        /// Every event so far.
        pub fn events(&self) -> Vec<RecordedEvent> {
            self.events.lock().map(|e| e.clone()).unwrap_or_default()
        }
        /// `(reason, message)` of every event so far.
        pub fn reasons_and_messages(&self) -> Vec<(String, String)> {
            self.events()
                .into_iter()
                .map(|e| (e.reason, e.message))
                .collect()
        }
    }

    impl EventSink for RecordingEvents {
        fn event(&self, pod: &AdmittedPod, type_: EventType, reason: &str, message: String) {
            if let Ok(mut e) = self.events.lock() {
                e.push(RecordedEvent {
                    pod_uid: pod.uid().to_string(),
                    type_,
                    reason: reason.to_owned(),
                    message,
                });
            }
        }
    }

    /// A [`StatusSink`] that keeps the newest status per pod UID and lets tests await changes.
    #[derive(Debug, Clone)]
    pub struct RecordingStatus {
        statuses: Arc<Mutex<BTreeMap<String, PodStatus>>>,
        terminated: Arc<Mutex<Vec<String>>>,
        changed: Arc<watch::Sender<u64>>,
    }

    impl Default for RecordingStatus {
        fn default() -> Self {
            Self {
                statuses: Arc::default(),
                terminated: Arc::default(),
                changed: Arc::new(watch::channel(0).0),
            }
        }
    }

    impl RecordingStatus {
        /// An empty recorder.
        pub fn new() -> Self {
            Self::default()
        }
        /// The newest status of pod `uid`.
        pub fn status(&self, uid: &str) -> Option<PodStatus> {
            self.statuses.lock().ok().and_then(|s| s.get(uid).cloned())
        }
        /// UIDs reported terminated, in order.
        pub fn terminated_pods(&self) -> Vec<String> {
            self.terminated
                .lock()
                .map(|t| t.clone())
                .unwrap_or_default()
        }
        /// A receiver that changes on every report.
        pub fn changes(&self) -> watch::Receiver<u64> {
            self.changed.subscribe()
        }
    }

    impl StatusSink for RecordingStatus {
        fn set_status(&self, pod: &AdmittedPod, status: &PodStatus) {
            if let Ok(mut s) = self.statuses.lock() {
                s.insert(pod.uid().to_string(), status.clone());
            }
            self.changed.send_modify(|n| *n += 1);
        }
        fn terminated(&self, pod: &AdmittedPod) {
            if let Ok(mut t) = self.terminated.lock() {
                t.push(pod.uid().to_string());
            }
            self.changed.send_modify(|n| *n += 1);
        }
    }
}
