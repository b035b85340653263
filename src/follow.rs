//! Runs `nodelet_podworker::follow::driver::drive` (reloads, FC-5, FC-6; the condition
//! `nodelet.io/ConfigCurrent`, FC-20) with the pods as the pod source last saw them; and tells
//! it of pods gone. Only with the process runtime. Pods seen have their annotations checked
//! under either runtime.
//! (subPath binds move inside the volume's write: `parts::volume_manager` installs the hook.)
//!
//! [`run_env`] feeds the environments that follow a change (FC-10 … FC-14, either runtime):
//! the managers' announcements, the known pods and their syncs.

use std::sync::Arc;

use nodelet_core::{AdmittedPod, ObjectKind, ObjectRef, PodUid};
use nodelet_podworker::follow::driver::{FollowInputs, drive};
use nodelet_podworker::{PodUpdate, UpdateType};
use tokio_util::sync::CancellationToken;

use crate::state::AgentState;

pub(crate) async fn run(state: Arc<AgentState>, shutdown: CancellationToken) {
    let Some(follow) = state.follow.clone() else {
        return;
    };
    let inputs = FollowInputs {
        updates: state.volumes.subscribe_updates(),
        configmaps: state.configmaps.clone(),
        secrets: state.secrets.clone(),
        pods: |uids: Option<&[PodUid]>| -> Vec<AdmittedPod> {
            let known = state.known_pods.read();
            match uids {
                Some(uids) => uids.iter().filter_map(|u| known.get(u).cloned()).collect(),
                None => known.values().cloned().collect(),
            }
        },
        republish: |uid: &PodUid| state.workers.syncer().config_seen_changed(uid),
    };
    drive(follow, inputs, shutdown.cancelled()).await;
}

/// The pod source saw `pod` (added or changed): its annotations are checked (either runtime).
pub(crate) fn pod_seen(state: &AgentState, pod: &AdmittedPod) {
    state.follow_annotations.pod_seen(pod);
}

/// The pod source saw pod `uid` deleted.
pub(crate) fn pod_gone(state: &AgentState, uid: &PodUid) {
    if let Some(follow) = &state.follow {
        follow.forget_pod(uid);
    }
    state.env_follow.forget_pod(uid);
    state.follow_annotations.forget_pod(uid);
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
