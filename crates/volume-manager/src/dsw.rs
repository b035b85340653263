//! Desired state of world (VM-3 … VM-6): which pods want which volumes, with the latest pod
//! object per pod and the pod errors the populator recorded.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use nodelet_core::{AdmittedPod, ObjectRef, PodUid, PodVolume, SourceRef};

use crate::plugins::VolumePlugin;

/// VM-5: at most this many distinct error strings are kept per pod.
pub(crate) const MAX_POD_ERRORS: usize = 10;

/// One volume a pod wants mounted.
#[derive(Clone)]
pub(crate) struct DesiredVolume {
    /// VM-2: `<plugin>/<pod uid>-<volume name>`.
    pub(crate) unique: String,
    /// The pod volume name (the kubelet's outer volume name).
    pub(crate) outer_name: String,
    pub(crate) plugin: Arc<dyn VolumePlugin>,
    pub(crate) volume: VolumeInPod,
    /// What the volume reads whose changes remount it (live updates; the plugin's
    /// [`VolumePlugin::sources`]).
    pub(crate) sources: Vec<SourceRef>,
}

/// One of a pod's volumes ([`AdmittedPod::volumes`]), read in place: the pod's compact
/// volumes are shared (an [`AdmittedPod`] holds them in an `Arc`), not copied. A k8s-openapi
/// `Volume` holds every volume source inline (over 3 KB each); a copy per desired volume was a
/// quarter of the agent's heap at 1,000 volumes. A plugin gets a `Volume` built for the call
/// ([`PodVolume::to_volume`]).
#[derive(Clone)]
pub(crate) struct VolumeInPod {
    pod: AdmittedPod,
    index: usize,
}

impl VolumeInPod {
    /// Volume `index` of the pod's volumes; `None` when there is no such entry.
    pub(crate) fn new(pod: &AdmittedPod, index: usize) -> Option<Self> {
        (index < pod.volumes().len()).then(|| VolumeInPod {
            pod: pod.clone(),
            index,
        })
    }
}

impl std::ops::Deref for VolumeInPod {
    type Target = PodVolume;

    fn deref(&self) -> &PodVolume {
        // `new` checked the index and an admitted pod never changes, so the fallback (a
        // volume without a source, which no plugin supports) is never reached.
        static NONE: std::sync::LazyLock<PodVolume> = std::sync::LazyLock::new(|| {
            PodVolume::from(k8s_openapi::api::core::v1::Volume::default())
        });
        self.pod.volumes().get(self.index).unwrap_or(&NONE)
    }
}

/// A used pod volume no plugin supports (hostPath, PVC, CSI, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnsupportedVolume {
    pub(crate) name: String,
    /// The source field that is set, e.g. `hostPath`.
    pub(crate) volume_type: String,
}

/// Everything the desired state holds for one pod.
#[derive(Clone)]
pub(crate) struct DesiredPod {
    /// The pod's validated UID (its key in the desired state).
    pub(crate) uid: PodUid,
    /// The newest admitted pod object (VM-5).
    pub(crate) pod: AdmittedPod,
    pub(crate) volumes: Vec<DesiredVolume>,
    pub(crate) unsupported: Vec<UnsupportedVolume>,
    /// Populator errors (VM-5), popped by `wait_for_attach_and_mount`.
    pub(crate) errors: BTreeSet<String>,
    /// Unsupported volumes already reported by an event (once per pod and volume).
    pub(crate) reported: HashSet<String>,
}

/// The desired state: pod UID → [`DesiredPod`].
#[derive(Default)]
pub(crate) struct DesiredState {
    pods: HashMap<PodUid, DesiredPod>,
    /// Which pod wants each unique volume name: `contains` and `volume` in one hash lookup
    /// instead of a walk of the pod's volumes (the reconciler asks for every mounted volume).
    owners: HashMap<String, PodUid>,
    /// The unique names of the volumes reading each ConfigMap and Secret, so a changed object
    /// finds its readers without a walk of every desired volume.
    readers: HashMap<ObjectRef, Vec<String>>,
}

