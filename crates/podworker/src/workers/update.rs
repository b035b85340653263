//! What a pod update carries: [`PodUpdate`] (its [`UpdateType`] and [`UpdateTarget`]), and
//! [`TerminatingPod`], the pod as the termination callbacks see it.

use std::fmt;
use std::time::Duration;

use nodelet_core::{AdmittedPod, PodUid};

/// The kind of a pod update (PW-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateType {
    /// The pod was seen for the first time.
    Create,
    /// The pod changed.
    Update,
    /// A periodic or requested resync.
    Sync,
    /// Terminate the pod (deleted from the API, or no longer bound to this node).
    Kill,
}

/// The pod an update is for: the kubelet's `UpdatePodOptions.Pod`, or its `RunningPod` for a
/// pod it knows only from the node.
#[derive(Debug, Clone)]
pub enum UpdateTarget {
    /// A pod the API has (its newest object), admitted by the pod source.
    Pod(AdmittedPod),
    /// A pod known only by its directory `<root>/pods/<uid>`, left by a previous run of the
    /// agent, whose API object is gone (deleted while the agent was down). Its worker runs
    /// only the termination callbacks; nothing is reported on it (no events, no status), as
    /// there is no object to report on.
    OnDisk(PodUid),
}

/// One update for [`PodWorkers::update_pod`](crate::PodWorkers::update_pod): made by
/// [`new`](Self::new) for a pod the API has, or by [`kill_on_disk`](Self::kill_on_disk) for a
/// pod known only by its UID, which is only ever terminated.
#[derive(Debug, Clone)]
pub struct PodUpdate {
    pub(super) target: UpdateTarget,
    pub(super) kind: UpdateType,
}

/// A pod whose termination runs ([`PodSyncer::sync_terminating_pod`] and
/// [`PodSyncer::sync_terminated_pod`]): its UID always, its API object when it has one (none
/// for a pod known only on disk, [`UpdateTarget::OnDisk`]). Cheap to copy.
///
/// [`PodSyncer::sync_terminating_pod`]: crate::PodSyncer::sync_terminating_pod
/// [`PodSyncer::sync_terminated_pod`]: crate::PodSyncer::sync_terminated_pod
#[derive(Clone, Copy)]
pub struct TerminatingPod<'a> {
    uid: &'a PodUid,
    object: Option<&'a AdmittedPod>,
}

impl UpdateTarget {
    /// The pod's UID.
    pub fn uid(&self) -> &PodUid {
        match self {
            Self::Pod(pod) => pod.uid(),
            Self::OnDisk(uid) => uid,
        }
    }

    /// The pod's API object; `None` for a pod known only on disk.
    pub fn object(&self) -> Option<&AdmittedPod> {
        match self {
            Self::Pod(pod) => Some(pod),
            Self::OnDisk(_) => None,
        }
    }

    /// The pod as its termination sees it.
    pub fn terminating(&self) -> TerminatingPod<'_> {
        TerminatingPod {
            uid: self.uid(),
            object: self.object(),
        }
    }

    /// The pod's namespace and name (`""` each for a pod known only on disk).
    pub(super) fn namespace_and_name(&self) -> (&str, &str) {
        self.object()
            .map_or(("", ""), |pod| (pod.namespace(), pod.name()))
    }

    /// The grace period the pod's object asks for on deletion
    /// (`metadata.deletionGracePeriodSeconds`), if any.
    pub(super) fn deletion_grace_period(&self) -> Option<Duration> {
        let seconds = self.object()?.metadata.deletion_grace_period_seconds?;
        Some(Duration::from_secs(u64::try_from(seconds).unwrap_or(0)))
    }

    /// The pod's `spec.terminationGracePeriodSeconds`, if it has an object that sets it.
    pub(super) fn termination_grace_period(&self) -> Option<Duration> {
        let seconds = self
            .object()?
            .spec
            .as_ref()?
            .termination_grace_period_seconds?;
        Some(Duration::from_secs(u64::try_from(seconds).unwrap_or(0)))
    }
}

impl PodUpdate {
    /// An update of `kind` with `pod`, a pod the API has.
    pub fn new(kind: UpdateType, pod: AdmittedPod) -> Self {
        Self {
            target: UpdateTarget::Pod(pod),
            kind,
        }
    }

    /// Terminate pod `uid`, known only by its directory on disk (its API object is gone):
    /// an [`UpdateType::Kill`] of an [`UpdateTarget::OnDisk`]. On first sight its worker
    /// starts terminating: it is never desired and never synced.
    pub fn kill_on_disk(uid: PodUid) -> Self {
        Self {
            target: UpdateTarget::OnDisk(uid),
            kind: UpdateType::Kill,
        }
    }

    /// What happened.
    pub fn kind(&self) -> UpdateType {
        self.kind
    }

    /// The pod the update is for.
    pub fn target(&self) -> &UpdateTarget {
        &self.target
    }
}

impl<'a> TerminatingPod<'a> {
    /// Pod `uid` known only on disk: no API object.
    pub fn on_disk(uid: &'a PodUid) -> Self {
        Self { uid, object: None }
    }

    /// The pod's UID.
    pub fn uid(&self) -> &'a PodUid {
        self.uid
    }

    /// The pod's API object; `None` for a pod known only on disk, which nothing reports on.
    pub fn object(&self) -> Option<&'a AdmittedPod> {
        self.object
    }
}

impl<'a> From<&'a AdmittedPod> for TerminatingPod<'a> {
    fn from(pod: &'a AdmittedPod) -> Self {
        Self {
            uid: pod.uid(),
            object: Some(pod),
        }
    }
}

impl fmt::Debug for TerminatingPod<'_> {
    /// The object's `Debug` (`namespace/name` and UID), or the UID of a pod known only on disk.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.object {
            Some(pod) => fmt::Debug::fmt(pod, f),
            None => f
                .debug_struct("TerminatingPod")
                .field("on_disk", &self.uid.as_str())
                .finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use nodelet_testutil::PodBuilder;

    use super::*;

    #[test]
    fn a_pod_known_only_on_disk_gives_its_uid_and_no_object() {
        let uid = PodUid::new("u-1").unwrap_or_else(|e| panic!("{e}"));
        let update = PodUpdate::kill_on_disk(uid.clone());
        assert_eq!(update.kind(), UpdateType::Kill);
        assert_eq!(update.target().uid(), &uid);
        assert!(update.target().object().is_none());
        let pod = update.target().terminating();
        assert_eq!(pod.uid(), &uid);
        assert!(pod.object().is_none());
        assert_eq!(update.target().namespace_and_name(), ("", ""));
        assert_eq!(format!("{pod:?}"), r#"TerminatingPod { on_disk: "u-1" }"#);
    }

    #[test]
    fn a_pod_the_api_has_gives_its_uid_and_its_object() {
        let admitted = AdmittedPod::new(
            PodBuilder::new("ns", "web")
                .uid("u-2")
                .spec(serde_json::json!({"terminationGracePeriodSeconds": 7}))
                .build(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let update = PodUpdate::new(UpdateType::Update, admitted.clone());
        let target = update.target();
        assert_eq!(target.uid().as_str(), "u-2");
        assert_eq!(target.object(), Some(&admitted));
        assert_eq!(target.namespace_and_name(), ("ns", "web"));
        assert_eq!(
            target.termination_grace_period(),
            Some(Duration::from_secs(7))
        );
        let pod = TerminatingPod::from(&admitted);
        assert_eq!(pod.uid().as_str(), "u-2");
        assert_eq!(pod.object(), Some(&admitted));
    }
}
