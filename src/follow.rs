//! Runs `nodelet_podworker::follow::driver::drive` (reloads, FC-5, FC-6; the condition
//! `nodelet.io/ConfigCurrent`, FC-20) with the pods as the pod source last saw them; and tells
//! it of pods seen (their annotations checked) and gone. Only with the process runtime.
//! (subPath binds move inside the volume's write: `parts::volume_manager` installs the hook.)

use std::sync::Arc;

use nodelet_core::{AdmittedPod, PodUid};
use nodelet_podworker::follow::driver::{FollowInputs, drive};
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
