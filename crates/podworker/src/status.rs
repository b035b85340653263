//! [`generate_pod_status`]: a pod's API status from what its last sync knows (the kubelet's
//! `generateAPIPodStatus`, beside [`pod_phase`](crate::pod_phase), its `getPhase`), for every runtime.
//!
//! The input is typed: the runtime's container states ([`ContainerStatus`]), the probes'
//! `started`/`ready`, and the config side's verdicts ([`PodConfigStatus`]). The output is the
//! k8s-openapi [`PodStatus`] the [`StatusSink`](nodelet_core::StatusSink) gets: the conditions
//! the node owns (`PodReadyToStartContainers`, [`CONFIG_READY_CONDITION`], for a pod that
//! follows changes [`CONFIG_CURRENT_CONDITION`], `Initialized`,
//! `ContainersReady`, `Ready` with the readiness gates, PW-35), the container statuses (init,
//! regular, ephemeral), the phase, the start time and, when the runtime gave the pod a sandbox,
//! its addresses.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::{
    Container, ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus as ApiStatus, HostIP, Pod, PodCondition, PodIP,
    PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use nodelet_core::go;
use nodelet_core::runtime::{ContainerState, ContainerStatus, Termination, is_sidecar};

use crate::follow::ContainerFreshness;
use crate::phase::{PodPhase, pod_phase_with};
use crate::probe::ContainerProbeStatus;
use crate::seams::{ContainerConfigState, ContainerConfigStatus, PodConfigStatus};

/// The pod condition telling whether every container's configuration (environment, pull
/// secrets) was resolved. Not in the kubelet.
pub const CONFIG_READY_CONDITION: &str = "nodelet.io/ConfigReady";

/// The pod condition telling whether every running container sees the current version of
/// each object it reads (FC-20): only for a pod that asks for a follow behaviour. Not in the
/// kubelet.
pub const CONFIG_CURRENT_CONDITION: &str = "nodelet.io/ConfigCurrent";

/// The reason of a [`CONFIG_CURRENT_CONDITION`] that is `False`.
pub const CONFIG_STALE_REASON: &str = "StaleConfiguration";

/// The API status of `pod` after a sync that found `status`; `start_time` is when the node
/// first reported the pod (`status.startTime`). Conditions carry no `lastTransitionTime` (the
/// status writer keeps those, knowing the earlier ones); an absent reason or message is
/// `None`.
pub fn generate_pod_status(
    pod: &Pod,
    status: &PodConfigStatus,
    start_time: SystemTime,
) -> PodStatus {
    let view = ContainerView { pod, status };
    // PW-60: a running sidecar whose startup probe has not passed keeps the pod Pending until
    // an app container ran (without a prober, running is started).
    let started = |name: &str| view.probed(name).is_none_or(|p| p.started);
    let phase = pod_phase_with(pod, &status.statuses, &started);
    let init: Vec<ApiStatus> = view
        .init_containers()
        .map(|c| view.status(c, true))
        .collect();
    let regular: Vec<ApiStatus> = view
        .regular_containers()
        .map(|c| view.status(c, false))
        .collect();
    let conditions = node_conditions(&view, phase, &init, &regular);
    let ephemeral: Vec<ApiStatus> = view
        .ephemeral_containers()
        .map(|c| view.ephemeral(c))
        .collect();
    let generation = pod.metadata.generation;
    let mut out = PodStatus {
        phase: Some(phase.as_str().to_owned()),
        start_time: Some(time(start_time)),
        init_container_statuses: Some(init),
        container_statuses: Some(regular),
        ephemeral_container_statuses: (!ephemeral.is_empty()).then_some(ephemeral),
        conditions: Some(
            conditions
                .into_iter()
                .map(|c| PodCondition {
                    observed_generation: generation,
                    ..c
                })
                .collect(),
        ),
        observed_generation: generation,
        ..PodStatus::default()
    };
    set_addresses(&mut out, &status.pod_ips);
    // PW-26: the node failed the pod, whatever its containers say.
    if let Some(eviction) = &status.eviction {
        out.phase = Some(PodPhase::Failed.as_str().to_owned());
        out.reason = Some(eviction.reason.clone());
        out.message = Some(eviction.message.clone());
    }
    out
}

