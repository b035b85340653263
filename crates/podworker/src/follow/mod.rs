//! Configuration that follows a change (nodelet's own, beyond the kubelet: FC-1 … FC-15),
//! under the process runtime: after a volume's `..data` swap, the subPath binds of the
//! containers that mount it are replaced in place, and the containers that ask for it get a
//! reload signal or a POST to a local URL; a container whose environment changed is
//! restarted (under the env-file runtime: its env files replaced). Opt-in per pod ([`options`]: `nodelet.io/` annotations
//! over the node's [`FollowDefaults`]; bad values are Warning events, [`AnnotationCheck`], under
//! either runtime); a pod that asks nothing is left exactly as the kubelet leaves it.
//!
//! # subPath binds (FC-3, FC-4)
//!
//! The volume manager calls [`FollowChange::after_swap`] from the write of a configMap,
//! secret, projected or downwardAPI volume, after its `..data` switch and before the old data
//! directory is removed (`nodelet_volume_manager::AfterSwap`). For each container and init
//! container of the pod that asks for `follow-subpath` and mounts the volume with a subPath:
//! read the binds of its running instance, plan the new sources (`subpath.rs`) and replace
//! them in its mount namespace (`nodelet_runtime::ProcessRuntime::rebind`). The old data is
//! still there meanwhile, so a subPath file or directory never shows missing or empty. A bind
//! that cannot follow keeps its old content, and a Warning event
//! [`reasons::FAILED_SUBPATH_UPDATE`] says why.
//!
//! # The environment (FC-10 … FC-15)
//!
//! `env/` ([`EnvFollow`], shared with the syncer): a change of a ConfigMap or Secret that
//! changes a following container's resolved environment restarts that container alone
//! (process runtime) or replaces its env files (env-file runtime). See its docs.
//!
//! # Reloads (FC-5, FC-6)
//!
//! The agent hands each `nodelet_volume_manager::VolumeUpdate` that wrote new content (the
//! SetUp is complete, subPath binds included; whatever caused the remount) to
//! [`FollowChange::volume_updated`]. Each
//! container of the pod that mounts the volume and asks for a reload signal or URL records an
//! update in its burst (`reload.rs`); when the burst ends, the signal goes to the main process
//! of the instance running then, then the POST; each failure is a Warning event
//! [`reasons::FAILED_RELOAD`]. A container not running gets nothing (it reads its
//! configuration when it starts).

mod annotations;
pub mod driver;
mod env;
mod freshness;
pub mod options;
mod reload;
mod subpath;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nodelet_core::events::EventType;
use nodelet_core::{AdmittedPod, ObjectRef, PodUid};
use nodelet_runtime::{LiveError, ProcessRuntime};
use nodelet_volume_manager::VolumeUpdate;
use parking_lot::Mutex;

pub use annotations::AnnotationCheck;
pub use env::{EnvFollow, EnvFollowParts, EnvFreshness, EnvRestart, reasons as env_reasons};
pub use freshness::{ContainerFreshness, MountFreshness, StaleSource};
use nodelet_core::events::EventSink;
pub use options::{
    AnnotationError, ContainerFollow, FollowDefaults, PodFollow, ReloadUrl, pod_follow,
};
pub use reload::{MAX_BURST, ReloadUrlError, URL_TIMEOUT, post};
pub use subpath::Kept;

/// The reasons of the events this module records (nodelet's own).
pub mod reasons {
    /// A subPath bind could not follow an update (Warning).
    pub const FAILED_SUBPATH_UPDATE: &str = "FailedSubPathUpdate";
    /// A reload signal or URL could not be delivered (Warning).
    pub const FAILED_RELOAD: &str = "FailedReload";
    /// A `nodelet.io/` annotation has a bad value (Warning).
    pub const INVALID_ANNOTATION: &str = super::annotations::REASON;
}

/// What follows changes for the process runtime's containers. Cloning shares it.
#[derive(Clone)]
pub struct FollowChange {
    inner: Arc<Inner>,
}

struct Inner {
    runtime: ProcessRuntime,
    events: Arc<dyn EventSink>,
    defaults: FollowDefaults,
    /// What each replaced bind shows now, by container.
    bound: Mutex<HashMap<ContainerKey, Bound>>,
    bursts: reload::Bursts<ContainerKey>,
    /// The versions of each volume's recent data directories (FC-8).
    versions: Mutex<freshness::Versions>,
    /// The versions the object managers hold of what the pods that follow read (FC-20).
    latest: Mutex<freshness::Latest>,
    /// Each written volume's directory, by pod and volume name.
    volume_dirs: Mutex<HashMap<ContainerKey, PathBuf>>,
    /// When each volume's last `..data` swap was, by pod and volume name, until its update
    /// comes (a reload's quiet time counts from it).
    swapped: Mutex<HashMap<ContainerKey, tokio::time::Instant>>,
    /// What the containers' environments read (FC-15).
    env: Option<EnvFollow>,
}

