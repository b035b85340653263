//! [`Changes`]: every change a volume may have to act on, as one stream of [`Change`]s — the
//! object managers' [`ObjectRef`]s and the sources' [`SourceChange`]s — matched against what
//! each desired volume reads ([`SourceRef`]) without knowing which source is which.

use nodelet_core::{ObjectRef, PodUid, SourceChange, SourceRef};
use nodelet_object_manager::{ConfigMapManager, SecretManager};
use nodelet_sources::{SourceChanges, Sources};
use tokio::sync::broadcast::{self, error::RecvError};

/// One change seen by the reconciler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    /// An object manager saw new content of this ConfigMap or Secret.
    Object(ObjectRef),
    /// A source (trust bundles, pod certificates) announced a change.
    Source(SourceChange),
    /// A subscription fell behind and missed changes: anything may have changed.
    Lagged,
}

impl Change {
    /// Whether a volume of pod `pod_uid` reading `source` may see different content now.
    pub(crate) fn affects(&self, pod_uid: &PodUid, source: &SourceRef) -> bool {
        match (self, source) {
            (Change::Object(changed), SourceRef::Object(read)) => changed == read,
            (Change::Source(change), _) => change.affects(pod_uid, source),
            (Change::Lagged, _) => true,
            (Change::Object(_), _) => false,
        }
    }

    /// Whether the change is new content whose propagation to the files is measured (a
    /// [`VolumeUpdate`](crate::VolumeUpdate) per volume it remounts).
    pub(crate) fn is_content(&self) -> bool {
        match self {
            Change::Object(_) => true,
            Change::Source(change) => change.is_content(),
            Change::Lagged => false,
        }
    }
}

/// The merged subscriptions of the object managers and the sources.
pub(crate) struct Changes {
    configmaps: Option<broadcast::Receiver<ObjectRef>>,
    secrets: Option<broadcast::Receiver<ObjectRef>>,
    sources: SourceChanges,
}

impl Changes {
    /// Subscribes to every manager; only changes after this call arrive.
    pub(crate) fn subscribe(
        configmaps: &ConfigMapManager,
        secrets: &SecretManager,
        sources: &Sources,
    ) -> Self {
        Self {
            configmaps: Some(configmaps.subscribe()),
            secrets: Some(secrets.subscribe()),
            sources: sources.subscribe(),
        }
    }

    /// The next change of any manager; pending for ever once all have stopped.
    ///
    /// # Cancel safety
    /// Cancel-safe: every receiver's `recv` is.
    pub(crate) async fn next(&mut self) -> Change {
        tokio::select! {
            change = object(&mut self.configmaps) => change,
            change = object(&mut self.secrets) => change,
            change = self.sources.recv() => change.map_or(Change::Lagged, Change::Source),
        }
    }
}

/// The next object change of one manager; a closed channel never resolves again.
async fn object(rx: &mut Option<broadcast::Receiver<ObjectRef>>) -> Change {
    let Some(receiver) = rx.as_mut() else {
        return std::future::pending().await;
    };
    match receiver.recv().await {
        Ok(object) => Change::Object(object),
        Err(RecvError::Lagged(_)) => Change::Lagged,
        Err(RecvError::Closed) => {
            *rx = None;
            std::future::pending().await
        }
    }
}

/// Which volumes a pass looks at.
#[derive(Debug)]
pub(crate) enum Scope {
    /// Every desired and every mounted volume, and their token refresh deadlines: after a
    /// pod was removed, an unmount ended, a deadline passed, the resync.
    All,
    /// Only these unique volume names (and their refresh deadlines): the readers of a changed
    /// object or source, the volumes of a pod added, updated or processed again, volumes whose
    /// SetUp ended with a change to take in, a failure to back off from or a token to
    /// refresh. A pass
    /// stays proportional to what changed, not to the node's volumes (at 50 updates per
    /// second on a node of 1,000 volumes, a pass over all of them per update was a quarter of
    /// the agent's CPU).
    Only(Vec<String>),
}
