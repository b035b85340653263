//! The configMap volume plugin, `kubernetes.io/configmap` (PL-1 … PL-7).

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, Volume};
use nodelet_atomic_writer::WriteOutcome;
use nodelet_core::{ObjectRef, SourceRef};

use super::api::{ObjectVersion, SetUpOutcome, VolumePlugin};
use super::host::{Medium, SetUpContext};
use super::payload::config_map_payload;
use crate::SetUpError;

/// `kubernetes.io/configmap`: projects a ConfigMap's keys into files on node disk.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConfigMapPlugin;

/// The plugin name (PL-1).
pub(crate) const NAME: &str = "kubernetes.io/configmap";

#[async_trait]
impl VolumePlugin for ConfigMapPlugin {
    fn name(&self) -> &str {
        NAME
    }

    fn can_support(&self, volume: &Volume) -> bool {
        volume.config_map.is_some()
    }

    fn sources(&self, namespace: &str, volume: &Volume) -> Vec<SourceRef> {
        volume
            .config_map
            .iter()
            .map(|s| SourceRef::Object(ObjectRef::config_map(namespace, s.name.clone())))
            .collect()
    }

    /// PL-6: fetch through the shared manager (a missing optional object is empty), build the
    /// payload (PL-7), then write it (steps 5–9). Nothing is created on disk when the fetch or
    /// the payload fails.
    async fn set_up(&self, ctx: &SetUpContext<'_>) -> Result<SetUpOutcome, SetUpError> {
        let Some(source) = ctx.volume.config_map() else {
            return Err(SetUpError::Unsupported {
                what: "a volume without a configMap source".into(),
            });
        };
        let namespace = ctx.pod.metadata.namespace.as_deref().unwrap_or_default();
        let optional = source.optional.unwrap_or(false);
        // (2) + (3) Fetch; NotFound of an optional object is an empty object.
        let object = match ctx.host.configmaps().get(namespace, &source.name).await {
            Ok(cm) => Some(cm),
            Err(e) if e.is_not_found() && optional => None,
            Err(e) => return Err(e.into()),
        };
        let empty = ConfigMap::default();
        let cm = object.as_deref().unwrap_or(&empty);
        // (4) Payload, built and written in one of the host's write slots.
        let _slot = ctx.host.write_slot().await;
        let payload =
            config_map_payload(source.items.as_deref(), cm, source.default_mode, optional)?;
        // (5)-(9) Wrapper, nested mountpoints, atomic write.
        let outcome = ctx.host.project(ctx, Medium::Disk, payload).await?;
        Ok(SetUpOutcome {
            written: outcome == WriteOutcome::Written,
            objects: vec![ObjectVersion {
                object: ObjectRef::config_map(namespace, source.name.clone()),
                resource_version: object.and_then(|o| o.metadata.resource_version.clone()),
            }],
            refresh_at: None,
        })
    }
}
