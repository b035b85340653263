//! [`PodWorkers`]: one task per pod UID running the [`PodSyncer`] callbacks through the phases
//! sync → terminating → terminated → finished (spec PW-1 … PW-3).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use nodelet_core::backoff::Jitter;
use nodelet_core::{AdmittedPod, PodUid};
use parking_lot::Mutex;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument as _, debug, info_span, warn};

use crate::error::SyncError;

mod update;

pub use update::{PodUpdate, TerminatingPod, UpdateTarget, UpdateType};

/// What a pod worker runs: the hook that records a live pod as desired, and the three
/// callbacks (the kubelet's SyncPod, SyncTerminatingPod, SyncTerminatedPod).
///
/// `pod_desired` and `sync_pod` get the [`AdmittedPod`] (the pod source validated its UID
/// once), so no implementation reads `metadata.uid` again. The termination callbacks get a
/// [`TerminatingPod`]: its UID always, its object only when the pod has one. A pod known only
/// on disk ([`PodUpdate::kill_on_disk`]) reaches the termination callbacks alone, with no
/// object, as the kubelet terminates a running pod that has no API object (PW-1).
pub trait PodSyncer: Send + Sync + 'static {
    /// Record `pod`, the newest object of a live pod, as desired: the kubelet's pod manager
    /// feeding its secret/configmap managers and its volume populator (PW-4, PW-13, VM-4).
    ///
    /// [`PodWorkers::update_pod`] calls it for every update of a live pod (not
    /// [`UpdateType::Kill`], no deletion timestamp, phase neither Succeeded nor Failed, worker
    /// still [`WorkerPhase::Syncing`]) **before it returns** and before any callback runs for
    /// that update; never after termination was requested (PW-14). It is the only place a pod
    /// becomes desired.
    ///
    /// Called under the workers' lock: it must not block and must not call back into the
    /// [`PodWorkers`].
    fn pod_desired(&self, pod: &AdmittedPod);

    /// Bring the pod towards its desired state. `Ok(SyncOutcome::Terminal)` when the pod has
    /// finished (phase Succeeded/Failed) and should terminate. Dropped (cancelled) when
    /// termination is requested mid-sync.
    fn sync_pod(
        &self,
        pod: &AdmittedPod,
    ) -> impl Future<Output = Result<SyncOutcome, SyncError>> + Send;

    /// Stop the pod's containers within `grace_period` (PW-5). Repeated until it succeeds.
    fn sync_terminating_pod(
        &self,
        pod: TerminatingPod<'_>,
        grace_period: Duration,
    ) -> impl Future<Output = Result<(), SyncError>> + Send;

    /// Release the pod's resources (PW-6). Repeated until it succeeds.
    fn sync_terminated_pod(
        &self,
        pod: TerminatingPod<'_>,
    ) -> impl Future<Output = Result<(), SyncError>> + Send;

    /// When the pod's next sync is due at the latest, whatever its last sync came to (a
    /// container's crash back-off ends then). Asked after each sync of a live pod; `None`
    /// (the default): the resync interval or the retry back-off decides alone.
    fn next_sync(&self, _uid: &PodUid) -> Option<Instant> {
        None
    }
}

/// What a successful [`PodSyncer::sync_pod`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncOutcome {
    /// The pod keeps running; resync later.
    Running,
    /// The pod reached a terminal phase; terminate it.
    Terminal,
}

/// The phase of a pod's worker (PW-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum WorkerPhase {
    /// SyncPod runs (repeatedly).
    Syncing,
    /// Termination was requested; SyncTerminatingPod runs until it succeeds.
    Terminating,
    /// SyncTerminatedPod runs until it succeeds.
    Terminated,
    /// Done; further updates are ignored until the worker is forgotten.
    Finished,
}

/// Timing of the workers (PW-3). Start from `WorkerConfig::default()`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WorkerConfig {
    /// Resync after a successful sync, jittered to [1, 1.5) × (the kubelet's `syncFrequency`,
    /// default 60 s).
    pub resync_interval: Duration,
    /// Retry after a failed sync, jittered to [1, 1.5) × (default 10 s).
    pub backoff_period: Duration,
    /// Grace period when the pod does not say (default 30 s).
    pub default_grace_period: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            resync_interval: Duration::from_secs(60),
            backoff_period: Duration::from_secs(10),
            default_grace_period: Duration::from_secs(30),
        }
    }
}

