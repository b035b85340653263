//! The API connection as the agent sees it, for `/metrics` and `/pods`: the health of the pod
//! watch (`pod_watch::PodWatchHealth`, recorded by the pod source) and of every object watch (from the
//! object managers' `watch_health`).
//!
//! A watch is *failing* from its first failed request (connection refused or reset, time-out,
//! error status) until the API server answers it again; the API is *reachable* while no watch
//! is failing. The pod watch's client re-watches silently after an outage (no event until
//! something changes), so while it fails the pod source probes with a one-item list of its pods
//! (`pod_watch::PROBE_INTERVAL`) and an answer ends the failure.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::pods_view::{ApiView, WatchView};
use crate::state::AgentState;

/// What a watch follows.
enum Watched {
    /// The pod watch.
    Pods { field_selector: String },
    /// One ConfigMap or Secret.
    Object { namespace: String, name: String },
}

/// One watch, whichever its kind, as `/pods` and `/metrics` show it.
struct Row {
    resource: &'static str,
    object: Watched,
    running: bool,
    last_success: Option<SystemTime>,
    failing_since: Option<SystemTime>,
    failures: u32,
    last_error: Option<String>,
}

fn rows(state: &AgentState) -> Vec<Row> {
    let pods = state.pod_watch.snapshot();
    let mut rows = vec![Row {
        resource: "pods",
        object: Watched::Pods {
            field_selector: format!("spec.nodeName={}", state.config.node_name),
        },
        running: true,
        last_success: pods.last_success,
        failing_since: pods.failing_since,
        failures: pods.failures,
        last_error: pods.last_error,
    }];
    let objects = [
        ("configmaps", state.configmaps.watch_health()),
        ("secrets", state.secrets.watch_health()),
    ];
    for (resource, list) in objects {
        rows.extend(list.into_iter().map(|h| Row {
            resource,
            object: Watched::Object {
                namespace: h.object.namespace,
                name: h.object.name,
            },
            running: h.running,
            last_success: h.last_success,
            failing_since: h.failing_since,
            failures: h.consecutive_failures,
            last_error: h.last_error,
        }));
    }
    rows
}

fn rfc3339(t: Option<SystemTime>) -> Option<String> {
    t.map(|t| {
        chrono::DateTime::<chrono::Utc>::from(t)
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    })
}

fn unix_seconds(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The `api` part of `/pods`: reachable, and every watch's health.
pub(crate) fn api_view(state: &AgentState) -> ApiView {
    let rows = rows(state);
    let reachable = rows.iter().all(|r| r.failing_since.is_none());
    let watches = rows
        .into_iter()
        .map(|r| {
            let (field_selector, namespace, name) = match r.object {
                Watched::Pods { field_selector } => (Some(field_selector), None, None),
                Watched::Object { namespace, name } => (None, Some(namespace), Some(name)),
            };
            WatchView {
                resource: r.resource.to_owned(),
                running: r.running,
                last_success: rfc3339(r.last_success),
                failing_since: rfc3339(r.failing_since),
                failures: r.failures,
                last_error: r.last_error,
                field_selector,
                namespace,
                name,
            }
        })
        .collect();
    ApiView { reachable, watches }
}

/// Sets `nodelet_api_reachable`, `nodelet_watches_failing` and
/// `nodelet_watch_last_success_timestamp_seconds` (per resource: the oldest last answer among
/// its running watches, so it lags while any one of them is not being answered).
pub(crate) fn update_metrics(state: &AgentState) {
    let rows = rows(state);
    let reachable = rows.iter().all(|r| r.failing_since.is_none());
    let per_resource: Vec<(String, usize, Option<i64>)> = ["pods", "configmaps", "secrets"]
        .into_iter()
        .map(|resource| {
            let of = || rows.iter().filter(move |r| r.resource == resource);
            let failing = of().filter(|r| r.failing_since.is_some()).count();
            let oldest = of()
                .filter(|r| r.running)
                .map(|r| r.last_success.map_or(0, unix_seconds))
                .min();
            (resource.to_owned(), failing, oldest)
        })
        .collect();
    state.metrics.set_api_health(reachable, &per_resource);
}
