//! [`AdmittedPod`]: a pod that entered the node, with its UID validated once.
//!
//! The agent's pod source (the pod watch, or the manifests of the offline mode) turns every
//! pod object into an `AdmittedPod` and refuses the pods whose UID is unusable; everything
//! after it — pod workers, object managers, volume manager, status and events — takes the
//! proof (`&AdmittedPod`) or only the key (`&PodUid`), never a raw `Pod`, so no later step
//! validates again or needs a policy for an invalid UID.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::{PodUid, PodUidError};

/// A pod admitted to the node: the pod object (shared, never copied per consumer) and its
/// validated [`PodUid`].
///
/// Only [`AdmittedPod::new`] makes one, from the pod object as watched: holding an
/// `AdmittedPod` proves the UID is non-empty and a single path component. It dereferences to
/// the [`Pod`] for reading.
#[derive(Clone, PartialEq)]
pub struct AdmittedPod {
    uid: PodUid,
    pod: Arc<Pod>,
}

impl AdmittedPod {
    /// Admits `pod`: validates its `metadata.uid` once.
    ///
    /// # Errors
    /// [`PodUidError`] naming the pod (`namespace/name`) when it has no UID or one that is not
    /// a single path component.
    pub fn new(pod: impl Into<Arc<Pod>>) -> Result<Self, PodUidError> {
        let pod = pod.into();
        let uid = PodUid::from_pod(&pod)?;
        Ok(Self { uid, pod })
    }

    /// The pod's validated UID.
    pub fn uid(&self) -> &PodUid {
        &self.uid
    }

    /// The pod object.
    pub fn pod(&self) -> &Arc<Pod> {
        &self.pod
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

impl Deref for AdmittedPod {
    type Target = Pod;

    fn deref(&self) -> &Pod {
        &self.pod
    }
}

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
