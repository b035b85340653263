//! A point-in-time view of both worlds for the agent's `/pods` endpoint.

use std::collections::BTreeMap;

use nodelet_core::PodUid;
use std::path::PathBuf;

use crate::VolumeManager;
use crate::asw::MountState;
use crate::plugins::ObjectVersion;

/// The volumes of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodVolumes {
    /// The pod's UID.
    pub pod_uid: PodUid,
    /// Namespace (empty for a pod known only from disk).
    pub namespace: String,
    /// Name (empty for a pod known only from disk).
    pub name: String,
    /// Whether the pod is desired (else its volumes are being torn down).
    pub desired: bool,
    /// Its volumes, sorted by name.
    pub volumes: Vec<VolumeSnapshot>,
}

/// One volume of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeSnapshot {
    /// The pod volume name.
    pub name: String,
    /// The plugin name; `None` for unsupported volumes.
    pub plugin: Option<String>,
    /// VM-2 unique volume name; `None` for unsupported volumes.
    pub unique_name: Option<String>,
    /// The volume directory, once set up.
    pub path: Option<PathBuf>,
    /// Where the volume stands.
    pub state: VolumeState,
    /// A remount is pending (content change, pod update, token refresh, resync).
    pub remount_pending: bool,
    /// A change of content (an object or a source it reads) was seen and no SetUp has taken
    /// it in yet, or the one that did failed: what it shows may be old.
    pub change_pending: bool,
    /// The last SetUp / TearDown error, cleared by the next success.
    pub last_error: Option<String>,
    /// The objects of the last successful SetUp, with their resourceVersions.
    pub objects: Vec<ObjectVersion>,
}

/// Where a volume stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VolumeState {
    /// Desired, not set up yet (or its first SetUp failed).
    Pending,
    /// Set up.
    Mounted,
    /// Found on disk after a restart, not confirmed yet.
    Uncertain,
    /// On disk, no longer desired: being torn down.
    Unmounting,
    /// No plugin for it; never mounted.
    Unsupported {
        /// The source field, e.g. `hostPath`.
        volume_type: String,
    },
}

impl VolumeManager {
    /// The volumes of desired pod `uid` in the pod's order, as [`snapshot`](Self::snapshot)
    /// shows them (empty for a pod not desired): one pod's look, without copying the others'.
    pub fn pod_snapshot(&self, uid: &PodUid) -> Vec<VolumeSnapshot> {
        let st = self.inner.state.lock();
        st.dsw
            .pod(uid)
            .map(|desired| desired_volumes(&st, desired))
            .unwrap_or_default()
    }

    /// Every pod known to either world with its volumes, sorted by pod UID.
    pub fn snapshot(&self) -> Vec<PodVolumes> {
        let st = self.inner.state.lock();
        let mut pods: BTreeMap<PodUid, PodVolumes> = BTreeMap::new();
        for (uid, desired) in st.dsw.pods() {
            let meta = &desired.pod.metadata;
            let volumes = desired_volumes(&st, desired);
            pods.insert(
                uid.clone(),
                PodVolumes {
                    pod_uid: uid.clone(),
                    namespace: meta.namespace.clone().unwrap_or_default(),
                    name: meta.name.clone().unwrap_or_default(),
                    desired: true,
                    volumes,
                },
            );
        }
        for (unique, a) in st.asw.iter() {
            if st.dsw.contains(&a.pod_uid, unique) {
                continue;
            }
            let entry = pods.entry(a.pod_uid.clone()).or_insert_with(|| {
                let meta = a
                    .pod
                    .as_ref()
                    .map(|p| p.metadata.clone())
                    .unwrap_or_default();
                PodVolumes {
                    pod_uid: a.pod_uid.clone(),
                    namespace: meta.namespace.unwrap_or_default(),
                    name: meta.name.unwrap_or_default(),
                    desired: false,
                    volumes: Vec::new(),
                }
            });
            entry.volumes.push(VolumeSnapshot {
                name: a.outer_name.clone(),
                plugin: Some(a.plugin.name().to_owned()),
                unique_name: Some(unique.clone()),
                path: Some(a.dir.clone()),
                state: VolumeState::Unmounting,
                remount_pending: false,
                change_pending: false,
                last_error: st.last_errors.get(unique).cloned(),
                objects: a.objects.clone(),
            });
        }
        let mut out: Vec<PodVolumes> = pods.into_values().collect();
        for p in &mut out {
            p.volumes.sort_by(|a, b| a.name.cmp(&b.name));
        }
        out
    }
}

/// The snapshot of `desired`'s volumes (those without a plugin last).
fn desired_volumes(
    st: &crate::manager::State,
    desired: &crate::dsw::DesiredPod,
) -> Vec<VolumeSnapshot> {
    let mut volumes = Vec::new();
    for v in &desired.volumes {
        let actual = st.asw.get(&v.unique);
        volumes.push(VolumeSnapshot {
            name: v.outer_name.clone(),
            plugin: Some(v.plugin.name().to_owned()),
            unique_name: Some(v.unique.clone()),
            path: actual.map(|a| a.dir.clone()),
            state: match actual.map(|a| a.state) {
                None => VolumeState::Pending,
                Some(MountState::Mounted) => VolumeState::Mounted,
                Some(MountState::Uncertain) => VolumeState::Uncertain,
            },
            remount_pending: actual.is_some_and(|a| a.remount_required),
            change_pending: st.change_seen.contains_key(&v.unique),
            last_error: st.last_errors.get(&v.unique).cloned(),
            objects: actual.map(|a| a.objects.clone()).unwrap_or_default(),
        });
    }
    for u in &desired.unsupported {
        volumes.push(VolumeSnapshot {
            name: u.name.clone(),
            plugin: None,
            unique_name: None,
            path: None,
            state: VolumeState::Unsupported {
                volume_type: u.volume_type.clone(),
            },
            remount_pending: false,
            change_pending: false,
            last_error: None,
            objects: Vec::new(),
        });
    }
    volumes
}
