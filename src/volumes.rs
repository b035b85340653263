//! [`ManagedVolumes`]: the volume manager behind the pod worker's [`Volumes`] seam.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use nodelet_podworker::{VolumeError, Volumes};
use nodelet_volume_manager::{Error, PodUid, VolumeManager, WaitCause};

/// Adapts [`VolumeManager`] to [`Volumes`]. A wait that ends because the manager shut down is
/// an interruption (no event); a time-out is a failure with the kubelet's text, so the
/// `FailedMount` summary event is emitted (the older kubelets' behaviour, PW-4).
#[derive(Debug, Clone)]
pub(crate) struct ManagedVolumes(pub(crate) VolumeManager);

fn map(err: Error) -> VolumeError {
    match &err {
        Error::VolumesNotMounted {
            cause: WaitCause::ShutDown,
            ..
        }
        | Error::VolumesStillMounted {
            cause: WaitCause::ShutDown,
            ..
        } => VolumeError::Interrupted,
        _ => VolumeError::Failed {
            message: err.to_string(),
        },
    }
}

#[async_trait]
impl Volumes for ManagedVolumes {
    fn add_pod(&self, pod: &Pod) {
        self.0.add_pod(Arc::new(pod.clone()));
    }

    fn remove_pod(&self, uid: &PodUid) {
        self.0.remove_pod(uid);
    }

    async fn wait_for_attach_and_mount(&self, pod: &Pod) -> Result<(), VolumeError> {
        self.0.wait_for_attach_and_mount(pod).await.map_err(map)
    }

    async fn wait_for_unmount(&self, pod: &Pod) -> Result<(), VolumeError> {
        self.0.wait_for_unmount(pod).await.map_err(map)
    }
}
