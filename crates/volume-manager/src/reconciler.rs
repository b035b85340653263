//! The reconciler (VM-8) and the operations it starts (VM-10, PL-14): compares desired and
//! actual state (a pass over every volume) when a change may give it work — a pod added,
//! updated or removed, a failed or superseded operation, an object change a volume must act
//! on, a deadline — and sleeps otherwise. A SetUp that ended with nothing left to do, or an
//! object change whose readers are mid-SetUp, wakes only the waiters.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use nodelet_core::{AdmittedPod, EventType, ObjectRef, PodUid};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::NodeFault;
use crate::asw::{MountState, MountedVolume};
use crate::dsw::{DesiredPod, DesiredVolume, PodVolume};
use crate::events::reasons;
use crate::executor::Refusal;
use crate::manager::{Inner, State};
use crate::node_faults::Transition;
use crate::plugins::{SetUpContext, TearDownContext, VolumePlugin};
use crate::trust_bundle::TrustBundleChange;
use crate::updates::VolumeUpdate;

/// A mount or remount to run.
struct MountJob {
    unique: String,
    /// The desired pod's UID (validated when the pod was added).
    pod_uid: PodUid,
    pod: AdmittedPod,
    volume: PodVolume,
    plugin: Arc<dyn VolumePlugin>,
    remount: bool,
    /// When the earliest object change this SetUp takes in was seen, if any.
    change_seen: Option<Instant>,
}

/// Whether a change's time is kept for the `VolumeUpdate` of the volumes it remounts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// An object or trust bundle change: its propagation is measured.
    Recorded,
    /// Not a change a reader waits for (a certificate request moving on).
    NotRecorded,
}

/// A teardown to run.
struct UnmountJob {
    unique: String,
    volume: MountedVolume,
}

