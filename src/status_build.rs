//! The two pod status builders (one per runtime kind): the `status` strategic merge patch for
//! a [`PodConfigStatus`], the conditions the agent owns included. The `StatusWriter`
//! stamps their transition times and sends them.

use k8s_openapi::api::core::v1::Pod;
use nodelet_core::go;
use nodelet_core::runtime::{ContainerState, Termination};
use nodelet_podworker::{ContainerConfigState, PodConfigStatus, PodPhase, RuntimeView};
use serde_json::{Value, json};

/// The pod condition telling whether every container's configuration (environment, pull
/// secrets) was resolved. Not in the kubelet.
pub const CONFIG_READY_CONDITION: &str = "nodelet.io/ConfigReady";

/// A condition without its `lastTransitionTime` (see the writer's `stamp_transitions`). An absent
/// reason or message is `null`: the patch merges conditions by type, and a `null` deletes
/// what an earlier status said.
fn condition(type_: &str, ready: bool, reason: Option<&str>, message: Option<&str>) -> Value {
    json!({
        "type": type_,
        "status": if ready { "True" } else { "False" },
        "reason": reason,
        "message": message,
    })
}

/// The `status` patch for `status` of `pod` (`started` = the pod's first start time).
pub(crate) fn status_patch(pod: &Pod, status: &PodConfigStatus, started: &str) -> Value {
    let now = started;
    let all_created = !status.containers.is_empty()
        && status
            .containers
            .iter()
            .all(|c| c.state == ContainerConfigState::Created);
    let init_done = status
        .containers
        .iter()
        .filter(|c| c.init)
        .all(|c| c.state == ContainerConfigState::Created);
    let image = |name: &str| {
        pod.spec
            .as_ref()
            .into_iter()
            .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
            .find(|c| c.name == name)
            .and_then(|c| c.image.clone())
            .unwrap_or_default()
    };
    let container_status = |c: &nodelet_podworker::ContainerConfigStatus| {
        let (state, ready) = match &c.state {
            ContainerConfigState::Created if c.init => (
                json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}),
                true,
            ),
            ContainerConfigState::Created => (json!({"running": {"startedAt": now}}), true),
            ContainerConfigState::Waiting { reason, message } => (
                json!({"waiting": {"reason": reason, "message": message}}),
                false,
            ),
            _ => (
                json!({"waiting": {"reason": default_waiting_reason(pod)}}),
                false,
            ),
        };
        json!({
            "name": c.name, "state": state, "ready": ready, "started": ready && !c.init,
            "restartCount": 0, "image": image(&c.name), "imageID": "",
        })
    };
    let init: Vec<Value> = status
        .containers
        .iter()
        .filter(|c| c.init)
        .map(container_status)
        .collect();
    let regular: Vec<Value> = status
        .containers
        .iter()
        .filter(|c| !c.init)
        .map(container_status)
        .collect();
    let not_ready = (!all_created).then_some("ContainersNotReady");
    pod_status_patch(
        pod,
        status,
        Verdicts {
            initialized: (
                init_done,
                (!init_done).then_some("ContainersNotInitialized"),
                None,
            ),
            containers_ready: (all_created, not_ready, None),
        },
        json!({
            "phase": if all_created { "Running" } else { "Pending" },
            "startTime": now,
            "initContainerStatuses": init,
            "containerStatuses": regular,
        }),
    )
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

