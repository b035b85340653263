//! [`pod_phase`]: a pod's phase from its containers' runtime statuses, by the kubelet's rules
//! (`getPhase`).

use k8s_openapi::api::core::v1::Pod;
use nodelet_core::runtime::{CONFIG_CHANGED, ContainerState, ContainerStatus, is_sidecar};

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

/// The phase of `pod` given the runtime's `statuses` (containers never started are absent),
/// every running sidecar counted as started; [`pod_phase_with`] when the prober says which
/// sidecars started.
pub fn pod_phase(pod: &Pod, statuses: &[ContainerStatus]) -> PodPhase {
    pod_phase_with(pod, statuses, &|_| true)
}

/// The phase of `pod` given the runtime's `statuses` and `started` (whether a running
/// sidecar's instance started, PW-60):
/// 1. a regular init container that failed (ended, or waits to restart after ending, with a
///    non-zero code) under `restartPolicy: Never` fails the pod;
/// 2. a regular init container that has not succeeded keeps the pod Pending, and so does a
///    sidecar not started yet while no app container has run;
/// 3. an app container never started, or waiting without having run, keeps it Pending;
/// 4. one running container (app or sidecar) makes it Running (an app container stopped for
///    a new environment counts as running, FC-12);
/// 5. all app containers ended: Running under `Always` (they restart), Succeeded when all
///    exited 0, Failed under `Never`, Running under `OnFailure` (the failed ones restart).
///
/// Sidecars that ended count for nothing (PW-63): a pod whose app containers succeeded is
/// Succeeded whatever its stopped sidecars' exit codes.
pub fn pod_phase_with(
    pod: &Pod,
    statuses: &[ContainerStatus],
    started: &dyn Fn(&str) -> bool,
) -> PodPhase {
    let Some(spec) = pod.spec.as_ref() else {
        return PodPhase::Pending;
    };
    let policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let status = |name: &str| statuses.iter().find(|s| s.name == name);
    let (mut pending_init, mut pending_sidecars, mut failed_init) = (0, 0, 0);
    let (mut unknown, mut waiting, mut running, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for c in spec.init_containers.iter().flatten() {
        let s = status(&c.name);
        if is_sidecar(c) {
            match s.map(|s| (&s.state, &s.last_state)) {
                None => unknown += 1,
                Some((ContainerState::Running { .. }, _)) => {
                    if !started(&c.name) {
                        pending_sidecars += 1;
                    }
                    running += 1;
                }
                Some(
                    (ContainerState::Terminated(_), _) | (ContainerState::Waiting { .. }, Some(_)),
                ) => {}
                Some((ContainerState::Waiting { .. }, None)) => {
                    pending_sidecars += 1;
                    waiting += 1;
                }
            }
            continue;
        }
        match s.map(|s| (&s.state, &s.last_state)) {
            Some(
                (ContainerState::Terminated(t), _) | (ContainerState::Waiting { .. }, Some(t)),
            ) => {
                if t.exit_code != 0 {
                    failed_init += 1;
                }
            }
            _ => pending_init += 1,
        }
    }
    for c in &spec.containers {
        match status(&c.name) {
            None => unknown += 1,
            Some(s) => match &s.state {
                ContainerState::Running { .. } => running += 1,
                // FC-12: stopped for a new environment, it starts again at once.
                ContainerState::Terminated(t) if t.reason == CONFIG_CHANGED => running += 1,
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
    // The kubelet's "has an app container started": one has a status.
    let app_started = spec.containers.iter().any(|c| status(&c.name).is_some());
    // (1)
    if failed_init > 0 && policy == "Never" {
        return PodPhase::Failed;
    }
    // (2) … (5)
    if pending_init > 0 || (pending_sidecars > 0 && !app_started) || waiting > 0 {
        PodPhase::Pending
    } else if running > 0 && unknown == 0 {
        PodPhase::Running
    } else if running == 0 && stopped > 0 && unknown == 0 {
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

    fn with_sidecar(policy: &str) -> Pod {
        PodBuilder::new("ns", "p")
            .init_container(json!({"name": "i", "image": "x"}))
            .init_container(json!({"name": "s", "image": "x", "restartPolicy": "Always"}))
            .container(json!({"name": "a", "image": "x"}))
            .spec(json!({"restartPolicy": policy}))
            .build()
    }

    #[test]
    fn pw63_stopped_sidecars_count_for_nothing_once_the_app_containers_ended() {
        let pod = with_sidecar("Never");
        let killed = ended("s", 143);
        assert_eq!(
            pod_phase(&pod, &[ended("i", 0), killed.clone(), ended("a", 0)]),
            PodPhase::Succeeded
        );
        assert_eq!(
            pod_phase(&pod, &[ended("i", 0), killed, ended("a", 1)]),
            PodPhase::Failed
        );
        assert_eq!(
            pod_phase(&pod, &[ended("i", 0), running("s"), ended("a", 0)]),
            PodPhase::Running,
            "the sidecar still runs: not terminal until it is stopped"
        );
        assert_eq!(
            pod_phase(
                &with_sidecar("Always"),
                &[ended("i", 0), ended("s", 1), running("a")]
            ),
            PodPhase::Running,
            "a crashed sidecar does not fail the pod"
        );
    }

    #[test]
    fn pw60_a_sidecar_not_started_keeps_the_pod_pending_until_an_app_container_ran() {
        let pod = with_sidecar("Always");
        let not_started = |_: &str| false;
        assert_eq!(
            pod_phase_with(&pod, &[ended("i", 0), running("s")], &not_started),
            PodPhase::Pending
        );
        assert_eq!(
            pod_phase_with(
                &pod,
                &[ended("i", 0), running("s"), running("a")],
                &not_started
            ),
            PodPhase::Running,
            "a restarting sidecar's startup probe does not send the pod back to Pending"
        );
        assert_eq!(
            pod_phase(&pod, &[ended("i", 0), running("s")]),
            PodPhase::Pending,
            "the app container has not started"
        );
    }
}
