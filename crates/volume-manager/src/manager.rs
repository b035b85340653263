//! [`VolumeManager`]: the public face: desired pods in, mounted volumes out, waits and a
//! snapshot.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use nodelet_core::events::{EventSink, reasons};
use nodelet_core::{AdmittedPod, EventType, NodeAllocatable, PodUid};
use nodelet_object_manager::{ConfigMapManager, SecretManager};
use nodelet_sources::Sources;
use parking_lot::Mutex;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::asw::ActualState;
use crate::changes::Scope;
use crate::dsw::{DesiredPod, DesiredState, UnsupportedVolume};
use crate::executor::Operations;
use crate::node_faults::NodeFaults;
use crate::plugins::{PluginRegistry, VolumeHost, host_probe_tmpfs};
use crate::populator::{desired_pod, expected_volumes};
use crate::{Config, Error, MemoryMedium, WaitCause};

/// The volume manager: keeps the volumes of the desired pods set up on disk and current.
///
/// Cheap to clone (a handle). See the crate docs for how the pieces interact.
#[derive(Clone)]
pub struct VolumeManager {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for VolumeManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.inner.state.lock();
        f.debug_struct("VolumeManager")
            .field("root_dir", &self.inner.config.root_dir)
            .field("desired_pods", &st.dsw.pods().count())
            .field("actual_volumes", &st.asw.len())
            .finish()
    }
}

/// Shared state of a [`VolumeManager`] and its reconciler.
pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) host: VolumeHost,
    pub(crate) registry: PluginRegistry,
    pub(crate) events: Arc<dyn EventSink>,
    pub(crate) state: Mutex<State>,
    /// Wakes the reconciler (a stored permit if it is busy).
    pub(crate) wake: Notify,
    /// The next pass is over every volume (else over `State::pass_over` only).
    pub(crate) full_pass: AtomicBool,
    /// Bumped on every change of the actual state or pod errors; waits watch it.
    pub(crate) changed: watch::Sender<u64>,
    /// The pods a [`VolumeManager::wait_for_attach_and_mount`] waits for, each woken by the
    /// changes of its own volumes (and by every change [`bump`](Inner::bump) announces): at
    /// a node's cold start, a wake-up of every waiting pod per finished SetUp was a pod count
    /// times the SetUps of task wake-ups. Never locked while `state` is.
    pub(crate) pod_waiters: Mutex<HashMap<PodUid, Arc<Notify>>>,
    pub(crate) tasks: TaskTracker,
    /// The agent has fed its initial pods: reconstructed volumes of other pods may go.
    pub(crate) sources_ready: AtomicBool,
    /// Reconciler passes so far (tests check that an idle manager does no work).
    pub(crate) passes: AtomicU64,
    pub(crate) configmaps: ConfigMapManager,
    pub(crate) secrets: SecretManager,
    /// Remounts caused by object changes or that wrote, for [`VolumeManager::subscribe_updates`].
    pub(crate) updates: tokio::sync::broadcast::Sender<crate::VolumeUpdate>,
}

/// Everything behind the one lock: both worlds, operations and per-volume status.
pub(crate) struct State {
    pub(crate) dsw: DesiredState,
    pub(crate) asw: ActualState,
    pub(crate) ops: Operations,
    /// Last SetUp/TearDown error per unique volume name (for the snapshot).
    pub(crate) last_errors: std::collections::HashMap<String, String>,
    /// Per unique volume name: when the earliest object change not yet taken in by a SetUp
    /// was seen (update path step (2)); moved into the SetUp that starts next.
    pub(crate) change_seen: std::collections::HashMap<String, Instant>,
    /// Volumes whose SetUp fails for a node-side reason (what the log has said about them).
    pub(crate) node_faults: NodeFaults,
    /// Volumes whose operation ended with something left for a pass over them (a change that
    /// arrived meanwhile, a failure to back off from): see [`Inner::pass_over`].
    pub(crate) pass_over: Vec<String>,
}

