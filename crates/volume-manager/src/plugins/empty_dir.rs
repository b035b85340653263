//! The emptyDir volume plugin, `kubernetes.io/empty-dir`: an empty directory (tmpfs for
//! `medium: Memory` when the agent may mount), so pods using one are not blocked.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Volume;

use super::api::{SetUpOutcome, VolumePlugin};
use super::host::{Medium, SetUpContext};
use crate::SetUpError;

/// `kubernetes.io/empty-dir`. Created once; never remounted (its content belongs to the pod).
#[derive(Debug, Clone, Copy, Default)]
pub struct EmptyDirPlugin;

#[async_trait]
impl VolumePlugin for EmptyDirPlugin {
    fn name(&self) -> &str {
        "kubernetes.io/empty-dir"
    }

    fn can_support(&self, volume: &Volume) -> bool {
        volume.empty_dir.is_some()
    }

    fn requires_remount(&self) -> bool {
        false
    }

    async fn set_up(&self, ctx: &SetUpContext<'_>) -> Result<SetUpOutcome, SetUpError> {
        let memory = ctx.volume.empty_dir().and_then(|e| e.medium.as_deref()) == Some("Memory");
        let medium = if memory { Medium::Memory } else { Medium::Disk };
        ctx.host.set_up_dir(ctx, medium).await?;
        Ok(SetUpOutcome::default())
    }
}
