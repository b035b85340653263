//! The pod source: a watch of pods with `spec.nodeName=<node>` feeding the pod workers.
//!
//! 1. Every watched pod is admitted here, once ([`admit`]): its UID validated, the parts no
//!    node reads dropped; the pod workers get the [`AdmittedPod`], the `known_pods` map keeps it.
//! 2. The first complete list makes the agent ready; pods with a directory under `<root>/pods`
//!    that it does not name are terminated (deleted while the agent was down).
//! 3. While the watch fails, `GET /version` probes the API server; when it answers after an
//!    outage the watch is rebuilt at once instead of waiting out its grown back-off.
//! 4. A failed pod is retried as soon as an object it references changes (its manager knows
//!    which pods reference what); a container that changed state re-syncs its pod (the
//!    kubelet's PLEG), and so does a probe result that changed, after the pod's status was
//!    published again with it (PW-33).
//! 5. A pod with a sysctl the node cannot set in a namespace of the pod's own (PW-56), for
//!    another operating system (PW-40), or declaring a port a running pod of the node declares
//!    while containers share the host network (PW-85), is rejected as the kubelet's admission
//!    rejects it: status `Failed`, one event, never handed to the workers.
//! 6. Housekeeping forgets the finished workers of pods no longer known, and with each the
//!    event publisher's entries of that pod: it was removed from the API and its termination
//!    is over, so nothing reports on it again (`events.rs`, "Forgetting a pod").

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use nodelet_core::EventSink as _;
use nodelet_core::{AdmittedPod, ObjectRef, PodDirs, PodUid};
use nodelet_podworker::StatusSink as _;
use nodelet_podworker::{PodUpdate, UpdateType, WorkerPhase};
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::state::AgentState;
use nodelet_reporting::EventPublisher;

/// How often finished workers of pods no longer known are forgotten (the kubelet's
/// housekeeping period).
const HOUSEKEEPING: Duration = Duration::from_secs(2);

/// What the pod source does to a pod object as it admits it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Admission {
    /// `PodLevelResources` on: `spec.resources` kept. Off, it is dropped at admission, so no
    /// part sees pod-level resources: a `resourceFieldRef` (env or downwardAPI volume) to a
    /// limit the container does not set is the node's allocatable, as a kubelet with the gate
    /// off resolves it.
    pub(crate) pod_level_resources: bool,
}

/// Admits a watched pod: its UID is validated here, once, where pods enter the node. A pod
/// without a UID, or with one that is not a single path component (`../x`), is skipped with a
/// warning naming its namespace/name. It never reaches the workers, the managers, the volume
/// manager or `<root>/pods`; everything after this takes the [`AdmittedPod`].
///
/// With the `PodLevelResources` gate off, the pod's `spec.resources` is dropped here too
/// ([`Admission`]).
///
/// The pod's `managedFields` are dropped here: nothing on a node reads them (the downward API
/// cannot name them) and they are often the largest part of a pod object, held for every pod
/// as long as it runs.
pub(crate) fn admit(mut pod: Pod, admission: Admission) -> Option<AdmittedPod> {
    pod.metadata.managed_fields = None;
    if !admission.pod_level_resources
        && let Some(spec) = pod.spec.as_mut()
    {
        spec.resources = None;
    }
    match AdmittedPod::new(pod) {
        Ok(pod) => Some(pod),
        Err(error) => {
            warn!(%error, "pod skipped: unusable metadata.uid");
            None
        }
    }
}