impl VolumeManager {
    /// A manager writing under `config.root_dir`, reading objects through the shared
    /// managers and everything else through the `sources` the agent built (a source it did not
    /// build answers with the kubelet's text for a disabled feature), reporting to `events`.
    /// Nothing happens until [`run`](Self::run) is polled.
    ///
    /// Probes tmpfs support when `config.memory_medium` is [`MemoryMedium::Auto`] and logs one
    /// warning if memory-medium volumes will live on node disk.
    ///
    /// # Errors
    /// [`Error::RootDir`] if the root directory cannot be created.
    pub fn new(
        config: Config,
        configmaps: ConfigMapManager,
        secrets: SecretManager,
        sources: Sources,
        events: Arc<dyn EventSink>,
    ) -> Result<Self, Error> {
        std::fs::create_dir_all(&config.root_dir).map_err(|e| Error::RootDir {
            path: config.root_dir.clone(),
            cause: Arc::new(e),
        })?;
        let tmpfs = match config.memory_medium {
            MemoryMedium::Disk => false,
            MemoryMedium::Tmpfs => true,
            MemoryMedium::Auto => host_probe_tmpfs(&config.root_dir),
        };
        if !tmpfs {
            tracing::warn!(
                root_dir = %config.root_dir.display(),
                "secret, projected and downwardAPI volumes are written to node disk: \
                 the agent cannot mount tmpfs (needs root with CAP_SYS_ADMIN)"
            );
        }
        let allocatable = config
            .node_allocatable
            .unwrap_or_else(|| NodeAllocatable::detect(&config.root_dir));
        let host = VolumeHost::new(
            config.root_dir.clone(),
            configmaps.clone(),
            secrets.clone(),
            sources,
            tmpfs,
            config.fsync,
            allocatable,
        )
        .with_after_swap(config.after_swap.clone());
        let state = State {
            dsw: DesiredState::default(),
            asw: ActualState::default(),
            ops: Operations::new(config.initial_backoff, config.max_backoff),
            last_errors: std::collections::HashMap::new(),
            change_seen: std::collections::HashMap::new(),
            node_faults: NodeFaults::default(),
            pass_over: Vec::new(),
        };
        let inner = Inner {
            registry: config.plugins.clone(),
            config,
            host,
            events,
            state: Mutex::new(state),
            wake: Notify::new(),
            changed: watch::channel(0).0,
            pod_waiters: Mutex::default(),
            tasks: TaskTracker::new(),
            sources_ready: AtomicBool::new(false),
            passes: AtomicU64::new(0),
            full_pass: AtomicBool::new(false),
            configmaps,
            secrets,
            updates: crate::updates::channel(),
        };
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// Runs the reconciler until `shutdown` is cancelled, then waits for running operations.
    /// Call it once per manager (spawn it as a task).
    ///
    /// First reconstructs the actual state from the volume directories on disk (adopting
    /// them, see the crate docs), then reconciles whenever something changes: a pod added,
    /// updated or removed, a change notified by the object managers or the sources, a
    /// finished operation, a backoff or refresh deadline, the periodic resync. It sleeps
    /// otherwise; when it stops, it stops the sources' watches.
    ///
    /// # Cancel safety
    /// Dropping the future stops reconciling; operations already started still finish.
    pub async fn run(&self, shutdown: CancellationToken) {
        self.inner.clone().run(shutdown).await;
    }

    /// Records `pod` as desired (VM-4, VM-5): its used, supported volumes are mounted by the
    /// reconciler; unsupported ones are reported once with an `UnsupportedVolume` event. The
    /// latest pod object is kept, and the pod's mounted volumes are marked for remount (so
    /// downward API changes reach the files); a running SetUp of a volume that reads the pod
    /// object is repeated when it ends. Never blocks.
    ///
    /// The pod was admitted ([`AdmittedPod`]): its UID is one path component, so nothing is
    /// ever created outside `<root>/pods/<uid>/`.
    pub fn add_pod(&self, pod: &AdmittedPod) {
        let desired = desired_pod(pod, &self.inner.registry);
        let fresh = {
            let mut st = self.inner.state.lock();
            let (fresh, volumes) = set_desired(&mut st, pod.uid(), desired, Running::Redo);
            self.inner.pass_over_all(&mut st, volumes);
            fresh
        };
        self.report_unsupported(pod, fresh);
        self.inner.observed_pod(pod.uid());
    }

    /// The kubelet's `ReprocessPod` (VM-4, VM-11) for a pod already desired: its volumes are
    /// processed again from the pod object the desired state holds (the newest one
    /// [`add_pod`](Self::add_pod) was given; populator errors are recorded again, so a wait
    /// sees them) and its mounted volumes are marked remount-required (downward API changes and
    /// objects are read again). A SetUp already running is not repeated: it reads the objects
    /// now. Never adds a pod: for a pod that is not desired it does nothing and returns
    /// `false`. Never blocks.
    pub fn reprocess_pod(&self, pod_uid: &PodUid) -> bool {
        let (pod, fresh) = {
            let mut st = self.inner.state.lock();
            // Read and replace under one lock, so a concurrent remove_pod is never undone.
            let Some(pod) = st.dsw.pod(pod_uid).map(|p| p.pod.clone()) else {
                return false;
            };
            let desired = desired_pod(&pod, &self.inner.registry);
            let (fresh, volumes) = set_desired(&mut st, pod_uid, desired, Running::Keep);
            self.inner.pass_over_all(&mut st, volumes);
            (pod, fresh)
        };
        self.report_unsupported(&pod, fresh);
        self.inner.observed_pod(pod_uid);
        true
    }

    /// One `UnsupportedVolume` warning per volume not reported for this pod yet.
    fn report_unsupported(&self, pod: &AdmittedPod, fresh: Vec<UnsupportedVolume>) {
        for u in fresh {
            let message = format!(
                "volume {:?} of type {} is not supported by nodelet and is not mounted; \
                 the pod's other volumes are",
                u.name, u.volume_type
            );
            self.inner.events.event(
                pod,
                EventType::Warning,
                reasons::UNSUPPORTED_VOLUME,
                message,
            );
        }
    }

    /// Same as [`add_pod`](Self::add_pod): the newest pod object replaces the old one.
    pub fn update_pod(&self, pod: &AdmittedPod) {
        self.add_pod(pod);
    }

    /// VM-6 / VM-13: the pod's runtime may be removed; its volumes are torn down (call after
    /// its containers stopped). Never blocks; use [`wait_for_unmount`](Self::wait_for_unmount).
    pub fn remove_pod(&self, pod_uid: &PodUid) {
        {
            let mut guard = self.inner.state.lock();
            let st: &mut State = &mut guard;
            // A volume never set up is never torn down: its node fault is forgotten here.
            for v in st
                .dsw
                .pod(pod_uid)
                .into_iter()
                .flat_map(|p| p.volumes.iter())
            {
                st.node_faults.forget(&v.unique);
            }
            st.dsw.remove_pod(pod_uid);
        }
        self.inner.bump();
    }

    /// The agent has added every pod it knows after a (re)start (the kubelet's "sources
    /// ready"): reconstructed volumes of pods not desired may now be torn down.
    pub fn pods_synced(&self) {
        self.inner.sources_ready.store(true, Ordering::SeqCst);
        self.inner.bump();
    }

    /// VM-11: waits until every used, supported volume of `pod` is mounted.
    ///
    /// First [`reprocess_pod`](Self::reprocess_pod), the kubelet's `ReprocessPod`: the pod's
    /// mounted volumes are remounted (so pod and object changes reach them) and its failed
    /// volumes are processed again. It never adds a pod: the caller made `pod` desired with
    /// [`add_pod`](Self::add_pod) first (in nodelet, the pod worker's `update_pod` does, the
    /// one owner of "desired"). Does not wait for remounts: a mounted volume counts as mounted
    /// while its remount is pending or failing. Woken by state changes (no polling).
    ///
    /// # Errors
    /// [`Error::VolumesNotMounted`] after `config.wait_timeout` (2 min 3 s) or when the
    /// populator recorded pod errors — unless every volume is mounted by then;
    /// [`Error::PodNotDesired`] at once for a pod with volumes that is not desired (the kubelet
    /// would wait out the time-out for it; nothing would ever mount them).
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future only stops waiting.
    pub async fn wait_for_attach_and_mount(&self, pod: &AdmittedPod) -> Result<(), Error> {
        let uid = pod.uid();
        let expected = expected_volumes(uid, pod, &self.inner.registry);
        if expected.is_empty() {
            return Ok(());
        }
        let waiter = PodWaiter::register(&self.inner, uid);
        if !self.reprocess_pod(uid) {
            return Err(Error::PodNotDesired {
                pod: pod.to_string(),
                uid: uid.clone(),
            });
        }
        let deadline = Instant::now() + self.inner.config.wait_timeout;
        // Every wake-up (any volume of the node set up) looks at the volume found unmounted
        // last time first: while it still is, one lookup instead of one per volume (at a cold
        // start, a node's waiters times its SetUps).
        let mut first_unmounted = 0;
        let cause = loop {
            // Registered before the look, so a change right after it is not missed.
            let woken = waiter.notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            {
                let mut st = self.inner.state.lock();
                let errors = st.dsw.pop_pod_errors(uid);
                if !errors.is_empty() {
                    break WaitCause::PodErrors(errors);
                }
                let (before, from) = expected.split_at(first_unmounted);
                match from
                    .iter()
                    .chain(before)
                    .position(|(_, u)| !st.asw.is_mounted(u))
                {
                    None => return Ok(()),
                    Some(i) => first_unmounted = (first_unmounted + i) % expected.len(),
                }
            }
            tokio::select! {
                () = woken => {}
                () = tokio::time::sleep_until(deadline) => break WaitCause::Timeout,
            }
        };
        drop(waiter);
        let st = self.inner.state.lock();
        let mut unmounted: Vec<String> = expected
            .iter()
            .filter(|(_, u)| !st.asw.is_mounted(u))
            .map(|(o, _)| o.clone())
            .collect();
        if unmounted.is_empty() {
            return Ok(());
        }
        unmounted.sort();
        let mut failed_to_process: Vec<String> = expected
            .iter()
            .filter(|(_, u)| !st.dsw.contains(uid, u))
            .map(|(o, _)| o.clone())
            .collect();
        failed_to_process.sort();
        Err(Error::VolumesNotMounted {
            unmounted,
            unattached: Vec::new(),
            failed_to_process,
            cause,
        })
    }

    /// VM-12: waits until none of pod `uid`'s volumes is on disk any more (call after
    /// [`remove_pod`](Self::remove_pod); a desired pod's volumes stay mounted). When it
    /// returns `Ok`, the volume directories are gone (PW-6).
    ///
    /// # Errors
    /// [`Error::VolumesStillMounted`] after `config.wait_timeout`.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn wait_for_unmount(&self, uid: &PodUid) -> Result<(), Error> {
        let mut rx = self.inner.changed.subscribe();
        self.inner.bump();
        let deadline = Instant::now() + self.inner.config.wait_timeout;
        let cause = loop {
            rx.borrow_and_update();
            if self.inner.state.lock().asw.present_for_pod(uid).is_empty() {
                return Ok(());
            }
            tokio::select! {
                r = rx.changed() => if r.is_err() { break WaitCause::ShutDown },
                () = tokio::time::sleep_until(deadline) => break WaitCause::Timeout,
            }
        };
        let mounted = self.inner.state.lock().asw.present_for_pod(uid);
        if mounted.is_empty() {
            return Ok(());
        }
        Err(Error::VolumesStillMounted { mounted, cause })
    }