/// The conditions the node owns, in order: `PodReadyToStartContainers`, the config
/// condition, `Initialized`, `ContainersReady`, `Ready` (without transition times), from the
/// pod's `phase` and the `init` and `regular` container statuses just made.
fn node_conditions(
    view: &ContainerView<'_>,
    phase: PodPhase,
    init: &[ApiStatus],
    regular: &[ApiStatus],
) -> Vec<PodCondition> {
    // PW-64: a sidecar's readiness counts for the pod's, before the app containers'.
    let sidecars: Vec<&str> = view
        .init_containers()
        .filter(|c| is_sidecar(c))
        .map(|c| c.name.as_str())
        .collect();
    let unready: Vec<&str> = init
        .iter()
        .filter(|s| sidecars.contains(&s.name.as_str()))
        .chain(regular)
        .filter(|c| !c.ready)
        .map(|c| c.name.as_str())
        .collect();
    // PW-65: a sidecar is complete once it started, a regular init container once it
    // succeeded.
    let incomplete: Vec<&str> = view
        .init_containers()
        .filter(|c| {
            if is_sidecar(c) {
                !init
                    .iter()
                    .any(|s| s.name == c.name && s.started == Some(true))
            } else {
                !succeeded(view.runtime(&c.name))
            }
        })
        .map(|c| c.name.as_str())
        .collect();
    // Once an app container ran (it runs or ended) the pod was initialized, whatever its
    // sidecars do since; a pod that succeeded with every init container known was too.
    let app_ran = view.regular_containers().any(|c| {
        view.runtime(&c.name)
            .is_some_and(|s| !matches!(s.state, ContainerState::Waiting { .. }))
    });
    let completed = phase == PodPhase::Succeeded
        && view.init_containers().next().is_some()
        && view
            .init_containers()
            .all(|c| view.runtime(&c.name).is_some());
    let containers_ready = containers_ready(phase, &unready);
    let mut out = vec![
        condition(
            "PodReadyToStartContainers",
            view.status.volumes.ready,
            None,
            view.status.volumes.message.clone(),
        ),
        condition(
            CONFIG_READY_CONDITION,
            view.status.config.ready,
            (!view.status.config.ready).then(|| "ConfigNotResolved".to_owned()),
            view.status.config.message.clone(),
        ),
    ];
    out.extend(view.status.freshness.as_deref().map(config_current));
    out.extend([
        initialized(&incomplete, app_ran, completed),
        containers_ready.clone(),
        pod_ready(view.pod, containers_ready),
    ]);
    out
}

/// FC-20: [`CONFIG_CURRENT_CONDITION`] from what each running container sees: `True` when
/// every one sees current content; else `False`, [`CONFIG_STALE_REASON`], and a message
/// naming, per container, the objects it sees an old version of (kind, namespace, name).
fn config_current(freshness: &[ContainerFreshness]) -> PodCondition {
    let stale: Vec<String> = freshness
        .iter()
        .filter_map(|c| {
            let sources = c.stale();
            (!sources.is_empty()).then(|| {
                let names: Vec<String> = sources.iter().map(ToString::to_string).collect();
                format!("container {} sees an old {}", c.container, names.join(", "))
            })
        })
        .collect();
    condition(
        CONFIG_CURRENT_CONDITION,
        stale.is_empty(),
        (!stale.is_empty()).then(|| CONFIG_STALE_REASON.to_owned()),
        (!stale.is_empty()).then(|| stale.join("; ")),
    )
}

/// The pod's addresses (`hostIP(s)`, `podIP(s)`), when its sandbox has any.
fn set_addresses(out: &mut PodStatus, ips: &[String]) {
    if let Some(first) = ips.first() {
        out.host_ip = Some(first.clone());
        out.pod_ip = Some(first.clone());
        out.host_ips = Some(ips.iter().map(|ip| HostIP { ip: ip.clone() }).collect());
        out.pod_ips = Some(ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect());
    }
}

/// A pod's containers as one sync saw them: the spec, the runtime's states, the config side's
/// waiting reasons and the probes' verdicts.
struct ContainerView<'a> {
    pod: &'a Pod,
    status: &'a PodConfigStatus,
}