type ContainerKey = (PodUid, String);

/// The replaced binds of one running instance.
#[derive(Debug, Default)]
struct Bound {
    pid: i32,
    /// Target in the container → the source it shows.
    sources: HashMap<PathBuf, PathBuf>,
}

impl std::fmt::Debug for FollowChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FollowChange")
            .field("defaults", &self.inner.defaults)
            .finish_non_exhaustive()
    }
}

impl FollowChange {
    /// Follows changes for `runtime`'s containers, events to `events`; `env`, the syncer's,
    /// adds what their environments read to their freshness.
    pub fn new(
        runtime: ProcessRuntime,
        events: Arc<dyn EventSink>,
        defaults: FollowDefaults,
        env: Option<EnvFollow>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                runtime,
                events,
                defaults,
                bound: Mutex::default(),
                bursts: reload::Bursts::new(),
                versions: Mutex::default(),
                latest: Mutex::default(),
                volume_dirs: Mutex::default(),
                swapped: Mutex::default(),
                env,
            }),
        }
    }

    /// What `pod` asks for (its annotations over the node's defaults; bad values left out).
    pub fn settings(&self, pod: &AdmittedPod) -> PodFollow {
        pod_follow(pod, &self.inner.defaults).0
    }

    /// Forgets what is kept for pod `uid` (it is gone).
    pub fn forget_pod(&self, uid: &PodUid) {
        self.inner.bound.lock().retain(|(u, _), _| u != uid);
        self.inner.versions.lock().forget(uid);
        self.inner.latest.lock().forget(uid);
        self.inner.volume_dirs.lock().retain(|(u, _), _| u != uid);
        self.inner.swapped.lock().retain(|(u, _), _| u != uid);
        if let Some(env) = &self.inner.env {
            env.forget_pod(uid);
        }
    }

    /// The object managers hold `resource_version` of `object`, which `pod` reads (told on each
    /// change of it, for a pod that asks for a follow behaviour): until a mount shows that
    /// version it is not current (FC-20), also before its volume is marked for a remount.
    pub fn object_changed(&self, pod: &AdmittedPod, object: &ObjectRef, resource_version: &str) {
        self.inner
            .latest
            .lock()
            .set(pod.uid(), object, resource_version);
    }

    /// Forgets the versions told by [`object_changed`](Self::object_changed) (some changes
    /// were missed: the volume manager's pending remounts alone say what is not current).
    pub fn forget_versions(&self) {
        self.inner.latest.lock().clear();
    }

    /// The subPath binds of `pod`'s running containers that read `volume` (at `dir`) move to
    /// its new data (module docs). Called between the switch and the removal of the old data;
    /// blocks while the binds are replaced.
    pub fn after_swap(&self, pod: &AdmittedPod, volume: &str, dir: &Path) {
        let key = (pod.uid().clone(), volume.to_owned());
        let now = tokio::time::Instant::now();
        self.inner.swapped.lock().insert(key.clone(), now);
        self.inner.volume_dirs.lock().insert(key, dir.to_path_buf());
        let settings = self.settings(pod);
        for (container, sub_path) in mounting(pod, volume) {
            let wants = settings.container(&container);
            if sub_path && wants.is_some_and(|w| w.sub_path) {
                self.follow_sub_paths(pod, &container, volume, dir);
            }
        }
    }

    /// Reloads (module docs) for `update`, a volume of `pod` set up again. Does nothing when
    /// no new content was written.
    pub fn volume_updated(&self, pod: &AdmittedPod, update: &VolumeUpdate) {
        if !update.written || update.pod_uid != *pod.uid() {
            return;
        }
        let key = (pod.uid().clone(), update.volume.clone());
        let swapped = self.inner.swapped.lock().remove(&key);
        let dir = self.inner.volume_dirs.lock().get(&key).cloned();
        if let Some(data_dir) = dir.as_deref().and_then(freshness::current_data_dir) {
            let mut versions = self.inner.versions.lock();
            versions.note(pod.uid(), &update.volume, &data_dir, &update.objects, true);
        }
        let settings = self.settings(pod);
        if !settings.containers.values().any(ContainerFollow::reloads) {
            return;
        }
        // The quiet time counts from the swap (the write's end when no swap was seen).
        let at = swapped.unwrap_or(update.at).min(update.at);
        for (container, _) in mounting(pod, &update.volume) {
            if let Some(wants) = settings.container(&container).filter(|w| w.reloads()) {
                self.reload(pod, &container, wants, &settings, at);
            }
        }
    }

    /// What each running container of `pod` sees through its configMap, secret, projected
    /// and downwardAPI volume mounts and through its environment (FC-8); `volumes` is the
    /// volume manager's snapshot of the pod's volumes. Containers not running are absent.
    pub fn freshness(
        &self,
        pod: &AdmittedPod,
        volumes: &[nodelet_volume_manager::VolumeSnapshot],
    ) -> Vec<ContainerFreshness> {
        let settings = self.settings(pod);
        // The data current now holds the snapshot's versions: surely once no SetUp is pending
        // or running (during one, `..data` may already name data the snapshot's objects trail).
        let mut current = HashMap::new();
        for v in volumes {
            let Some(dir) = &v.path else { continue };
            let Some(data_dir) = freshness::current_data_dir(dir) else {
                continue;
            };
            self.inner.versions.lock().note(
                pod.uid(),
                &v.name,
                &data_dir,
                &v.objects,
                !v.remount_pending,
            );
            current.insert(v.name.as_str(), (v, data_dir));
        }
        let mut out = Vec::new();
        let Some(spec) = &pod.spec else {
            return out;
        };
        for container in spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
        {
            let Ok(running) = self
                .inner
                .runtime
                .running_mounts(pod.uid(), &container.name)
            else {
                continue;
            };
            let key = (pod.uid().clone(), container.name.clone());
            let bound = {
                let all = self.inner.bound.lock();
                all.get(&key)
                    .filter(|b| b.pid == running.pid)
                    .map(|b| b.sources.clone())
                    .unwrap_or_default()
            };
            let follows = settings
                .container(&container.name)
                .is_some_and(|c| c.sub_path);
            let mut mounts = Vec::new();
            for m in container.volume_mounts.iter().flatten() {
                let Some((snapshot, current_dir)) = current.get(m.name.as_str()) else {
                    continue;
                };
                let sub_path = m.sub_path.as_deref().is_some_and(|s| !s.is_empty())
                    || m.sub_path_expr.as_deref().is_some_and(|s| !s.is_empty());
                let seen_dir = if sub_path {
                    let target = freshness::container_path(&m.mount_path);
                    let source = bound.get(&target).cloned().or_else(|| {
                        let spec = running.mounts.iter().find(|s| s.target == target);
                        spec.map(|s| s.source.clone())
                    });
                    let dir = snapshot.path.as_deref();
                    source.and_then(|s| dir.and_then(|d| freshness::data_dir_of(d, &s)))
                } else {
                    Some(current_dir.clone())
                };
                let objects = seen_dir
                    .as_deref()
                    .and_then(|d| {
                        let versions = self.inner.versions.lock();
                        versions.get(pod.uid(), &m.name, d).map(<[_]>::to_vec)
                    })
                    .unwrap_or_default();
                let behind = {
                    let latest = self.inner.latest.lock();
                    objects.iter().any(|o| latest.behind(pod.uid(), o))
                };
                mounts.push(MountFreshness {
                    volume: m.name.clone(),
                    mount_path: m.mount_path.clone(),
                    sub_path,
                    follows: sub_path && follows,
                    objects,
                    current: seen_dir.as_ref() == Some(current_dir)
                        && !snapshot.change_pending
                        && !behind,
                });
            }
            let env = self.inner.env.as_ref();
            out.push(ContainerFreshness {
                container: container.name.clone(),
                mounts,
                env: env.map_or_else(Vec::new, |e| e.freshness(pod.uid(), &container.name)),
            });
        }
        out
    }

    /// subPath binds for one container.
    fn follow_sub_paths(&self, pod: &AdmittedPod, container: &str, volume: &str, dir: &Path) {
        let runtime = &self.inner.runtime;
        let running = match runtime.running_mounts(pod.uid(), container) {
            Ok(r) => r,
            Err(LiveError::NotRunning { .. }) => return,
            Err(e) => return self.subpath_failed(pod, container, volume, None, &e.to_string()),
        };
        let key = (pod.uid().clone(), container.to_owned());
        let bound = {
            let mut all = self.inner.bound.lock();
            let entry = all.entry(key.clone()).or_default();
            if entry.pid != running.pid {
                *entry = Bound {
                    pid: running.pid,
                    sources: HashMap::new(),
                };
            }
            entry.sources.clone()
        };
        let plan = subpath::plan(dir, &running.mounts, &bound);
        for (target, why) in &plan.kept {
            self.subpath_failed(pod, container, volume, Some(target), &why.to_string());
        }
        if plan.rebinds.is_empty() {
            return;
        }
        let rebinds = plan.rebinds.clone();
        match runtime.rebind(pod.uid(), container, running.pid, plan.rebinds) {
            Ok(()) => {
                let mut all = self.inner.bound.lock();
                if let Some(entry) = all.get_mut(&key).filter(|e| e.pid == running.pid) {
                    for r in rebinds {
                        entry.sources.insert(r.target, r.source);
                    }
                }
                tracing::debug!(
                    pod.namespace = pod.namespace(),
                    pod.name = pod.name(),
                    container,
                    volume,
                    "subPath binds replaced"
                );
            }
            Err(LiveError::NotRunning { .. }) => {}
            Err(e) => self.subpath_failed(pod, container, volume, None, &error_chain(&e)),
        }
    }

    fn subpath_failed(
        &self,
        pod: &AdmittedPod,
        container: &str,
        volume: &str,
        target: Option<&Path>,
        why: &str,
    ) {
        let at = target.map_or(String::new(), |t| format!(" at {}", t.display()));
        let message = format!(
            "subPath mount{at} of volume {volume:?} in container {container:?} kept its old \
             content: {why}"
        );
        tracing::warn!(
            pod.namespace = pod.namespace(),
            pod.name = pod.name(),
            container,
            volume,
            %message,
            "subPath not updated"
        );
        self.inner.events.event(
            pod,
            EventType::Warning,
            reasons::FAILED_SUBPATH_UPDATE,
            message,
        );
    }

    /// Step 2 for one container.
    fn reload(
        &self,
        pod: &AdmittedPod,
        container: &str,
        wants: &ContainerFollow,
        settings: &PodFollow,
        at: tokio::time::Instant,
    ) {
        let key = (pod.uid().clone(), container.to_owned());
        let this = Arc::downgrade(&self.inner);
        let (pod, container, wants) = (pod.clone(), container.to_owned(), wants.clone());
        self.inner
            .bursts
            .update(key, at, settings.debounce, async move {
                if let Some(inner) = this.upgrade() {
                    deliver(&inner, &pod, &container, &wants).await;
                }
            });
    }
}