    /// VM-7 `GetMountedVolumesForPod`: the pod's mounted volumes, by outer name, each with the
    /// path a container mounts (its directory under the pod, or the node's own path for a
    /// hostPath volume, PL-33).
    pub fn mounted_volumes(&self, pod_uid: &PodUid) -> BTreeMap<String, PathBuf> {
        self.inner.state.lock().asw.mounted_for_pod(pod_uid)
    }

    /// A [`VolumeUpdate`](crate::VolumeUpdate) for every volume set up again after a change
    /// of an object it reads, and for every remount that wrote new content, sent when its
    /// SetUp succeeds. Only updates sent after this call
    /// arrive; a subscriber more than 1,024 behind lags and misses some.
    pub fn subscribe_updates(&self) -> tokio::sync::broadcast::Receiver<crate::VolumeUpdate> {
        self.inner.updates.subscribe()
    }

    /// A counter bumped whenever the desired pods, the actual state or a pod's errors change
    /// (after the change is visible on disk). For long-polling status endpoints and tests that
    /// wait for a condition instead of sleeping.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    /// Whether memory-medium volumes are on tmpfs (else node disk).
    pub fn uses_tmpfs(&self) -> bool {
        self.inner.host.uses_tmpfs()
    }

    /// The shared services plugins use (root directory, managers, sources).
    pub fn host(&self) -> &VolumeHost {
        &self.inner.host
    }
}

/// VM-4 for one pod, under the lock: the desired state takes `desired` (VM-5: the latest pod
/// object), the pod's mounted volumes are marked remount-required (the kubelet's
/// `MarkRemountRequired` after a pod is processed) and running operations of its volumes are
/// marked to run again. With [`Running::Redo`] (a new pod object), a volume whose SetUp is
/// running and whose content comes from the pod object itself (downward API) is set up again
/// when it ends; a ConfigMap or Secret being written reads nothing from the pod object, so a
/// pod update (our own status patch, at a node's cold start) does not write it twice.
///
/// Returns the unsupported volumes not reported yet, and every volume the change may give
/// work: the pod's desired volumes and its volumes on disk (one the update dropped is torn
/// down). No other volume is affected, so a pass over these is enough: at a node's cold start
/// a pass over every volume per pod added or processed was most of the reconciler's time.
fn set_desired(
    st: &mut State,
    uid: &PodUid,
    desired: DesiredPod,
    running: Running,
) -> (Vec<UnsupportedVolume>, Vec<String>) {
    let fresh = st.dsw.set_pod(desired);
    let mut volumes = st.asw.mark_pod_remount_required(uid);
    volumes.extend(
        st.dsw
            .pod(uid)
            .into_iter()
            .flat_map(|p| p.volumes.iter())
            .filter(|v| !st.asw.contains(&v.unique))
            .map(|v| v.unique.clone()),
    );
    if running == Running::Redo {
        let readers: Vec<String> = st
            .dsw
            .pod(uid)
            .into_iter()
            .flat_map(|p| p.volumes.iter())
            .filter(|v| reads_pod_object(&v.volume))
            .map(|v| v.unique.clone())
            .collect();
        for unique in readers {
            st.ops.mark_dirty(&unique);
        }
    }
    (fresh, volumes)
}

