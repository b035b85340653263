//! Read-only views of the agent's state: the `/pods` JSON document and the `/metrics` text,
//! served by `http.rs` and offered by [`Agent`](crate::Agent).

use std::collections::HashMap;

use crate::pods_view::{
    ContainerView, EnvView, MountView, ObjectView, PodView, PodsView, VolumeView,
};
use crate::state::AgentState;

/// The `/pods` document.
pub(crate) fn pods_view(state: &AgentState) -> PodsView {
    let mut volumes: HashMap<nodelet_core::PodUid, nodelet_volume_manager::PodVolumes> = state
        .volumes
        .snapshot()
        .into_iter()
        .map(|p| (p.pod_uid.clone(), p))
        .collect();
    let pods = state
        .workers
        .snapshot()
        .into_iter()
        .map(|w| PodView {
            containers: containers_view(state, &w.uid, volumes.get(&w.uid)),
            volumes: volumes
                .remove(&w.uid)
                .map(|p| p.volumes.iter().map(volume_view).collect())
                .unwrap_or_default(),
            uid: w.uid.to_string(),
            namespace: w.namespace,
            name: w.name,
            phase: format!("{:?}", w.phase),
            syncs: w.syncs,
            last_sync: w
                .last_sync
                .map(|t| chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339()),
            last_error: w.last_error,
        })
        .collect();
    PodsView {
        node: state.config.node_name.clone(),
        api: crate::api_health::api_view(state),
        pods,
    }
}

/// FC-8: what each running container of pod `uid` sees (the process runtime only).
fn containers_view(
    state: &AgentState,
    uid: &nodelet_core::PodUid,
    volumes: Option<&nodelet_volume_manager::PodVolumes>,
) -> Vec<ContainerView> {
    let (Some(follow), Some(volumes)) = (&state.follow, volumes) else {
        return Vec::new();
    };
    let Some(pod) = state.known_pods.read().get(uid).cloned() else {
        return Vec::new();
    };
    follow
        .freshness(&pod, &volumes.volumes)
        .into_iter()
        .map(|c| ContainerView {
            current: c.current(),
            name: c.container,
            mounts: c
                .mounts
                .into_iter()
                .map(|m| MountView {
                    objects: m.objects.iter().map(object_view).collect(),
                    volume: m.volume,
                    mount_path: m.mount_path,
                    sub_path: m.sub_path,
                    follows: m.follows,
                    current: m.current,
                })
                .collect(),
            env: c
                .env
                .into_iter()
                .map(|e| EnvView {
                    kind: format!("{:?}", e.object.kind),
                    name: e.object.name,
                    resource_version: e.resource_version,
                    current: e.current,
                })
                .collect(),
        })
        .collect()
}

fn object_view(o: &nodelet_volume_manager::plugins::ObjectVersion) -> ObjectView {
    ObjectView {
        kind: format!("{:?}", o.object.kind),
        name: o.object.name.clone(),
        resource_version: o.resource_version.clone(),
    }
}

fn volume_view(v: &nodelet_volume_manager::VolumeSnapshot) -> VolumeView {
    VolumeView {
        name: v.name.clone(),
        plugin: v.plugin.clone(),
        state: state_name(&v.state),
        path: v.path.as_ref().map(|p| p.display().to_string()),
        remount_pending: v.remount_pending,
        last_error: v.last_error.clone(),
        objects: v.objects.iter().map(object_view).collect(),
    }
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
    m.set_watches("services", usize::from(state.services.is_started()));
    // Both managers share one bucket.
    m.set_first_reads(state.configmaps.first_reads().stats());
    if let Some(window) = state.configmaps.first_reads().window() {
        m.set_request_window(window.stats());
    }
    for (client, limiter) in &state.paced {
        m.set_paced(client, limiter.stats());
    }
    m.set_service_watch_lists(state.services.lists());
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
