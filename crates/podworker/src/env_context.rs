//! [`EnvContext`]: what environment resolution sees of a pod on this node (the pod with its
//! addresses in a sandbox on the host's network; the options, with its emptyDir volumes):
//! shared by a start (`sync.rs`) and a check of a followed environment (`follow/env/`,
//! FC-10), so both resolve the same environment.

use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use nodelet_core::{AdmittedPod, PodDirs};

use crate::env::{EnvOptions, PodVolumes};

/// The node's side of environment resolution ([`SyncerConfig::env_context`](crate::SyncerConfig::env_context)).
#[derive(Debug, Clone)]
pub struct EnvContext {
    /// The agent's root directory (the pods' emptyDir volumes are under it).
    pub root_dir: PathBuf,
    /// Environment resolution options.
    pub env: EnvOptions,
    /// The node's addresses: a pod in a sandbox on the host's network has them as its IPs.
    pub host_ips: Vec<String>,
}

impl EnvContext {
    /// The pod and the options environment resolution sees for `pod`, in a `sandbox` on the
    /// host's network or not.
    pub(crate) fn resolve(&self, pod: &AdmittedPod, sandbox: bool) -> (Arc<Pod>, EnvOptions) {
        let env_pod = if sandbox {
            with_host_ips(pod, &self.host_ips)
        } else {
            pod.pod().clone()
        };
        // fileKeyRef reads the pod's emptyDir volumes under its directory.
        let options = EnvOptions {
            pod_volumes: Some(PodVolumes::new(PodDirs::new(&self.root_dir), pod)),
            ..self.env.clone()
        };
        (env_pod, options)
    }
}

/// The pod as environment resolution sees it in a sandbox on the host's network: the pod
/// shares the host's network, so its IPs are the node's (`status.podIP(s)`,
/// `status.hostIP(s)`), as a kubelet fills them in from the sandbox before it starts
/// containers.
fn with_host_ips(pod: &AdmittedPod, ips: &[String]) -> Arc<Pod> {
    if ips.is_empty() {
        return pod.pod().clone();
    }
    let mut copy = Pod::clone(pod);
    let status = copy.status.get_or_insert_with(Default::default);
    status.host_ip.get_or_insert_with(|| ips[0].clone());
    status.pod_ip.get_or_insert_with(|| ips[0].clone());
    if status.pod_ips.as_ref().is_none_or(Vec::is_empty) {
        status.pod_ips = Some(
            ips.iter()
                .map(|ip| k8s_openapi::api::core::v1::PodIP { ip: ip.clone() })
                .collect(),
        );
    }
    if status.host_ips.as_ref().is_none_or(Vec::is_empty) {
        status.host_ips = Some(
            ips.iter()
                .map(|ip| k8s_openapi::api::core::v1::HostIP { ip: ip.clone() })
                .collect(),
        );
    }
    Arc::new(copy)
}
