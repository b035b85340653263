//! [`StatusWriter`]: turns the config syncer's [`PodConfigStatus`] into pod status patches
//! (conditions, container states, phase) and deletes finished pods, in a background task.
//!
//! The patches are strategic merge patches, as the kubelet's: the conditions the agent owns
//! merge by type, so conditions others set (`PodScheduled`, a readiness gate's) stay; the
//! container status lists are replaced whole. A condition keeps its `lastTransitionTime`
//! while its status stays (the time of the last patch that changed it, else the pod's own).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use nodelet_core::{AdmittedPod, PodUid};
use nodelet_podworker::{PodConfigStatus, StatusSink};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::metrics::Metrics;
use crate::status_build::{process_status_patch, status_patch};

/// A [`StatusSink`]: newest status per pod wins; a background task patches `pods/status`
/// (strategic merge patch) and, for terminated pods, deletes the pod with grace period 0 and a UID
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
    /// Last patch sent per pod UID (to skip unchanged ones).
    sent: Mutex<HashMap<PodUid, Sent>>,
    wake: Arc<Notify>,
}

/// What was last sent for a pod.
struct Sent {
    /// The patch, as compact JSON text (about a seventh of the heap its `Value` tree takes:
    /// ~1 KB a pod instead of ~7).
    text: Box<str>,
    /// The pod's first start time.
    started: String,
    /// Each condition sent: type, status, `lastTransitionTime`.
    conditions: Vec<(String, String, String)>,
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
                .patch_status(name, &PatchParams::default(), &Patch::Strategic(body))
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
                    .patch_status(name, &PatchParams::default(), &Patch::Strategic(body))
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
        c["lastTransitionTime"] = json!(time);
        sent.push((type_, status, time));
    }
    sent
}

impl StatusSink for StatusWriter {
    fn set_status(&self, pod: &AdmittedPod, status: &PodConfigStatus) {
        let uid = pod.uid().clone();
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let mut sent = self.shared.sent.lock();
        let last = sent.get(&uid);
        let started = last.map_or_else(|| now.clone(), |s| s.started.clone());
        let mut body = match &status.runtime {
            Some(runtime) => {
                process_status_patch(pod, status, runtime, &started, &self.shared.host_ips)
            }
            None => status_patch(pod, status, &started),
        };
        let conditions =
            stamp_transitions(&mut body, last.map(|s| s.conditions.as_slice()), pod, &now);
        // serde_json's maps are sorted, so equal bodies print the same text.
        let text: Box<str> = body.to_string().into();
        if last.is_some_and(|s| s.text == text) {
            return;
        }
        sent.insert(
            uid.clone(),
            Sent {
                text,
                started,
                conditions,
            },
        );
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
    use nodelet_podworker::ContainerConfigState;

    use crate::status_build::tests::{condition_field, pod, probed, status};

    use super::*;

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
            .map(|s| s.text.len());
        assert!(
            kept.is_some_and(|n| n < 2048),
            "kept as text: {kept:?} bytes"
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
        // No earlier patch: the pod's own time is kept for an unchanged status.
        let mut body = probed(&p, true, false);
        let sent = stamp_transitions(&mut body, None, &p, "2026-01-01T00:00:10Z");
        assert_eq!(
            condition_field(&body, "Ready", "lastTransitionTime"),
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(
            condition_field(&body, "Initialized", "lastTransitionTime"),
            "2026-01-01T00:00:10Z"
        );
        // Ready turns True: its time moves; the others keep theirs.
        let mut body = probed(&p, true, true);
        let sent = stamp_transitions(&mut body, Some(&sent), &p, "2026-01-01T00:00:20Z");
        assert_eq!(
            condition_field(&body, "Ready", "lastTransitionTime"),
            "2026-01-01T00:00:20Z"
        );
        assert_eq!(
            condition_field(&body, "Initialized", "lastTransitionTime"),
            "2026-01-01T00:00:10Z"
        );
        let mut body = probed(&p, true, true);
        stamp_transitions(&mut body, Some(&sent), &p, "2026-01-01T00:00:30Z");
        assert_eq!(
            condition_field(&body, "Ready", "lastTransitionTime"),
            "2026-01-01T00:00:20Z"
        );
    }
}