impl WorkerConfig {
    /// Sets [`resync_interval`](Self::resync_interval).
    #[must_use]
    pub fn with_resync_interval(mut self, d: Duration) -> Self {
        self.resync_interval = d;
        self
    }
    /// Sets [`backoff_period`](Self::backoff_period).
    #[must_use]
    pub fn with_backoff_period(mut self, d: Duration) -> Self {
        self.backoff_period = d;
        self
    }
}

/// A worker's state for `/pods`, metrics and tests.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WorkerSnapshot {
    /// Pod UID (serialized as a plain string).
    pub uid: PodUid,
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Worker phase.
    pub phase: WorkerPhase,
    /// Completed syncs (any phase, success or failure).
    pub syncs: u64,
    /// When the last sync completed.
    #[serde(with = "opt_time")]
    pub last_sync: Option<SystemTime>,
    /// The last sync's error text, if it failed.
    pub last_error: Option<String>,
}

mod opt_time {
    use std::time::SystemTime;

    pub(super) fn serialize<S: serde::Serializer>(
        t: &Option<SystemTime>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_str(&chrono::DateTime::<chrono::Utc>::from(*t).to_rfc3339()),
            None => s.serialize_none(),
        }
    }
}

/// The pod workers: one task per pod UID (PW-1).
///
/// * A pod's syncs never overlap: one task runs them in sequence.
/// * [`update_pod`](Self::update_pod) stores the newest pod as the single pending update and
///   wakes the task; a burst of updates becomes one sync with the newest pod (PW-2).
/// * A termination request (a [`UpdateType::Kill`] update, or a pod with a deletion
///   timestamp) cancels an in-flight SyncPod; from then on only terminating and terminated
///   work runs.
/// * A pod known only on disk ([`PodUpdate::kill_on_disk`]) starts terminating on first
///   sight: it is never desired and never synced; its termination callbacks get its UID and
///   no object. A later update with the pod's object replaces the UID alone; a kill of the
///   pod on disk never forgets an object the worker has.
/// * Re-queue (PW-3): phase change → at once; success → [1, 1.5) × resync; error →
///   [1, 1.5) × back-off; a pending update → at once.
/// * A finished worker ignores updates until [`sync_known_pods`](Self::sync_known_pods) forgets
///   it.
///
/// Cheap to clone. Worker tasks hold a `Weak` reference and end on
/// [`shutdown`](Self::shutdown).
pub struct PodWorkers<S> {
    inner: Arc<Inner<S>>,
}

impl<S> Clone for PodWorkers<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<S> std::fmt::Debug for PodWorkers<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.inner.workers.lock().len();
        f.debug_struct("PodWorkers").field("workers", &n).finish()
    }
}

struct Inner<S> {
    syncer: Arc<S>,
    config: WorkerConfig,
    workers: Mutex<HashMap<PodUid, Worker>>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    changed: watch::Sender<u64>,
}

impl<S> Inner<S> {
    fn notify_changed(&self) {
        self.changed.send_modify(|n| *n += 1);
    }
}

struct Worker {
    /// The newest pod (its object), or its UID alone for a pod known only on disk.
    target: UpdateTarget,
    pending: bool,
    phase: WorkerPhase,
    grace_period: Option<Duration>,
    /// Cancels the in-flight SyncPod.
    sync_cancel: CancellationToken,
    wake: Arc<Notify>,
    syncs: u64,
    last_sync: Option<SystemTime>,
    last_error: Option<String>,
}

/// Whether `pod` reached a terminal phase (Succeeded or Failed): it is never desired (PW-4).
pub(crate) fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether `update` asks for termination, and with which grace period. A pod known only on
/// disk is only ever terminated.
fn termination_request(update: &PodUpdate) -> Option<Option<Duration>> {
    let deleted = update
        .target
        .object()
        .is_none_or(|pod| pod.metadata.deletion_timestamp.is_some());
    (update.kind == UpdateType::Kill || deleted).then(|| update.target.deletion_grace_period())
}