fn rfc3339(t: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn termination_json(t: &Termination, container_id: &str) -> Value {
    let mut v = json!({
        "exitCode": t.exit_code,
        "reason": t.reason,
        "startedAt": rfc3339(t.started_at),
        "finishedAt": rfc3339(t.finished_at),
    });
    if let Some(signal) = t.signal {
        v["signal"] = json!(signal);
    }
    if let Some(m) = &t.message {
        v["message"] = json!(m);
    }
    if !container_id.is_empty() {
        v["containerID"] = json!(container_id);
    }
    v
}

/// The `status` patch of a pod whose containers run as processes: container states,
/// restart counts and phase from the runtime (`runtime`), the rest as [`status_patch`].
pub(crate) fn process_status_patch(
    pod: &Pod,
    status: &PodConfigStatus,
    runtime: &RuntimeView,
    started: &str,
    host_ips: &[String],
) -> Value {
    let spec = pod.spec.as_ref();
    let find = |name: &str| runtime.statuses.iter().find(|s| s.name == name);
    let config_waiting = |name: &str| {
        status
            .containers
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| match &c.state {
                ContainerConfigState::Waiting { reason, message } => {
                    Some((reason.clone(), message.clone()))
                }
                _ => None,
            })
    };
    let init_names: Vec<&str> = spec
        .into_iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .map(|c| c.name.as_str())
        .collect();
    let init_done = init_names.iter().all(|n| {
        find(n)
            .and_then(|s| s.terminated())
            .is_some_and(|t| t.exit_code == 0)
    });
    let container_json = |c: &k8s_openapi::api::core::v1::Container, init: bool| -> (Value, bool) {
        let image = c.image.clone().unwrap_or_default();
        let s = find(&c.name);
        let waiting = |reason: &str, message: Option<&str>| {
            let mut w = json!({"reason": reason});
            if let Some(m) = message {
                w["message"] = json!(m);
            }
            json!({"waiting": w})
        };
        let state = match (config_waiting(&c.name), s) {
            (Some((reason, message)), _) => waiting(&reason, Some(&message)),
            (None, Some(s)) => match &s.state {
                ContainerState::Running { started_at } => {
                    json!({"running": {"startedAt": rfc3339(*started_at)}})
                }
                ContainerState::Terminated(t) => {
                    json!({"terminated": termination_json(t, &s.container_id)})
                }
                ContainerState::Waiting { reason, message } => waiting(reason, message.as_deref()),
            },
            (None, None) => waiting(default_waiting_reason(pod), None),
        };
        let running = s.is_some_and(|s| s.is_running());
        // PW-33: a regular container's `started` and `ready` are its probes' (without any,
        // running is both); an init container is ready once it succeeded.
        let probed = runtime.probes.iter().find(|p| p.name == c.name);
        let (ready, started) = match probed {
            _ if init => (
                s.and_then(|s| s.terminated())
                    .is_some_and(|t| t.exit_code == 0),
                running,
            ),
            Some(p) => (p.ready, p.started),
            None => (running, running),
        };
        let mut v = json!({
            "name": c.name,
            "state": state,
            "lastState": s
                .and_then(|s| s.last_state.as_ref())
                .map(|t| json!({"terminated": termination_json(t, "")}))
                .unwrap_or_else(|| json!({})),
            "ready": ready,
            "started": started,
            "restartCount": s.map_or(0, |s| s.restart_count),
            "image": image,
            "imageID": "",
        });
        if let Some(id) = s
            .map(|s| s.container_id.as_str())
            .filter(|id| !id.is_empty())
        {
            v["containerID"] = json!(id);
        }
        (v, ready)
    };
    let init: Vec<Value> = spec
        .into_iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .map(|c| container_json(c, true).0)
        .collect();
    let mut unready = Vec::new();
    let regular: Vec<Value> = spec
        .into_iter()
        .flat_map(|s| &s.containers)
        .map(|c| {
            let (v, ready) = container_json(c, false);
            if !ready {
                unready.push(c.name.clone());
            }
            v
        })
        .collect();
    let incomplete: Vec<&str> = init_names
        .iter()
        .filter(|n| {
            find(n)
                .and_then(|s| s.terminated())
                .is_none_or(|t| t.exit_code != 0)
        })
        .copied()
        .collect();
    let now = started;
    let terminal = runtime.phase.is_terminal();
    let all_ready = unready.is_empty() && !terminal;
    let not_ready_reason = match runtime.phase {
        PodPhase::Succeeded => "PodCompleted",
        PodPhase::Failed => "PodFailed",
        _ => "ContainersNotReady",
    };
    let unready_message = format!("containers with unready status: [{}]", unready.join(" "));
    let init_message = format!(
        "containers with incomplete status: [{}]",
        incomplete.join(" ")
    );
    let ips: Vec<Value> = host_ips.iter().map(|ip| json!({"ip": ip})).collect();
    let ephemeral = ephemeral_statuses(pod, status, runtime);
    let mut patch = pod_status_patch(
        pod,
        status,
        Verdicts {
            initialized: (
                init_done,
                (!init_done).then_some("ContainersNotInitialized"),
                (!init_done).then_some(init_message.as_str()),
            ),
            containers_ready: (
                all_ready,
                (!all_ready).then_some(not_ready_reason),
                (!all_ready && !terminal).then_some(unready_message.as_str()),
            ),
        },
        json!({
            "phase": runtime.phase.as_str(),
            "startTime": now,
            "initContainerStatuses": init,
            "containerStatuses": regular,
            "hostIP": host_ips.first(),
            "hostIPs": ips,
            "podIP": host_ips.first(),
            "podIPs": ips,
        }),
    );
    if !ephemeral.is_empty() {
        patch["status"]["ephemeralContainerStatuses"] = json!(ephemeral);
    }
    patch
}