/// What [`set_desired`] does to SetUps already running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Running {
    /// A new pod object: those reading it are set up again when they end.
    Redo,
    /// The same pod object processed again: they read it already.
    Keep,
}

/// Whether the volume's files come (in part) from the pod object: a `downwardAPI` volume or a
/// projected one with a `downwardAPI` source.
fn reads_pod_object(volume: &nodelet_core::PodVolume) -> bool {
    volume.downward_api().is_some()
        || volume
            .projected()
            .is_some_and(|p| p.sources.iter().flatten().any(|s| s.downward_api.is_some()))
}

impl Inner {
    /// Something changed: wake the reconciler for a pass over every volume, and the waiters
    /// (of every pod).
    pub(crate) fn bump(&self) {
        self.full_pass.store(true, Ordering::SeqCst);
        self.wake.notify_one();
        self.observed();
        for waiter in self.pod_waiters.lock().values() {
            waiter.notify_waiters();
        }
    }

    /// Volume `unique`'s operation ended with work left for it alone: wake the reconciler for
    /// a pass over the volumes so named (`st` is the locked state), and the waiters. At a
    /// node's cold start objects arrive while their volumes' SetUps run, so most SetUps end
    /// "dirty"; a pass over every volume for each was most of the reconciler's time.
    pub(crate) fn pass_over(&self, st: &mut State, unique: &str) {
        st.pass_over.push(unique.to_owned());
        self.wake.notify_one();
    }

    /// [`pass_over`](Self::pass_over) for each of `volumes` (none: no wake-up).
    pub(crate) fn pass_over_all(&self, st: &mut State, volumes: Vec<String>) {
        if !volumes.is_empty() {
            st.pass_over.extend(volumes);
            self.wake.notify_one();
        }
    }

    /// The scope of the pass a wake-up asked for (see [`bump`](Self::bump) and
    /// [`pass_over`](Self::pass_over)); `None` when a previous pass took in what it asked
    /// for already. (A wake-up while the reconciler is busy leaves a permit behind: with
    /// SetUps ending at once, each such permit was a pass over every volume.)
    pub(crate) fn requested_scope(&self) -> Option<Scope> {
        let volumes = std::mem::take(&mut self.state.lock().pass_over);
        if self.full_pass.swap(false, Ordering::SeqCst) {
            Some(Scope::All)
        } else if volumes.is_empty() {
            None
        } else {
            Some(Scope::Only(volumes))
        }
    }

    /// Something changed that leaves the reconciler nothing new to do: wake only the waiters.
    pub(crate) fn observed(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// [`observed`](Self::observed), for a change of pod `uid`'s volumes or errors only: wakes
    /// the subscribers and that pod's waiters.
    pub(crate) fn observed_pod(&self, uid: &PodUid) {
        self.observed();
        if let Some(waiter) = self.pod_waiters.lock().get(uid) {
            waiter.notify_waiters();
        }
    }
}

/// One [`VolumeManager::wait_for_attach_and_mount`]'s place in [`Inner::pod_waiters`]; the
/// pod's entry goes with its last waiter.
struct PodWaiter<'a> {
    inner: &'a Inner,
    uid: &'a PodUid,
    notify: Arc<Notify>,
}

impl<'a> PodWaiter<'a> {
    fn register(inner: &'a Inner, uid: &'a PodUid) -> Self {
        let notify = inner
            .pod_waiters
            .lock()
            .entry(uid.clone())
            .or_default()
            .clone();
        Self { inner, uid, notify }
    }
}

impl Drop for PodWaiter<'_> {
    fn drop(&mut self) {
        let mut waiters = self.inner.pod_waiters.lock();
        // The map's reference and this one: no other waiter of the pod.
        if Arc::strong_count(&self.notify) == 2 {
            waiters.remove(self.uid);
            nodelet_core::capacity::shrink_when_sparse(&mut *waiters);
        }
    }
}

#[cfg(test)]
mod tests {
    //! The manager on fakes and paused time: backoff (VM-9), idleness, live updates.
    use std::time::Duration;

    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use nodelet_object_manager::source::{FakeSource, Verb};
    use nodelet_object_manager::{ManagerConfig, Strategy};
    use nodelet_testutil::{ConfigMapBuilder, PodBuilder};
    use serde_json::json;

    use super::*;
    use crate::changes::Change;
    use k8s_openapi::api::core::v1::Pod;
    use nodelet_core::events::RecordingSink;
    use nodelet_sources::TokenManager;
    use nodelet_sources::token::FakeTokenSource;

    struct Bed {
        vm: VolumeManager,
        events: RecordingSink,
        configmaps: Arc<FakeSource<ConfigMap>>,
        _root: tempfile::TempDir,
        shutdown: CancellationToken,
    }

    fn bed(strategy: Strategy, resync: Option<Duration>) -> Bed {
        let root = tempfile::tempdir().unwrap();
        let cm_source = Arc::new(FakeSource::<ConfigMap>::new());
        let mut mc = ManagerConfig::default();
        mc.strategy = strategy;
        let cms = ConfigMapManager::with_sources(cm_source.clone(), None, mc.clone()).unwrap();
        let secrets =
            SecretManager::with_sources(Arc::new(FakeSource::<Secret>::new()), None, mc).unwrap();
        let mut config = Config::new(root.path());
        config.memory_medium = MemoryMedium::Disk;
        config.fsync = false;
        config.resync_interval = resync;
        let events = RecordingSink::new();
        let vm = VolumeManager::new(
            config,
            cms,
            secrets,
            Sources::new(TokenManager::new(Arc::new(FakeTokenSource::new()))),
            Arc::new(events.clone()),
        )
        .unwrap();
        let shutdown = CancellationToken::new();
        let runner = vm.clone();
        let token = shutdown.clone();
        tokio::spawn(async move { runner.run(token).await });
        Bed {
            vm,
            events,
            configmaps: cm_source,
            _root: root,
            shutdown,
        }
    }

