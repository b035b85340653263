//! Read-only views of the agent's state: the `/pods` JSON document and the `/metrics` text,
//! served by `http.rs` and offered by [`Agent`](crate::Agent).

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::state::AgentState;

/// The `/pods` document.
pub(crate) fn pods_json(state: &AgentState) -> Value {
    let volumes: HashMap<nodelet_core::PodUid, nodelet_volume_manager::PodVolumes> = state
        .volumes
        .snapshot()
        .into_iter()
        .map(|p| (p.pod_uid.clone(), p))
        .collect();
    let pods: Vec<Value> = state
        .workers
        .snapshot()
        .into_iter()
        .map(|w| {
            let vols: Vec<Value> = volumes
                .get(&w.uid)
                .map(|p| p.volumes.iter().map(volume_json).collect())
                .unwrap_or_default();
            json!({
                "uid": w.uid, "namespace": w.namespace, "name": w.name,
                "phase": w.phase, "syncs": w.syncs,
                "lastSync": serde_json::to_value(&w).ok().and_then(|v| v.get("last_sync").cloned()),
                "lastError": w.last_error,
                "volumes": vols,
            })
        })
        .collect();
    json!({"node": state.config.node_name, "api": crate::api_health::api_json(state), "pods": pods})
}

fn volume_json(v: &nodelet_volume_manager::VolumeSnapshot) -> Value {
    let objects: Vec<Value> = v
        .objects
        .iter()
        .map(|o| {
            json!({
                "kind": format!("{:?}", o.object.kind),
                "name": o.object.name,
                "resourceVersion": o.resource_version,
            })
        })
        .collect();
    json!({
        "name": v.name,
        "plugin": v.plugin,
        "state": state_name(&v.state),
        "path": v.path.as_ref().map(|p| p.display().to_string()),
        "remountPending": v.remount_pending,
        "lastError": v.last_error,
        "objects": objects,
    })
}

pub(crate) fn state_name(s: &nodelet_volume_manager::VolumeState) -> String {
    use nodelet_volume_manager::VolumeState;
    match s {
        VolumeState::Pending => "Pending".into(),
        VolumeState::Mounted => "Mounted".into(),
        VolumeState::Uncertain => "Uncertain".into(),
        VolumeState::Unmounting => "Unmounting".into(),
        VolumeState::Unsupported { .. } => "Unsupported".into(),
        other => format!("{other:?}"),
    }
}

/// Refresh the gauges from the current state and encode.
pub(crate) fn metrics_text(state: &AgentState) -> String {
    let m = &state.metrics;
    m.set_watches("configmaps", state.configmaps.stats().running_watches);
    m.set_watches("secrets", state.secrets.stats().running_watches);
    let mut by_state: HashMap<(String, String), usize> = HashMap::new();
    let mut errors: HashMap<String, usize> = HashMap::new();
    for pod in state.volumes.snapshot() {
        for v in &pod.volumes {
            let plugin = v.plugin.clone().unwrap_or_else(|| "none".into());
            *by_state
                .entry((plugin.clone(), state_name(&v.state)))
                .or_default() += 1;
            if v.last_error.is_some() {
                *errors.entry(plugin).or_default() += 1;
            }
        }
    }
    m.set_volumes(
        &by_state.into_iter().collect::<Vec<_>>(),
        &errors.into_iter().collect::<Vec<_>>(),
    );
    let mut phases: HashMap<String, usize> = HashMap::new();
    for w in state.workers.snapshot() {
        *phases.entry(format!("{:?}", w.phase)).or_default() += 1;
    }
    m.set_pods(&phases.into_iter().collect::<Vec<_>>());
    crate::api_health::update_metrics(state);
    m.encode()
}
