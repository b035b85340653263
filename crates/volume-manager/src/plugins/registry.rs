//! [`PluginRegistry`]: the plugins a volume manager knows, looked up by the volume they support
//! or by name.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Volume;

use super::api::VolumePlugin;
use super::configmap::ConfigMapPlugin;
use super::downward_api::DownwardApiPlugin;
use super::empty_dir::EmptyDirPlugin;
use super::host_path::HostPathPlugin;
use super::projected::ProjectedPlugin;
use super::secret::SecretPlugin;

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
    /// configMap, secret, projected, downwardAPI, emptyDir and hostPath.
    fn default() -> Self {
        Self {
            plugins: vec![
                Arc::new(ConfigMapPlugin),
                Arc::new(SecretPlugin),
                Arc::new(ProjectedPlugin),
                Arc::new(DownwardApiPlugin),
                Arc::new(EmptyDirPlugin),
                Arc::new(HostPathPlugin),
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
            name(serde_json::json!({"name": "v", "hostPath": {"path": "/"}})).as_deref(),
            Some("kubernetes.io/host-path")
        );
        assert_eq!(
            name(serde_json::json!({"name": "v", "persistentVolumeClaim": {"claimName": "c"}})),
            None
        );
        assert_eq!(name(serde_json::json!({"name": "v"})), None);
    }
}
