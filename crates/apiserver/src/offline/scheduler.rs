//! Offline mode's scheduler ([`Config::schedule_to`](crate::Config::schedule_to)): binds every
//! pod that names no node to the one node there is, as kube-scheduler would on a one-node
//! cluster, and writes the `Scheduled` event it writes.
//!
//! # Steps (markers `// (n)`)
//! 1. Under the store's lock: subscribe to its changes and read the pods stored now, so that no
//!    pod written meanwhile is missed.
//! 2. Bind each of those pods that waits for scheduling; then follow the changes: a pod added
//!    or modified that waits is bound. If the changes outran the task (a lagged broadcast),
//!    every stored pod is looked at again.
//! 3. Bind as `pods/binding` does: `spec.nodeName` and the `PodScheduled` condition. A pod
//!    bound meanwhile (Conflict) or deleted (NotFound) is left alone.
//! 4. Record the event kube-scheduler's events.k8s.io recorder writes, as core/v1 shows it:
//!    type `Normal`, reason `Scheduled`, action `Binding`, message `Successfully assigned
//!    <namespace>/<name> to <node>`, `reportingComponent` `default-scheduler`,
//!    `reportingInstance` `default-scheduler-<host name>`, `eventTime` now (microseconds), an
//!    empty `source`, no count or first/last timestamps; named `<pod>.<nanoseconds, hex>`.
//!
//! A pod waits for scheduling when it has no `spec.nodeName`, is not being deleted, names
//! `default-scheduler` (what defaulting gives it) and has no `schedulingGates`. Nothing else a
//! scheduler weighs among many nodes is looked at (taints, node selectors, affinity, resource
//! requests, whether the Node object exists yet): there is one node.

use std::sync::{Arc, Weak};

use chrono::SecondsFormat;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use crate::registry::{WriteOptions, meta_str};
use crate::resources::{EVENTS, PODS};
use crate::state::Shared;
use crate::store::{Notice, WatchEventType};

/// The scheduler name kube-scheduler answers to, and the component its events name.
const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// Starts binding the pods of the server behind `shared` to `node` (module docs), in a task
/// that ends with the server.
pub(crate) fn spawn(shared: &Arc<Shared>, node: String) {
    // (1)
    let (mut changes, pods) = {
        let s = shared.registry.store.inner.lock();
        let pods: Vec<Arc<Value>> = s
            .snapshot(PODS, None, s.rv)
            .into_iter()
            .map(|(_, pod)| pod)
            .collect();
        (s.subscribe(), pods)
    };
    let stop = shared.shutdown.clone();
    let weak = Arc::downgrade(shared);
    let scheduler = Scheduler {
        node,
        instance: format!("{DEFAULT_SCHEDULER}-{}", host_name()),
    };
    tokio::spawn(async move {
        // (2)
        if !scheduler.bind_all(&weak, pods) {
            return;
        }
        loop {
            let change = tokio::select! {
                () = stop.cancelled() => return,
                change = changes.recv() => change,
            };
            let Some(shared) = weak.upgrade() else { return };
            match change {
                Ok(Notice::Event(event))
                    if event.key.resource == PODS && event.kind != WatchEventType::Deleted =>
                {
                    scheduler.bind_if_waiting(&shared, &event.object);
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => {
                    let pods = {
                        let s = shared.registry.store.inner.lock();
                        s.snapshot(PODS, None, s.rv)
                    };
                    for (_, pod) in pods {
                        scheduler.bind_if_waiting(&shared, &pod);
                    }
                }
                Err(RecvError::Closed) => return,
            }
        }
    });
}

/// The one node and the instance name events report.
struct Scheduler {
    node: String,
    instance: String,
}

impl Scheduler {
    /// Binds the waiting ones of `pods`; `false` once the server is gone.
    fn bind_all(&self, weak: &Weak<Shared>, pods: Vec<Arc<Value>>) -> bool {
        let Some(shared) = weak.upgrade() else {
            return false;
        };
        for pod in pods {
            self.bind_if_waiting(&shared, &pod);
        }
        true
    }

    fn bind_if_waiting(&self, shared: &Shared, pod: &Value) {
        if !waits_for_scheduling(pod) {
            return;
        }
        let ns = meta_str(pod, "namespace").unwrap_or("default");
        let name = meta_str(pod, "name").unwrap_or("");
        // (3)
        if let Err(error) = shared
            .registry
            .bind(ns, name, &self.node, WriteOptions::default())
        {
            tracing::debug!(namespace = ns, name, %error, "pod not bound");
            return;
        }
        // (4)
        let event = self.scheduled_event(pod, chrono::Utc::now());
        if let Err(error) = shared
            .registry
            .create(EVENTS, ns, event, WriteOptions::default())
        {
            tracing::debug!(namespace = ns, name, %error, "Scheduled event not recorded");
        }
    }

    /// The `Scheduled` event for `pod` (as it was before binding), at `now` (step 4).
    fn scheduled_event(&self, pod: &Value, now: chrono::DateTime<chrono::Utc>) -> Value {
        let ns = meta_str(pod, "namespace").unwrap_or("default");
        let name = meta_str(pod, "name").unwrap_or("");
        let nanos = now.timestamp_nanos_opt().unwrap_or_default();
        json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": format!("{name}.{nanos:x}"), "namespace": ns},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": ns,
                "name": name,
                "uid": meta_str(pod, "uid").unwrap_or(""),
                "resourceVersion": meta_str(pod, "resourceVersion").unwrap_or(""),
            },
            "type": "Normal",
            "reason": "Scheduled",
            "action": "Binding",
            "message": format!("Successfully assigned {ns}/{name} to {}", self.node),
            "eventTime": now.to_rfc3339_opts(SecondsFormat::Micros, true),
            "reportingComponent": DEFAULT_SCHEDULER,
            "reportingInstance": self.instance,
            "source": {},
            "firstTimestamp": null,
            "lastTimestamp": null,
        })
    }
}