impl<S: PodSyncer> PodWorkers<S> {
    /// Workers running `syncer`'s callbacks. Must be called inside a tokio runtime.
    pub fn new(syncer: Arc<S>, config: WorkerConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                syncer,
                config,
                workers: Mutex::default(),
                tracker: TaskTracker::new(),
                shutdown: CancellationToken::new(),
                changed: watch::channel(0).0,
            }),
        }
    }

    /// The syncer the workers run.
    pub fn syncer(&self) -> &Arc<S> {
        &self.inner.syncer
    }

    /// Deliver an update for a pod: start its worker on first sight, else replace its pending
    /// update and wake it (PW-1, PW-2). Never blocks.
    ///
    /// The one entry for pods from the pod source, and the one owner of "this pod is desired":
    /// for a live pod (an object, not [`UpdateType::Kill`], no deletion timestamp, not
    /// Succeeded/Failed) whose worker is new or still [`WorkerPhase::Syncing`], it calls
    /// [`PodSyncer::pod_desired`] before returning, under the workers' lock. A pod known only
    /// on disk is never live. A termination request moves the phase on under the same lock,
    /// and the terminating and terminated callbacks run only after that, so no update
    /// re-registers or re-adds a pod once its termination was requested (PW-14, VM-4).
    pub fn update_pod(&self, update: PodUpdate) {
        if self.inner.shutdown.is_cancelled() {
            return;
        }
        let uid = update.target.uid().clone();
        let termination = termination_request(&update);
        let live = update
            .target
            .object()
            .filter(|pod| termination.is_none() && !is_terminal(pod));
        let mut workers = self.inner.workers.lock();
        if let Some(w) = workers.get_mut(&uid) {
            if w.phase == WorkerPhase::Finished {
                return;
            }
            if let Some(pod) = live.filter(|_| w.phase == WorkerPhase::Syncing) {
                self.inner.syncer.pod_desired(pod);
            }
            // A kill of the pod on disk keeps the object the worker may have: events and
            // status still go to it.
            if update.target.object().is_some() {
                w.target = update.target;
            }
            w.pending = true;
            if let Some(grace) = termination {
                if w.phase == WorkerPhase::Syncing {
                    w.phase = WorkerPhase::Terminating;
                    w.sync_cancel.cancel();
                }
                if grace.is_some() {
                    w.grace_period = grace;
                }
            }
            w.wake.notify_one();
            return;
        }
        let phase = if termination.is_some() {
            WorkerPhase::Terminating
        } else {
            WorkerPhase::Syncing
        };
        if let Some(pod) = live {
            self.inner.syncer.pod_desired(pod);
        }
        let wake = Arc::new(Notify::new());
        let target = update.target;
        let (namespace, name) = target.namespace_and_name();
        let span = info_span!(
            "pod worker",
            pod.uid = %uid,
            pod.namespace = namespace,
            pod.name = name,
        );
        workers.insert(
            uid.clone(),
            Worker {
                target,
                pending: true,
                phase,
                grace_period: termination.flatten(),
                sync_cancel: CancellationToken::new(),
                wake: wake.clone(),
                syncs: 0,
                last_sync: None,
                last_error: None,
            },
        );
        drop(workers);
        let task = run_worker(
            Arc::downgrade(&self.inner),
            self.inner.syncer.clone(),
            uid,
            wake,
            self.inner.shutdown.clone(),
        );
        self.inner.tracker.spawn(task.instrument(span));
        self.inner.notify_changed();
    }

    /// Reconcile with the pods that should exist (`desired` UIDs): workers of other pods are
    /// asked to terminate, and finished workers of other pods are forgotten (PW-1
    /// `SyncKnownPods`). Returns the UIDs forgotten.
    pub fn sync_known_pods(&self, desired: &HashSet<PodUid>) -> Vec<PodUid> {
        let mut forgotten = Vec::new();
        let mut to_kill = Vec::new();
        {
            let mut workers = self.inner.workers.lock();
            workers.retain(|uid, w| {
                if desired.contains(uid) {
                    return true;
                }
                match w.phase {
                    WorkerPhase::Finished => {
                        forgotten.push(uid.clone());
                        false
                    }
                    WorkerPhase::Syncing => {
                        to_kill.push(w.target.clone());
                        true
                    }
                    _ => true,
                }
            });
        }
        for target in to_kill {
            self.update_pod(PodUpdate {
                target,
                kind: UpdateType::Kill,
            });
        }
        if !forgotten.is_empty() {
            self.inner.notify_changed();
        }
        forgotten
    }

    /// The phase of pod `uid`'s worker, if it has one.
    pub fn phase(&self, uid: &PodUid) -> Option<WorkerPhase> {
        self.inner.workers.lock().get(uid).map(|w| w.phase)
    }

    /// Whether termination of pod `uid` was requested (its worker is past Syncing).
    pub fn is_termination_requested(&self, uid: &PodUid) -> bool {
        self.phase(uid).is_some_and(|p| p != WorkerPhase::Syncing)
    }

    /// Of `uids` (every worker's pod when `None`), those whose worker is syncing and whose
    /// last sync failed: what a change of something they read may fix. Cheaper than
    /// [`snapshot`](Self::snapshot) for a few pods of many (no copies, no sorting).
    pub fn failed_syncing(&self, uids: Option<&[PodUid]>) -> Vec<PodUid> {
        let workers = self.inner.workers.lock();
        let failed = |w: &Worker| w.phase == WorkerPhase::Syncing && w.last_error.is_some();
        match uids {
            Some(uids) => uids
                .iter()
                .filter(|uid| workers.get(*uid).is_some_and(failed))
                .cloned()
                .collect(),
            None => workers
                .iter()
                .filter(|(_, w)| failed(w))
                .map(|(uid, _)| uid.clone())
                .collect(),
        }
    }

    /// A snapshot of every worker, sorted by namespace and name.
    pub fn snapshot(&self) -> Vec<WorkerSnapshot> {
        let workers = self.inner.workers.lock();
        let mut out: BTreeMap<(String, String, PodUid), WorkerSnapshot> = BTreeMap::new();
        for (uid, w) in workers.iter() {
            let (namespace, name) = w.target.namespace_and_name();
            let (namespace, name) = (namespace.to_owned(), name.to_owned());
            out.insert(
                (namespace.clone(), name.clone(), uid.clone()),
                WorkerSnapshot {
                    uid: uid.clone(),
                    namespace,
                    name,
                    phase: w.phase,
                    syncs: w.syncs,
                    last_sync: w.last_sync,
                    last_error: w.last_error.clone(),
                },
            );
        }
        out.into_values().collect()
    }

    /// A receiver whose value changes whenever a worker completes a sync or changes phase
    /// (await instead of polling).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    /// Wait until `pred` holds for the snapshot. Cancel-safe.
    pub async fn wait_for(&self, mut pred: impl FnMut(&[WorkerSnapshot]) -> bool) {
        let mut rx = self.changes();
        loop {
            if pred(&self.snapshot()) {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Stop every worker (in-flight syncs are dropped) and wait for the tasks to end.
    /// Volumes and files stay in place. Idempotent.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }
}

/// What the task takes from the worker's state to run one step.
struct Work {
    target: UpdateTarget,
    phase: WorkerPhase,
    grace_period: Duration,
    cancel: CancellationToken,
}

async fn run_worker<S: PodSyncer>(
    inner: Weak<Inner<S>>,
    syncer: Arc<S>,
    uid: PodUid,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let mut next: Option<Instant> = None;
    loop {
        // Wait for a wake-up or the re-queue time (none: run at once).
        // A wake-up without a pending update (a stale permit) keeps waiting.
        if let Some(at) = next {
            loop {
                tokio::select! {
                    () = wake.notified() => if has_pending(&inner, &uid) { break },
                    () = tokio::time::sleep_until(at) => break,
                    () = shutdown.cancelled() => return,
                }
            }
        }
        let Some(work) = take_work(&inner, &uid) else {
            return;
        };
        let span = info_span!("sync pod", phase = ?work.phase);
        // Boxed: the worker's task lives as long as its pod and is as large as its largest
        // state; inline, the syncer's callbacks (about 9 KiB) stayed in every idle worker.
        let result = tokio::select! {
            r = Box::pin(step(&*syncer, &work).instrument(span)) => r,
            () = shutdown.cancelled() => return,
        };
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let (requeue, finished) = complete_work(&inner, &uid, &work, result);
        inner.notify_changed();
        if finished {
            return;
        }
        let due = (work.phase == WorkerPhase::Syncing)
            .then(|| syncer.next_sync(&uid))
            .flatten();
        next = Some(due.map_or(requeue, |at| requeue.min(at)));
    }
}

fn has_pending<S>(inner: &Weak<Inner<S>>, uid: &PodUid) -> bool {
    inner
        .upgrade()
        .is_none_or(|inner| inner.workers.lock().get(uid).is_none_or(|w| w.pending))
}

fn take_work<S>(inner: &Weak<Inner<S>>, uid: &PodUid) -> Option<Work> {
    let inner = inner.upgrade()?;
    let mut workers = inner.workers.lock();
    let w = workers.get_mut(uid)?;
    w.pending = false;
    if w.phase == WorkerPhase::Finished {
        return None;
    }
    if w.phase == WorkerPhase::Syncing {
        w.sync_cancel = CancellationToken::new();
    }
    Some(Work {
        target: w.target.clone(),
        phase: w.phase,
        grace_period: w
            .grace_period
            .or_else(|| w.target.termination_grace_period())
            .unwrap_or(inner.config.default_grace_period),
        cancel: w.sync_cancel.clone(),
    })
}

/// One callback of the current phase; `Ok(true)` = move to the next phase.
async fn step<S: PodSyncer>(syncer: &S, work: &Work) -> Result<bool, SyncError> {
    match work.phase {
        WorkerPhase::Syncing => {
            // A pod known only on disk starts terminating, so it never gets here; were it to,
            // terminating it is what it needs.
            let Some(pod) = work.target.object() else {
                return Ok(true);
            };
            tokio::select! {
                r = syncer.sync_pod(pod) => r.map(|o| o == SyncOutcome::Terminal),
                () = work.cancel.cancelled() => Err(SyncError::Interrupted),
            }
        }
        WorkerPhase::Terminating => syncer
            .sync_terminating_pod(work.target.terminating(), work.grace_period)
            .await
            .map(|()| true),
        WorkerPhase::Terminated => syncer
            .sync_terminated_pod(work.target.terminating())
            .await
            .map(|()| true),
        WorkerPhase::Finished => Ok(false),
    }
}

/// Record the result, move the phase, and compute the re-queue time (PW-3).
fn complete_work<S>(
    inner: &Inner<S>,
    uid: &PodUid,
    work: &Work,
    result: Result<bool, SyncError>,
) -> (Instant, bool) {
    let now = Instant::now();
    let mut workers = inner.workers.lock();
    let Some(w) = workers.get_mut(uid) else {
        return (now, true);
    };
    w.syncs += 1;
    w.last_sync = Some(SystemTime::now());
    let jitter = |d: Duration| Jitter::between(1.0, 1.5).apply(d);
    let mut requeue = match &result {
        Ok(true) => {
            w.last_error = None;
            // A termination request may have moved the phase on already.
            if w.phase == work.phase {
                w.phase = match work.phase {
                    WorkerPhase::Syncing => WorkerPhase::Terminating,
                    WorkerPhase::Terminating => WorkerPhase::Terminated,
                    _ => WorkerPhase::Finished,
                };
            }
            now
        }
        Ok(false) => {
            w.last_error = None;
            now + jitter(inner.config.resync_interval)
        }
        Err(e) if e.is_interrupted() => {
            debug!(phase = ?work.phase, "sync interrupted");
            now
        }
        Err(e) => {
            // The one place a failed sync is logged: errors are logged once, where they are handled.
            let error = crate::error::with_causes(&e);
            warn!(phase = ?work.phase, %error, "sync failed");
            w.last_error = Some(error);
            now + jitter(inner.config.backoff_period)
        }
    };
    if w.phase != work.phase || w.pending {
        requeue = now;
    }
    (requeue, w.phase == WorkerPhase::Finished)
}

#[cfg(test)]
mod tests;