/// Runs the pod source until `shutdown` (module docs): `ready` turns true once the first list
/// has been handed to the pod workers.
pub(crate) async fn run(
    state: Arc<AgentState>,
    client: kube::Client,
    admission: Admission,
    events: EventPublisher,
    ready: watch::Sender<bool>,
    shutdown: CancellationToken,
) {
    let api: Api<Pod> = Api::all(client.clone());
    let selector = format!("spec.nodeName={}", state.config.node_name);
    let mut probe = tokio::time::interval(crate::pod_watch::PROBE_INTERVAL);
    // Ticks missed while healthy (the branch is off) must not burst when the watch fails.
    probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let watch_pods = || {
        watcher::watcher(api.clone(), watcher::Config::default().fields(&selector))
            .default_backoff()
            .boxed()
    };
    let mut stream = watch_pods();
    // The probe found the API server unreachable since the pod watch last answered.
    let mut unreachable = false;
    let mut configmap_changes = state.configmaps.subscribe();
    let mut secret_changes = state.secrets.subscribe();
    let mut housekeeping = tokio::time::interval(HOUSEKEEPING);
    let mut container_changes = state.processes.as_ref().map(|p| p.changes());
    let mut probe_updates = state.probes.as_ref().map(|p| p.updates());
    let mut source = Source {
        state: state.clone(),
        admission,
        events,
        ready,
        listing: None,
        first_list: true,
        rejected: HashSet::new(),
        unforgotten: Vec::new(),
    };
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => break,
            _ = housekeeping.tick() => {
                source.housekeeping();
                continue;
            }
            uid = next(&mut container_changes) => {
                if !source.container_changed(uid) {
                    container_changes = None;
                }
                continue;
            }
            update = next(&mut probe_updates) => {
                if !source.probe_result_changed(update) {
                    probe_updates = None;
                }
                continue;
            }
            change = configmap_changes.recv() => {
                retry_failed_pods(&state, change, |o| state.configmaps.referencing_pods(o));
                continue;
            }
            change = secret_changes.recv() => {
                retry_failed_pods(&state, change, |o| state.secrets.referencing_pods(o));
                continue;
            }
            // (3)
            _ = probe.tick(), if state.pod_watch.is_failing() => {
                let answered = probe_api_server(&state, &client).await;
                if answered && std::mem::take(&mut unreachable) {
                    // Back after an outage: watch again now, not when the watch's own
                    // back-off (grown through the outage) runs out.
                    stream = watch_pods();
                }
                unreachable |= !answered;
                continue;
            }
            e = stream.next() => e,
        };
        let Some(event) = event else { break };
        if event.is_ok() {
            unreachable = false;
        }
        source.watch_event(event);
    }
    state.metrics.set_watches("pods", 0);
}

