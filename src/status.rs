//! [`StatusWriter`]: turns the config syncer's [`PodConfigStatus`] into pod status patches
//! (conditions, container states, phase) and deletes finished pods, in a background task.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use nodelet_core::runtime::{ContainerState, Termination};
use nodelet_core::{AdmittedPod, PodUid};
use nodelet_podworker::{ContainerConfigState, PodConfigStatus, PodPhase, RuntimeView, StatusSink};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::metrics::Metrics;

/// The pod condition telling whether every container's configuration (environment, pull
/// secrets) was resolved. Not in the kubelet.
pub const CONFIG_READY_CONDITION: &str = "nodelet.io/ConfigReady";

/// A [`StatusSink`]: newest status per pod wins; a background task patches `pods/status`
/// (merge patch) and, for terminated pods, deletes the pod with grace period 0 and a UID
/// precondition, as the kubelet's status manager does.
#[derive(Clone)]
pub(crate) struct StatusWriter {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for StatusWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StatusWriter")
    }
}

struct Shared {
    /// The node's addresses: the pods' IPs under the process runtime.
    host_ips: Vec<String>,
    pending: Mutex<HashMap<PodUid, Work>>,
    /// Last patch sent per pod UID (to skip unchanged ones), as compact JSON text (about a
    /// seventh of the heap its `Value` tree takes: ~1 KB a pod instead of ~7), and first start
    /// time.
    sent: Mutex<HashMap<PodUid, (Box<str>, String)>>,
    wake: Arc<Notify>,
}

#[derive(Clone)]
enum Work {
    Patch {
        namespace: String,
        name: String,
        body: Value,
    },
    Delete {
        namespace: String,
        name: String,
        uid: PodUid,
        /// A status patch that was still pending when the deletion came (the containers' final
        /// states): written first, as the kubelet's status manager does.
        last_status: Option<Value>,
    },
}

impl StatusWriter {
    pub(crate) fn start(
        client: kube::Client,
        metrics: Metrics,
        host_ips: Vec<String>,
        shutdown: CancellationToken,
        tracker: &tokio_util::task::TaskTracker,
    ) -> Self {
        let shared = Arc::new(Shared {
            host_ips,
            pending: Mutex::default(),
            sent: Mutex::default(),
            wake: Arc::new(Notify::new()),
        });
        let weak = Arc::downgrade(&shared);
        let wake = shared.wake.clone();
        tracker.spawn(async move {
            loop {
                let Some(shared) = weak.upgrade() else { return };
                let batch: Vec<(PodUid, Work)> = shared.pending.lock().drain().collect();
                let mut retry = Vec::new();
                for (uid, work) in batch {
                    if shutdown.is_cancelled() {
                        return;
                    }
                    if let Err(error) = run(&client, &work).await {
                        warn!(pod.uid = %uid, %error, "pod status not written");
                        metrics.api_write_failed("pod_status");
                        retry.push((uid, work));
                    }
                }
                let retry_later = !retry.is_empty();
                {
                    let mut p = shared.pending.lock();
                    for (uid, work) in retry {
                        p.entry(uid).or_insert(work);
                    }
                }
                drop(shared);
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = wake.notified() => {}
                    () = tokio::time::sleep(Duration::from_secs(1)), if retry_later => {}
                }
            }
        });
        Self { shared }
    }

    fn enqueue(&self, uid: PodUid, mut work: Work) {
        {
            let mut p = self.shared.pending.lock();
            if let (
                Work::Delete { last_status, .. },
                Some(
                    Work::Patch { body, .. }
                    | Work::Delete {
                        last_status: Some(body),
                        ..
                    },
                ),
            ) = (&mut work, p.remove(&uid))
            {
                *last_status = Some(body);
            }
            p.insert(uid, work);
        }
        self.shared.wake.notify_one();
    }
}

async fn run(client: &kube::Client, work: &Work) -> Result<(), kube::Error> {
    match work {
        Work::Patch {
            namespace,
            name,
            body,
        } => {
            let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
            match api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(body))
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                Err(e) => Err(e),
            }
        }
        Work::Delete {
            namespace,
            name,
            uid,
            last_status,
        } => {
            let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
            if let Some(body) = last_status {
                match api
                    .patch_status(name, &PatchParams::default(), &Patch::Merge(body))
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(uid.to_string()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(name, &params).await {
                Ok(_) => {
                    debug!(pod.uid = %uid, "pod deleted");
                    Ok(())
                }
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
                Err(e) => Err(e),
            }
        }
    }
}

