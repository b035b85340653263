//! Feeds reloads (`nodelet_podworker::follow`, FC-5, FC-6) from the volume manager's
//! [`VolumeUpdate`]s, in order, with the pod as the pod source last saw it; and tells it of
//! pods seen (their annotations checked) and gone. Only with the process runtime. (subPath
//! binds move inside the volume's write: `parts::volume_manager` installs the hook.)
//!
//! [`run_env`] feeds the environments that follow a change (FC-10 … FC-14, either runtime):
//! each change the ConfigMap and Secret managers announce, with each known pod that
//! references the object; the pods it asks to sync (a restart queued); and every
//! [`ENV_RECHECK`] a check of every following container (a change missed when the
//! announcements lagged; reading the objects keeps their watches from going idle).
//!
//! When updates were lost to a burst (the broadcast lagged), every volume of every pod that
//! asks for a reload is taken as updated: a reload may come once more than needed, never once
//! less.

use std::sync::Arc;
use std::time::Duration;

use nodelet_core::{AdmittedPod, ObjectRef, PodUid};
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

/// How often every following environment is checked again (module docs).
pub(crate) const ENV_RECHECK: Duration = Duration::from_secs(60);

/// Feeds the environments that follow a change (module docs) until `shutdown`.
pub(crate) async fn run_env(state: Arc<AgentState>, shutdown: CancellationToken) {
    let follow = state.env_follow.clone();
    let mut configmaps = state.configmaps.subscribe();
    let mut secrets = state.secrets.subscribe();
    let mut syncs = follow.syncs();
    let mut recheck = tokio::time::interval(ENV_RECHECK);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            change = configmaps.recv() => {
                let referencing = |o: &ObjectRef| state.configmaps.referencing_pods(o);
                if !env_changed(&state, change, referencing) {
                    return;
                }
            }
            change = secrets.recv() => {
                let referencing = |o: &ObjectRef| state.secrets.referencing_pods(o);
                if !env_changed(&state, change, referencing) {
                    return;
                }
            }
            uid = syncs.recv() => match uid {
                Ok(uid) => {
                    let pod = state.known_pods.read().get(&uid).cloned();
                    if let Some(pod) = pod {
                        state.workers.update_pod(PodUpdate::new(UpdateType::Sync, pod));
                    }
                }
                Err(RecvError::Lagged(_)) => recheck_all(&state),
                Err(RecvError::Closed) => return,
            },
            _ = recheck.tick() => recheck_all(&state),
        }
    }
}

/// One announced change: each known pod referencing the object is told. Whether changes
/// may still come.
fn env_changed(
    state: &AgentState,
    change: Result<ObjectRef, RecvError>,
    referencing: impl Fn(&ObjectRef) -> Vec<PodUid>,
) -> bool {
    match change {
        Ok(object) => {
            let pods: Vec<AdmittedPod> = {
                let known = state.known_pods.read();
                let uids = referencing(&object);
                uids.iter().filter_map(|u| known.get(u).cloned()).collect()
            };
            for pod in &pods {
                state.env_follow.object_changed(pod, &object);
            }
            true
        }
        Err(RecvError::Lagged(missed)) => {
            tracing::warn!(missed, "object changes missed; checking every environment");
            recheck_all(state);
            true
        }
        Err(RecvError::Closed) => false,
    }
}

/// Every following container of every known pod is checked again.
fn recheck_all(state: &AgentState) {
    let pods: Vec<AdmittedPod> = state.known_pods.read().values().cloned().collect();
    for pod in &pods {
        state.env_follow.recheck(pod);
    }
}
