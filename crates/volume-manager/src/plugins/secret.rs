//! The secret volume plugin, `kubernetes.io/secret` (PL-1 … PL-6, PL-8).

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Secret, Volume};
use nodelet_atomic_writer::WriteOutcome;
use nodelet_core::{ObjectRef, SourceRef};

use super::api::{ObjectVersion, SetUpOutcome, VolumePlugin};
use super::host::{Medium, SetUpContext};
use super::payload::secret_payload;
use crate::SetUpError;

/// `kubernetes.io/secret`: projects a Secret's keys into files on a tmpfs (node disk when
/// the agent may not mount).
#[derive(Debug, Clone, Copy, Default)]
pub struct SecretPlugin;

/// The plugin name (PL-1).
pub(crate) const NAME: &str = "kubernetes.io/secret";

#[async_trait]
impl VolumePlugin for SecretPlugin {
    fn name(&self) -> &str {
        NAME
    }

    fn can_support(&self, volume: &Volume) -> bool {
        volume.secret.is_some()
    }

    fn sources(&self, namespace: &str, volume: &Volume) -> Vec<SourceRef> {
        volume
            .secret
            .iter()
            .map(|s| {
                let name = s.secret_name.clone().unwrap_or_default();
                SourceRef::Object(ObjectRef::secret(namespace, name))
            })
            .collect()
    }

    /// PL-6: fetch through the shared manager (a missing optional object is empty), build the
    /// payload (PL-8), then write it (steps 5–9). Nothing is created on disk when the fetch or
    /// the payload fails.
    async fn set_up(&self, ctx: &SetUpContext<'_>) -> Result<SetUpOutcome, SetUpError> {
        let Some(source) = ctx.volume.secret() else {
            return Err(SetUpError::Unsupported {
                what: "a volume without a secret source".into(),
            });
        };
        let namespace = ctx.pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = source.secret_name.clone().unwrap_or_default();
        let optional = source.optional.unwrap_or(false);
        // (2) + (3) Fetch; NotFound of an optional object is an empty object.
        let object = match ctx.host.secrets().get(namespace, &name).await {
            Ok(cm) => Some(cm),
            Err(e) if e.is_not_found() && optional => None,
            Err(e) => return Err(e.into()),
        };
        let empty = Secret::default();
        let secret = object.as_deref().unwrap_or(&empty);
        // (4) Payload, built and written in one of the host's write slots.
        let _slot = ctx.host.write_slot().await;
        let payload = secret_payload(
            source.items.as_deref(),
            secret,
            source.default_mode,
            optional,
        )?;
        // (5)-(9) Wrapper, nested mountpoints, atomic write.
        let outcome = ctx.host.project(ctx, Medium::Memory, payload).await?;
        Ok(SetUpOutcome {
            written: outcome == WriteOutcome::Written,
            objects: vec![ObjectVersion {
                object: ObjectRef::secret(namespace, name),
                resource_version: object.and_then(|o| o.metadata.resource_version.clone()),
            }],
            refresh_at: None,
        })
    }
}
