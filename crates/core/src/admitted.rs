//! [`AdmittedPod`]: a pod that entered the node, with its UID validated once.
//!
//! The agent's pod source (the pod watch, or the manifests of the offline mode) turns every
//! pod object into an `AdmittedPod` and refuses the pods whose UID is unusable; everything
//! after it — pod workers, object managers, volume manager, status and events — takes the
//! proof (`&AdmittedPod`) or only the key (`&PodUid`), never a raw `Pod`, so no later step
//! validates again or needs a policy for an invalid UID.
//!
//! The pod's `spec.volumes` are moved out of the pod object at admission and kept as
//! [`PodVolume`]s ([`AdmittedPod::volumes`]): a k8s-openapi `Volume` is over 3 KB inline, and
//! at 10 volumes a pod they were the largest part of a node's heap. The pod an `AdmittedPod`
//! dereferences to therefore has `spec.volumes == None`; [`AdmittedPod::to_pod`] rebuilds the
//! whole object for the few readers that need it (the kubelet API's `/pods`). The lists the
//! pod keeps lose the spare room decoding left in them (`tighten`).

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::{PodUid, PodUidError, PodVolume};

/// A pod admitted to the node: the pod object (shared, never copied per consumer), its volumes
/// and its validated [`PodUid`].
///
/// Only [`AdmittedPod::new`] makes one, from the pod object as watched: holding an
/// `AdmittedPod` proves the UID is non-empty and a single path component. It dereferences to
/// the [`Pod`] for reading.
///
/// **The pod it dereferences to has no `spec.volumes`** (always `None`): they are in
/// [`volumes`](Self::volumes), compact. Read a pod's volumes there; [`to_pod`](Self::to_pod)
/// is the whole pod object, volumes included, for what serializes or hands on a `Pod`.
/// Equality compares the pod object and its volumes.
#[derive(Clone, PartialEq)]
pub struct AdmittedPod {
    uid: PodUid,
    /// The pod object, its `spec.volumes` moved to `volumes`.
    pod: Arc<Pod>,
    /// The pod's `spec.volumes` (`None`: the pod had no `spec.volumes`, or no spec).
    volumes: Option<Arc<[PodVolume]>>,
}

impl AdmittedPod {
    /// Admits `pod`: validates its `metadata.uid` once and moves its `spec.volumes` into
    /// [`volumes`](Self::volumes). A pod with volumes shared by another `Arc` is copied for
    /// that (pass it owned); one without volumes is kept as it is. A pod passed owned also
    /// loses the spare room decoding left in its lists (they are kept as long as the pod).
    ///
    /// # Errors
    /// [`PodUidError`] naming the pod (`namespace/name`) when it has no UID or one that is not
    /// a single path component.
    pub fn new(pod: impl Into<Arc<Pod>>) -> Result<Self, PodUidError> {
        let mut pod = pod.into();
        let uid = PodUid::from_pod(&pod)?;
        if let Some(owned) = Arc::get_mut(&mut pod) {
            tighten(owned);
        }
        let volumes = if pod.spec.as_ref().is_some_and(|s| s.volumes.is_some()) {
            Arc::make_mut(&mut pod)
                .spec
                .as_mut()
                .and_then(|s| s.volumes.take())
                .map(|volumes| volumes.into_iter().map(PodVolume::from).collect())
        } else {
            None
        };
        Ok(Self { uid, pod, volumes })
    }

    /// The pod's validated UID.
    pub fn uid(&self) -> &PodUid {
        &self.uid
    }

    /// The pod object **without its `spec.volumes`** (see [`volumes`](Self::volumes) and
    /// [`to_pod`](Self::to_pod)).
    pub fn pod(&self) -> &Arc<Pod> {
        &self.pod
    }

    /// The pod's `spec.volumes`, in spec order (empty when it has none).
    pub fn volumes(&self) -> &[PodVolume] {
        self.volumes.as_deref().unwrap_or_default()
    }

    /// The volume named `name`, if the pod has one.
    pub fn volume(&self, name: &str) -> Option<&PodVolume> {
        self.volumes().iter().find(|v| v.name() == name)
    }

