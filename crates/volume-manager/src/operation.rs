//! The operations the reconciler starts (VM-10, PL-14): a volume's SetUp or TearDown through
//! its plugin, then the result recorded in the actual state, the `FailedMount` /
//! `FailedUnmount` events, the node-fault log and the [`VolumeUpdate`]s.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use nodelet_core::events::reasons;
use nodelet_core::{AdmittedPod, EventType, PodUid};
use tokio::time::Instant;
use tracing::Instrument;

use crate::NodeFault;
use crate::asw::{MountState, MountedVolume};
use crate::dsw::VolumeInPod;
use crate::manager::Inner;
use crate::node_faults::Transition;
use crate::plugins::{SetUpContext, TearDownContext, VolumePlugin};
use crate::updates::VolumeUpdate;

/// A mount or remount to run.
pub(crate) struct MountJob {
    pub(crate) unique: String,
    /// The desired pod's UID (validated when the pod was added).
    pub(crate) pod_uid: PodUid,
    pub(crate) pod: AdmittedPod,
    pub(crate) volume: VolumeInPod,
    pub(crate) plugin: Arc<dyn VolumePlugin>,
    pub(crate) remount: bool,
    /// When the earliest object change this SetUp takes in was seen, if any.
    pub(crate) change_seen: Option<Instant>,
}

/// A teardown to run.
pub(crate) struct UnmountJob {
    pub(crate) unique: String,
    pub(crate) volume: MountedVolume,
}

impl Inner {
    /// VM-10: SetUp, then record the result. A failed remount leaves the volume mounted with
    /// its old content and `remount_required` set; it is retried after the backoff.
    pub(crate) async fn mount(self: Arc<Self>, job: MountJob) {
        let uid = job.pod_uid.clone();
        let name = job.volume.name().to_owned();
        let dir = self.host.volume_dir(&uid, job.plugin.name(), &name);
        let span = tracing::debug_span!(
            "reconcile volume",
            volume = %name,
            plugin = job.plugin.name(),
            pod.uid = %uid,
            remount = job.remount,
        );
        let ctx = SetUpContext {
            pod: &job.pod,
            volume: &job.volume,
            dir: &dir,
            remount: job.remount,
            fs_group: fs_group(&job.pod),
            fs_user: fs_user(&job.pod),
            host: &self.host,
        };
        // (4) The plugin reads the object, builds the payload and writes it atomically.
        let result = job.plugin.set_up(&ctx).instrument(span.clone()).await;
        // (5) Record the result; a change that arrived meanwhile keeps the flag set.
        // Whether a pass may now have work: a retry or remount to schedule, an unmount a pass
        // skipped while this operation ran, a token deadline to wait for — each a pass over
        // this volume only (it finds the volume's deadline, which the reconciler keeps with
        // the others). A plain success wakes only the waiters: at a node's cold start a pass
        // per finished mount (or per token volume), each over every volume, was most of the
        // reconciler's time.
        let (failure, transition) = {
            let mut st = self.state.lock();
            let now = Instant::now();
            let dirty = st.ops.finish(&job.unique, result.is_ok(), now);
            match result {
                Ok(outcome) => {
                    if outcome.refresh_at.is_some() || dirty || !st.dsw.contains(&uid, &job.unique)
                    {
                        self.pass_over(&mut st, &job.unique);
                    }
                    st.last_errors.remove(&job.unique);
                    let transition = st.node_faults.succeeded(&job.unique, now);
                    // Reported: a SetUp that took in a change notification, and any remount
                    // that wrote new content. A remount for another reason (a pod update or
                    // sync) may read an object's new content before the object's notification
                    // reached the reconciler; the notification's own remount then finds the
                    // volume current (`written: false`), so this write is the only news of it.
                    if job.change_seen.is_some() || (job.remount && outcome.written) {
                        // Nobody listening is fine: the update is for observers only.
                        let _ = self.updates.send(VolumeUpdate {
                            pod_uid: uid.clone(),
                            namespace: job.pod.metadata.namespace.clone().unwrap_or_default(),
                            volume: name.clone(),
                            objects: outcome.objects.clone(),
                            written: outcome.written,
                            change_seen: job.change_seen,
                            at: now,
                        });
                    }
                    st.asw.insert(
                        job.unique.clone(),
                        MountedVolume {
                            pod_uid: uid,
                            outer_name: name.clone(),
                            plugin: job.plugin.clone(),
                            dir: dir.clone(),
                            state: MountState::Mounted,
                            remount_required: dirty,
                            objects: outcome.objects,
                            refresh_at: outcome.refresh_at,
                            reconstructed: false,
                            pod: Some(job.pod.clone()),
                        },
                    );
                    span.in_scope(|| {
                        tracing::debug!(
                            written = outcome.written,
                            change_seen = job.change_seen.is_some(),
                            "MountVolume.SetUp succeeded"
                        );
                    });
                    (None, transition)
                }
                Err(e) => {
                    let message = e.to_string();
                    // A pod removed meanwhile is not reported: its volume is going away.
                    let transition = if st.dsw.contains(&uid, &job.unique) {
                        st.node_faults.failed(&job.unique, e.node_fault(), now)
                    } else {
                        Transition::Quiet
                    };
                    if let Some(seen) = job.change_seen {
                        // The change is still not on disk: the retry carries its time on.
                        let earliest = st.change_seen.entry(job.unique.clone()).or_insert(seen);
                        *earliest = (*earliest).min(seen);
                    }
                    st.last_errors.insert(job.unique.clone(), message.clone());
                    if let Some(m) = st.asw.get_mut(&job.unique) {
                        m.remount_required = true;
                    }
                    // The retry's backoff deadline is found by a pass over this volume.
                    self.pass_over(&mut st, &job.unique);
                    (Some(message), transition)
                }
            }
        };
        log_node_fault(&job.pod, &name, &dir, transition, failure.as_deref());
        if let Some(error) = failure {
            let message = format!("MountVolume.SetUp failed for volume {name:?} : {error}");
            self.events
                .event(&job.pod, EventType::Warning, reasons::FAILED_MOUNT, message);
        }
        self.observed_pod(&job.pod_uid);
    }

