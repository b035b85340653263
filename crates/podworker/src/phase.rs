//! [`pod_phase`]: a pod's phase from its containers' runtime statuses, by the kubelet's rules
//! (`getPhase`).

use k8s_openapi::api::core::v1::Pod;
use nodelet_core::runtime::{ContainerState, ContainerStatus};

/// A pod's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodPhase {
    /// Not every container started yet (init containers running, a container waiting).
    Pending,
    /// Containers run (or restart).
    Running,
    /// Every container ended with exit code 0 and none will restart.
    Succeeded,
    /// Every container ended, one at least failed, and none will restart.
    Failed,
}

impl PodPhase {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
        }
    }

    /// Succeeded or Failed.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}

/// The phase of `pod` given the runtime's `statuses` (containers never started are absent):
/// 1. an init container that failed under `restartPolicy: Never` fails the pod;
/// 2. an init container that has not succeeded keeps the pod Pending;
/// 3. an app container never started, or waiting without having run, keeps it Pending;
/// 4. one running container makes it Running;
/// 5. all ended: Running under `Always` (they restart), Succeeded when all exited 0, Failed
///    under `Never`, Running under `OnFailure` (the failed ones restart).
pub fn pod_phase(pod: &Pod, statuses: &[ContainerStatus]) -> PodPhase {
    let Some(spec) = pod.spec.as_ref() else {
        return PodPhase::Pending;
    };
    let policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let status = |name: &str| statuses.iter().find(|s| s.name == name);
    for c in spec.init_containers.iter().flatten() {
        match status(&c.name).map(|s| (&s.state, &s.last_state)) {
            Some((ContainerState::Terminated(t), _)) if t.exit_code == 0 => {}
            // (1)
            Some((ContainerState::Terminated(_), _)) if policy == "Never" => {
                return PodPhase::Failed;
            }
            // (2)
            _ => return PodPhase::Pending,
        }
    }
    let (mut waiting, mut running, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for c in &spec.containers {
        match status(&c.name) {
            None => waiting += 1,
            Some(s) => match &s.state {
                ContainerState::Running { .. } => running += 1,
                ContainerState::Terminated(t) => {
                    stopped += 1;
                    if t.exit_code == 0 {
                        succeeded += 1;
                    }
                }
                ContainerState::Waiting { .. } if s.last_state.is_some() => stopped += 1,
                ContainerState::Waiting { .. } => waiting += 1,
            },
        }
    }
    // (3) … (5)
    if waiting > 0 {
        PodPhase::Pending
    } else if running > 0 {
        PodPhase::Running
    } else if stopped > 0 {
        if policy == "Always" {
            PodPhase::Running
        } else if stopped == succeeded {
            PodPhase::Succeeded
        } else if policy == "Never" {
            PodPhase::Failed
        } else {
            PodPhase::Running
        }
    } else {
        PodPhase::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use nodelet_core::runtime::Termination;
    use nodelet_testutil::PodBuilder;
    use serde_json::json;

    use super::*;

    fn pod(policy: &str) -> Pod {
        PodBuilder::new("ns", "p")
            .init_container(json!({"name": "i", "image": "x"}))
            .container(json!({"name": "a", "image": "x"}))
            .container(json!({"name": "b", "image": "x"}))
            .spec(json!({"restartPolicy": policy}))
            .build()
    }

    fn ended(name: &str, code: i32) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: ContainerState::Terminated(Termination {
                exit_code: code,
                signal: None,
                reason: if code == 0 { "Completed" } else { "Error" }.into(),
                message: None,
                started_at: SystemTime::UNIX_EPOCH,
                finished_at: SystemTime::UNIX_EPOCH,
            }),
            last_state: None,
            restart_count: 0,
            container_id: String::new(),
        }
    }

    fn running(name: &str) -> ContainerStatus {
        ContainerStatus {
            state: ContainerState::Running {
                started_at: SystemTime::UNIX_EPOCH,
            },
            ..ended(name, 0)
        }
    }

    #[test]
    fn init_containers_keep_the_pod_pending_until_they_succeed() {
        assert_eq!(pod_phase(&pod("Never"), &[]), PodPhase::Pending);
        assert_eq!(pod_phase(&pod("Never"), &[running("i")]), PodPhase::Pending);
        assert_eq!(pod_phase(&pod("Never"), &[ended("i", 1)]), PodPhase::Failed);
        assert_eq!(
            pod_phase(&pod("OnFailure"), &[ended("i", 1)]),
            PodPhase::Pending
        );
        assert_eq!(
            pod_phase(&pod("Never"), &[ended("i", 0), running("a")]),
            PodPhase::Pending,
            "b not started yet"
        );
    }

    #[test]
    fn ended_containers_decide_by_restart_policy() {
        let all_ok = [ended("i", 0), ended("a", 0), ended("b", 0)];
        let one_failed = [ended("i", 0), ended("a", 0), ended("b", 2)];
        assert_eq!(pod_phase(&pod("Never"), &all_ok), PodPhase::Succeeded);
        assert_eq!(pod_phase(&pod("OnFailure"), &all_ok), PodPhase::Succeeded);
        assert_eq!(pod_phase(&pod("Always"), &all_ok), PodPhase::Running);
        assert_eq!(pod_phase(&pod("Never"), &one_failed), PodPhase::Failed);
        assert_eq!(pod_phase(&pod("OnFailure"), &one_failed), PodPhase::Running);
        assert_eq!(
            pod_phase(&pod("Never"), &[ended("i", 0), running("a"), ended("b", 0)]),
            PodPhase::Running
        );
    }
}