/// PW-57: the statuses of `pod`'s ephemeral containers, in the pod's order, as the kubelet
/// reports them: the state the runtime (or a configuration error) gives, else waiting as any
/// container not started yet; never ready, and no `started` (the kubelet's prober fills in
/// neither for them); an ephemeral container counts for neither the phase nor readiness.
fn ephemeral_statuses(pod: &Pod, status: &PodConfigStatus, runtime: &RuntimeView) -> Vec<Value> {
    pod.spec
        .iter()
        .flat_map(|s| s.ephemeral_containers.iter().flatten())
        .map(|c| {
            let s = runtime.statuses.iter().find(|s| s.name == c.name);
            let config = status.ephemeral.iter().find(|e| e.name == c.name);
            let waiting = |reason: &str, message: Option<&str>| {
                let mut w = json!({"reason": reason});
                if let Some(m) = message {
                    w["message"] = json!(m);
                }
                json!({"waiting": w})
            };
            let state = match (config.map(|e| &e.state), s) {
                (Some(ContainerConfigState::Waiting { reason, message }), _) => {
                    waiting(reason, Some(message))
                }
                (_, Some(s)) => match &s.state {
                    ContainerState::Running { started_at } => {
                        json!({"running": {"startedAt": rfc3339(*started_at)}})
                    }
                    ContainerState::Terminated(t) => {
                        json!({"terminated": termination_json(t, &s.container_id)})
                    }
                    ContainerState::Waiting { reason, message } => {
                        waiting(reason, message.as_deref())
                    }
                },
                (_, None) => waiting(default_waiting_reason(pod), None),
            };
            let mut v = json!({
                "name": c.name,
                "state": state,
                "lastState": s
                    .and_then(|s| s.last_state.as_ref())
                    .map(|t| json!({"terminated": termination_json(t, "")}))
                    .unwrap_or_else(|| json!({})),
                "ready": false,
                "restartCount": s.map_or(0, |s| s.restart_count),
                "image": c.image.clone().unwrap_or_default(),
                "imageID": "",
            });
            if let Some(id) = s
                .map(|s| s.container_id.as_str())
                .filter(|id| !id.is_empty())
            {
                v["containerID"] = json!(id);
            }
            v
        })
        .collect()
}

/// `(status, reason, message)` of the `Initialized` and `ContainersReady` conditions.
struct Verdicts<'a> {
    initialized: (bool, Option<&'a str>, Option<&'a str>),
    containers_ready: (bool, Option<&'a str>, Option<&'a str>),
}

