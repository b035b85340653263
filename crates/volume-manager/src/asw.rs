//! Actual state of world (VM-7): which volumes are set up on disk, in which state, and whether
//! they must be set up again.
//!
//! The kubelet keys the actual state by volume and lists the pods per volume; for the plugins
//! here the unique volume name already contains the pod UID (VM-2), so one entry per unique
//! name is the same thing, flatter.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use nodelet_core::{AdmittedPod, PodUid};
use tokio::time::Instant;

use crate::plugins::{ObjectVersion, VolumePlugin};

/// VM-7 mount states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MountState {
    /// Set up successfully.
    Mounted,
    /// Found on disk after a restart (reconstruction); not yet confirmed by a SetUp.
    Uncertain,
}

/// One volume set up on disk.
#[derive(Clone)]
pub(crate) struct MountedVolume {
    pub(crate) pod_uid: PodUid,
    pub(crate) outer_name: String,
    pub(crate) plugin: Arc<dyn VolumePlugin>,
    pub(crate) dir: PathBuf,
    pub(crate) state: MountState,
    /// VM-7 `remountRequired`: set by pod updates, object changes, token refresh, resync.
    pub(crate) remount_required: bool,
    pub(crate) objects: Vec<ObjectVersion>,
    /// When the content must be refreshed even without a change (tokens).
    pub(crate) refresh_at: Option<Instant>,
    /// Found by reconstruction: torn down only once the agent said its pods are synced.
    pub(crate) reconstructed: bool,
    /// The pod object of the last SetUp (for events); `None` for reconstructed volumes.
    pub(crate) pod: Option<AdmittedPod>,
}

/// The actual state: unique volume name → [`MountedVolume`].
///
/// Each volume is boxed: a hash table keeps up to twice the slots of its most entries (a node's
/// first thousand volumes: 2,048), and an empty slot then costs the 32 bytes of a key and a
/// box instead of the 200 of a key and a volume (0.4 MB of table at 1,100 volumes, 0.28 MB
/// with the boxes).
#[derive(Default)]
pub(crate) struct ActualState {
    volumes: HashMap<String, Box<MountedVolume>>,
}

impl ActualState {
    pub(crate) fn get(&self, unique: &str) -> Option<&MountedVolume> {
        self.volumes.get(unique).map(|v| &**v)
    }

    pub(crate) fn get_mut(&mut self, unique: &str) -> Option<&mut MountedVolume> {
        self.volumes.get_mut(unique).map(|v| &mut **v)
    }

    pub(crate) fn contains(&self, unique: &str) -> bool {
        self.volumes.contains_key(unique)
    }

    pub(crate) fn insert(&mut self, unique: String, volume: MountedVolume) {
        self.volumes.insert(unique, Box::new(volume));
    }

    pub(crate) fn remove(&mut self, unique: &str) -> Option<MountedVolume> {
        let removed = self.volumes.remove(unique);
        nodelet_core::capacity::shrink_when_sparse(&mut self.volumes);
        removed.map(|v| *v)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&String, &MountedVolume)> {
        self.volumes.iter().map(|(k, v)| (k, &**v))
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut MountedVolume)> {
        self.volumes.iter_mut().map(|(k, v)| (k, &mut **v))
    }

    /// VM-7 `MarkRemountRequired(pod)`: every volume of the pod whose plugin requires remount.
    /// Returns the unique names of all the pod's volumes on disk (marked or not).
    pub(crate) fn mark_pod_remount_required(&mut self, pod_uid: &PodUid) -> Vec<String> {
        let mut on_disk = Vec::new();
        for (unique, v) in &mut self.volumes {
            if &v.pod_uid == pod_uid {
                if v.plugin.requires_remount() {
                    v.remount_required = true;
                }
                on_disk.push(unique.clone());
            }
        }
        on_disk
    }

    /// VM-7 `GetMountedVolumesForPod`: outer names of the pod's fully mounted volumes, sorted.
    /// The pod's mounted volumes: outer name → the path containers mount (the node's own
    /// path for a hostPath volume, else the volume's directory).
    pub(crate) fn mounted_for_pod(&self, pod_uid: &PodUid) -> BTreeMap<String, PathBuf> {
        self.volumes
            .values()
            .filter(|v| &v.pod_uid == pod_uid && v.state == MountState::Mounted)
            .map(|v| {
                let host_path = v
                    .pod
                    .as_ref()
                    .and_then(|pod| pod.volume(&v.outer_name))
                    .and_then(|volume| v.plugin.host_path(volume));
                let path = host_path.unwrap_or_else(|| v.dir.clone());
                (v.outer_name.clone(), path)
            })
            .collect()
    }

    /// Outer names of every volume of the pod still on disk (mounted or uncertain), sorted.
    pub(crate) fn present_for_pod(&self, pod_uid: &PodUid) -> Vec<String> {
        let mut names: Vec<String> = self
            .volumes
            .values()
            .filter(|v| &v.pod_uid == pod_uid)
            .map(|v| v.outer_name.clone())
            .collect();
        names.sort();
        names
    }

    pub(crate) fn is_mounted(&self, unique: &str) -> bool {
        self.volumes
            .get(unique)
            .is_some_and(|v| v.state == MountState::Mounted)
    }

    pub(crate) fn len(&self) -> usize {
        self.volumes.len()
    }
}