fn condition(
    type_: &str,
    ready: bool,
    reason: Option<&str>,
    message: Option<&str>,
    now: &str,
) -> Value {
    let mut c = json!({
        "type": type_,
        "status": if ready { "True" } else { "False" },
        "lastTransitionTime": now,
    });
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    c
}

/// The `status` merge patch for `status` of `pod` (`started` = the pod's first start time).
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
                json!({"waiting": {"reason": if c.init { "PodInitializing" } else { "ContainerCreating" }}}),
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
            ready: (all_created, not_ready, None),
        },
        json!({
            "phase": if all_created { "Running" } else { "Pending" },
            "startTime": now,
            "initContainerStatuses": init,
            "containerStatuses": regular,
        }),
    )
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

/// The `status` merge patch of a pod whose containers run as processes: container states,
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
            (None, None) if init || !init_done => waiting("PodInitializing", None),
            (None, None) => waiting("ContainerCreating", None),
        };
        let running = s.is_some_and(|s| s.is_running());
        let ready = if init {
            s.and_then(|s| s.terminated())
                .is_some_and(|t| t.exit_code == 0)
        } else {
            running
        };
        let mut v = json!({
            "name": c.name,
            "state": state,
            "lastState": s
                .and_then(|s| s.last_state.as_ref())
                .map(|t| json!({"terminated": termination_json(t, "")}))
                .unwrap_or_else(|| json!({})),
            "ready": ready,
            "started": running,
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
    let completed = runtime.phase == PodPhase::Succeeded;
    let all_ready = unready.is_empty() && !runtime.phase.is_terminal();
    let not_ready_reason = if completed {
        "PodCompleted"
    } else {
        "ContainersNotReady"
    };
    let unready_message = format!("containers with unready status: [{}]", unready.join(" "));
    let init_message = format!(
        "containers with incomplete status: [{}]",
        incomplete.join(" ")
    );
    let ips: Vec<Value> = host_ips.iter().map(|ip| json!({"ip": ip})).collect();
    pod_status_patch(
        pod,
        status,
        Verdicts {
            initialized: (
                init_done,
                (!init_done).then_some("ContainersNotInitialized"),
                (!init_done).then_some(init_message.as_str()),
            ),
            ready: (
                all_ready,
                (!all_ready).then_some(not_ready_reason),
                (!all_ready && !completed).then_some(unready_message.as_str()),
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
    )
}

/// `(status, reason, message)` of the `Initialized` condition and of `ContainersReady` and
/// `Ready` (which agree: nodelet has no readiness probes).
struct Verdicts<'a> {
    initialized: (bool, Option<&'a str>, Option<&'a str>),
    ready: (bool, Option<&'a str>, Option<&'a str>),
}

/// The `status` merge patch both runtimes share: `fields` (phase, container statuses, IPs)
/// with the conditions the agent owns — `PodReadyToStartContainers`, the config condition,
/// `Initialized`, `ContainersReady`, `Ready` — after the scheduler's `PodScheduled`, all
/// carrying the pod's generation (PodObservedGenerationTracking, on by default since 1.34).
fn pod_status_patch(
    pod: &Pod,
    status: &PodConfigStatus,
    verdicts: Verdicts<'_>,
    mut fields: Value,
) -> Value {
    let now = fields["startTime"].as_str().unwrap_or_default().to_owned();
    let (initialized, init_reason, init_message) = verdicts.initialized;
    let (ready, ready_reason, ready_message) = verdicts.ready;
    let mut conditions = vec![
        condition(
            "PodReadyToStartContainers",
            status.volumes.ready,
            None,
            status.volumes.message.as_deref(),
            &now,
        ),
        condition(
            CONFIG_READY_CONDITION,
            status.config.ready,
            (!status.config.ready).then_some("ConfigNotResolved"),
            status.config.message.as_deref(),
            &now,
        ),
        condition("Initialized", initialized, init_reason, init_message, &now),
        condition("ContainersReady", ready, ready_reason, ready_message, &now),
        condition("Ready", ready, ready_reason, ready_message, &now),
    ];
    if let Some(g) = pod.metadata.generation {
        for c in &mut conditions {
            c["observedGeneration"] = json!(g);
        }
        fields["observedGeneration"] = json!(g);
    }
    if let Some(scheduled) = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
        .and_then(|c| serde_json::to_value(c).ok())
    {
        conditions.insert(0, scheduled);
    }
    fields["conditions"] = json!(conditions);
    // PW-26: the node failed the pod, whatever its containers say.
    if let Some(eviction) = &status.eviction {
        fields["phase"] = json!("Failed");
        fields["reason"] = json!(eviction.reason);
        fields["message"] = json!(eviction.message);
    }
    json!({"status": fields})
}

impl StatusSink for StatusWriter {
    fn set_status(&self, pod: &AdmittedPod, status: &PodConfigStatus) {
        let uid = pod.uid().clone();
        let mut sent = self.shared.sent.lock();
        let started = sent.get(&uid).map(|(_, s)| s.clone()).unwrap_or_else(|| {
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        });
        let body = match &status.runtime {
            Some(runtime) => {
                process_status_patch(pod, status, runtime, &started, &self.shared.host_ips)
            }
            None => status_patch(pod, status, &started),
        };
        // serde_json's maps are sorted, so equal bodies print the same text.
        let text: Box<str> = body.to_string().into();
        if sent.get(&uid).is_some_and(|(last, _)| *last == text) {
            return;
        }
        sent.insert(uid.clone(), (text, started));
        drop(sent);
        self.enqueue(
            uid,
            Work::Patch {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                body,
            },
        );
    }

    fn terminated(&self, pod: &AdmittedPod) {
        let uid = pod.uid().clone();
        self.shared.sent.lock().remove(&uid);
        // As the kubelet's status manager: only a pod being deleted is deleted; one that
        // finished on its own (Succeeded, Failed) stays, with its status and logs.
        if pod.metadata.deletion_timestamp.is_none() {
            return;
        }
        let name = pod.name().to_owned();
        self.enqueue(
            uid.clone(),
            Work::Delete {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name,
                uid,
                last_status: None,
            },
        );
    }
}

impl StatusWriter {
    /// PW-40: `pod` was not admitted. Its status becomes `Failed` with the rejection's reason
    /// and `Pod was rejected: <message>`, as the kubelet's `rejectPod` writes it; nothing else
    /// of the pod is reported afterwards.
    pub(crate) fn rejected(&self, pod: &AdmittedPod, rejection: &nodelet_podworker::Rejection) {
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let body = json!({"status": {
            "phase": "Failed",
            "reason": rejection.reason,
            "message": rejection.status_message(),
            "startTime": now,
        }});
        self.enqueue(
            pod.uid().clone(),
            Work::Patch {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                body,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use nodelet_podworker::{ContainerConfigStatus, Readiness};
    use nodelet_testutil::PodBuilder;

    use super::*;

    fn pod() -> Pod {
        PodBuilder::new("ns", "p")
            .uid("u")
            .container(json!({"name": "c", "image": "img"}))
            .init_container(json!({"name": "i", "image": "init"}))
            .status(json!({"conditions": [{"type": "PodScheduled", "status": "True"}]}))
            .build()
    }

    fn status(state: ContainerConfigState, volumes: bool) -> PodConfigStatus {
        PodConfigStatus {
            runtime: None,
            eviction: None,
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
        }
    }

    fn condition_status(patch: &Value, type_: &str) -> Option<String> {
        patch["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == type_)
            .and_then(|c| c["status"].as_str().map(str::to_owned))
    }

    #[test]
    fn a_status_equal_to_the_last_one_sent_is_not_queued_again() {
        let writer = StatusWriter {
            shared: Arc::new(Shared {
                host_ips: Vec::new(),
                pending: Mutex::default(),
                sent: Mutex::default(),
                wake: Arc::new(Notify::new()),
            }),
        };
        let pod = AdmittedPod::new(pod()).unwrap_or_else(|e| panic!("{e}"));
        let queued = |w: &StatusWriter| w.shared.pending.lock().drain().count();
        writer.set_status(&pod, &status(ContainerConfigState::Created, true));
        assert_eq!(queued(&writer), 1);
        writer.set_status(&pod, &status(ContainerConfigState::Created, true));
        assert_eq!(queued(&writer), 0, "the same status again");
        writer.set_status(&pod, &status(ContainerConfigState::Created, false));
        assert_eq!(queued(&writer), 1, "volumes no longer ready");
        let kept = writer
            .shared
            .sent
            .lock()
            .get(pod.uid())
            .map(|(t, _)| t.len());
        assert!(
            kept.is_some_and(|n| n < 2048),
            "kept as text: {kept:?} bytes"
        );
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
            let expected = if c["type"] == "PodScheduled" {
                Value::Null
            } else {
                json!(3)
            };
            assert_eq!(c["observedGeneration"], expected, "{}", c["type"]);
        }
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
        assert_eq!(
            condition_status(&patch, "PodScheduled").as_deref(),
            Some("True"),
            "kept"
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
            "ContainerCreating"
        );
    }
}