/// Whether kube-scheduler would pick `pod` up (module docs).
fn waits_for_scheduling(pod: &Value) -> bool {
    let unbound = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    let deleting = pod.pointer("/metadata/deletionTimestamp").is_some();
    let ours = pod
        .pointer("/spec/schedulerName")
        .and_then(Value::as_str)
        .is_none_or(|s| s.is_empty() || s == DEFAULT_SCHEDULER);
    let gated = pod
        .pointer("/spec/schedulingGates")
        .and_then(Value::as_array)
        .is_some_and(|gates| !gates.is_empty());
    unbound && !deleting && ours && !gated
}

/// This machine's host name (what kube-scheduler puts in its reporting instance).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unbound_live_ungated_pods_of_the_default_scheduler_wait_for_scheduling() {
        let pod = |spec: Value, meta: Value| json!({"metadata": meta, "spec": spec});
        let m = json!({"name": "p"});
        assert!(waits_for_scheduling(&pod(json!({}), m.clone())));
        assert!(waits_for_scheduling(&pod(
            json!({"nodeName": "", "schedulerName": "default-scheduler", "schedulingGates": []}),
            m.clone()
        )));
        assert!(!waits_for_scheduling(&pod(
            json!({"nodeName": "n"}),
            m.clone()
        )));
        assert!(!waits_for_scheduling(&pod(
            json!({"schedulerName": "my-scheduler"}),
            m.clone()
        )));
        assert!(!waits_for_scheduling(&pod(
            json!({"schedulingGates": [{"name": "wait"}]}),
            m
        )));
        assert!(!waits_for_scheduling(&pod(
            json!({}),
            json!({"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"})
        )));
    }

    #[test]
    fn the_scheduled_event_is_the_one_kube_scheduler_records() {
        let scheduler = Scheduler {
            node: "nodelet".into(),
            instance: "default-scheduler-host".into(),
        };
        let pod = json!({"metadata": {"name": "web", "namespace": "shop", "uid": "u1",
                                      "resourceVersion": "7"}});
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-05T05:26:02.796796123Z")
            .map(|t| t.to_utc())
            .unwrap();
        let event = scheduler.scheduled_event(&pod, now);
        assert_eq!(event["metadata"]["name"], "web.18ee444499d5c8db");
        assert_eq!(event["metadata"]["namespace"], "shop");
        assert_eq!(
            event["message"],
            "Successfully assigned shop/web to nodelet"
        );
        assert_eq!(
            (&event["type"], &event["reason"], &event["action"]),
            (&json!("Normal"), &json!("Scheduled"), &json!("Binding"))
        );
        assert_eq!(event["reportingComponent"], "default-scheduler");
        assert_eq!(event["reportingInstance"], "default-scheduler-host");
        assert_eq!(event["eventTime"], "2026-12-05T05:26:02.796796Z");
        assert_eq!(
            event["involvedObject"],
            json!({"apiVersion": "v1", "kind": "Pod", "namespace": "shop", "name": "web",
                   "uid": "u1", "resourceVersion": "7"})
        );
    }
}
