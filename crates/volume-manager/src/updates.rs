//! [`VolumeUpdate`]: the observer seam. The reconciler reports every successful remount that
//! an object change caused, with the object versions it projected and the time the manager
//! was told of the change, so an observer (the agent's propagation histogram) measures
//! "change seen → volume current" without polling the snapshot or reading the objects again;
//! and every other remount that wrote new content, so an observer that acts on new content
//! (a reload signal) misses none.

use nodelet_core::PodUid;
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::plugins::ObjectVersion;

/// Updates kept for a slow subscriber before it lags (and misses some).
pub(crate) const CAPACITY: usize = 1024;

/// One volume set up again after a change of an object it reads, or with new content written
/// (update path step (5)).
#[derive(Debug, Clone)]
pub struct VolumeUpdate {
    /// The pod's UID.
    pub pod_uid: PodUid,
    /// The pod's namespace.
    pub namespace: String,
    /// The volume's name in the pod spec.
    pub volume: String,
    /// The objects the SetUp projected, with their resourceVersions.
    pub objects: Vec<ObjectVersion>,
    /// Whether new content was written (`..data` swapped); false when the payload was
    /// already current.
    pub written: bool,
    /// When the manager received the earliest object-change notification this SetUp took in
    /// (update path step (1)); the SetUp started after it. `None` for a remount that took in
    /// no notification yet wrote new content (one for a pod update or sync that read an
    /// object's new content before its notification arrived; that notification's own remount
    /// then finds the volume current and is reported `written: false`).
    pub change_seen: Option<Instant>,
    /// When the SetUp finished.
    pub at: Instant,
}

/// The sending half, owned by the manager.
pub(crate) fn channel() -> broadcast::Sender<VolumeUpdate> {
    broadcast::channel(CAPACITY).0
}
