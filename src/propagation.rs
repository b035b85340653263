//! Measures update propagation for the `nodelet_propagation_latency_seconds` histogram: from
//! the moment an object manager reports a changed ConfigMap/Secret to the moment every
//! mounted volume that reads it shows the new resourceVersion.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use nodelet_object_manager::ObjectKey;
use nodelet_volume_manager::VolumeState;
use nodelet_volume_manager::plugins::ObjectKind;
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::state::AgentState;

/// Give up on a change after this long (a failing remount never converges).
const GIVE_UP: Duration = Duration::from_secs(120);
/// How often pending changes are checked against the volume snapshot (only while some are
/// pending).
const CHECK: Duration = Duration::from_millis(5);

type Pending = HashMap<(ObjectKind, String, String), (Option<String>, Instant)>;

pub(crate) async fn track(state: Arc<AgentState>, shutdown: CancellationToken) {
    let mut cms = state.configmaps.subscribe();
    let mut secrets = state.secrets.subscribe();
    let mut pending: Pending = HashMap::new();
    loop {
        let check = tokio::time::sleep(CHECK);
        tokio::select! {
            () = shutdown.cancelled() => return,
            k = cms.recv() => note(&state, &mut pending, ObjectKind::ConfigMap, k).await,
            k = secrets.recv() => note(&state, &mut pending, ObjectKind::Secret, k).await,
            () = check, if !pending.is_empty() => settle(&state, &mut pending),
        }
    }
}

async fn note(
    state: &AgentState,
    pending: &mut Pending,
    kind: ObjectKind,
    key: Result<ObjectKey, broadcast::error::RecvError>,
) {
    let Ok(key) = key else { return };
    let rv = match kind {
        ObjectKind::ConfigMap => state
            .configmaps
            .get(&key.namespace, &key.name)
            .await
            .ok()
            .and_then(|o| o.metadata.resource_version.clone()),
        _ => state
            .secrets
            .get(&key.namespace, &key.name)
            .await
            .ok()
            .and_then(|o| o.metadata.resource_version.clone()),
    };
    pending.insert((kind, key.namespace, key.name), (rv, Instant::now()));
}

fn settle(state: &AgentState, pending: &mut Pending) {
    let snapshot = state.volumes.snapshot();
    pending.retain(|(kind, namespace, name), (rv, since)| {
        if since.elapsed() > GIVE_UP {
            return false;
        }
        let mut users = 0;
        let mut current = 0;
        for pod in snapshot.iter().filter(|p| &p.namespace == namespace) {
            for v in pod
                .volumes
                .iter()
                .filter(|v| v.state == VolumeState::Mounted)
            {
                for o in v
                    .objects
                    .iter()
                    .filter(|o| &o.object.kind == kind && &o.object.name == name)
                {
                    users += 1;
                    if &o.resource_version == rv {
                        current += 1;
                    }
                }
            }
        }
        if users > 0 && users == current {
            state
                .metrics
                .observe_propagation(since.elapsed().as_secs_f64());
            return false;
        }
        // Nobody mounts it (env-only or deleted optional object): nothing to measure.
        users > 0
    });
}
