//! Feeds reloads (`nodelet_podworker::follow`, FC-5, FC-6) from the volume manager's
//! [`VolumeUpdate`]s, in order, with the pod as the pod source last saw it; and tells it of
//! pods seen (their annotations checked) and gone. Only with the process runtime. (subPath
//! binds move inside the volume's write: `parts::volume_manager` installs the hook.)
//!
//! The condition `nodelet.io/ConfigCurrent` (FC-20) of a pod that follows changes is
//! published again at once when what its containers see may have changed: when an object it
//! reads changed (the version the object managers now hold is told first, so the condition
//! says `False` until a volume shows it) and when one of its volumes was set up again.
//!
//! When updates were lost to a burst (the broadcast lagged), every volume of every pod that
//! asks for a reload is taken as updated: a reload may come once more than needed, never once
//! less.

use std::sync::Arc;

use nodelet_core::{AdmittedPod, ObjectKind, ObjectRef, PodUid};
use nodelet_podworker::follow::FollowChange;
use nodelet_volume_manager::VolumeUpdate;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::state::AgentState;

pub(crate) async fn run(state: Arc<AgentState>, shutdown: CancellationToken) {
    let Some(follow) = state.follow.clone() else {
        return;
    };
    let mut updates = state.volumes.subscribe_updates();
    let mut configmaps = state.configmaps.subscribe();
    let mut secrets = state.secrets.subscribe();
    loop {
        let update = tokio::select! {
            () = shutdown.cancelled() => return,
            u = updates.recv() => u,
            change = configmaps.recv() => {
                object_changed(&state, &follow, change, |o| state.configmaps.referencing_pods(o)).await;
                continue;
            }
            change = secrets.recv() => {
                object_changed(&state, &follow, change, |o| state.secrets.referencing_pods(o)).await;
                continue;
            }
        };
        match update {
            Ok(u) => {
                let pod = state.known_pods.read().get(&u.pod_uid).cloned();
                let Some(pod) = pod else { continue };
                if u.written {
                    follow.volume_updated(&pod, &u);
                }
                if follow.settings(&pod).any() {
                    state.workers.syncer().config_seen_changed(pod.uid());
                }
            }
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(
                    missed,
                    "volume updates missed; following every volume again"
                );
                let pods: Vec<AdmittedPod> = state.known_pods.read().values().cloned().collect();
                for pod in pods.iter().filter(|p| follow.settings(p).any()) {
                    for volume in pod.volumes() {
                        let now = tokio::time::Instant::now();
                        let update = VolumeUpdate {
                            pod_uid: pod.uid().clone(),
                            namespace: pod.namespace().to_owned(),
                            volume: volume.name().to_owned(),
                            objects: Vec::new(),
                            written: true,
                            change_seen: now,
                            at: now,
                        };
                        follow.volume_updated(pod, &update);
                    }
                    state.workers.syncer().config_seen_changed(pod.uid());
                }
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// FC-20: an object changed; for each pod that reads it, the version the object managers hold
/// now is told (FC-8: a mount is not current until it shows it), and the status of each one
/// that follows changes is published again (its condition `False` until the volumes that show
/// the object were written). When changes were missed, every such pod's status is published
/// again from the volume manager's view alone.
async fn object_changed(
    state: &AgentState,
    follow: &FollowChange,
    change: Result<ObjectRef, RecvError>,
    referencing: impl Fn(&ObjectRef) -> Vec<PodUid>,
) {
    let (object, uids) = match change {
        Ok(object) => {
            let uids = referencing(&object);
            (Some(object), uids)
        }
        Err(RecvError::Lagged(_)) => {
            follow.forget_versions();
            (None, state.known_pods.read().keys().cloned().collect())
        }
        Err(RecvError::Closed) => return,
    };
    let pods: Vec<AdmittedPod> = {
        let known = state.known_pods.read();
        uids.iter().filter_map(|u| known.get(u).cloned()).collect()
    };
    if pods.is_empty() {
        return;
    }
    if let Some(object) = &object {
        let version = match object.kind {
            ObjectKind::ConfigMap => state
                .configmaps
                .get(&object.namespace, &object.name)
                .await
                .ok()
                .and_then(|o| o.metadata.resource_version.clone()),
            ObjectKind::Secret => state
                .secrets
                .get(&object.namespace, &object.name)
                .await
                .ok()
                .and_then(|o| o.metadata.resource_version.clone()),
        };
        if let Some(version) = version {
            for pod in &pods {
                follow.object_changed(pod, object, &version);
            }
        }
    }
    for pod in pods.iter().filter(|p| follow.settings(p).any()) {
        state.workers.syncer().config_seen_changed(pod.uid());
    }
}

/// The pod source saw `pod` (added or changed): its annotations are checked.
pub(crate) fn pod_seen(state: &AgentState, pod: &AdmittedPod) {
    if let Some(follow) = &state.follow {
        follow.pod_seen(pod);
    }
}

/// The pod source saw pod `uid` deleted.
pub(crate) fn pod_gone(state: &AgentState, uid: &PodUid) {
    if let Some(follow) = &state.follow {
        follow.forget_pod(uid);
    }
}