impl DesiredState {
    /// Adds or replaces a pod (VM-5: the latest pod object wins); keeps which unsupported
    /// volumes were reported. Returns the unsupported volumes not reported yet.
    pub(crate) fn set_pod(&mut self, mut pod: DesiredPod) -> Vec<UnsupportedVolume> {
        if let Some(old) = self.pods.remove(&pod.uid) {
            pod.reported.extend(old.reported.iter().cloned());
            self.unindex(&old);
        }
        let fresh: Vec<UnsupportedVolume> = pod
            .unsupported
            .iter()
            .filter(|u| !pod.reported.contains(&u.name))
            .cloned()
            .collect();
        pod.reported.extend(fresh.iter().map(|u| u.name.clone()));
        self.index(&pod);
        self.pods.insert(pod.uid.clone(), pod);
        fresh
    }

    /// Adds `pod`'s volumes to the owner and reader indexes.
    fn index(&mut self, pod: &DesiredPod) {
        for v in &pod.volumes {
            self.owners.insert(v.unique.clone(), pod.uid.clone());
            for source in &v.sources {
                if let SourceRef::Object(object) = source {
                    let readers = self.readers.entry(object.clone()).or_default();
                    if !readers.contains(&v.unique) {
                        readers.push(v.unique.clone());
                    }
                }
            }
        }
    }

    /// Drops `old`'s volumes from the owner and reader indexes.
    fn unindex(&mut self, old: &DesiredPod) {
        for v in &old.volumes {
            if self.owners.get(&v.unique) == Some(&old.uid) {
                self.owners.remove(&v.unique);
            }
            for source in &v.sources {
                if let SourceRef::Object(object) = source
                    && let Some(readers) = self.readers.get_mut(object)
                {
                    readers.retain(|u| *u != v.unique);
                    if readers.is_empty() {
                        self.readers.remove(object);
                    }
                }
            }
        }
    }

    pub(crate) fn remove_pod(&mut self, uid: &PodUid) -> bool {
        match self.pods.remove(uid) {
            Some(old) => {
                self.unindex(&old);
                shrink_when_sparse(self);
                true
            }
            None => false,
        }
    }

    pub(crate) fn pod(&self, uid: &PodUid) -> Option<&DesiredPod> {
        self.pods.get(uid)
    }

    pub(crate) fn pods(&self) -> impl Iterator<Item = (&PodUid, &DesiredPod)> {
        self.pods.iter()
    }

    /// Every desired volume with its pod.
    pub(crate) fn volumes(&self) -> impl Iterator<Item = (&DesiredPod, &DesiredVolume)> {
        self.pods
            .values()
            .flat_map(|p| p.volumes.iter().map(move |v| (p, v)))
    }

    /// Whether the volume with this unique name is desired.
    pub(crate) fn contains(&self, pod_uid: &PodUid, unique: &str) -> bool {
        self.owners.get(unique) == Some(pod_uid)
    }

    /// The unique names of the desired volumes that read `object`.
    pub(crate) fn readers_of(&self, object: &ObjectRef) -> &[String] {
        self.readers.get(object).map_or(&[], Vec::as_slice)
    }

    /// The desired volume named `unique` and its pod.
    pub(crate) fn volume(&self, unique: &str) -> Option<(&DesiredPod, &DesiredVolume)> {
        let pod = self.pods.get(self.owners.get(unique)?)?;
        let volume = pod.volumes.iter().find(|v| v.unique == unique)?;
        Some((pod, volume))
    }

    /// VM-5 `PopPodErrors`: sorted, and cleared.
    pub(crate) fn pop_pod_errors(&mut self, uid: &PodUid) -> Vec<String> {
        self.pods
            .get_mut(uid)
            .map(|p| std::mem::take(&mut p.errors).into_iter().collect())
            .unwrap_or_default()
    }
}

