//! [`StatusWriter`]: sends the pod statuses the pod workers generate
//! ([`nodelet_podworker::generate_pod_status`]) as pod status patches and deletes finished
//! pods, in a background task.
//!
//! The patches are strategic merge patches, as the kubelet's: the conditions the agent owns
//! merge by type, so conditions others set (`PodScheduled`, a readiness gate's) stay, and an
//! absent reason or message is sent as `null` so that an earlier one goes; the container
//! status lists, atomic in the API, are sent whole and replace the pod's. A condition keeps its `lastTransitionTime`
//! while its status stays (the time of the last patch that changed it, else the pod's own).
//! A condition of nodelet's own (`nodelet.io/`) that is no longer generated is deleted by type
//! (`$patch: delete`, FC-22).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use nodelet_core::StatusSink;
use nodelet_core::{AdmittedPod, PodUid};
use parking_lot::Mutex;
use serde_json::{Map, Value};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::counters::{Counters, WriteTarget};

/// A [`StatusSink`]: newest status per pod wins; a background task patches `pods/status`
/// (strategic merge patch) and, for terminated pods, deletes the pod with grace period 0 and a UID
/// precondition, as the kubelet's status manager does.
#[derive(Clone)]
pub struct StatusWriter {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for StatusWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StatusWriter")
    }
}

struct Shared {
    pending: Mutex<HashMap<PodUid, Work>>,
    /// Last patch sent per pod UID (to skip unchanged ones).
    sent: Mutex<HashMap<PodUid, Sent>>,
    /// The newest [`DELETED_MEMORY`] pods whose deletion was queued: each is deleted once,
    /// however many times it is reported terminated (the worker's end, then the pod watch
    /// showing it finished and being deleted).
    deleted: Mutex<VecDeque<PodUid>>,
    wake: Arc<Notify>,
}

/// How many deleted pods a [`StatusWriter`] remembers (a pod UID each; its later reports
/// come within seconds, while hundreds of pods cannot come and go).
const DELETED_MEMORY: usize = 256;

/// What was last sent for a pod.
struct Sent {
    /// The patch, as compact JSON text (about a seventh of the heap its `Value` tree takes:
    /// ~1 KB a pod instead of ~7).
    text: Box<str>,
    /// Each condition sent: type, status, `lastTransitionTime`.
    conditions: Vec<(String, String, String)>,
}

/// A patch body while it waits in the queue, as compact JSON text: one allocation, where its
/// `Value` tree is about a hundred small ones (1.2 MB for a node's first 110 pods). The writes
/// lag the pods' starts, so those trees were made while the start's long-lived objects were,
/// and freed later, leaving holes among them that the allocator cannot give back.
#[derive(Clone)]
struct Body(Box<str>);

impl Body {
    fn new(value: &Value) -> Self {
        Body(value.to_string().into())
    }

    /// The patch to send (a `Value` again: one at a time, while it is sent).
    fn value(&self) -> Value {
        // The text is `Value`'s own output, so it always parses.
        serde_json::from_str(&self.0).unwrap_or_default()
    }
}

#[derive(Clone)]
enum Work {
    Patch {
        namespace: String,
        name: String,
        body: Body,
    },
    Delete {
        namespace: String,
        name: String,
        uid: PodUid,
        /// A status patch that was still pending when the deletion came (the containers' final
        /// states): written first, as the kubelet's status manager does.
        last_status: Option<Body>,
    },
}

/// How a [`StatusWriter`] writes. [`StatusConfig::default`]: a failed write is tried again
/// after 1 s.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatusConfig {
    /// How long after a failed write it is tried again (the newest status of the pod, if one
    /// came meanwhile).
    pub retry_after: Duration,
}

impl Default for StatusConfig {
    fn default() -> Self {
        Self {
            retry_after: Duration::from_secs(1),
        }
    }
}