/// The next message of `receiver`; pending forever without one.
async fn next<T: Clone>(
    receiver: &mut Option<broadcast::Receiver<T>>,
) -> Result<T, broadcast::error::RecvError> {
    match receiver.as_mut() {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// What the pod source keeps between events.
struct Source {
    state: Arc<AgentState>,
    admission: Admission,
    events: EventPublisher,
    ready: watch::Sender<bool>,
    /// The UIDs of the list in progress (between `Init` and `InitDone`).
    listing: Option<HashSet<PodUid>>,
    first_list: bool,
    /// Pods the node did not admit (PW-40): reported once, never handed to the workers.
    rejected: HashSet<PodUid>,
    /// Pods whose worker was forgotten while the event queue was full: forgotten by the event
    /// publisher at a later housekeeping.
    unforgotten: Vec<PodUid>,
}

impl Source {
    /// (6) Finished workers of pods no longer known are forgotten, with their event entries;
    /// pods past their active deadline (PW-26) are synced, to be failed and killed (the
    /// kubelet's sync loop handlers); logs of pods no longer known are removed.
    fn housekeeping(&mut self) {
        let state = &self.state;
        let desired: HashSet<PodUid> = state.known_pods.read().keys().cloned().collect();
        self.unforgotten
            .extend(state.workers.sync_known_pods(&desired));
        let now = std::time::SystemTime::now();
        let due: Vec<AdmittedPod> = state
            .known_pods
            .read()
            .values()
            .filter(|p| {
                let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                !matches!(phase, Some("Succeeded" | "Failed"))
                    && nodelet_podworker::past_active_deadline(p, now)
            })
            .cloned()
            .collect();
        for pod in due {
            self.sync(pod);
        }
        forget_events(&self.events, &mut self.unforgotten);
        // Not before the first list: every pod would look deleted.
        if let (Some(processes), false) = (&state.processes, self.first_list) {
            processes.remove_logs_except(&desired);
        }
    }

    /// (4) The kubelet's PLEG: a container changed state (ended, back-off over): its pod is
    /// synced (every pod when changes were dropped). Whether changes may still come.
    fn container_changed(&self, uid: Result<PodUid, broadcast::error::RecvError>) -> bool {
        match uid {
            Ok(uid) => {
                let pod = self.state.known_pods.read().get(&uid).cloned();
                if let Some(pod) = pod {
                    self.sync(pod);
                }
            }
            Err(broadcast::error::RecvError::Lagged(_)) => {
                for pod in self.known() {
                    self.sync(pod);
                }
            }
            Err(broadcast::error::RecvError::Closed) => return false,
        }
        true
    }

    /// (4) A probe result changed: the pod's status says so at once (also while its worker is
    /// busy stopping it), and the pod is synced (a failed liveness probe kills the container
    /// there). Whether updates may still come.
    fn probe_result_changed(
        &self,
        update: Result<nodelet_podworker::ProbeUpdate, broadcast::error::RecvError>,
    ) -> bool {
        let workers = &self.state.workers;
        match update {
            Ok(update) => {
                workers.syncer().probe_result_changed(&update.pod_uid);
                let pod = self.state.known_pods.read().get(&update.pod_uid).cloned();
                if let (Some(pod), true) = (pod, update.needs_sync()) {
                    self.sync(pod);
                }
            }
            Err(broadcast::error::RecvError::Lagged(_)) => {
                for pod in self.known() {
                    workers.syncer().probe_result_changed(pod.uid());
                    self.sync(pod);
                }
            }
            Err(broadcast::error::RecvError::Closed) => return false,
        }
        true
    }

    /// One event of the pod watch.
    fn watch_event(&mut self, event: Result<Event<Pod>, watcher::Error>) {
        let state = self.state.clone();
        match &event {
            Ok(_) => state.pod_watch.success(),
            Err(error) => state.pod_watch.failure(&error.to_string()),
        }
        match event {
            Ok(Event::Init) => self.listing = Some(HashSet::new()),
            // (1)
            Ok(Event::InitApply(pod)) => {
                let Some(pod) = self.admit(pod) else { return };
                if let Some(l) = self.listing.as_mut() {
                    l.insert(pod.uid().clone());
                }
                self.remember(&pod);
                self.update(pod, UpdateType::Update);
            }
            Ok(Event::InitDone) => self.listed(),
            Ok(Event::Apply(pod)) => {
                let Some(pod) = self.admit(pod) else { return };
                self.remember(&pod);
                // A pod that finished on its own and is now being deleted: its worker is done,
                // so the agent completes the deletion (as the kubelet's status manager does).
                if pod.metadata.deletion_timestamp.is_some()
                    && state.workers.phase(pod.uid()) == Some(WorkerPhase::Finished)
                {
                    state.status.terminated(&pod);
                }
                self.update(pod, UpdateType::Update);
            }
            Ok(Event::Delete(pod)) => {
                let Some(pod) = admit(pod, self.admission) else {
                    return;
                };
                if self.rejected.remove(pod.uid()) {
                    return;
                }
                state.known_pods.write().remove(pod.uid());
                crate::follow::pod_gone(&state, pod.uid());
                self.update(pod, UpdateType::Kill);
            }
            Err(error) => {
                state.metrics.set_watches("pods", 0);
                warn!(%error, "pod watch failed; retrying");
            }
        }
    }

    /// A complete list: pods known but not listed are killed; the first list makes the agent
    /// ready, after the orphans on disk were terminated (2).
    fn listed(&mut self) {
        let state = self.state.clone();
        state.metrics.set_watches("pods", 1);
        let listed = self.listing.take().unwrap_or_default();
        let gone: Vec<AdmittedPod> = {
            let mut known = state.known_pods.write();
            let gone: Vec<PodUid> = known
                .keys()
                .filter(|u| !listed.contains(*u))
                .cloned()
                .collect();
            gone.iter().filter_map(|u| known.remove(u)).collect()
        };
        for pod in gone {
            self.update(pod, UpdateType::Kill);
        }
        if self.first_list {
            self.first_list = false;
            // (2)
            terminate_orphans(&state, &listed);
            // Every listed live pod is desired by now: `update_pod` made it so before
            // returning, so reconstructed volumes of listed pods are adopted, never torn
            // down and set up again.
            state.volumes.pods_synced();
            let _ = self.ready.send(true);
            info!(pods = listed.len(), "initial pods synced");
        }
    }

    /// (1), (5) A watched pod admitted and not rejected.
    fn admit(&mut self, pod: Pod) -> Option<AdmittedPod> {
        let pod = admit(pod, self.admission)?;
        (!reject(&self.state, &self.events, &mut self.rejected, &pod)).then_some(pod)
    }

    /// `pod` as the pod source last saw it (`known_pods`), told to the configuration
    /// following (its annotations checked).
    fn remember(&self, pod: &AdmittedPod) {
        self.state
            .known_pods
            .write()
            .insert(pod.uid().clone(), pod.clone());
        crate::follow::pod_seen(&self.state, pod);
    }

    fn known(&self) -> Vec<AdmittedPod> {
        self.state.known_pods.read().values().cloned().collect()
    }

    fn sync(&self, pod: AdmittedPod) {
        self.update(pod, UpdateType::Sync);
    }

    fn update(&self, pod: AdmittedPod, kind: UpdateType) {
        self.state.workers.update_pod(PodUpdate::new(kind, pod));
    }
}

/// PW-40, PW-56, PW-85, the kubelet's admission of a pod it has not seen yet: a pod with a
/// sysctl it cannot set in a namespace of the pod's own, for another operating system, or
/// declaring a port a running pod declares (process runtime) is rejected — one Warning event
/// with the kubelet's reason and text, its status `Failed` — and never reaches the pod workers (no volume, no container). Whether `pod` is
/// (or was already) rejected. A pod the workers already know was admitted.
fn reject(
    state: &AgentState,
    events: &EventPublisher,
    rejected: &mut HashSet<PodUid>,
    pod: &AdmittedPod,
) -> bool {
    if rejected.contains(pod.uid()) {
        return true;
    }
    if state.workers.phase(pod.uid()).is_some() {
        return false;
    }
    // The kubelet's order: the sysctl allowlist (PW-56), the operating system (PW-40), then
    // the general predicates, of which only the host ports (PW-85) concern a node of host
    // processes.
    let admitted = nodelet_podworker::admit_sysctls(pod, &state.sysctls)
        .and_then(|()| nodelet_podworker::admit(pod))
        .map_err(|r| (r, None))
        .and_then(|()| admit_ports(state, pod).map_err(|(r, detail)| (r, Some(detail))));
    let Err((rejection, detail)) = admitted else {
        return false;
    };
    info!(
        pod.uid = %pod.uid(),
        reason = rejection.reason,
        detail = detail.as_deref().unwrap_or_default(),
        "pod rejected"
    );
    events.event(
        pod,
        nodelet_core::EventType::Warning,
        rejection.reason,
        rejection.message.clone(),
    );
    state
        .status
        .rejected(pod, rejection.reason, rejection.status_message());
    rejected.insert(pod.uid().clone());
    true
}

/// PW-85: with the process runtime every container listens on the host network, so a port
/// the new `pod` declares must not be one that a pod still running here declares. Running:
/// known to a worker that syncs it or is stopping it (the kubelet's active pods: a pod
/// being deleted still holds its ports), and not finished (`Succeeded` or `Failed` while its
/// worker still syncs it). The env-file runtime binds nothing: every pod is admitted.
fn admit_ports(
    state: &AgentState,
    pod: &AdmittedPod,
) -> Result<(), (nodelet_podworker::Rejection, String)> {
    use nodelet_podworker::WorkerPhase;
    if state.processes.is_none() {
        return Ok(());
    }
    let known: Vec<AdmittedPod> = state.known_pods.read().values().cloned().collect();
    let running = known.iter().filter(|other| {
        let phase = other.status.as_ref().and_then(|s| s.phase.as_deref());
        other.uid() != pod.uid()
            && !matches!(phase, Some("Succeeded" | "Failed"))
            && matches!(
                state.workers.phase(other.uid()),
                Some(WorkerPhase::Syncing | WorkerPhase::Terminating)
            )
    });
    nodelet_podworker::admit_ports(pod, running.map(|p| &**p))
}

/// Has `events` forget each pod of `pods` (module docs, (6)); those it refuses (the event queue
/// is full) stay in `pods` for the next housekeeping.
fn forget_events(events: &EventPublisher, pods: &mut Vec<PodUid>) {
    pods.retain(|uid| match events.forget(uid) {
        Ok(()) => false,
        Err(full) => {
            debug!(error = %full, "event entries kept until the next housekeeping");
            true
        }
    });
}

/// While the pod watch fails: `GET /version` (any authenticated user may), whether the API
/// server answers. Not a LIST: through a 13 s outage a list a second was 13 LISTs at every
/// restart. Whether it answered.
async fn probe_api_server(state: &AgentState, client: &kube::Client) -> bool {
    match tokio::time::timeout(crate::pod_watch::PROBE_INTERVAL, client.apiserver_version()).await {
        Ok(Ok(_)) => {
            state.pod_watch.success();
            true
        }
        Ok(Err(error)) => {
            state.pod_watch.failure(&error.to_string());
            false
        }
        Err(_elapsed) => {
            state.pod_watch.failure("probe timed out");
            false
        }
    }
}

/// Beyond the kubelet: a pod whose last sync failed (a missing object or key for its
/// environment, an unmountable volume) is retried as soon as an object it references changes,
/// instead of after the 10 s sync back-off. Which pods reference the object is asked of its
/// manager (`referencing_pods`), which keeps that index; `Lagged` (notifications dropped)
/// retries every failed pod. Successful pods are untouched: their volumes follow changes
/// through the volume manager, and a running container's environment never changes (UP-3).
fn retry_failed_pods(
    state: &AgentState,
    change: Result<ObjectRef, broadcast::error::RecvError>,
    referencing: impl FnOnce(&ObjectRef) -> Vec<PodUid>,
) {
    // Usually no pod has failed: then the managers are not asked who references what.
    let mut failed = state.workers.failed_syncing(None);
    if failed.is_empty() {
        return;
    }
    match change {
        Ok(key) => {
            let referencing = referencing(&key);
            failed.retain(|uid| referencing.contains(uid));
        }
        Err(broadcast::error::RecvError::Lagged(_)) => {}
        Err(broadcast::error::RecvError::Closed) => return,
    }
    let pods: Vec<AdmittedPod> = {
        let known = state.known_pods.read();
        failed
            .iter()
            .filter_map(|uid| known.get(uid).cloned())
            .collect()
    };
    for pod in pods {
        debug!(pod.uid = %pod.uid(), "retrying a failed pod after a referenced object changed");
        state
            .workers
            .update_pod(PodUpdate::new(UpdateType::Sync, pod));
    }
}

/// Pods with a directory under `<root>/pods` that the API no longer has (deleted while the
/// agent was down) are terminated by their UID alone ([`PodUpdate::kill_on_disk`], the
/// kubelet's kill of a running pod without an object): volumes torn down, directories
/// removed, nothing reported to the API.
fn terminate_orphans(state: &AgentState, listed: &HashSet<PodUid>) {
    let dir = PodDirs::new(&state.config.root_dir).pods();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        // A directory that is no pod UID (`PodUid` refuses it) was never a pod's.
        let Ok(uid) = PodUid::new(&name) else {
            continue;
        };
        if listed.contains(&uid) || state.workers.phase(&uid).is_some() {
            continue;
        }
        info!(pod.uid = %name, "terminating pod found only on disk");
        state.workers.update_pod(PodUpdate::kill_on_disk(uid));
    }
}

#[cfg(test)]
mod tests {
    use nodelet_core::{PodVolume, VolumeSource};
    use nodelet_testutil::PodBuilder;

    use super::*;

    /// Admission with every gate at its default.
    const DEFAULTS: Admission = Admission {
        pod_level_resources: true,
    };

    /// Pod `default/web` with `uid` (none: `metadata.uid` unset).
    fn pod(uid: Option<&str>) -> Pod {
        let p = PodBuilder::new("default", "web");
        match uid {
            Some(uid) => p.uid(uid),
            None => p,
        }
        .build()
    }

    // An admitted pod is kept for its life: no managedFields, its volumes compact, and its
    // lists of containers and mounts without the spare room decoding left.
    #[test]
    fn an_admitted_pod_holds_no_managed_fields_nor_spare_list_capacity() {
        let mounts: Vec<_> = (0..9)
            .map(|i| serde_json::json!({"name": format!("v{i}"), "mountPath": format!("/v{i}")}))
            .collect();
        let mut b = PodBuilder::new("default", "web")
            .uid("u1")
            .container(serde_json::json!({"name": "c", "volumeMounts": mounts}));
        for i in 0..9 {
            b = b.config_map_volume(&format!("v{i}"), &format!("cm{i}"));
        }
        let mut json = b.json();
        json["metadata"]["managedFields"] = serde_json::json!([{"manager": "kubectl"}]);
        json["spec"]["tolerations"] = serde_json::json!([
            {"key": "a", "operator": "Exists"},
            {"key": "b", "operator": "Exists"},
        ]);
        json["spec"]["volumes"].as_array_mut().unwrap().push(
            serde_json::json!({"name": "api", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt"}},
                {"downwardAPI": {"items": []}},
            ]}}),
        );
        json["status"] = serde_json::json!({
            "conditions": (0..5)
                .map(|i| serde_json::json!({"type": format!("T{i}"), "status": "True"}))
                .collect::<Vec<_>>(),
            "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": true,
                "restartCount": 0}],
        });
        // Decoded as the pod watch decodes it.
        let pod: Pod = serde_json::from_slice(&serde_json::to_vec(&json).unwrap()).unwrap();
        assert!(
            pod.spec
                .as_ref()
                .unwrap()
                .volumes
                .as_ref()
                .unwrap()
                .capacity()
                > 9
        );
        let decoded = pod.status.as_ref().unwrap();
        assert!(decoded.container_statuses.as_ref().unwrap().capacity() > 1);
        assert!(decoded.conditions.as_ref().unwrap().capacity() > 5);
        let admitted = admit(pod, DEFAULTS).unwrap();
        assert!(admitted.metadata.managed_fields.is_none());
        let spec = admitted.spec.as_ref().unwrap();
        assert!(spec.volumes.is_none(), "moved out, compact");
        assert_eq!(admitted.volumes().len(), 10);
        assert_eq!(spec.containers.capacity(), 1);
        assert_eq!(spec.tolerations.as_ref().unwrap().capacity(), 2);
        let Some(VolumeSource::Projected(projected)) =
            admitted.volumes().last().map(PodVolume::source)
        else {
            panic!("the projected volume is last");
        };
        assert_eq!(projected.sources.as_ref().unwrap().capacity(), 3);
        let status = admitted.status.as_ref().unwrap();
        assert_eq!(status.conditions.as_ref().unwrap().capacity(), 5);
        assert_eq!(status.container_statuses.as_ref().unwrap().capacity(), 1);
        assert_eq!(
            spec.containers[0]
                .volume_mounts
                .as_ref()
                .unwrap()
                .capacity(),
            9
        );
    }

    // A UID becomes a directory name: the pod source admits only pods whose UID is one plain path
    // component; the
    // others never reach the workers, the volume manager or `<root>/pods/<uid>/`.
    #[test]
    fn the_pod_source_skips_pods_without_a_usable_uid() {
        for bad in [None, Some(""), Some("../x"), Some(".."), Some("a/b")] {
            assert!(admit(pod(bad), DEFAULTS).is_none(), "{bad:?}");
        }
        assert_eq!(
            admit(pod(Some("6f1c-42")), DEFAULTS).map(|p| p.uid().to_string()),
            Some("6f1c-42".to_owned())
        );
    }
}