/// Hands back the capacity of the desired state's maps once most pods are gone.
fn shrink_when_sparse(dsw: &mut DesiredState) {
    use nodelet_core::capacity::shrink_when_sparse as shrink;
    shrink(&mut dsw.pods);
    shrink(&mut dsw.owners);
    shrink(&mut dsw.readers);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u() -> PodUid {
        PodUid::new("u").unwrap()
    }

    fn desired(unsupported: &[&str]) -> DesiredPod {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        }))
        .unwrap();
        DesiredPod {
            uid: u(),
            pod: AdmittedPod::new(pod).unwrap(),
            volumes: Vec::new(),
            unsupported: unsupported
                .iter()
                .map(|n| UnsupportedVolume {
                    name: (*n).into(),
                    volume_type: "hostPath".into(),
                })
                .collect(),
            errors: BTreeSet::new(),
            reported: HashSet::new(),
        }
    }

    /// Pod `uid` wanting emptyDir volumes `names` (unique name `<uid>-<name>`), each said to
    /// read ConfigMap `ns/<name>`.
    fn with_volumes(uid: &str, names: &[&str]) -> DesiredPod {
        let volumes: Vec<_> = names
            .iter()
            .map(|n| serde_json::json!({"name": n, "emptyDir": {}}))
            .collect();
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "ns", "uid": uid},
            "spec": {"containers": [], "volumes": volumes},
        }))
        .unwrap();
        let pod = AdmittedPod::new(pod).unwrap();
        let plugin: Arc<dyn VolumePlugin> = Arc::new(crate::plugins::EmptyDirPlugin);
        DesiredPod {
            uid: pod.uid().clone(),
            volumes: names
                .iter()
                .enumerate()
                .map(|(i, n)| DesiredVolume {
                    unique: format!("{uid}-{n}"),
                    outer_name: (*n).into(),
                    plugin: plugin.clone(),
                    volume: VolumeInPod::new(&pod, i).unwrap(),
                    sources: vec![SourceRef::Object(ObjectRef::config_map("ns", *n))],
                })
                .collect(),
            pod,
            unsupported: Vec::new(),
            errors: BTreeSet::new(),
            reported: HashSet::new(),
        }
    }

    #[test]
    fn the_owner_index_follows_updates_and_removals() {
        let (a, b) = (PodUid::new("a").unwrap(), PodUid::new("b").unwrap());
        let mut dsw = DesiredState::default();
        dsw.set_pod(with_volumes("a", &["x", "y"]));
        dsw.set_pod(with_volumes("b", &["x"]));
        assert!(dsw.contains(&a, "a-x") && dsw.contains(&a, "a-y") && dsw.contains(&b, "b-x"));
        assert!(!dsw.contains(&b, "a-x"), "another pod's volume");
        assert_eq!(
            dsw.volume("a-y")
                .map(|(p, v)| (&p.uid, v.outer_name.as_str())),
            Some((&a, "y"))
        );
        let x = ObjectRef::config_map("ns", "x");
        assert_eq!(dsw.readers_of(&x), ["a-x", "b-x"]);
        assert_eq!(dsw.readers_of(&ObjectRef::config_map("ns", "y")), ["a-y"]);

        // An update that drops a volume drops it from the index; the one kept stays.
        dsw.set_pod(with_volumes("a", &["x"]));
        assert!(dsw.contains(&a, "a-x"));
        assert!(!dsw.contains(&a, "a-y"));
        assert!(dsw.volume("a-y").is_none());
        assert!(dsw.readers_of(&ObjectRef::config_map("ns", "y")).is_empty());
        assert_eq!(dsw.readers_of(&x), ["b-x", "a-x"], "re-indexed on update");

        assert!(dsw.remove_pod(&a));
        assert_eq!(dsw.readers_of(&x), ["b-x"]);
        assert!(!dsw.contains(&a, "a-x"));
        assert!(dsw.volume("a-x").is_none());
        assert!(dsw.contains(&b, "b-x"), "the other pod is untouched");
        assert_eq!(dsw.owners.len(), 1);
        assert_eq!(dsw.readers.len(), 1);
    }

    #[test]
    fn unsupported_volumes_are_reported_once_per_pod_across_updates() {
        let mut dsw = DesiredState::default();
        assert_eq!(dsw.set_pod(desired(&["a"])).len(), 1);
        assert!(dsw.set_pod(desired(&["a"])).is_empty());
        let fresh = dsw.set_pod(desired(&["a", "b"]));
        assert_eq!(
            fresh.iter().map(|u| u.name.as_str()).collect::<Vec<_>>(),
            ["b"]
        );
    }

    // VM-5: errors are capped at ten, returned sorted and cleared by the pop.
    #[test]
    fn pod_errors_are_returned_sorted_and_cleared_when_popped() {
        let mut dsw = DesiredState::default();
        let mut pod = desired(&[]);
        pod.errors = (0..10).rev().map(|i| format!("e{i:02}")).collect();
        dsw.set_pod(pod);
        let errors = dsw.pop_pod_errors(&u());
        assert_eq!(errors.len(), MAX_POD_ERRORS);
        assert!(errors.windows(2).all(|w| w[0] < w[1]));
        assert!(dsw.pop_pod_errors(&u()).is_empty());
        assert!(dsw.remove_pod(&u()));
        assert!(!dsw.remove_pod(&u()));
    }
}