impl Inner {
    /// The reconciler loop (see [`VolumeManager::run`](crate::VolumeManager::run)).
    pub(crate) async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        self.reconstruct().await;
        let mut configmaps = Some(self.configmaps.subscribe());
        let mut secrets = Some(self.secrets.subscribe());
        let mut trust_bundles = self.host.trust_bundles().map(|m| m.subscribe());
        // PL-21: a pod's PodCertificateRequest changed (issued, refused, deleted).
        let mut certificates = self.host.pod_certificates().map(|c| c.subscribe());
        let resync = self.config.resync_interval;
        let mut next_resync = resync.map(|r| Instant::now() + r);
        let (mut pass, mut next) = (true, None);
        loop {
            if pass {
                next = self.reconcile();
            }
            let deadline = [next, next_resync].into_iter().flatten().min();
            // A change that gives no volume anything to do (an object no desired volume reads,
            // or one whose volumes are mid-SetUp and report their own end) starts no pass.
            pass = tokio::select! {
                () = shutdown.cancelled() => break,
                () = self.wake.notified() => true,
                () = sleep_until(deadline) => true,
                // (1) An object manager saw new content; (2) mark the volumes that read it.
                object = recv(&mut configmaps) => self.object_changed(object),
                object = recv(&mut secrets) => self.object_changed(object),
                bundle = recv(&mut trust_bundles) => self.trust_bundle_changed(bundle),
                pod = recv(&mut certificates) => self.pod_certificate_changed(pod),
            };
            if let (Some(at), Some(every)) = (next_resync, resync)
                && Instant::now() >= at
            {
                self.mark_all_remount_required();
                next_resync = Some(Instant::now() + every);
                pass = true;
            }
        }
        if let Some(bundles) = self.host.trust_bundles() {
            bundles.shutdown();
        }
        self.tasks.close();
        self.tasks.wait().await;
        self.tasks.reopen();
    }

    /// One pass (VM-8): start unmounts, then mounts and remounts. Returns when the next pass
    /// is due without any event (a backoff expiry or a token refresh).
    pub(crate) fn reconcile(self: &Arc<Self>) -> Option<Instant> {
        let now = Instant::now();
        self.passes.fetch_add(1, Ordering::Relaxed);
        let sources_ready = self.sources_ready.load(Ordering::SeqCst);
        let mut next: Option<Instant> = None;
        let mut soonest = |at: Instant| next = Some(next.map_or(at, |n: Instant| n.min(at)));
        let mut unmounts = Vec::new();
        let mut mounts = Vec::new();
        {
            let mut guard = self.state.lock();
            let st: &mut State = &mut guard;
            // Token refresh deadlines (PL-10) turn into remounts.
            for (unique, v) in st.asw.iter_mut() {
                match v.refresh_at {
                    Some(at) if at <= now => {
                        v.refresh_at = None;
                        v.remount_required = true;
                        st.ops.mark_dirty(unique);
                    }
                    Some(at) => soonest(at),
                    None => {}
                }
            }
            // (1) Unmount what is on disk but no longer desired.
            for (unique, v) in st.asw.iter() {
                if st.dsw.contains(&v.pod_uid, unique) || (v.reconstructed && !sources_ready) {
                    continue;
                }
                match st.ops.try_start(unique, now) {
                    Ok(()) => unmounts.push(UnmountJob {
                        unique: unique.clone(),
                        volume: v.clone(),
                    }),
                    Err(Refusal::BackingOff(at)) => soonest(at),
                    Err(Refusal::Pending) => {}
                }
            }
            // (2) Mount what is desired and not mounted; remount what needs it (update path
            // step (3): one operation per volume, none while backing off).
            for (pod, v) in st.dsw.volumes() {
                let remount = match st.asw.get(&v.unique) {
                    None => false,
                    Some(m) if m.remount_required || m.state == MountState::Uncertain => true,
                    Some(_) => continue,
                };
                match st.ops.try_start(&v.unique, now) {
                    Ok(()) => mounts.push(MountJob {
                        unique: v.unique.clone(),
                        pod_uid: pod.uid.clone(),
                        pod: pod.pod.clone(),
                        volume: v.volume.clone(),
                        plugin: v.plugin.clone(),
                        remount,
                        change_seen: st.change_seen.remove(&v.unique),
                    }),
                    Err(Refusal::BackingOff(at)) => soonest(at),
                    Err(Refusal::Pending) => {}
                }
            }
        }
        for job in unmounts {
            let inner = self.clone();
            self.tasks.spawn(async move { inner.unmount(job).await });
        }
        for job in mounts {
            let inner = self.clone();
            self.tasks.spawn(async move { inner.mount(job).await });
        }
        next
    }

    /// VM-10: SetUp, then record the result. A failed remount leaves the volume mounted with
    /// its old content and `remount_required` set; it is retried after the backoff.
    async fn mount(self: Arc<Self>, job: MountJob) {
        let uid = job.pod_uid.clone();
        let name = job.volume.name.clone();
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
        // Whether a pass may now have work: a retry or remount to schedule, a token deadline
        // to wait for, or an unmount a pass skipped while this operation ran. A plain success
        // wakes only the waiters: at a node's cold start a pass per finished mount, each over
        // every volume, was most of the reconciler's time.
        let mut pass_needed = true;
        let (failure, transition) = {
            let mut st = self.state.lock();
            let now = Instant::now();
            let dirty = st.ops.finish(&job.unique, result.is_ok(), now);
            match result {
                Ok(outcome) => {
                    pass_needed = dirty
                        || outcome.refresh_at.is_some()
                        || !st.dsw.contains(&uid, &job.unique);
                    st.last_errors.remove(&job.unique);
                    let transition = st.node_faults.succeeded(&job.unique, now);
                    if let Some(change_seen) = job.change_seen {
                        // Nobody listening is fine: the update is for observers only.
                        let _ = self.updates.send(VolumeUpdate {
                            pod_uid: uid.clone(),
                            namespace: job.pod.metadata.namespace.clone().unwrap_or_default(),
                            volume: name.clone(),
                            objects: outcome.objects.clone(),
                            written: outcome.written,
                            change_seen,
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
                        tracing::debug!(written = outcome.written, "MountVolume.SetUp succeeded");
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
        if pass_needed {
            self.bump();
        } else {
            self.observed();
        }
    }

    /// PL-14: TearDown, then forget the volume (and the pod's tokens once it is not desired).
    async fn unmount(self: Arc<Self>, job: UnmountJob) {
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
                        self.host.forget_tokens(&v.pod_uid);
                    }
                    None
                }
                Err(e) => {
                    st.last_errors.insert(job.unique.clone(), e.to_string());
                    Some(e.to_string())
                }
            }
        };
        if let Some(error) = failure {
            let pod = v
                .pod
                .clone()
                .unwrap_or_else(|| AdmittedPod::known_by_uid(v.pod_uid.clone()));
            let message = format!(
                "UnmountVolume.TearDown failed for volume {:?} : {error}",
                v.outer_name
            );
            self.events
                .event(&pod, EventType::Warning, reasons::FAILED_UNMOUNT, message);
        }
        self.bump();
    }

    /// Live updates: every desired volume that reads the changed object is marked for
    /// remount and freed from its backoff (a failure may have been this object missing); the
    /// loop reconciles right after. `None` (the subscriber lagged): all are marked.
    ///
    /// Returns whether a pass has work now (see [`mark_changed`](Self::mark_changed)).
    pub(crate) fn object_changed(&self, object: Option<ObjectRef>) -> bool {
        // (2) Mark every desired volume that reads the object; stale in-flight results too.
        let Some(object) = object else {
            self.mark_all_remount_required();
            return true;
        };
        self.mark_changed(Seen::Recorded, |_, v| v.objects.contains(&object))
    }

    /// PL-20: a ClusterTrustBundle changed; the volumes reading it (by name, or by its
    /// signer) are marked as for an object change. `None` (lagged): all are marked.
    pub(crate) fn trust_bundle_changed(&self, change: Option<TrustBundleChange>) -> bool {
        let Some(change) = change else {
            self.mark_all_remount_required();
            return true;
        };
        self.mark_changed(Seen::Recorded, |_, v| {
            v.trust_bundles.iter().any(|r| change.affects(r))
        })
    }

    /// Update path step (2) for every desired volume `reads` picks: a mounted one is marked
    /// for remount, and any one backing off after a failure (the thing that changed was
    /// missing?) may retry now. With [`Seen::Recorded`] the change's time is kept for the
    /// volume's `VolumeUpdate`. Returns whether a pass has work: a mounted volume to remount
    /// or a retry due now (a SetUp still running is marked and reports its own end).
    fn mark_changed(
        &self,
        seen: Seen,
        reads: impl Fn(&DesiredPod, &DesiredVolume) -> bool,
    ) -> bool {
        let mut guard = self.state.lock();
        let st: &mut State = &mut guard;
        let affected: Vec<String> = st
            .dsw
            .volumes()
            .filter(|(pod, v)| reads(pod, v))
            .map(|(_, v)| v.unique.clone())
            .collect();
        let now = Instant::now();
        let mut work = false;
        for unique in affected {
            if let Some(m) = st.asw.get_mut(&unique) {
                m.remount_required = true;
                work = true;
                if seen == Seen::Recorded {
                    st.change_seen.entry(unique.clone()).or_insert(now);
                }
            }
            work |= st.ops.object_changed(&unique, now);
        }
        work
    }

    /// PL-21: a PodCertificateRequest of pod `pod_uid` changed: its volumes with a
    /// `podCertificate` source are set up again at once, as after an object change (`None`:
    /// the subscriber lagged, every such volume).
    fn pod_certificate_changed(&self, pod_uid: Option<String>) -> bool {
        // Not an object change: no propagation time is recorded for it.
        self.mark_changed(Seen::NotRecorded, |pod, v| {
            pod_uid.as_deref().is_none_or(|u| pod.uid.as_str() == u)
                && v.volume.projected.as_ref().is_some_and(|p| {
                    p.sources
                        .iter()
                        .flatten()
                        .any(|s| s.pod_certificate.is_some())
                })
        })
    }

    /// Resync safety net: every desired, mounted volume whose plugin requires remount.
    fn mark_all_remount_required(&self) {
        let mut guard = self.state.lock();
        let st: &mut State = &mut guard;
        let uniques: Vec<String> = st.dsw.volumes().map(|(_, v)| v.unique.clone()).collect();
        for unique in uniques {
            if let Some(m) = st.asw.get_mut(&unique)
                && m.plugin.requires_remount()
            {
                m.remount_required = true;
            }
            st.ops.mark_dirty(&unique);
        }
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

/// The next change notification; `Some(None)` when the subscriber lagged. A closed channel
/// never resolves again.
async fn recv<T: Clone>(rx: &mut Option<broadcast::Receiver<T>>) -> Option<T> {
    let Some(receiver) = rx.as_mut() else {
        return std::future::pending().await;
    };
    match receiver.recv().await {
        Ok(key) => Some(key),
        Err(RecvError::Lagged(_)) => None,
        Err(RecvError::Closed) => {
            *rx = None;
            std::future::pending().await
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
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