/// The pod's `Ready` (PW-35): `ContainersReady`'s verdict when that is not true; else true
/// only when the condition of every `spec.readinessGates` type is `True` in the pod's status,
/// with the kubelet's texts for those that are not.
fn pod_ready(
    pod: &Pod,
    containers_ready: (bool, Option<&str>, Option<&str>),
) -> (bool, Option<String>, Option<String>) {
    let (ready, reason, message) = containers_ready;
    if !ready {
        return (false, reason.map(str::to_owned), message.map(str::to_owned));
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
        (true, None, None)
    } else {
        (
            false,
            Some("ReadinessGatesNotReady".to_owned()),
            Some(unready.join(", ")),
        )
    }
}

/// The `status` patch both runtimes share: `fields` (phase, container statuses, IPs) with
/// the conditions the agent owns — `PodReadyToStartContainers`, the config condition,
/// `Initialized`, `ContainersReady`, `Ready` — all carrying the pod's generation
/// (PodObservedGenerationTracking, on by default since 1.34). Their `lastTransitionTime`s are
/// set by the `StatusWriter`, which knows the earlier ones.
fn pod_status_patch(
    pod: &Pod,
    status: &PodConfigStatus,
    verdicts: Verdicts<'_>,
    mut fields: Value,
) -> Value {
    let (initialized, init_reason, init_message) = verdicts.initialized;
    let (containers_ready, ready_reason, ready_message) = verdicts.containers_ready;
    let (ready, pod_ready_reason, pod_ready_message) = pod_ready(pod, verdicts.containers_ready);
    let mut conditions = vec![
        condition(
            "PodReadyToStartContainers",
            status.volumes.ready,
            None,
            status.volumes.message.as_deref(),
        ),
        condition(
            CONFIG_READY_CONDITION,
            status.config.ready,
            (!status.config.ready).then_some("ConfigNotResolved"),
            status.config.message.as_deref(),
        ),
        condition("Initialized", initialized, init_reason, init_message),
        condition(
            "ContainersReady",
            containers_ready,
            ready_reason,
            ready_message,
        ),
        condition(
            "Ready",
            ready,
            pod_ready_reason.as_deref(),
            pod_ready_message.as_deref(),
        ),
    ];
    if let Some(g) = pod.metadata.generation {
        for c in &mut conditions {
            c["observedGeneration"] = json!(g);
        }
        fields["observedGeneration"] = json!(g);
    }
    fields["conditions"] = json!(conditions);
    // PW-26: the node failed the pod, whatever its containers say.
    if let Some(eviction) = &status.eviction {
        fields["phase"] = json!("Failed");
        fields["reason"] = json!(eviction.reason);
        fields["message"] = json!(eviction.message);
    }
    // Replaced whole, not merged by name (the kubelet's patch deletes what is gone).
    for list in ["initContainerStatuses", "containerStatuses"] {
        if let Some(items) = fields[list].as_array_mut() {
            items.push(json!({"$patch": "replace"}));
        }
    }
    json!({"status": fields})
}

#[cfg(test)]
pub(crate) mod tests {
    use nodelet_podworker::{ContainerConfigStatus, Readiness};
    use nodelet_testutil::PodBuilder;

    use super::*;

    pub(crate) fn pod() -> Pod {
        PodBuilder::new("ns", "p")
            .uid("u")
            .container(json!({"name": "c", "image": "img"}))
            .init_container(json!({"name": "i", "image": "init"}))
            .status(json!({"conditions": [{"type": "PodScheduled", "status": "True"}]}))
            .build()
    }

    pub(crate) fn status(state: ContainerConfigState, volumes: bool) -> PodConfigStatus {
        PodConfigStatus {
            volumes: Readiness {
                ready: volumes,
                message: None,
            },
            config: Readiness {
                ready: state == ContainerConfigState::Created,
                message: None,
            },
            containers: vec![
                ContainerConfigStatus {
                    name: "i".into(),
                    init: true,
                    state: ContainerConfigState::Created,
                },
                ContainerConfigStatus {
                    name: "c".into(),
                    init: false,
                    state,
                },
            ],
            ..PodConfigStatus::default()
        }
    }

