//! Volume plugins: the [`VolumePlugin`] trait, the contexts it receives, the registry, and the
//! built-in plugins (configMap, secret, projected, downwardAPI, emptyDir).

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, Volume};
use nodelet_core::{ObjectRef, PodUid};
use tokio::time::Instant;

use crate::SetUpError;

mod configmap;
mod downward_api;
mod empty_dir;
mod host;
mod ownership;
mod payload;
mod projected;
mod secret;

pub use configmap::ConfigMapPlugin;
pub use downward_api::{DownwardApiPlugin, collect_downward_api_data};
pub use empty_dir::EmptyDirPlugin;
pub(crate) use host::probe_tmpfs as host_probe_tmpfs;
pub use host::{Medium, VolumeHost};
pub use ownership::set_volume_ownership;
pub use payload::{config_map_payload, secret_payload};
pub use projected::ProjectedPlugin;
pub use secret::SecretPlugin;

/// The version of an object a SetUp projected (for the agent's `/pods` endpoint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectVersion {
    /// Which object.
    pub object: ObjectRef,
    /// Its `metadata.resourceVersion`; `None` when it is missing and optional.
    pub resource_version: Option<String>,
}

/// Everything a plugin's [`VolumePlugin::set_up`] needs (VM-10).
#[derive(Clone, Copy)]
pub struct SetUpContext<'a> {
    /// The pod's UID, validated when the pod was added (its directory `pods/<uid>/`).
    pub pod_uid: &'a PodUid,
    /// The latest pod object of the desired state (PL-4, VM-5).
    pub pod: &'a Pod,
    /// The pod volume.
    pub volume: &'a Volume,
    /// The volume directory (PL-1).
    pub dir: &'a Path,
    /// Whether the volume is already mounted (a remount must never remove live content).
    pub remount: bool,
    /// The pod's `securityContext.fsGroup` (PL-11).
    pub fs_group: Option<u32>,
    /// The pod's effective `runAsUser` when all containers agree (VM-10).
    pub fs_user: Option<u32>,
    /// Shared services: object managers, tokens, disk layout.
    pub host: &'a VolumeHost,
}

/// Everything a plugin's [`VolumePlugin::tear_down`] needs.
#[derive(Clone, Copy)]
pub struct TearDownContext<'a> {
    /// The pod's UID.
    pub pod_uid: &'a PodUid,
    /// The pod volume name.
    pub volume_name: &'a str,
    /// The volume directory (PL-1).
    pub dir: &'a Path,
    /// Shared services.
    pub host: &'a VolumeHost,
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

    /// The objects (in the pod's `namespace`) whose changes should remount the volume at once
    /// (live updates).
    fn referenced_objects(&self, namespace: &str, volume: &Volume) -> Vec<ObjectRef> {
        let _ = (namespace, volume);
        Vec::new()
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

/// The plugins a [`VolumeManager`](crate::VolumeManager) knows, looked up by
/// [`VolumePlugin::can_support`] (first match wins) or by name.
#[derive(Clone)]
pub struct PluginRegistry {
    plugins: Vec<Arc<dyn VolumePlugin>>,
}

impl std::fmt::Debug for PluginRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.plugins.iter().map(|p| p.name().to_owned()))
            .finish()
    }
}

impl Default for PluginRegistry {
    /// configMap, secret, projected, downwardAPI and emptyDir.
    fn default() -> Self {
        Self {
            plugins: vec![
                Arc::new(ConfigMapPlugin),
                Arc::new(SecretPlugin),
                Arc::new(ProjectedPlugin),
                Arc::new(DownwardApiPlugin),
                Arc::new(EmptyDirPlugin),
            ],
        }
    }
}

impl PluginRegistry {
    /// A registry with no plugin at all.
    pub fn empty() -> Self {
        Self {
            plugins: Vec::new(),
        }
    }

    /// Adds a plugin; it is consulted after the ones already registered.
    #[must_use]
    pub fn with(mut self, plugin: Arc<dyn VolumePlugin>) -> Self {
        self.plugins.push(plugin);
        self
    }

    /// The plugin for a pod volume (PL-2), if any.
    pub fn find(&self, volume: &Volume) -> Option<Arc<dyn VolumePlugin>> {
        self.plugins.iter().find(|p| p.can_support(volume)).cloned()
    }

    /// The plugin with this name.
    pub fn by_name(&self, name: &str) -> Option<Arc<dyn VolumePlugin>> {
        self.plugins.iter().find(|p| p.name() == name).cloned()
    }

    /// The registered plugins, in lookup order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn VolumePlugin>> {
        self.plugins.iter()
    }
}

/// The mode as the writer takes it; out-of-range values are kept out of range so the writer
/// rejects them with a clear error.
pub(crate) fn mode_bits(mode: i32) -> u32 {
    u32::try_from(mode).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(json: serde_json::Value) -> Volume {
        serde_json::from_value(json).unwrap()
    }

    // PL-2 (TestCanSupport): an empty configMap name still counts.
    #[test]
    fn the_registry_finds_each_plugin_by_its_source_field() {
        let registry = PluginRegistry::default();
        let name = |v: serde_json::Value| registry.find(&volume(v)).map(|p| p.name().to_owned());
        assert_eq!(
            name(serde_json::json!({"name": "v", "configMap": {"name": ""}})).as_deref(),
            Some("kubernetes.io/configmap")
        );
        assert_eq!(
            name(serde_json::json!({"name": "v", "secret": {}})).as_deref(),
            Some("kubernetes.io/secret")
        );
        assert_eq!(
            name(serde_json::json!({"name": "v", "projected": {}})).as_deref(),
            Some("kubernetes.io/projected")
        );
        assert_eq!(
            name(serde_json::json!({"name": "v", "downwardAPI": {}})).as_deref(),
            Some("kubernetes.io/downward-api")
        );
        assert_eq!(
            name(serde_json::json!({"name": "v", "emptyDir": {}})).as_deref(),
            Some("kubernetes.io/empty-dir")
        );
        assert_eq!(
            name(serde_json::json!({"name": "v", "hostPath": {"path": "/"}})),
            None
        );
        assert_eq!(name(serde_json::json!({"name": "v"})), None);
    }
}