    /// PL-14: TearDown, then forget the volume (and what the sources hold for the pod once it
    /// is not desired).
    pub(crate) async fn unmount(self: Arc<Self>, job: UnmountJob) {
        let v = &job.volume;
        let ctx = TearDownContext {
            pod_uid: &v.pod_uid,
            volume_name: &v.outer_name,
            dir: &v.dir,
            host: &self.host,
        };
        let span = tracing::debug_span!(
            "reconcile volume",
            volume = %v.outer_name,
            plugin = v.plugin.name(),
            pod.uid = %v.pod_uid,
        );
        let result = v.plugin.tear_down(&ctx).instrument(span).await;
        let failure = {
            let mut st = self.state.lock();
            st.ops.finish(&job.unique, result.is_ok(), Instant::now());
            match result {
                Ok(()) => {
                    st.asw.remove(&job.unique);
                    st.change_seen.remove(&job.unique);
                    st.ops.forget(&job.unique);
                    st.last_errors.remove(&job.unique);
                    st.node_faults.forget(&job.unique);
                    if st.dsw.pod(&v.pod_uid).is_none() {
                        self.host.sources().unregister_pod(&v.pod_uid);
                    }
                    None
                }
                Err(e) => {
                    st.last_errors.insert(job.unique.clone(), e.to_string());
                    Some(e.to_string())
                }
            }
        };
        // A volume reconstructed from the disk whose pod was never seen (a pod known only on
        // disk is never added) has no pod object to attach an event to: its failure is in
        // `last_errors` (the snapshot) only.
        if let (Some(error), Some(pod)) = (failure, v.pod.as_ref()) {
            let message = format!(
                "UnmountVolume.TearDown failed for volume {:?} : {error}",
                v.outer_name
            );
            self.events
                .event(pod, EventType::Warning, reasons::FAILED_UNMOUNT, message);
        }
        self.bump();
    }
}

/// The operator's log for a volume's node fault (see the crate docs, "Logging"): one WARN
/// line when the volume enters a node fault or its fault changes, one INFO line when it is set
/// up again; nothing for the retries in between. Fields, never payloads: the pod, the volume,
/// its directory, the fault's `errno` name and the error text (paths and key names).
fn log_node_fault(
    pod: &AdmittedPod,
    volume: &str,
    dir: &std::path::Path,
    transition: Transition,
    error: Option<&str>,
) {
    match transition {
        Transition::Quiet => {}
        Transition::Entered { fault, previous } => tracing::warn!(
            pod.namespace = pod.namespace(),
            pod.name = pod.name(),
            volume,
            path = %dir.display(),
            fault = fault.as_str(),
            previous_fault = previous.map(NodeFault::as_str),
            error = error.unwrap_or_default(),
            "volume cannot be written: node-side failure, retrying"
        ),
        Transition::Recovered {
            fault,
            failures,
            failing_for,
        } => tracing::info!(
            pod.namespace = pod.namespace(),
            pod.name = pod.name(),
            volume,
            path = %dir.display(),
            fault = fault.as_str(),
            failures,
            failing_for = ?Duration::from_millis(
                u64::try_from(failing_for.as_millis()).unwrap_or(u64::MAX)
            ),
            "volume written again after a node-side failure"
        ),
    }
}

/// The pod's `securityContext.fsGroup` (PL-11).
fn fs_group(pod: &Pod) -> Option<u32> {
    let sc = pod.spec.as_ref()?.security_context.as_ref()?;
    sc.fs_group.and_then(|g| u32::try_from(g).ok())
}

/// VM-10: the effective `runAsUser` when every container (init and regular) has the same one.
fn fs_user(pod: &Pod) -> Option<u32> {
    let spec = pod.spec.as_ref()?;
    let pod_level = spec.security_context.as_ref().and_then(|s| s.run_as_user);
    let mut users = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.run_as_user)
                .or(pod_level)
        });
    let first = users.next()??;
    if users.all(|u| u == Some(first)) {
        u32::try_from(first).ok()
    } else {
        None
    }
}
