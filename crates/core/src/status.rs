//! The pod status seam: [`StatusSink`], where the pod workers hand each pod's newest API
//! status (the kubelet's status manager), beside the [`EventSink`](crate::EventSink).

use k8s_openapi::api::core::v1::PodStatus;

use crate::AdmittedPod;

/// Where pod statuses go (the agent patches the pod's status). Implementations must not block
/// (queue and return).
pub trait StatusSink: Send + Sync + 'static {
    /// The newest status of `pod`: the conditions the node owns (`PodScheduled` and readiness
    /// gates' are others'), the container statuses, phase and addresses.
    fn set_status(&self, pod: &AdmittedPod, status: &PodStatus);

    /// `pod` has finished terminating: volumes gone, references dropped. The agent deletes the
    /// API object (grace period 0), as the kubelet's status manager does.
    fn terminated(&self, pod: &AdmittedPod);
}

/// A [`StatusSink`] that drops everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoStatus;

impl StatusSink for NoStatus {
    fn set_status(&self, _pod: &AdmittedPod, _status: &PodStatus) {}
    fn terminated(&self, _pod: &AdmittedPod) {}
}