impl<'a> ContainerView<'a> {
    fn init_containers(&self) -> impl Iterator<Item = &'a Container> + use<'a> {
        self.pod
            .spec
            .iter()
            .flat_map(|s| s.init_containers.iter().flatten())
    }

    fn regular_containers(&self) -> impl Iterator<Item = &'a Container> + use<'a> {
        self.pod.spec.iter().flat_map(|s| s.containers.iter())
    }

    fn ephemeral_containers(
        &self,
    ) -> impl Iterator<Item = &'a k8s_openapi::api::core::v1::EphemeralContainer> + use<'a> {
        self.pod
            .spec
            .iter()
            .flat_map(|s| s.ephemeral_containers.iter().flatten())
    }

    fn runtime(&self, name: &str) -> Option<&'a ContainerStatus> {
        self.status.statuses.iter().find(|s| s.name == name)
    }

    /// The state of container `name`: a configuration error's (PW-12) before the runtime's;
    /// without either, waiting as a container not created yet (PW-55).
    fn state(&self, name: &str, config: &[ContainerConfigStatus]) -> ApiState {
        let config_waiting = config
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| match &c.state {
                ContainerConfigState::Waiting { reason, message } => Some((reason, message)),
                _ => None,
            });
        match (config_waiting, self.runtime(name)) {
            (Some((reason, message)), _) => waiting(reason, Some(message.clone())),
            (None, Some(s)) => match &s.state {
                ContainerState::Running { started_at } => ApiState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(time(*started_at)),
                    }),
                    ..ApiState::default()
                },
                ContainerState::Terminated(t) => ApiState {
                    terminated: Some(terminated(t, &s.container_id)),
                    ..ApiState::default()
                },
                ContainerState::Waiting { reason, message } => waiting(reason, message.clone()),
            },
            (None, None) => waiting(default_waiting_reason(self.pod), None),
        }
    }

    /// The fields every kind of container shares; `ready` and `started` are the caller's.
    fn base(
        &self,
        name: &str,
        image: Option<&String>,
        config: &[ContainerConfigStatus],
    ) -> ApiStatus {
        let s = self.runtime(name);
        ApiStatus {
            name: name.to_owned(),
            state: Some(self.state(name, config)),
            last_state: Some(
                s.and_then(|s| s.last_state.as_ref())
                    .map(|t| ApiState {
                        terminated: Some(terminated(t, "")),
                        ..ApiState::default()
                    })
                    .unwrap_or_default(),
            ),
            restart_count: s.map_or(0, |s| i32::try_from(s.restart_count).unwrap_or(i32::MAX)),
            image: image.cloned().unwrap_or_default(),
            image_id: String::new(),
            container_id: s
                .map(|s| s.container_id.clone())
                .filter(|id| !id.is_empty()),
            ..ApiStatus::default()
        }
    }

    /// The probes' verdict on container `name`, if it is probed.
    fn probed(&self, name: &str) -> Option<&'a ContainerProbeStatus> {
        self.status.probes.iter().find(|p| p.name == name)
    }

    /// PW-33: a regular container's `started` and `ready` are its probes' (without any,
    /// running is both), and so are a sidecar's (PW-64); an init container is ready once it
    /// succeeded, started while it runs.
    fn status(&self, c: &Container, init: bool) -> ApiStatus {
        let s = self.runtime(&c.name);
        let running = s.is_some_and(ContainerStatus::is_running);
        let (ready, started) = match self.probed(&c.name) {
            _ if init && !is_sidecar(c) => (succeeded(s), running),
            Some(p) => (p.ready, p.started),
            None => (running, running),
        };
        ApiStatus {
            ready,
            started: Some(started),
            ..self.base(&c.name, c.image.as_ref(), &self.status.containers)
        }
    }

    /// PW-57: an ephemeral container is never ready and has no `started` (the kubelet's prober
    /// fills in neither); it counts for neither the phase nor readiness.
    fn ephemeral(&self, c: &k8s_openapi::api::core::v1::EphemeralContainer) -> ApiStatus {
        self.base(&c.name, c.image.as_ref(), &self.status.ephemeral)
    }
}