    /// The whole pod object as admitted, `spec.volumes` included: a copy, for a reader that
    /// serializes the pod or needs a [`Pod`] with its volumes.
    pub fn to_pod(&self) -> Pod {
        let mut pod = Pod::clone(&self.pod);
        if let (Some(spec), Some(volumes)) = (pod.spec.as_mut(), self.volumes.as_deref()) {
            spec.volumes = Some(volumes.iter().map(PodVolume::to_volume).collect());
        }
        pod
    }

    /// The pod's namespace (`""` when unset).
    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or_default()
    }

    /// The pod's name (`""` when unset).
    pub fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }
}

/// The pod object **without its `spec.volumes`**: read them with [`AdmittedPod::volumes`].
impl Deref for AdmittedPod {
    type Target = Pod;

    fn deref(&self) -> &Pod {
        &self.pod
    }
}

/// The pod object **without its `spec.volumes`**, as [`Deref`].
impl AsRef<Pod> for AdmittedPod {
    fn as_ref(&self) -> &Pod {
        &self.pod
    }
}

impl fmt::Debug for AdmittedPod {
    /// `namespace/name` and the UID: the pod object can be large, and a pod's spec is not
    /// what a log line about it needs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdmittedPod")
            .field("pod", &format_args!("{}/{}", self.namespace(), self.name()))
            .field("uid", &self.uid.as_str())
            .finish()
    }
}

/// `namespace/name`.
impl fmt::Display for AdmittedPod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace(), self.name())
    }
}