impl StatusWriter {
    /// A writer through `client` as `config` says, counting failed writes in `counters`; its
    /// task (one of `tracker`'s) ends on `shutdown` (what is pending is dropped).
    pub fn start(
        config: StatusConfig,
        client: kube::Client,
        counters: Counters,
        shutdown: CancellationToken,
        tracker: &tokio_util::task::TaskTracker,
    ) -> Self {
        let shared = Arc::new(Shared {
            pending: Mutex::default(),
            sent: Mutex::default(),
            deleted: Mutex::default(),
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
                        counters.write_failed(WriteTarget::PodStatus);
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
                    () = tokio::time::sleep(config.retry_after), if retry_later => {}
                }
            }
        });
        Self { shared }
    }

    fn enqueue(&self, uid: PodUid, mut work: Work) {
        {
            let mut p = self.shared.pending.lock();
            // A status that comes after the deletion was queued is written before it, never
            // instead of it.
            if let (Work::Patch { body, .. }, Some(Work::Delete { last_status, .. })) =
                (&work, p.get_mut(&uid))
            {
                *last_status = Some(body.clone());
                drop(p);
                self.shared.wake.notify_one();
                return;
            }
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
                .patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Strategic(body.value()),
                )
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
                    .patch_status(
                        name,
                        &PatchParams::default(),
                        &Patch::Strategic(body.value()),
                    )
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

/// The strategic merge patch that makes `status` the pod's (before the conditions'
/// transition times, [`stamp_transitions`]): each condition's absent reason and message as
/// `null`. The container status lists have no merge key in the API (they are atomic): each
/// one the patch names replaces the pod's whole, with no `$patch` directive, which the API
/// server would keep as an element of its own.
fn status_patch(status: &PodStatus) -> Value {
    let mut fields = serde_json::to_value(status).unwrap_or_default();
    let conditions = fields.get_mut("conditions").and_then(Value::as_array_mut);
    for c in conditions
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
    {
        for key in ["reason", "message"] {
            c.entry(key).or_insert(Value::Null);
        }
    }
    wrap_status(fields)
}

/// `{"status": fields}`.
fn wrap_status(fields: Value) -> Value {
    let mut body = Map::new();
    body.insert("status".to_owned(), fields);
    Value::Object(body)
}

/// Sets each condition's `lastTransitionTime` in `body`: kept from `previous` (what was last
/// sent) or, without that, from the pod's own status while the condition's status is the
/// same; `now` when it changed. Returns the conditions as sent.
fn stamp_transitions(
    body: &mut Value,
    previous: Option<&[(String, String, String)]>,
    pod: &Pod,
    now: &str,
) -> Vec<(String, String, String)> {
    let known = pod.status.as_ref().and_then(|s| s.conditions.as_deref());
    let mut sent = Vec::new();
    for c in body["status"]["conditions"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        let type_ = c["type"].as_str().unwrap_or_default().to_owned();
        let status = c["status"].as_str().unwrap_or_default().to_owned();
        let kept = match previous {
            Some(previous) => previous
                .iter()
                .find(|(t, s, _)| *t == type_ && *s == status)
                .map(|(_, _, time)| time.clone()),
            None => known
                .into_iter()
                .flatten()
                .find(|k| k.type_ == type_ && k.status == status)
                .and_then(|k| k.last_transition_time.as_ref())
                .map(|t| t.0.to_string()),
        };
        let time = kept.unwrap_or_else(|| now.to_owned());
        c["lastTransitionTime"] = Value::String(time.clone());
        sent.push((type_, status, time));
    }
    sent
}

/// The prefix of the condition types that are nodelet's own: the agent may stop sending one
/// (`nodelet.io/ConfigCurrent` of a pod that no longer follows changes).
const OWN_CONDITION_PREFIX: &str = "nodelet.io/";

/// Deletes from the pod (`$patch: delete`, merged by type) each condition of nodelet's own
/// that `body` no longer names: one sent before (`previous`), or, without that, one in the
/// pod's own status. The kubelet's condition types are always sent. Returns whether it added a
/// deletion.
fn delete_dropped(
    body: &mut Value,
    previous: Option<&[(String, String, String)]>,
    pod: &Pod,
) -> bool {
    let known: Vec<String> = match previous {
        Some(previous) => previous.iter().map(|(t, _, _)| t.clone()).collect(),
        None => pod
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .map(|c| c.type_.clone())
            .collect(),
    };
    let Some(conditions) = body["status"]["conditions"].as_array_mut() else {
        return false;
    };
    let named: Vec<String> = conditions
        .iter()
        .filter_map(|c| c["type"].as_str().map(str::to_owned))
        .collect();
    let before = conditions.len();
    for type_ in known {
        if type_.starts_with(OWN_CONDITION_PREFIX) && !named.contains(&type_) {
            conditions.push(serde_json::json!({"type": type_, "$patch": "delete"}));
        }
    }
    conditions.len() > before
}

impl StatusSink for StatusWriter {
    fn set_status(&self, pod: &AdmittedPod, status: &PodStatus) {
        let uid = pod.uid().clone();
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let mut sent = self.shared.sent.lock();
        let last = sent.get(&uid);
        let mut body = status_patch(status);
        let conditions =
            stamp_transitions(&mut body, last.map(|s| s.conditions.as_slice()), pod, &now);
        // serde_json's maps are sorted, so equal bodies print the same text (compared without
        // the deletions, which a patch makes once).
        let text: Box<str> = body.to_string().into();
        if last.is_some_and(|s| s.text == text) {
            return;
        }
        let deletions = delete_dropped(&mut body, last.map(|s| s.conditions.as_slice()), pod);
        let body = if deletions {
            Body::new(&body)
        } else {
            Body(text.clone())
        };
        sent.insert(uid.clone(), Sent { text, conditions });
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
        {
            let mut deleted = self.shared.deleted.lock();
            if deleted.contains(&uid) {
                return;
            }
            if deleted.len() >= DELETED_MEMORY {
                deleted.pop_front();
            }
            deleted.push_back(uid.clone());
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
    /// `pod` was not admitted: its status becomes `Failed` with `reason` and `message` (the
    /// kubelet's `rejectPod` writes `Pod was rejected: <why>`), started now; nothing else of
    /// the pod is to be reported afterwards.
    pub fn rejected(&self, pod: &AdmittedPod, reason: &str, message: String) {
        let status = PodStatus {
            phase: Some("Failed".to_owned()),
            reason: Some(reason.to_owned()),
            message: Some(message),
            start_time: Some(Time(k8s_openapi::jiff::Timestamp::now())),
            ..PodStatus::default()
        };
        let body = Body::new(&wrap_status(
            serde_json::to_value(&status).unwrap_or_default(),
        ));
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
    use std::time::SystemTime;

    use nodelet_core::runtime::{ContainerState, ContainerStatus};
    use nodelet_podworker::{
        CONFIG_READY_CONDITION, ContainerProbeStatus, PodConfigStatus, Readiness,
        generate_pod_status,
    };
    use nodelet_testutil::PodBuilder;
    use serde_json::json;

    use super::*;

    fn pod() -> Pod {
        PodBuilder::new("ns", "p")
            .uid("u")
            .container(json!({"name": "c", "image": "img"}))
            .status(json!({"conditions": [{"type": "PodScheduled", "status": "True"}]}))
            .build()
    }

    /// The API status of `p` whose container `c` runs, with the probes' `ready`, and volumes
    /// mounted or not.
    fn generated(p: &Pod, ready: bool, volumes: bool) -> PodStatus {
        let status = PodConfigStatus {
            volumes: Readiness {
                ready: volumes,
                message: None,
            },
            config: Readiness {
                ready: true,
                message: None,
            },
            statuses: vec![ContainerStatus {
                name: "c".into(),
                state: ContainerState::Running {
                    started_at: SystemTime::UNIX_EPOCH,
                },
                last_state: None,
                restart_count: 0,
                container_id: "nodelet://c".into(),
            }],
            probes: vec![ContainerProbeStatus {
                name: "c".into(),
                started: true,
                ready,
            }],
            ..PodConfigStatus::default()
        };
        generate_pod_status(p, &status, SystemTime::UNIX_EPOCH)
    }

    fn condition_field(patch: &Value, type_: &str, field: &str) -> Value {
        patch["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
            .map(|c| c[field].clone())
            .unwrap_or(Value::Null)
    }

    #[test]
    fn a_status_equal_to_the_last_one_sent_is_not_queued_again() {
        let writer = StatusWriter {
            shared: Arc::new(Shared {
                pending: Mutex::default(),
                sent: Mutex::default(),
                deleted: Mutex::default(),
                wake: Arc::new(Notify::new()),
            }),
        };
        let pod = AdmittedPod::new(pod()).unwrap_or_else(|e| panic!("{e}"));
        let queued = |w: &StatusWriter| w.shared.pending.lock().drain().count();
        writer.set_status(&pod, &generated(&pod, true, true));
        assert_eq!(queued(&writer), 1);
        writer.set_status(&pod, &generated(&pod, true, true));
        assert_eq!(queued(&writer), 0, "the same status again");
        writer.set_status(&pod, &generated(&pod, true, false));
        assert_eq!(queued(&writer), 1, "volumes no longer ready");
        let kept = writer
            .shared
            .sent
            .lock()
            .get(pod.uid())
            .map(|s| s.text.len());
        assert!(
            kept.is_some_and(|n| n < 2048),
            "kept as text: {kept:?} bytes"
        );
    }

    #[test]
    fn the_patch_names_only_the_agents_conditions_deletes_absent_texts_and_replaces_the_lists() {
        let patch = status_patch(&generated(&pod(), true, true));
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
            ready.get("message").is_some_and(Value::is_null)
                && ready.get("reason").is_some_and(Value::is_null),
            "an absent reason or message deletes an earlier one: {ready}"
        );
        // Atomic lists: sent whole, no directive (a real API server keeps one as an element).
        let items = patch["status"]["containerStatuses"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(items.len(), 1);
        assert!(items.iter().all(|i| i.get("$patch").is_none()));
        assert_eq!(patch["status"]["initContainerStatuses"], json!([]));
        assert_eq!(patch["status"]["startTime"], "1970-01-01T00:00:00Z");
        assert_eq!(
            patch["status"]["containerStatuses"][0]["lastState"],
            json!({})
        );
    }

    #[test]
    fn an_own_condition_no_longer_generated_is_deleted_from_the_pod_by_type() {
        let writer = StatusWriter {
            shared: Arc::new(Shared {
                pending: Mutex::default(),
                sent: Mutex::default(),
                deleted: Mutex::default(),
                wake: Arc::new(Notify::new()),
            }),
        };
        let pod = AdmittedPod::new(pod()).unwrap_or_else(|e| panic!("{e}"));
        let body = |w: &StatusWriter| match w.shared.pending.lock().drain().next() {
            Some((_, Work::Patch { body, .. })) => body.value(),
            _ => panic!("no patch queued"),
        };
        let mut with = generated(&pod, true, true);
        with.conditions.get_or_insert_with(Vec::new).push(
            k8s_openapi::api::core::v1::PodCondition {
                type_: "nodelet.io/ConfigCurrent".into(),
                status: "True".into(),
                ..Default::default()
            },
        );
        writer.set_status(&pod, &with);
        let first = body(&writer);
        assert_eq!(
            condition_field(&first, "nodelet.io/ConfigCurrent", "status"),
            "True"
        );
        writer.set_status(&pod, &generated(&pod, true, true));
        let second = body(&writer);
        assert_eq!(
            condition_field(&second, "nodelet.io/ConfigCurrent", "$patch"),
            "delete"
        );
        // The kubelet's conditions are never deleted; a later identical status sends nothing.
        assert_eq!(condition_field(&second, "Ready", "$patch"), Value::Null);
        writer.set_status(&pod, &generated(&pod, true, true));
        assert_eq!(writer.shared.pending.lock().len(), 0);
        // After a restart (nothing sent yet) the pod's own status says what to delete.
        let mut restarted = pod.to_pod();
        restarted.status = Some(
            serde_json::from_value(json!({"conditions": [
                {"type": "nodelet.io/ConfigCurrent", "status": "False"},
                {"type": "PodScheduled", "status": "True"},
            ]}))
            .unwrap_or_default(),
        );
        let restarted = AdmittedPod::new(restarted).unwrap_or_else(|e| panic!("{e}"));
        let fresh = StatusWriter {
            shared: Arc::new(Shared {
                pending: Mutex::default(),
                sent: Mutex::default(),
                deleted: Mutex::default(),
                wake: Arc::new(Notify::new()),
            }),
        };
        fresh.set_status(&restarted, &generated(&restarted, true, true));
        let third = body(&fresh);
        assert_eq!(
            condition_field(&third, "nodelet.io/ConfigCurrent", "$patch"),
            "delete"
        );
        assert_eq!(
            condition_field(&third, "PodScheduled", "$patch"),
            Value::Null
        );
    }

    #[test]
    fn a_conditions_transition_time_moves_only_when_its_status_changes() {
        let mut p = pod();
        p.status = Some(
            serde_json::from_value(json!({"conditions": [
                {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            ]}))
            .unwrap_or_default(),
        );
        let body = |ready: bool| status_patch(&generated(&p, ready, true));
        // No earlier patch: the pod's own time is kept for an unchanged status.
        let mut sent_body = body(false);
        let sent = stamp_transitions(&mut sent_body, None, &p, "2026-01-01T00:00:10Z");
        assert_eq!(
            condition_field(&sent_body, "Ready", "lastTransitionTime"),
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(
            condition_field(&sent_body, "Initialized", "lastTransitionTime"),
            "2026-01-01T00:00:10Z"
        );
        // Ready turns True: its time moves; the others keep theirs.
        let mut sent_body = body(true);
        let sent = stamp_transitions(&mut sent_body, Some(&sent), &p, "2026-01-01T00:00:20Z");
        assert_eq!(
            condition_field(&sent_body, "Ready", "lastTransitionTime"),
            "2026-01-01T00:00:20Z"
        );
        assert_eq!(
            condition_field(&sent_body, "Initialized", "lastTransitionTime"),
            "2026-01-01T00:00:10Z"
        );
        let mut sent_body = body(true);
        stamp_transitions(&mut sent_body, Some(&sent), &p, "2026-01-01T00:00:30Z");
        assert_eq!(
            condition_field(&sent_body, "Ready", "lastTransitionTime"),
            "2026-01-01T00:00:20Z"
        );
    }

    #[tokio::test]
    async fn a_pod_reported_terminated_twice_is_deleted_once_with_its_later_status_first() {
        let server = nodelet_apiserver::ApiServer::start(nodelet_apiserver::Config::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let h = server.handle();
        h.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}))
            .unwrap_or_else(|e| panic!("{e}"));
        let created = h
            .create(serde_json::to_value(pod()).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut p = pod();
        p.metadata.uid = created["metadata"]["uid"].as_str().map(str::to_owned);
        p.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        let admitted = AdmittedPod::new(p.clone()).unwrap_or_else(|e| panic!("{e}"));
        let (shutdown, tracker) = (
            CancellationToken::new(),
            tokio_util::task::TaskTracker::new(),
        );
        let writer = StatusWriter::start(
            StatusConfig::default(),
            server.client(),
            Counters::default(),
            shutdown.clone(),
            &tracker,
        );
        // No await between these: the writer's task has not run yet.
        writer.terminated(&admitted);
        writer.set_status(&admitted, &generated(&p, false, true));
        writer.terminated(&admitted);
        {
            let pending = writer.shared.pending.lock();
            assert_eq!(pending.len(), 1);
            assert!(
                matches!(
                    pending.values().next(),
                    Some(Work::Delete {
                        last_status: Some(_),
                        ..
                    })
                ),
                "the later status rides with the deletion, which it does not replace"
            );
        }
        while h.get("v1", "Pod", Some("ns"), "p").is_some() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The pod watch shows it finished and being deleted once more: nothing to send.
        writer.terminated(&admitted);
        assert!(writer.shared.pending.lock().is_empty());
        let deletes = h
            .requests()
            .iter()
            .filter(|r| r.verb == "delete" && r.resource == "pods")
            .count();
        assert_eq!(deletes, 1, "one DELETE for one pod");
        shutdown.cancel();
        tracker.close();
        tracker.wait().await;
        server.shutdown().await;
    }
}