/// Whether the container's current instance exited 0.
fn succeeded(s: Option<&ContainerStatus>) -> bool {
    s.and_then(ContainerStatus::terminated)
        .is_some_and(|t| t.exit_code == 0)
}

fn waiting(reason: &str, message: Option<String>) -> ApiState {
    ApiState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.to_owned()),
            message,
        }),
        ..ApiState::default()
    }
}

fn terminated(t: &Termination, container_id: &str) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: t.exit_code,
        signal: t.signal,
        reason: Some(t.reason.clone()),
        message: t.message.clone(),
        started_at: Some(time(t.started_at)),
        finished_at: Some(time(t.finished_at)),
        container_id: (!container_id.is_empty()).then(|| container_id.to_owned()),
    }
}

/// `t` as the API's time (whole seconds on the wire).
fn time(t: SystemTime) -> Time {
    Time(Timestamp::try_from(t).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// The waiting reason of a container the runtime has no state for (the kubelet's
/// `convertToAPIContainerStatuses`, PW-55): `PodInitializing` for every container, init or
/// app, of a pod that has init containers, else `ContainerCreating`.
fn default_waiting_reason(pod: &Pod) -> &'static str {
    let has_init = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|i| !i.is_empty());
    if has_init {
        "PodInitializing"
    } else {
        "ContainerCreating"
    }
}

/// A condition of the node's, without `lastTransitionTime`.
fn condition(
    type_: &str,
    ready: bool,
    reason: Option<String>,
    message: Option<String>,
) -> PodCondition {
    PodCondition {
        type_: type_.to_owned(),
        status: if ready { "True" } else { "False" }.to_owned(),
        reason,
        message,
        ..PodCondition::default()
    }
}

/// `Initialized` (PW-65): every init container done (`incomplete` empty), or an app container
/// ran; `PodCompleted` for a pod that `completed`.
fn initialized(incomplete: &[&str], app_ran: bool, completed: bool) -> PodCondition {
    let done = incomplete.is_empty() || app_ran || completed;
    condition(
        "Initialized",
        done,
        if done {
            completed.then(|| "PodCompleted".to_owned())
        } else {
            Some("ContainersNotInitialized".to_owned())
        },
        (!done).then(|| {
            format!(
                "containers with incomplete status: [{}]",
                incomplete.join(" ")
            )
        }),
    )
}

/// `ContainersReady`: every regular container ready and the pod not finished.
fn containers_ready(phase: PodPhase, unready: &[&str]) -> PodCondition {
    let terminal = phase.is_terminal();
    let ready = unready.is_empty() && !terminal;
    let reason = match phase {
        PodPhase::Succeeded => "PodCompleted",
        PodPhase::Failed => "PodFailed",
        _ => "ContainersNotReady",
    };
    condition(
        "ContainersReady",
        ready,
        (!ready).then(|| reason.to_owned()),
        (!ready && !terminal)
            .then(|| format!("containers with unready status: [{}]", unready.join(" "))),
    )
}

/// The pod's `Ready` (PW-35): `ContainersReady`'s verdict when that is not true; else true
/// only when the condition of every `spec.readinessGates` type is `True` in the pod's status,
/// with the kubelet's texts for those that are not.
fn pod_ready(pod: &Pod, containers_ready: PodCondition) -> PodCondition {
    if containers_ready.status != "True" {
        return PodCondition {
            type_: "Ready".to_owned(),
            ..containers_ready
        };
    }
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_deref());
    let unready: Vec<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.readiness_gates.iter().flatten())
        .filter_map(|gate| {
            let gate = &gate.condition_type;
            match conditions.into_iter().flatten().find(|c| c.type_ == *gate) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate {} does not exist.",
                    go::quote(gate)
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate {} is not \"True\", but {}",
                    go::quote(gate),
                    c.status
                )),
                Some(_) => None,
            }
        })
        .collect();
    if unready.is_empty() {
        condition("Ready", true, None, None)
    } else {
        condition(
            "Ready",
            false,
            Some("ReadinessGatesNotReady".to_owned()),
            Some(unready.join(", ")),
        )
    }
}

#[cfg(test)]
mod tests {
    use nodelet_testutil::PodBuilder;
    use serde_json::json;

