//! The plugin interface: the [`VolumePlugin`] trait and what a SetUp reports
//! ([`SetUpOutcome`], [`ObjectVersion`]). The contexts a plugin receives are in `host.rs`,
//! beside the [`VolumeHost`](super::VolumeHost) they carry.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Volume;
use std::path::PathBuf;

use nodelet_core::{ObjectRef, PodVolume, SourceRef};
use tokio::time::Instant;

use super::host::{SetUpContext, TearDownContext};
use crate::SetUpError;

/// The version of an object a SetUp projected (for the agent's `/pods` endpoint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectVersion {
    /// Which object.
    pub object: ObjectRef,
    /// Its `metadata.resourceVersion`; `None` when it is missing and optional.
    pub resource_version: Option<String>,
}

/// What a successful SetUp did.
#[derive(Debug, Clone, Default)]
pub struct SetUpOutcome {
    /// Whether new content was written (false: the payload was unchanged).
    pub written: bool,
    /// The objects projected, with their resourceVersions.
    pub objects: Vec<ObjectVersion>,
    /// When the volume must be set up again even if nothing changes (token refresh, PL-10).
    pub refresh_at: Option<Instant>,
}

/// A volume plugin: the kubelet's `VolumePlugin` + `Mounter` + `Unmounter` in one trait.
///
/// The volume manager calls at most one of `set_up` / `tear_down` at a time per volume
/// (VM-8), so implementations need no locking of their own per directory.
#[async_trait]
pub trait VolumePlugin: Send + Sync + 'static {
    /// The plugin name, e.g. `kubernetes.io/configmap` (PL-1). Its `/` → `~` escape is the
    /// directory under `pods/<uid>/volumes/`.
    fn name(&self) -> &str;

    /// PL-2: whether this plugin handles the pod volume.
    fn can_support(&self, volume: &Volume) -> bool;

    /// PL-4: whether a mounted volume is set up again on every pod resync and object change.
    fn requires_remount(&self) -> bool {
        true
    }

    /// What the volume reads besides its pod — objects in the pod's `namespace`, trust
    /// bundles, the pod's certificates — whose changes should set it up again at once (live
    /// updates, PL-20, PL-21). The volume manager matches them against every change without
    /// knowing which source is which.
    fn sources(&self, namespace: &str, volume: &Volume) -> Vec<SourceRef> {
        let _ = (namespace, volume);
        Vec::new()
    }

    /// The node's own path a volume is, when it is one (hostPath, PL-33): containers mount it
    /// rather than the volume directory under the pod. `None` (the default): the volume is
    /// its directory under `pods/<uid>/volumes/`.
    fn host_path(&self, volume: &PodVolume) -> Option<PathBuf> {
        let _ = volume;
        None
    }

    /// Make the volume directory hold the volume's current content. Idempotent.
    ///
    /// # Errors
    /// A [`SetUpError`] whose `Display` follows `MountVolume.SetUp failed for volume "<v>" : `.
    /// On a remount the previous content must stay in place.
    async fn set_up(&self, ctx: &SetUpContext<'_>) -> Result<SetUpOutcome, SetUpError>;

    /// PL-14: remove the volume directory (unmounting a tmpfs first). Idempotent.
    ///
    /// # Errors
    /// [`SetUpError::TearDown`] when the directory could not be removed.
    async fn tear_down(&self, ctx: &TearDownContext<'_>) -> Result<(), SetUpError> {
        ctx.host
            .tear_down_dir(ctx.pod_uid, ctx.volume_name, ctx.dir)
            .await
    }
}