/// Drops the spare room the decoder left in the pod's lists, which it grows by doubling: the
/// pod is kept for its life. Its elements are large (a `ContainerStatus` is 0.75 KB, a
/// `Container` 2.1 KB, even when almost every field is unset), so a one-container pod's status
/// alone held 2.2 KB of empty slots. (Its volumes [`AdmittedPod::new`] moves into an
/// exact-size list of compact ones; the list of a projected volume's sources is tightened here
/// first.)
fn tighten(pod: &mut Pod) {
    fn tight<T>(list: &mut Option<Vec<T>>) {
        if let Some(list) = list {
            list.shrink_to_fit();
        }
    }
    fn containers(list: &mut Vec<Container>) {
        list.shrink_to_fit();
        for c in list {
            tight(&mut c.volume_mounts);
            tight(&mut c.env);
            tight(&mut c.env_from);
            tight(&mut c.ports);
            tight(&mut c.args);
            tight(&mut c.command);
        }
    }
    if let Some(spec) = pod.spec.as_mut() {
        containers(&mut spec.containers);
        if let Some(init) = spec.init_containers.as_mut() {
            containers(init);
        }
        tight(&mut spec.tolerations);
        for volume in spec.volumes.iter_mut().flatten() {
            if let Some(projected) = volume.projected.as_mut() {
                tight(&mut projected.sources);
            }
        }
    }
    if let Some(status) = pod.status.as_mut() {
        tight(&mut status.conditions);
        tight(&mut status.container_statuses);
        tight(&mut status.init_container_statuses);
        tight(&mut status.ephemeral_container_statuses);
        tight(&mut status.pod_ips);
        tight(&mut status.host_ips);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: Option<&str>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.name = Some("web".into());
        pod.metadata.uid = uid.map(Into::into);
        pod
    }

    #[test]
    fn an_owned_pod_is_kept_without_spare_room_in_its_lists() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}]}]},
            "status": {"containerStatuses": [{"name": "c", "image": "i", "imageID": "",
                "ready": true, "restartCount": 0}]},
        }))
        .unwrap();
        let status = pod.status.as_mut().unwrap();
        status.container_statuses.as_mut().unwrap().reserve(3);
        let admitted = AdmittedPod::new(pod).unwrap();
        let status = admitted.status.as_ref().unwrap();
        assert_eq!(status.container_statuses.as_ref().unwrap().capacity(), 1);
        let spec = admitted.spec.as_ref().unwrap();
        assert_eq!(spec.containers[0].env.as_ref().unwrap().capacity(), 1);
    }

    #[test]
    fn a_pod_with_a_plain_uid_is_admitted_with_that_uid_and_shared_not_copied() {
        let shared = Arc::new(pod(Some("u-1")));
        let admitted = AdmittedPod::new(shared.clone()).unwrap();
        assert_eq!(admitted.uid().as_str(), "u-1");
        assert!(Arc::ptr_eq(admitted.pod(), &shared));
        assert_eq!(
            admitted.metadata.name.as_deref(),
            Some("web"),
            "derefs to the pod"
        );
        assert_eq!(admitted.to_string(), "ns/web");
        assert_eq!(
            format!("{admitted:?}"),
            r#"AdmittedPod { pod: ns/web, uid: "u-1" }"#
        );
    }

    fn with_volumes(uid: &str, volumes: serde_json::Value) -> Pod {
        let mut pod = pod(Some(uid));
        pod.spec = Some(
            serde_json::from_value(serde_json::json!({"containers": [], "volumes": volumes}))
                .unwrap(),
        );
        pod
    }

    #[test]
    fn the_volumes_are_moved_out_of_the_pod_and_to_pod_gives_the_whole_object_back() {
        let original = with_volumes(
            "u-1",
            serde_json::json!([
                {"name": "cfg", "configMap": {"name": "settings"}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "pvc"}},
            ]),
        );
        let admitted = AdmittedPod::new(original.clone()).unwrap();
        assert_eq!(
            admitted.spec.as_ref().map(|s| s.volumes.is_none()),
            Some(true),
            "the pod it derefs to has no spec.volumes"
        );
        let names: Vec<_> = admitted.volumes().iter().map(PodVolume::name).collect();
        assert_eq!(names, ["cfg", "data"]);
        assert!(
            admitted
                .volume("cfg")
                .and_then(PodVolume::config_map)
                .is_some()
        );
        assert!(admitted.volume("nope").is_none());
        assert_eq!(admitted.to_pod(), original);

        // An empty list and no list stay apart; a pod without a spec has no volumes.
        for volumes in [serde_json::json!([]), serde_json::Value::Null] {
            let original = with_volumes("u-1", volumes);
            assert_eq!(
                AdmittedPod::new(original.clone()).unwrap().to_pod(),
                original
            );
        }
        let bare = pod(Some("u-1"));
        let admitted = AdmittedPod::new(bare.clone()).unwrap();
        assert!(admitted.volumes().is_empty());
        assert_eq!(admitted.to_pod(), bare);
    }

    #[test]
    fn admitted_pods_differ_when_only_their_volumes_do() {
        let a = |name: &str| {
            AdmittedPod::new(with_volumes(
                "u-1",
                serde_json::json!([{"name": "cfg", "configMap": {"name": name}}]),
            ))
            .unwrap()
        };
        assert_eq!(a("one"), a("one"));
        assert_ne!(a("one"), a("two"));
    }

    #[test]
    fn a_shared_pod_with_volumes_is_copied_and_the_share_keeps_its_volumes() {
        let shared = Arc::new(with_volumes(
            "u-1",
            serde_json::json!([{"name": "tmp", "emptyDir": {}}]),
        ));
        let admitted = AdmittedPod::new(shared.clone()).unwrap();
        assert!(!Arc::ptr_eq(admitted.pod(), &shared));
        assert_eq!(
            shared
                .spec
                .as_ref()
                .and_then(|s| s.volumes.as_ref())
                .map(Vec::len),
            Some(1)
        );
        assert_eq!(admitted.to_pod(), *shared);
    }

    #[test]
    fn a_pod_without_a_usable_uid_is_refused_with_an_error_naming_it() {
        let err = AdmittedPod::new(pod(None)).unwrap_err();
        assert_eq!(err.to_string(), "pod ns/web has no metadata.uid");
        let err = AdmittedPod::new(pod(Some("../x"))).unwrap_err();
        assert!(
            matches!(&err, PodUidError::NotAPathComponent { pod, uid } if pod == "ns/web" && uid == "../x"),
            "{err}"
        );
    }
}