    use super::*;
    use crate::ContainerProbeStatus;
    use crate::seams::Readiness;

    const T0: SystemTime = SystemTime::UNIX_EPOCH;

    fn pod() -> Pod {
        PodBuilder::new("ns", "p")
            .uid("u")
            .container(json!({"name": "c", "image": "img"}))
            .init_container(json!({"name": "i", "image": "init"}))
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
                started_at: T0,
                finished_at: T0,
            }),
            last_state: None,
            restart_count: 0,
            container_id: format!("nodelet://{name}"),
        }
    }

    fn running(name: &str) -> ContainerStatus {
        ContainerStatus {
            state: ContainerState::Running { started_at: T0 },
            ..ended(name, 0)
        }
    }

    /// Volumes and config ready, the init container done, `c` running with the probes'
    /// `started` and `ready`.
    fn synced(started: bool, ready: bool) -> PodConfigStatus {
        PodConfigStatus {
            volumes: Readiness {
                ready: true,
                message: None,
            },
            config: Readiness {
                ready: true,
                message: None,
            },
            statuses: vec![ended("i", 0), running("c")],
            probes: vec![ContainerProbeStatus {
                name: "c".into(),
                started,
                ready,
            }],
            ..PodConfigStatus::default()
        }
    }

    fn condition<'a>(status: &'a PodStatus, type_: &str) -> &'a PodCondition {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no {type_} condition"))
    }

    fn regular(status: &PodStatus) -> &ApiStatus {
        &status.container_statuses.as_deref().unwrap_or_default()[0]
    }

    fn waiting_reason(status: &ApiStatus) -> Option<&str> {
        status.state.as_ref()?.waiting.as_ref()?.reason.as_deref()
    }

    #[test]
    fn pw33_a_running_container_is_ready_and_started_as_its_probes_say() {
        let status = generate_pod_status(&pod(), &synced(false, false), T0);
        let c = regular(&status);
        assert_eq!((c.started, c.ready), (Some(false), false));
        assert_eq!(condition(&status, "ContainersReady").status, "False");
        assert_eq!(
            condition(&status, "Ready").message.as_deref(),
            Some("containers with unready status: [c]")
        );
        let status = generate_pod_status(&pod(), &synced(true, true), T0);
        let c = regular(&status);
        assert_eq!((c.started, c.ready), (Some(true), true));
        assert_eq!(c.container_id.as_deref(), Some("nodelet://c"));
        assert_eq!(condition(&status, "Ready").status, "True");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let init = &status
            .init_container_statuses
            .as_deref()
            .unwrap_or_default()[0];
        assert!(init.ready && init.started == Some(false));
    }

    /// A pod with sidecar `s` (running, restarted twice; its probes say `started`, `ready`)
    /// before app container `a`, which runs when `app_ran`.
    fn with_sidecar(started: bool, ready: bool, app_ran: bool) -> PodStatus {
        let p = PodBuilder::new("ns", "p")
            .uid("u")
            .init_container(json!({"name": "s", "image": "x", "restartPolicy": "Always"}))
            .container(json!({"name": "a", "image": "x"}))
            .build();
        let mut status = synced(true, true);
        status.statuses = vec![ContainerStatus {
            restart_count: 2,
            ..running("s")
        }];
        status.probes = vec![ContainerProbeStatus {
            name: "s".into(),
            started,
            ready,
        }];
        if app_ran {
            status.statuses.push(running("a"));
            status.probes.push(ContainerProbeStatus {
                name: "a".into(),
                started: true,
                ready: true,
            });
        }
        generate_pod_status(&p, &status, T0)
    }

    #[test]
    fn pw60_pw64_pw65_a_sidecar_reports_its_probes_and_its_readiness_counts_for_the_pods() {
        let init = |status: &PodStatus| {
            let s = &status
                .init_container_statuses
                .as_deref()
                .unwrap_or_default()[0];
            (s.started, s.ready, s.restart_count)
        };
        let status = with_sidecar(false, false, false);
        assert_eq!(init(&status), (Some(false), false, 2));
        assert_eq!(
            condition(&status, "Initialized").message.as_deref(),
            Some("containers with incomplete status: [s]")
        );
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        let status = with_sidecar(true, false, false);
        assert_eq!(
            condition(&status, "Initialized").status,
            "True",
            "a started sidecar is complete"
        );
        let status = with_sidecar(true, false, true);
        assert_eq!(
            condition(&status, "ContainersReady").message.as_deref(),
            Some("containers with unready status: [s]")
        );
        let status = with_sidecar(false, false, true);
        assert_eq!(
            condition(&status, "Initialized").status,
            "True",
            "once an app container ran, a restarting sidecar does not undo initialization"
        );
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let status = with_sidecar(true, true, true);
        assert_eq!(init(&status), (Some(true), true, 2));
        assert_eq!(condition(&status, "Ready").status, "True");
    }

    #[test]
    fn pw63_pw65_a_pod_whose_app_succeeded_is_completed_whatever_its_stopped_sidecar_exited_with() {
        let p = PodBuilder::new("ns", "p")
            .uid("u")
            .init_container(json!({"name": "s", "image": "x", "restartPolicy": "Always"}))
            .container(json!({"name": "a", "image": "x"}))
            .spec(json!({"restartPolicy": "Never"}))
            .build();
        let mut status = synced(true, true);
        status.statuses = vec![ended("s", 143), ended("a", 0)];
        status.probes = Vec::new();
        let status = generate_pod_status(&p, &status, T0);
        assert_eq!(status.phase.as_deref(), Some("Succeeded"));
        let initialized = condition(&status, "Initialized");
        assert_eq!(
            (initialized.status.as_str(), initialized.reason.as_deref()),
            ("True", Some("PodCompleted"))
        );
    }

    #[test]
    fn pw35_ready_waits_for_every_readiness_gate_to_be_true() {
        let gated = |conditions: serde_json::Value| {
            PodBuilder::new("ns", "p")
                .uid("u")
                .container(json!({"name": "c", "image": "img"}))
                .init_container(json!({"name": "i", "image": "init"}))
                .spec(json!({"readinessGates": [
                    {"conditionType": "example.com/lb"},
                    {"conditionType": "example.com/dns"},
                ]}))
                .status(json!({"conditions": conditions}))
                .build()
        };
        let p = gated(json!([{"type": "example.com/lb", "status": "False"}]));
        let status = generate_pod_status(&p, &synced(true, true), T0);
        assert_eq!(condition(&status, "ContainersReady").status, "True");
        let ready = condition(&status, "Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("ReadinessGatesNotReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some(
                "the status of pod readiness gate \"example.com/lb\" is not \"True\", but False, \
                 corresponding condition of pod readiness gate \"example.com/dns\" does not exist."
            )
        );
        let p = gated(json!([
            {"type": "example.com/lb", "status": "True"},
            {"type": "example.com/dns", "status": "True"},
        ]));
        let status = generate_pod_status(&p, &synced(true, true), T0);
        assert_eq!(condition(&status, "Ready").status, "True");
        // Containers not ready: Ready says what ContainersReady says, whatever the gates.
        let status = generate_pod_status(&gated(json!([])), &synced(true, false), T0);
        assert_eq!(
            condition(&status, "Ready").reason.as_deref(),
            Some("ContainersNotReady")
        );
    }

    #[test]
    fn the_status_and_the_nodes_conditions_carry_the_pods_generation() {
        let mut p = pod();
        let status = generate_pod_status(&p, &synced(true, true), T0);
        assert_eq!(status.observed_generation, None);
        p.metadata.generation = Some(3);
        let status = generate_pod_status(&p, &synced(true, true), T0);
        assert_eq!(status.observed_generation, Some(3));
        let conditions = status.conditions.unwrap_or_default();
        assert_eq!(conditions.len(), 5);
        assert!(conditions.iter().all(|c| c.observed_generation == Some(3)));
    }

    #[test]
    fn pw12_a_config_error_is_a_waiting_container_and_a_pending_pod() {
        let mut status = synced(true, true);
        status.statuses = vec![ended("i", 0)];
        status.probes.clear();
        status.config.ready = false;
        status.containers = vec![ContainerConfigStatus {
            name: "c".into(),
            init: false,
            state: ContainerConfigState::Waiting {
                reason: "CreateContainerConfigError".into(),
                message: "couldn't find key k in ConfigMap ns/cm".into(),
            },
        }];
        let status = generate_pod_status(&pod(), &status, T0);
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        let c = regular(&status);
        assert_eq!(waiting_reason(c), Some("CreateContainerConfigError"));
        assert!(!c.ready);
        assert_eq!(
            condition(&status, "PodReadyToStartContainers").status,
            "True"
        );
        let config = condition(&status, CONFIG_READY_CONDITION);
        assert_eq!(config.status, "False");
        assert_eq!(config.reason.as_deref(), Some("ConfigNotResolved"));
    }

    #[test]
    fn unmounted_volumes_say_so_in_pod_ready_to_start_containers() {
        let status = PodConfigStatus {
            volumes: Readiness {
                ready: false,
                message: Some("waiting for volumes to be mounted".into()),
            },
            ..PodConfigStatus::default()
        };
        let status = generate_pod_status(&pod(), &status, T0);
        let condition = condition(&status, "PodReadyToStartContainers");
        assert_eq!(condition.status, "False");
        assert_eq!(
            condition.message.as_deref(),
            Some("waiting for volumes to be mounted")
        );
        assert_eq!(status.host_ip, None, "no sandbox yet, no addresses");
    }

    #[test]
    fn pw55_containers_not_started_wait_as_pod_initializing_only_in_a_pod_with_init_containers() {
        let status = generate_pod_status(&pod(), &PodConfigStatus::default(), T0);
        assert_eq!(waiting_reason(regular(&status)), Some("PodInitializing"));
        let init = &status
            .init_container_statuses
            .as_deref()
            .unwrap_or_default()[0];
        assert_eq!(waiting_reason(init), Some("PodInitializing"));
        let plain = PodBuilder::new("ns", "p")
            .uid("u")
            .container(json!({"name": "c", "image": "img"}))
            .build();
        let status = generate_pod_status(&plain, &PodConfigStatus::default(), T0);
        assert_eq!(waiting_reason(regular(&status)), Some("ContainerCreating"));
        assert_eq!(status.init_container_statuses, Some(Vec::new()));
        assert_eq!(status.phase.as_deref(), Some("Pending"));
    }

    #[test]
    fn pw57_ephemeral_containers_have_their_own_statuses_never_ready_and_outside_the_phase() {
        let mut p = PodBuilder::new("ns", "p")
            .uid("u")
            .container(json!({"name": "c", "image": "img"}))
            .build();
        let mut status = synced(true, true);
        status.statuses = vec![running("c"), running("debugger")];
        let without = generate_pod_status(&p, &status, T0);
        assert_eq!(without.ephemeral_container_statuses, None);
        if let Some(s) = p.spec.as_mut() {
            s.ephemeral_containers = serde_json::from_value(json!([
                {"name": "debugger", "image": "busybox"},
                {"name": "later", "image": "busybox"},
            ]))
            .ok();
        }
        let out = generate_pod_status(&p, &status, T0);
        let ephemeral = out.ephemeral_container_statuses.clone().unwrap_or_default();
        assert_eq!(ephemeral[0].name, "debugger");
        assert!(
            ephemeral[0]
                .state
                .as_ref()
                .is_some_and(|s| s.running.is_some())
        );
        assert!(!ephemeral[0].ready && ephemeral[0].started.is_none());
        assert_eq!(
            ephemeral[0].container_id.as_deref(),
            Some("nodelet://debugger")
        );
        assert_eq!(waiting_reason(&ephemeral[1]), Some("ContainerCreating"));
        assert_eq!(out.phase.as_deref(), Some("Running"));
        assert_eq!(condition(&out, "Ready").status, "True");
    }

    #[test]
    fn a_finished_pod_is_not_ready_and_its_addresses_are_the_sandboxs() {
        let mut status = synced(true, true);
        status.statuses = vec![ended("i", 0), ended("c", 1)];
        status.pod_ips = vec!["10.0.0.1".into()];
        let p = PodBuilder::new("ns", "p")
            .uid("u")
            .container(json!({"name": "c", "image": "img"}))
            .init_container(json!({"name": "i", "image": "init"}))
            .spec(json!({"restartPolicy": "Never"}))
            .build();
        let out = generate_pod_status(&p, &status, T0);
        assert_eq!(out.phase.as_deref(), Some("Failed"));
        let ready = condition(&out, "ContainersReady");
        assert_eq!(
            (ready.reason.as_deref(), ready.message.as_deref()),
            (Some("PodFailed"), None)
        );
        assert_eq!(out.pod_ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(out.host_ips.clone().unwrap_or_default()[0].ip, "10.0.0.1");
        let terminated = regular(&out)
            .state
            .as_ref()
            .and_then(|s| s.terminated.clone())
            .unwrap_or_default();
        assert_eq!(
            (terminated.exit_code, terminated.reason.as_deref()),
            (1, Some("Error"))
        );
    }

    fn mount(
        volume: &str,
        objects: &[(&str, &str)],
        current: bool,
    ) -> crate::follow::MountFreshness {
        use nodelet_core::{ObjectKind, ObjectRef};
        use nodelet_volume_manager::plugins::ObjectVersion;
        crate::follow::MountFreshness {
            volume: volume.into(),
            mount_path: format!("/etc/{volume}"),
            sub_path: true,
            follows: true,
            objects: objects
                .iter()
                .map(|(kind, name)| ObjectVersion {
                    object: ObjectRef::new(
                        if *kind == "Secret" {
                            ObjectKind::Secret
                        } else {
                            ObjectKind::ConfigMap
                        },
                        "ns",
                        *name,
                    ),
                    resource_version: Some("7".into()),
                })
                .collect(),
            current,
        }
    }

    fn seen(container: &str, mounts: Vec<crate::follow::MountFreshness>) -> ContainerFreshness {
        ContainerFreshness {
            container: container.into(),
            mounts,
            env: Vec::new(),
        }
    }

    #[test]
    fn fc20_a_pod_that_does_not_follow_changes_has_no_config_current_condition() {
        let out = generate_pod_status(&pod(), &synced(true, true), T0);
        let types: Vec<&str> = out
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(
            types,
            [
                "PodReadyToStartContainers",
                CONFIG_READY_CONDITION,
                "Initialized",
                "ContainersReady",
                "Ready"
            ]
        );
    }

    #[test]
    fn fc20_config_current_is_true_when_every_running_container_sees_current_content() {
        let mut status = synced(true, true);
        status.freshness = Some(vec![seen(
            "c",
            vec![mount("cfg", &[("ConfigMap", "cfg")], true)],
        )]);
        let out = generate_pod_status(&pod(), &status, T0);
        let c = condition(&out, CONFIG_CURRENT_CONDITION);
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
            ("True", None, None)
        );
        // No container running: nothing is stale.
        status.freshness = Some(Vec::new());
        let out = generate_pod_status(&pod(), &status, T0);
        assert_eq!(condition(&out, CONFIG_CURRENT_CONDITION).status, "True");
        let types: Vec<&str> = out
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(
            types[2], CONFIG_CURRENT_CONDITION,
            "after ConfigReady: {types:?}"
        );
    }

    #[test]
    fn fc20_config_current_is_false_naming_each_containers_stale_objects_once() {
        let mut status = synced(true, true);
        status.freshness = Some(vec![
            seen(
                "c",
                vec![
                    mount("a", &[("ConfigMap", "cfg"), ("Secret", "tls")], false),
                    mount("b", &[("ConfigMap", "cfg")], false),
                    mount("fresh", &[("ConfigMap", "other")], true),
                ],
            ),
            seen("d", vec![mount("podinfo", &[], false)]),
            seen("e", vec![mount("a", &[("ConfigMap", "cfg")], true)]),
        ]);
        let out = generate_pod_status(&pod(), &status, T0);
        let c = condition(&out, CONFIG_CURRENT_CONDITION);
        assert_eq!(c.status, "False");
        assert_eq!(c.reason.as_deref(), Some(CONFIG_STALE_REASON));
        assert_eq!(
            c.message.as_deref(),
            Some(
                "container c sees an old ConfigMap ns/cfg, Secret ns/tls; \
                 container d sees an old volume podinfo"
            )
        );
    }
}
