//! [`AgentHost`]: the agent as the kubelet API's [`Host`] — its known pods, and the process
//! runtime's containers when it runs one.

use std::sync::Weak;

use nodelet_core::runtime::ContainerStatus;
use nodelet_core::{AdmittedPod, PodUid};
use nodelet_kubelet_api::{ExecTarget, Host};
use nodelet_runtime::ProcessRuntime;
use tokio::sync::broadcast;

use crate::state::AgentState;

/// The pods the pod source last saw, and `runtime`'s containers (none without one, as with
/// `--runtime config`).
pub(crate) struct AgentHost {
    pub(crate) state: Weak<AgentState>,
    pub(crate) runtime: Option<ProcessRuntime>,
}

impl Host for AgentHost {
    fn pods(&self) -> Vec<AdmittedPod> {
        self.state
            .upgrade()
            .map(|s| s.known_pods.read().values().cloned().collect())
            .unwrap_or_default()
    }

    fn container_statuses(&self, uid: &PodUid) -> Vec<ContainerStatus> {
        self.runtime
            .as_ref()
            .map(|r| r.statuses(uid))
            .unwrap_or_default()
    }

    fn status_changes(&self) -> broadcast::Receiver<PodUid> {
        match &self.runtime {
            Some(runtime) => runtime.changes(),
            // Nothing runs: a closed receiver.
            None => broadcast::channel(1).1,
        }
    }

    fn exec_target(&self, uid: &PodUid, container: &str) -> Option<ExecTarget> {
        let (pid, spec) = self.runtime.as_ref()?.exec_target(uid, container)?;
        Some(ExecTarget::new(pid, spec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_runtime_or_a_state_the_agent_has_no_pods_statuses_or_exec_targets() {
        let host = AgentHost {
            state: Weak::new(),
            runtime: None,
        };
        let uid = PodUid::new("u1").unwrap();
        assert!(host.pods().is_empty());
        assert!(host.container_statuses(&uid).is_empty());
        assert!(host.exec_target(&uid, "app").is_none());
        assert!(matches!(
            host.status_changes().try_recv(),
            Err(broadcast::error::TryRecvError::Closed)
        ));
    }
}
