//! [`drive`]: what feeds a [`FollowChange`] (the agent runs it, with the process runtime): the
//! volume manager's [`VolumeUpdate`]s, in order, for reloads (FC-5, FC-6), and the object
//! managers' changes, for the condition `nodelet.io/ConfigCurrent` (FC-20, FC-21).
//!
//! A pod that follows changes has its status published again at once when what its containers
//! see may have changed: when an object it reads changed (the version the object managers now
//! hold is told first, so the condition says `False` until a volume shows it) and when one of
//! its volumes was set up again. When volume updates were lost to a burst (the broadcast
//! lagged), every volume of every pod that asks for a reload is taken as updated: a reload may
//! come once more than needed, never once less.

use std::future::Future;

use nodelet_core::{AdmittedPod, ObjectKind, ObjectRef, PodUid};
use nodelet_object_manager::{ConfigMapManager, SecretManager};
use nodelet_volume_manager::VolumeUpdate;
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;

use super::FollowChange;

/// What [`drive`] reads and whom it tells.
pub struct FollowInputs<L, R> {
    /// The volume manager's updates.
    pub updates: Receiver<VolumeUpdate>,
    /// The ConfigMap manager (its changes, the versions it holds, who reads what).
    pub configmaps: ConfigMapManager,
    /// The Secret manager.
    pub secrets: SecretManager,
    /// The pods as the pod source last saw them: those of the given UIDs, or all (`None`).
    pub pods: L,
    /// Publishes the status of a pod again (`ConfigSyncer::config_seen_changed`).
    pub republish: R,
}

/// Feeds `follow` from `inputs` (module docs) until `shutdown` completes or the updates end.
pub async fn drive<L, R>(
    follow: FollowChange,
    mut inputs: FollowInputs<L, R>,
    shutdown: impl Future<Output = ()>,
) where
    L: Fn(Option<&[PodUid]>) -> Vec<AdmittedPod>,
    R: Fn(&PodUid),
{
    let mut configmaps = inputs.configmaps.subscribe();
    let mut secrets = inputs.secrets.subscribe();
    tokio::pin!(shutdown);
    loop {
        let update = tokio::select! {
            () = &mut shutdown => return,
            u = inputs.updates.recv() => u,
            c = configmaps.recv() => {
                let c = c.map(|o| (inputs.configmaps.referencing_pods(&o), o));
                object_changed(&follow, &inputs, c).await;
                continue;
            }
            c = secrets.recv() => {
                let c = c.map(|o| (inputs.secrets.referencing_pods(&o), o));
                object_changed(&follow, &inputs, c).await;
                continue;
            }
        };
        match update {
            Ok(u) => {
                let Some(pod) = (inputs.pods)(Some(std::slice::from_ref(&u.pod_uid))).pop() else {
                    tracing::debug!(pod.uid = %u.pod_uid, volume = u.volume, "volume update of a pod not known");
                    continue;
                };
                tracing::debug!(pod.uid = %u.pod_uid, volume = u.volume, written = u.written, "volume update");
                if u.written {
                    follow.volume_updated(&pod, &u);
                }
                if follow.settings(&pod).any() {
                    (inputs.republish)(pod.uid());
                }
            }
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(
                    missed,
                    "volume updates missed; following every volume again"
                );
                let pods = (inputs.pods)(None);
                for pod in pods.iter().filter(|p| follow.settings(p).any()) {
                    for volume in pod.volumes() {
                        let now = tokio::time::Instant::now();
                        let update = VolumeUpdate {
                            pod_uid: pod.uid().clone(),
                            namespace: pod.namespace().to_owned(),
                            volume: volume.name().to_owned(),
                            objects: Vec::new(),
                            written: true,
                            change_seen: Some(now),
                            at: now,
                        };
                        follow.volume_updated(pod, &update);
                    }
                    (inputs.republish)(pod.uid());
                }
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// FC-20: an object changed; each pod that reads it (the UIDs beside it) is told the version the object
/// managers hold now (FC-8: a mount is not current until it shows it), and the status of each
/// one that follows changes is published again. When changes were missed, every such pod's
/// status is published again from the volume manager's view alone.
async fn object_changed<L, R>(
    follow: &FollowChange,
    inputs: &FollowInputs<L, R>,
    change: Result<(Vec<PodUid>, ObjectRef), RecvError>,
) where
    L: Fn(Option<&[PodUid]>) -> Vec<AdmittedPod>,
    R: Fn(&PodUid),
{
    let (object, pods) = match change {
        Ok((uids, object)) => (Some(object), (inputs.pods)(Some(&uids))),
        Err(RecvError::Lagged(_)) => {
            follow.forget_versions();
            (None, (inputs.pods)(None))
        }
        Err(RecvError::Closed) => return,
    };
    if pods.is_empty() {
        return;
    }
    if let Some(object) = &object {
        let (ns, name) = (&object.namespace, &object.name);
        let version = match object.kind {
            ObjectKind::ConfigMap => inputs
                .configmaps
                .get(ns, name)
                .await
                .ok()
                .and_then(|o| o.metadata.resource_version.clone()),
            ObjectKind::Secret => inputs
                .secrets
                .get(ns, name)
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
        (inputs.republish)(pod.uid());
    }
}