    pub(crate) fn condition_status(patch: &Value, type_: &str) -> Option<String> {
        patch["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == type_)
            .and_then(|c| c["status"].as_str().map(str::to_owned))
    }

    #[test]
    fn the_status_and_the_agents_conditions_carry_the_pods_generation() {
        let mut p = pod();
        let patch = status_patch(&p, &status(ContainerConfigState::Created, true), "t");
        assert!(patch["status"].get("observedGeneration").is_none());
        p.metadata.generation = Some(3);
        let patch = status_patch(&p, &status(ContainerConfigState::Created, true), "t");
        assert_eq!(patch["status"]["observedGeneration"], 3);
        for c in patch["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert_eq!(c["observedGeneration"], json!(3), "{}", c["type"]);
        }
    }

    #[test]
    fn the_patch_names_only_the_agents_conditions_and_replaces_the_container_lists() {
        let patch = status_patch(&pod(), &status(ContainerConfigState::Created, true), "t");
        let types: Vec<&str> = patch["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["type"].as_str())
            .collect();
        // `PodScheduled` (the scheduler's) is not named: the merge by type keeps it.
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
        let ready = &patch["status"]["conditions"][4];
        assert!(
            ready.get("message").is_some_and(Value::is_null),
            "an absent message deletes an earlier one: {ready}"
        );
        for list in ["containerStatuses", "initContainerStatuses"] {
            let items = patch["status"][list]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert_eq!(items.last(), Some(&json!({"$patch": "replace"})), "{list}");
        }
    }

    /// A pod whose container `c` runs, with the probes' `started` and `ready` for it.
    pub(crate) fn probed(p: &Pod, started: bool, ready: bool) -> Value {
        let runtime = RuntimeView {
            statuses: vec![
                nodelet_core::runtime::ContainerStatus {
                    name: "i".into(),
                    state: ContainerState::Terminated(Termination {
                        exit_code: 0,
                        signal: None,
                        reason: "Completed".into(),
                        message: None,
                        started_at: std::time::SystemTime::UNIX_EPOCH,
                        finished_at: std::time::SystemTime::UNIX_EPOCH,
                    }),
                    last_state: None,
                    restart_count: 0,
                    container_id: "nodelet://i".into(),
                },
                nodelet_core::runtime::ContainerStatus {
                    name: "c".into(),
                    state: ContainerState::Running {
                        started_at: std::time::SystemTime::UNIX_EPOCH,
                    },
                    last_state: None,
                    restart_count: 0,
                    container_id: "nodelet://c".into(),
                },
            ],
            phase: PodPhase::Running,
            probes: vec![nodelet_podworker::ContainerProbeStatus {
                name: "c".into(),
                started,
                ready,
            }],
        };
        let mut config = status(ContainerConfigState::Created, true);
        config.runtime = Some(runtime.clone());
        process_status_patch(p, &config, &runtime, "t", &["10.0.0.1".to_owned()])
    }

    pub(crate) fn condition_field(patch: &Value, type_: &str, field: &str) -> Value {
        patch["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
            .map(|c| c[field].clone())
            .unwrap_or(Value::Null)
    }

    #[test]
    fn pw33_a_running_container_is_ready_and_started_as_its_probes_say() {
        let patch = probed(&pod(), false, false);
        let c = &patch["status"]["containerStatuses"][0];
        assert_eq!(
            (c["started"].clone(), c["ready"].clone()),
            (json!(false), json!(false))
        );
        assert_eq!(
            condition_status(&patch, "ContainersReady").as_deref(),
            Some("False")
        );
        assert_eq!(
            condition_field(&patch, "Ready", "message"),
            "containers with unready status: [c]"
        );
        let patch = probed(&pod(), true, true);
        let c = &patch["status"]["containerStatuses"][0];
        assert_eq!(
            (c["started"].clone(), c["ready"].clone()),
            (json!(true), json!(true))
        );
        assert_eq!(condition_status(&patch, "Ready").as_deref(), Some("True"));
    }

    #[test]
    fn pw35_ready_waits_for_every_readiness_gate_to_be_true() {
        let gated = |conditions: Value| {
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
        let patch = probed(
            &gated(json!([{"type": "example.com/lb", "status": "False"}])),
            true,
            true,
        );
        assert_eq!(
            condition_status(&patch, "ContainersReady").as_deref(),
            Some("True")
        );
        assert_eq!(condition_status(&patch, "Ready").as_deref(), Some("False"));
        assert_eq!(
            condition_field(&patch, "Ready", "reason"),
            "ReadinessGatesNotReady"
        );
        assert_eq!(
            condition_field(&patch, "Ready", "message"),
            "the status of pod readiness gate \"example.com/lb\" is not \"True\", but False, \
             corresponding condition of pod readiness gate \"example.com/dns\" does not exist."
        );
        let patch = probed(
            &gated(json!([
                {"type": "example.com/lb", "status": "True"},
                {"type": "example.com/dns", "status": "True"},
            ])),
            true,
            true,
        );
        assert_eq!(condition_status(&patch, "Ready").as_deref(), Some("True"));
        // Not ready containers: Ready says what ContainersReady says, whatever the gates.
        let patch = probed(&gated(json!([])), true, false);
        assert_eq!(
            condition_field(&patch, "Ready", "reason"),
            "ContainersNotReady"
        );
    }

    #[test]
    fn pw12_a_config_error_is_a_waiting_container_and_a_pending_pod() {
        let waiting = ContainerConfigState::Waiting {
            reason: "CreateContainerConfigError".into(),
            message: "couldn't find key k in ConfigMap ns/cm".into(),
        };
        let patch = status_patch(&pod(), &status(waiting, true), "2026-01-01T00:00:00Z");
        assert_eq!(patch["status"]["phase"], "Pending");
        let c = &patch["status"]["containerStatuses"][0];
        assert_eq!(
            c["state"]["waiting"]["reason"],
            "CreateContainerConfigError"
        );
        assert_eq!(c["ready"], false);
        assert_eq!(
            condition_status(&patch, "PodReadyToStartContainers").as_deref(),
            Some("True")
        );
        assert_eq!(
            condition_status(&patch, CONFIG_READY_CONDITION).as_deref(),
            Some("False")
        );
    }

    #[test]
    fn created_containers_make_a_running_ready_pod_with_completed_init_containers() {
        let patch = status_patch(&pod(), &status(ContainerConfigState::Created, true), "t");
        assert_eq!(patch["status"]["phase"], "Running");
        assert!(patch["status"]["containerStatuses"][0]["state"]["running"].is_object());
        assert_eq!(patch["status"]["containerStatuses"][0]["image"], "img");
        assert_eq!(
            patch["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        for c in [
            "Ready",
            "ContainersReady",
            "Initialized",
            CONFIG_READY_CONDITION,
        ] {
            assert_eq!(condition_status(&patch, c).as_deref(), Some("True"), "{c}");
        }
    }

    #[test]
    fn unmounted_volumes_say_so_in_pod_ready_to_start_containers() {
        let patch = status_patch(&pod(), &status(ContainerConfigState::Pending, false), "t");
        assert_eq!(
            condition_status(&patch, "PodReadyToStartContainers").as_deref(),
            Some("False")
        );
        assert_eq!(
            patch["status"]["containerStatuses"][0]["state"]["waiting"]["reason"],
            "PodInitializing"
        );
    }

    #[test]
    fn pw55_containers_not_started_wait_as_pod_initializing_only_in_a_pod_with_init_containers() {
        let reason = |patch: &Value, list: &str| {
            patch["status"][list][0]["state"]["waiting"]["reason"]
                .as_str()
                .map(str::to_owned)
        };
        let mut pending = status(ContainerConfigState::Pending, true);
        pending.containers[0].state = ContainerConfigState::Pending;
        let patch = status_patch(&pod(), &pending, "t");
        assert_eq!(
            reason(&patch, "containerStatuses").as_deref(),
            Some("PodInitializing")
        );
        assert_eq!(
            reason(&patch, "initContainerStatuses").as_deref(),
            Some("PodInitializing")
        );
        // The runtime knows nothing of them yet either: the same verdict.
        let view = RuntimeView {
            phase: PodPhase::Pending,
            statuses: Vec::new(),
            probes: Vec::new(),
        };
        let patch = process_status_patch(&pod(), &pending, &view, "t", &[]);
        assert_eq!(
            reason(&patch, "containerStatuses").as_deref(),
            Some("PodInitializing")
        );
        assert_eq!(
            reason(&patch, "initContainerStatuses").as_deref(),
            Some("PodInitializing")
        );

        let plain = PodBuilder::new("ns", "p")
            .uid("u")
            .container(json!({"name": "c", "image": "img"}))
            .build();
        let mut pending = status(ContainerConfigState::Pending, true);
        pending.containers.remove(0);
        let patch = status_patch(&plain, &pending, "t");
        assert_eq!(
            reason(&patch, "containerStatuses").as_deref(),
            Some("ContainerCreating")
        );
        let patch = process_status_patch(&plain, &pending, &view, "t", &[]);
        assert_eq!(
            reason(&patch, "containerStatuses").as_deref(),
            Some("ContainerCreating")
        );
    }

    #[test]
    fn pw57_ephemeral_containers_have_their_own_statuses_never_ready_and_outside_the_phase() {
        let p = PodBuilder::new("ns", "p")
            .uid("u")
            .container(json!({"name": "c", "image": "img"}))
            .build();
        let mut with_debuggers = p.clone();
        if let Some(s) = with_debuggers.spec.as_mut() {
            s.ephemeral_containers = serde_json::from_value(json!([
                {"name": "debugger", "image": "busybox"},
                {"name": "later", "image": "busybox"},
            ]))
            .ok();
        }
        let started = std::time::SystemTime::UNIX_EPOCH;
        let running = |name: &str| nodelet_core::runtime::ContainerStatus {
            name: name.into(),
            state: ContainerState::Running {
                started_at: started,
            },
            last_state: None,
            restart_count: 0,
            container_id: "nodelet://1".into(),
        };
        let view = RuntimeView {
            phase: PodPhase::Running,
            statuses: vec![running("c"), running("debugger")],
            probes: Vec::new(),
        };
        let mut config = status(ContainerConfigState::Created, true);
        config.containers.remove(0);
        let patch = process_status_patch(&with_debuggers, &config, &view, "t", &[]);
        let ephemeral = &patch["status"]["ephemeralContainerStatuses"];
        assert_eq!(ephemeral[0]["name"], "debugger");
        assert!(ephemeral[0]["state"]["running"].is_object());
        assert_eq!(ephemeral[0]["ready"], false);
        assert!(ephemeral[0].get("started").is_none());
        assert_eq!(ephemeral[0]["containerID"], "nodelet://1");
        assert_eq!(
            ephemeral[1]["state"]["waiting"]["reason"],
            "ContainerCreating"
        );
        assert_eq!(patch["status"]["phase"], "Running");
        assert_eq!(condition_status(&patch, "Ready").as_deref(), Some("True"));
        // A pod without any: no such list at all.
        let patch = process_status_patch(&p, &config, &view, "t", &[]);
        assert!(patch["status"].get("ephemeralContainerStatuses").is_none());
    }
}
