//! Feeds reloads (`nodelet_podworker::follow`, FC-5, FC-6) from the volume manager's
//! [`VolumeUpdate`]s, in order, with the pod as the pod source last saw it; and tells it of
//! pods seen (their annotations checked) and gone. Only with the process runtime. (subPath
//! binds move inside the volume's write: `parts::volume_manager` installs the hook.)
//!
//! [`run_env`] feeds the environments that follow a change (FC-10 … FC-14, either runtime):
//! the managers' announcements, the known pods and their syncs.
//!
//! When updates were lost to a burst (the broadcast lagged), every volume of every pod that
//! asks for a reload is taken as updated: a reload may come once more than needed, never once
//! less.

use std::sync::Arc;

use nodelet_core::{AdmittedPod, ObjectKind, ObjectRef, PodUid};
use nodelet_podworker::{PodUpdate, UpdateType};
use nodelet_volume_manager::VolumeUpdate;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::state::AgentState;

pub(crate) async fn run(state: Arc<AgentState>, shutdown: CancellationToken) {
    let Some(follow) = state.follow.clone() else {
        return;
    };
    let mut updates = state.volumes.subscribe_updates();
    loop {
        let update = tokio::select! {
            () = shutdown.cancelled() => return,
            u = updates.recv() => u,
        };
        match update {
            Ok(u) => {
                if !u.written {
                    continue;
                }
                let pod = state.known_pods.read().get(&u.pod_uid).cloned();
                if let Some(pod) = pod {
                    follow.volume_updated(&pod, &u);
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
                }
            }
            Err(RecvError::Closed) => return,
        }
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
    state.env_follow.forget_pod(uid);
}

/// Feeds the environments that follow a change (`EnvFollow::run`) until `shutdown`.
pub(crate) async fn run_env(state: Arc<AgentState>, shutdown: CancellationToken) {
    let changes = [state.configmaps.subscribe(), state.secrets.subscribe()];
    let pods = |object: Option<&ObjectRef>| {
        let known = state.known_pods.read();
        let Some(o) = object else {
            return known.values().cloned().collect();
        };
        let uids = match o.kind {
            ObjectKind::ConfigMap => state.configmaps.referencing_pods(o),
            ObjectKind::Secret => state.secrets.referencing_pods(o),
        };
        uids.iter().filter_map(|u| known.get(u).cloned()).collect()
    };
    let sync = |pod| {
        state
            .workers
            .update_pod(PodUpdate::new(UpdateType::Sync, pod))
    };
    let follow = state.env_follow.clone();
    follow.run(changes, pods, sync, shutdown).await;
}