    /// Pod `ns/p` (UID `u1`) mounting ConfigMap `cm` as volume `cfg` at `/cfg`.
    fn pod(cm: &str) -> Arc<Pod> {
        Arc::new(
            PodBuilder::new("ns", "p")
                .uid("u1")
                .container(json!({"name": "c",
                    "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}))
                .volume(json!({"name": "cfg", "configMap": {"name": cm, "defaultMode": 420}}))
                .build(),
        )
    }

    /// `pod` as the agent's pod source admits it.
    fn admitted(pod: &Pod) -> AdmittedPod {
        AdmittedPod::new(pod.clone()).unwrap()
    }

    /// ConfigMap `name` (no namespace: [`FakeSource::apply`] sets it) with `k` = `value`.
    fn cm(name: &str, value: &str) -> ConfigMap {
        ConfigMapBuilder::new("", name).data("k", value).build()
    }

    fn tree(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let path = e.unwrap().path();
                if path.is_dir() {
                    stack.push(path.clone());
                }
                out.push(path);
            }
        }
        out.sort();
        out
    }

    // A pod without a UID must not become the directory `pods/`, and a UID
    // like `../x` must not leave `<root>/pods/`. Such a pod is never admitted (the error names
    // it), so the manager, which takes only an `AdmittedPod`, is never asked for it and nothing
    // is created under the root (`pods/../x` would be `<root>/x`); a pod with a plain UID next
    // to it is mounted as usual.
    #[tokio::test(start_paused = true)]
    async fn a_pod_without_a_usable_uid_is_refused_and_creates_nothing() {
        let bed = bed(Strategy::Get, None);
        bed.configmaps.apply("ns", cm("cm", "v1"));
        let root = bed._root.path().to_path_buf();
        let before = tree(&root);
        for uid in [None, Some(""), Some("../x"), Some(".."), Some("a/b")] {
            let mut p = (*pod("cm")).clone();
            p.metadata.uid = uid.map(str::to_owned);
            let err = AdmittedPod::new(p).unwrap_err();
            assert!(err.to_string().contains("pod ns/p"), "{uid:?}: {err}");
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(tree(&root), before);
        assert!(bed.events.with_reason(reasons::FAILED_MOUNT).is_empty());
        let good = admitted(&pod("cm"));
        bed.vm.add_pod(&good);
        bed.vm.wait_for_attach_and_mount(&good).await.unwrap();
        let dir = bed
            .vm
            .host()
            .volume_dir(good.uid(), "kubernetes.io/configmap", "cfg");
        assert!(
            dir.starts_with(root.join("pods").join("u1")),
            "{}",
            dir.display()
        );
        bed.shutdown.cancel();
    }

    // An object is kind + namespace + name: a change notification names all three; only the
    // volumes reading exactly that object are marked for remount — not for a Secret of the same
    // name, nor for a ConfigMap of the same name in another namespace.
    #[tokio::test(start_paused = true)]
    async fn a_notification_remounts_only_the_volumes_reading_that_exact_object() {
        use nodelet_core::ObjectRef;
        let bed = bed(Strategy::Get, None);
        bed.configmaps.apply("ns", cm("cm", "v1"));
        // The wait never adds a pod (VM-4): add it first, as the pod workers do.
        let p = pod("cm");
        bed.vm.add_pod(&admitted(&p));
        bed.vm
            .wait_for_attach_and_mount(&admitted(&p))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let pending = |vm: &VolumeManager| vm.snapshot()[0].volumes[0].remount_pending;
        assert!(!pending(&bed.vm));
        let mark = |object: &ObjectRef| {
            let change = Change::Object(object.clone());
            bed.vm
                .inner
                .state
                .lock()
                .mark_changed(&change, Instant::now())
        };
        for other in [
            ObjectRef::secret("ns", "cm"),
            ObjectRef::config_map("other", "cm"),
        ] {
            let scope = mark(&other);
            assert!(scope.is_none(), "{other:?}: {scope:?}");
            assert!(!pending(&bed.vm), "{other:?}");
        }
        // A pass has work: the mounted volume is to be set up again, and only it is looked at.
        let scope = mark(&ObjectRef::config_map("ns", "cm"));
        let unique = bed.vm.snapshot()[0].volumes[0]
            .unique_name
            .clone()
            .unwrap_or_default();
        assert!(
            matches!(&scope, Some(Scope::Only(u)) if *u == [unique.clone()]),
            "{scope:?}, want only {unique}"
        );
        assert!(pending(&bed.vm));
        bed.shutdown.cancel();
    }

    // VM-9: a failing mount is retried after 500 ms, 1 s, 2 s, ... (each failure is a
    // FailedMount event).
    #[tokio::test(start_paused = true)]
    async fn a_failing_mount_is_retried_with_exponential_backoff() {
        let bed = bed(Strategy::Get, None);
        bed.vm.add_pod(&admitted(&pod("missing")));
        bed.events.wait_for(|_| true).await;
        let start = Instant::now();
        let mut seen = Vec::new();
        for n in 2..=5 {
            bed.events
                .wait_for(|_| bed.events.events().len() >= n)
                .await;
            seen.push((Instant::now() - start).as_millis());
        }
        assert_eq!(seen, [500, 1500, 3500, 7500]);
        bed.shutdown.cancel();
    }

    // A late object must not wait out the backoff: a change of an object a failed volume reads
    // starts the retry at once,
    // whatever the backoff (VM-9 keeps holding retries that have no new information). Five
    // failures put the volume 8 s into its backoff; the object appears 1 s later and the volume
    // is mounted at that instant, with no sixth failure and no wait for the deadline.
    #[tokio::test(start_paused = true)]
    async fn an_object_created_during_the_backoff_is_mounted_at_once() {
        let bed = bed(Strategy::Watch, None);
        let p = pod("late");
        bed.vm.inner.configmaps.register_pod(&admitted(&p));
        bed.vm.add_pod(&admitted(&p));
        bed.events
            .wait_for(|_| bed.events.events().len() >= 5)
            .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        bed.configmaps.apply("ns", cm("late", "v1"));
        let created = Instant::now();
        let mut rx = bed.vm.subscribe();
        while bed
            .vm
            .mounted_volumes(&PodUid::new("u1").unwrap())
            .is_empty()
        {
            rx.changed().await.unwrap();
        }
        let delay = Instant::now() - created;
        assert!(
            delay < Duration::from_millis(100),
            "mounted {delay:?} after the object appeared (the backoff deadline was 7 s away)"
        );
        assert_eq!(bed.events.events().len(), 5, "{:?}", bed.events.events());
        bed.shutdown.cancel();
    }

    // A volume's own leftovers ask for a pass over it alone; anything else for a full pass,
    // which covers them.
    #[tokio::test(start_paused = true)]
    async fn a_wake_up_asks_for_a_pass_over_the_volumes_named_or_over_all() {
        let bed = bed(Strategy::Get, None);
        let inner = &bed.vm.inner;
        inner.pass_over(&mut inner.state.lock(), "a");
        inner.pass_over(&mut inner.state.lock(), "b");
        let scope = inner.requested_scope();
        assert!(
            matches!(&scope, Some(Scope::Only(v)) if *v == ["a", "b"]),
            "{scope:?}"
        );
        assert!(inner.requested_scope().is_none(), "asked for and taken in");
        inner.pass_over(&mut inner.state.lock(), "c");
        inner.bump();
        assert!(matches!(inner.requested_scope(), Some(Scope::All)));
        assert!(inner.requested_scope().is_none());
        assert!(
            inner.state.lock().pass_over.is_empty(),
            "covered by the full pass"
        );
        bed.shutdown.cancel();
    }

    // A pod added, updated or processed again asks for a pass over its own volumes only: the
    // ones it wants and the ones it has on disk (an update that drops a volume tears it down
    // through that pass), never over the other pods' volumes.
    #[tokio::test(start_paused = true)]
    async fn a_pod_change_asks_for_a_pass_over_that_pods_volumes_only() {
        let bed = bed(Strategy::Get, None);
        bed.configmaps.apply("ns", cm("cm", "v1"));
        let other = PodBuilder::new("ns", "q")
            .uid("u2")
            .container(json!({"name": "c", "volumeMounts": [{"name": "o", "mountPath": "/o"}]}))
            .volume(json!({"name": "o", "configMap": {"name": "cm", "defaultMode": 420}}))
            .build();
        let other = admitted(&other);
        bed.vm.add_pod(&other);
        bed.vm.wait_for_attach_and_mount(&other).await.unwrap();
        let inner = &bed.vm.inner;
        let cfg = "kubernetes.io/configmap/u1-cfg".to_owned();

        // A new pod: its desired volume.
        let p = admitted(&pod("cm"));
        bed.vm.add_pod(&p);
        let scope = inner.requested_scope();
        assert!(
            matches!(&scope, Some(Scope::Only(v)) if *v == [cfg.clone()]),
            "{scope:?}"
        );
        inner.pass_over_all(&mut inner.state.lock(), vec![cfg.clone()]);
        bed.vm.wait_for_attach_and_mount(&p).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;

        // Processed again: its volume on disk, once.
        assert!(bed.vm.reprocess_pod(p.uid()));
        let scope = inner.requested_scope();
        assert!(
            matches!(&scope, Some(Scope::Only(v)) if *v == [cfg.clone()]),
            "{scope:?}"
        );
        inner.pass_over_all(&mut inner.state.lock(), vec![cfg.clone()]);
        tokio::time::sleep(Duration::from_secs(1)).await;

        // An update without the volume: the volume on disk is looked at and torn down; the
        // other pod's volume stays.
        let without = PodBuilder::new("ns", "p")
            .uid("u1")
            .container(json!({"name": "c"}))
            .build();
        bed.vm.add_pod(&admitted(&without));
        let scope = inner.requested_scope();
        assert!(
            matches!(&scope, Some(Scope::Only(v)) if *v == [cfg.clone()]),
            "{scope:?}"
        );
        inner.pass_over_all(&mut inner.state.lock(), vec![cfg]);
        bed.vm.wait_for_unmount(p.uid()).await.unwrap();
        assert_eq!(bed.vm.mounted_volumes(other.uid()).len(), 1);

        // A pod with no volume at all wakes no pass.
        let passes = inner.passes.load(Ordering::SeqCst);
        bed.vm.add_pod(&admitted(&without));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(inner.passes.load(Ordering::SeqCst), passes);
        bed.shutdown.cancel();
    }

    // A mount wait is woken by its own pod's SetUps: two waits of one pod both end when the
    // pod's object appears, and the pod's place among the waiters goes with the last one.
    #[tokio::test(start_paused = true)]
    async fn mount_waits_are_woken_by_their_pod_and_leave_no_entry_behind() {
        let bed = bed(Strategy::Watch, None);
        let p = admitted(&pod("late"));
        bed.vm.inner.configmaps.register_pod(&p);
        bed.vm.add_pod(&p);
        let waits = futures::future::join(
            bed.vm.wait_for_attach_and_mount(&p),
            bed.vm.wait_for_attach_and_mount(&p),
        );
        let appear = async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            assert_eq!(
                bed.vm.inner.pod_waiters.lock().len(),
                1,
                "one entry per pod"
            );
            bed.configmaps.apply("ns", cm("late", "v1"));
        };
        let ((a, b), ()) = futures::future::join(waits, appear).await;
        a.unwrap();
        b.unwrap();
        assert!(bed.vm.inner.pod_waiters.lock().is_empty());
        bed.shutdown.cancel();
    }

    // The reconciler sleeps when nothing changes: no pass without an event (resync off).
    #[tokio::test(start_paused = true)]
    async fn an_idle_manager_does_not_reconcile_until_something_changes() {
        let bed = bed(Strategy::Get, None);
        bed.configmaps.apply("ns", cm("cm", "v1"));
        let p = pod("cm");
        bed.vm.add_pod(&admitted(&p));
        bed.vm
            .wait_for_attach_and_mount(&admitted(&p))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let passes = bed.vm.inner.passes.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(bed.vm.inner.passes.load(Ordering::SeqCst), passes);
        bed.shutdown.cancel();
    }

    // A finished mount with nothing left to do wakes the waiters, not the reconciler: a pod
    // with 40 volumes is mounted in a handful of passes, not one pass per volume. (Real time:
    // the writes run on blocking threads, which a paused clock does not wait for.)
    #[tokio::test]
    async fn finished_mounts_do_not_each_start_a_reconciler_pass() {
        let bed = bed(Strategy::Get, None);
        let mounts: Vec<_> = (0..40)
            .map(|i| json!({"name": format!("v{i}"), "mountPath": format!("/v{i}")}))
            .collect();
        let mut builder = PodBuilder::new("ns", "p")
            .uid("u1")
            .container(json!({"name": "c", "volumeMounts": mounts}));
        for i in 0..40 {
            let name = format!("cm{i}");
            bed.configmaps.apply("ns", cm(&name, "v1"));
            builder = builder.volume(
                json!({"name": format!("v{i}"), "configMap": {"name": name, "defaultMode": 420}}),
            );
        }
        let p = admitted(&builder.build());
        let before = bed.vm.inner.passes.load(Ordering::SeqCst);
        bed.vm.add_pod(&p);
        bed.vm.wait_for_attach_and_mount(&p).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(bed.vm.mounted_volumes(p.uid()).len(), 40);
        let passes = bed.vm.inner.passes.load(Ordering::SeqCst) - before;
        assert!(passes <= 3, "{passes} passes for one pod's 40 volumes");
        bed.shutdown.cancel();
    }

    // A pod removed while its volume's SetUp is still running: the pass at removal skipped the
    // busy volume, so the finished mount must start the pass that tears it down.
    #[tokio::test(start_paused = true)]
    async fn a_pod_removed_during_its_mount_is_torn_down_when_the_mount_ends() {
        let bed = bed(Strategy::Get, None);
        bed.configmaps.apply("ns", cm("cm", "v1"));
        bed.configmaps.hold_gets(true);
        let p = pod("cm");
        let uid = PodUid::new("u1").unwrap();
        bed.vm.add_pod(&admitted(&p));
        while bed.configmaps.count(Verb::Get, "ns", "cm") == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        bed.vm.remove_pod(&uid);
        tokio::time::sleep(Duration::from_millis(10)).await;
        bed.configmaps.hold_gets(false);
        let dir = bed
            .vm
            .host()
            .volume_dir(&uid, "kubernetes.io/configmap", "cfg");
        let mut rx = bed.vm.subscribe();
        tokio::time::timeout(Duration::from_secs(60), async {
            while dir.exists() || !bed.vm.mounted_volumes(&uid).is_empty() {
                rx.changed().await.unwrap();
            }
        })
        .await
        .expect("the volume of the removed pod was never torn down");
        bed.shutdown.cancel();
    }

    /// Pod `u1` with one projected volume `all` (ConfigMap `cm` + the pod's labels), label
    /// `app=<app>`, at `/all`.
    fn projected_pod(app: &str) -> AdmittedPod {
        admitted(
            &PodBuilder::new("ns", "p")
                .uid("u1")
                .label("app", app)
                .container(json!({"name": "c", "volumeMounts": [{"name": "all", "mountPath": "/all"}]}))
                .volume(json!({"name": "all", "projected": {"defaultMode": 420, "sources": [
                    {"configMap": {"name": "cm"}},
                    {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                ]}}))
                .build(),
        )
    }

    // A new pod object arriving while a volume reading the pod (downward API) is being set
    // up: the SetUp runs again when it ends, so the files show the new labels.
    #[tokio::test(start_paused = true)]
    async fn a_pod_update_during_a_downward_api_set_up_is_written_when_it_ends() {
        let bed = bed(Strategy::Get, None);
        bed.configmaps.apply("ns", cm("cm", "v1"));
        bed.configmaps.hold_gets(true);
        bed.vm.add_pod(&projected_pod("one"));
        while bed.configmaps.total(Verb::Get) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        bed.vm.add_pod(&projected_pod("two"));
        bed.configmaps.hold_gets(false);
        let file = bed
            .vm
            .host()
            .volume_dir(
                &PodUid::new("u1").unwrap(),
                "kubernetes.io/projected",
                "all",
            )
            .join("labels");
        let mut rx = bed.vm.subscribe();
        tokio::time::timeout(Duration::from_secs(60), async {
            while std::fs::read_to_string(&file).ok().as_deref() != Some("app=\"two\"") {
                rx.changed().await.unwrap();
            }
        })
        .await
        .expect("the new label never reached the file");
        bed.shutdown.cancel();
    }

    // The same pod processed again while its ConfigMap volume is being written (the pod
    // worker's first sync right after the pod was added): the volume is not set up twice.
    #[tokio::test(start_paused = true)]
    async fn reprocessing_a_pod_does_not_set_up_its_running_volumes_again() {
        let bed = bed(Strategy::Get, None);
        bed.configmaps.apply("ns", cm("cm", "v1"));
        bed.configmaps.hold_gets(true);
        let p = admitted(&pod("cm"));
        bed.vm.add_pod(&p);
        while bed.configmaps.total(Verb::Get) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(bed.vm.reprocess_pod(p.uid()));
        bed.configmaps.hold_gets(false);
        bed.vm.wait_for_attach_and_mount(&p).await.unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        // Both reprocessings (ours and the wait's) came while the SetUp ran: one GET.
        assert_eq!(bed.configmaps.count(Verb::Get, "ns", "cm"), 1);
        bed.shutdown.cancel();
    }

    // The periodic resync is the safety net: with the Get strategy (no notifications) a
    // change still arrives on the next resync.
    #[tokio::test(start_paused = true)]
    async fn the_periodic_resync_picks_up_changes_nobody_notified() {
        let bed = bed(Strategy::Get, Some(Duration::from_secs(60)));
        bed.configmaps.apply("ns", cm("cm", "v1"));
        let p = pod("cm");
        bed.vm.add_pod(&admitted(&p));
        bed.vm
            .wait_for_attach_and_mount(&admitted(&p))
            .await
            .unwrap();
        let dir = bed.vm.host().volume_dir(
            &PodUid::new("u1").unwrap(),
            "kubernetes.io/configmap",
            "cfg",
        );
        bed.configmaps.apply("ns", cm("cm", "v2"));
        let mut rx = bed.vm.subscribe();
        while std::fs::read(dir.join("k")).unwrap() != b"v2" {
            rx.changed().await.unwrap();
        }
        bed.shutdown.cancel();
    }

    // VM-4, VM-5, VM-11: a populator error (here a volume name that cannot be a directory)
    // ends the wait at once with the pod's errors.
    #[tokio::test(start_paused = true)]
    async fn a_pod_error_ends_the_wait_with_the_kubelet_text() {
        let bed = bed(Strategy::Get, None);
        let p = PodBuilder::new("ns", "p")
            .uid("u1")
            .container(json!({"name": "c", "volumeMounts": [{"name": "../x", "mountPath": "/x"}]}))
            .volume(json!({"name": "../x", "emptyDir": {}}))
            .build();
        bed.vm.add_pod(&admitted(&p.clone()));
        let text = "unmounted volumes=[../x], unattached volumes=[], failed to process volumes=[../x]: \
             volume name \"../x\" cannot be used as a directory name";
        let err = bed
            .vm
            .wait_for_attach_and_mount(&admitted(&p))
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), text);
        // The next SyncPod's wait reprocesses the pod: the error is recorded again and ends
        // that wait at once too (no 2 min 3 s time-out).
        let err = bed
            .vm
            .wait_for_attach_and_mount(&admitted(&p))
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), text);
        assert!(matches!(
            err,
            Error::VolumesNotMounted {
                cause: WaitCause::PodErrors(_),
                ..
            }
        ));
        bed.shutdown.cancel();
    }

    // Only the pod worker decides a pod is desired: waiting never adds a pod. A pod that was not
    // added
    // (or was removed) gets `PodNotDesired` at once, and nothing is mounted for it; a pod
    // without volumes has nothing to wait for (VM-11).
    #[tokio::test(start_paused = true)]
    async fn waiting_for_a_pod_that_is_not_desired_fails_at_once_and_adds_nothing() {
        let bed = bed(Strategy::Get, None);
        bed.configmaps.apply("ns", cm("cm", "v1"));
        let root = bed._root.path().to_path_buf();
        let before = tree(&root);
        let p = pod("cm");
        let err = bed
            .vm
            .wait_for_attach_and_mount(&admitted(&p))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "pod ns/p (UID u1) is not desired: it must be added before waiting for its volumes"
        );
        assert!(!bed.vm.reprocess_pod(&PodUid::new("u1").unwrap()));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(tree(&root), before, "nothing mounted");
        assert_eq!(bed.vm.inner.state.lock().dsw.pods().count(), 0);

        // Added, mounted, removed: the pod is no longer desired, and a wait does not bring it
        // back (the volume is torn down).
        bed.vm.add_pod(&admitted(&p));
        bed.vm
            .wait_for_attach_and_mount(&admitted(&p))
            .await
            .unwrap();
        let uid = PodUid::new("u1").unwrap();
        bed.vm.remove_pod(&uid);
        assert!(matches!(
            bed.vm.wait_for_attach_and_mount(&admitted(&p)).await,
            Err(Error::PodNotDesired { .. })
        ));
        bed.vm.wait_for_unmount(admitted(&p).uid()).await.unwrap();
        assert!(bed.vm.mounted_volumes(&uid).is_empty());

        let mut no_volumes = (*p).clone();
        no_volumes.spec = Some(Default::default());
        bed.vm
            .wait_for_attach_and_mount(&admitted(&no_volumes))
            .await
            .unwrap();
        bed.shutdown.cancel();
    }

    // VM-4 / VM-11 (`ReprocessPod`): a wait marks the desired pod's mounted volumes
    // remount-required, so a change nobody notified (Get strategy, no resync) reaches the
    // files on the next SyncPod's wait, as it did when the wait re-added the pod.
    #[tokio::test(start_paused = true)]
    async fn a_wait_remounts_the_desired_pods_mounted_volumes() {
        let bed = bed(Strategy::Get, None);
        bed.configmaps.apply("ns", cm("cm", "v1"));
        let p = pod("cm");
        bed.vm.add_pod(&admitted(&p));
        bed.vm
            .wait_for_attach_and_mount(&admitted(&p))
            .await
            .unwrap();
        let dir = bed.vm.host().volume_dir(
            &PodUid::new("u1").unwrap(),
            "kubernetes.io/configmap",
            "cfg",
        );
        bed.configmaps.apply("ns", cm("cm", "v2"));
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(std::fs::read(dir.join("k")).unwrap(), b"v1", "nobody asked");
        bed.vm
            .wait_for_attach_and_mount(&admitted(&p))
            .await
            .unwrap();
        let mut rx = bed.vm.subscribe();
        let remounted = tokio::time::timeout(Duration::from_secs(600), async {
            while std::fs::read(dir.join("k")).unwrap() != b"v2" {
                rx.changed().await.unwrap();
            }
        })
        .await;
        assert!(remounted.is_ok(), "the wait did not remount the volume");
        assert_eq!(bed.vm.inner.state.lock().dsw.pods().count(), 1);
        bed.shutdown.cancel();
    }
}