/// The containers and init containers of `pod` that mount `volume`, and whether one of those
/// mounts has a subPath.
fn mounting(pod: &AdmittedPod, volume: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let Some(spec) = &pod.spec else {
        return out;
    };
    for container in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        let mounts = container.volume_mounts.iter().flatten();
        let mut mounts = mounts.filter(|m| m.name == volume).peekable();
        if mounts.peek().is_none() {
            continue;
        }
        let sub_path = mounts.any(|m| {
            m.sub_path.as_deref().is_some_and(|s| !s.is_empty())
                || m.sub_path_expr.as_deref().is_some_and(|s| !s.is_empty())
        });
        out.push((container.name.clone(), sub_path));
    }
    out
}

/// The end of a burst: the signal, then the POST, to the instance running now.
async fn deliver(inner: &Inner, pod: &AdmittedPod, container: &str, wants: &ContainerFollow) {
    let failed = |what: String| {
        tracing::warn!(
            pod.namespace = pod.namespace(),
            pod.name = pod.name(),
            container,
            message = %what,
            "reload not delivered"
        );
        inner.events.event(
            pod,
            EventType::Warning,
            reasons::FAILED_RELOAD,
            format!("Reload of container {container:?} after a volume update failed: {what}"),
        );
    };
    if let Some(signal) = wants.signal {
        match inner.runtime.signal(pod.uid(), container, signal) {
            Ok(pid) => tracing::debug!(container, pid, %signal, "reload signal sent"),
            Err(LiveError::NotRunning { .. }) => return,
            Err(e) => failed(e.to_string()),
        }
    }
    if let Some(url) = &wants.url {
        if inner.runtime.exec_target(pod.uid(), container).is_none() {
            return;
        }
        match post(url).await {
            Ok(()) => tracing::debug!(container, %url, "reload URL answered"),
            Err(e) => failed(e.to_string()),
        }
    }
}

/// `e` and its sources, `: `-separated.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
