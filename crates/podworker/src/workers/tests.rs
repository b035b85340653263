//! Tests of the pod workers (PW-1 … PW-3) with a scripted syncer on paused time.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use nodelet_testutil::PodBuilder;
use parking_lot::Mutex;
use tokio::sync::Semaphore;

use super::*;

/// Records every callback as `"<phase> <uid> <generation>"` and every `pod_desired` as
/// `"<uid> <generation>"` (its own list); sync_pod can be held on a gate, made to fail, or to
/// report the pod terminal.
#[derive(Default)]
struct Script {
    calls: Mutex<Vec<String>>,
    desired: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    fail_sync: AtomicBool,
    fail_terminating_once: AtomicBool,
    terminal: AtomicBool,
    /// When set, sync_pod waits for a permit.
    gate: Mutex<Option<Arc<Semaphore>>>,
}

impl Script {
    fn calls(&self) -> Vec<String> {
        self.calls.lock().clone()
    }
    fn desired(&self) -> Vec<String> {
        self.desired.lock().clone()
    }
    fn desired_count(&self, uid: &str) -> usize {
        self.desired()
            .iter()
            .filter(|c| c.split(' ').next() == Some(uid))
            .count()
    }
    fn count(&self, prefix: &str) -> usize {
        self.calls()
            .iter()
            .filter(|c| c.starts_with(prefix))
            .count()
    }
    /// The worker passes the pod with the UID it was admitted under (as `pod_desired` checks).
    fn record(&self, what: &str, pod: &AdmittedPod) {
        let uid = pod.uid();
        assert_eq!(pod.metadata.uid.as_deref(), Some(uid.as_str()));
        let generation = pod.metadata.generation.unwrap_or(0);
        self.calls.lock().push(format!("{what} {uid} {generation}"));
    }
    /// As [`record`](Self::record); a pod known only on disk as `"<what> <uid> on-disk"`.
    fn record_terminating(&self, what: &str, pod: TerminatingPod<'_>) {
        match pod.object() {
            Some(object) => {
                assert_eq!(object.uid(), pod.uid());
                self.record(what, object);
            }
            None => self
                .calls
                .lock()
                .push(format!("{what} {} on-disk", pod.uid())),
        }
    }
}

impl PodSyncer for Script {
    fn pod_desired(&self, pod: &AdmittedPod) {
        let uid = pod.uid();
        assert_eq!(pod.metadata.uid.as_deref(), Some(uid.as_str()));
        let generation = pod.metadata.generation.unwrap_or(0);
        self.desired.lock().push(format!("{uid} {generation}"));
    }

    async fn sync_pod(&self, pod: &AdmittedPod) -> Result<SyncOutcome, SyncError> {
        let n = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(n, Ordering::SeqCst);
        let gate = self.gate.lock().clone();
        // Decrement even when the future is dropped (cancelled).
        struct Guard<'a>(&'a AtomicUsize);
        impl Drop for Guard<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _guard = Guard(&self.in_flight);
        if let Some(gate) = gate {
            let _permit = gate.acquire().await;
        }
        self.record("sync", pod);
        if self.fail_sync.load(Ordering::SeqCst) {
            return Err(SyncError::Status {
                message: "scripted failure".into(),
            });
        }
        if self.terminal.load(Ordering::SeqCst) {
            return Ok(SyncOutcome::Terminal);
        }
        Ok(SyncOutcome::Running)
    }

    async fn sync_terminating_pod(
        &self,
        pod: TerminatingPod<'_>,
        grace: Duration,
    ) -> Result<(), SyncError> {
        self.record_terminating(&format!("terminating({}s)", grace.as_secs()), pod);
        if self.fail_terminating_once.swap(false, Ordering::SeqCst) {
            return Err(SyncError::Status {
                message: "scripted failure".into(),
            });
        }
        Ok(())
    }

    async fn sync_terminated_pod(&self, pod: TerminatingPod<'_>) -> Result<(), SyncError> {
        self.record_terminating("terminated", pod);
        Ok(())
    }
}

/// Pod `ns/pod-<uid>` at `metadata.generation` `generation` (the builder has no setter for it).
fn pod(uid: &str, generation: i64) -> Pod {
    let mut p = PodBuilder::new("ns", &format!("pod-{uid}"))
        .uid(uid)
        .build();
    p.metadata.generation = Some(generation);
    p
}

/// `pod` as the agent's pod source admits it.
fn admit(pod: Pod) -> AdmittedPod {
    AdmittedPod::new(pod).unwrap_or_else(|e| panic!("{e}"))
}

fn workers(script: &Arc<Script>) -> PodWorkers<Script> {
    PodWorkers::new(script.clone(), WorkerConfig::default())
}

fn uid(s: &str) -> PodUid {
    PodUid::new(s).unwrap_or_else(|e| panic!("{e}"))
}

fn uids(list: &[&str]) -> HashSet<PodUid> {
    list.iter().map(|s| uid(s)).collect()
}

async fn wait_phase(w: &PodWorkers<Script>, u: &str, phase: WorkerPhase) {
    let u = uid(u);
    w.wait_for(|_| w.phase(&u) == Some(phase)).await;
}

async fn wait_syncs(w: &PodWorkers<Script>, uid: &str, n: u64) {
    w.wait_for(|s| s.iter().any(|x| x.uid == uid && x.syncs >= n))
        .await;
}

#[tokio::test(start_paused = true)]
async fn pw1_each_pod_gets_one_worker_and_its_syncs_never_overlap() {
    let script = Arc::new(Script::default());
    let gate = Arc::new(Semaphore::new(0));
    *script.gate.lock() = Some(gate.clone());
    let w = workers(&script);
    for g in 0..5 {
        w.update_pod(PodUpdate::new(UpdateType::Update, admit(pod("a", g))));
        w.update_pod(PodUpdate::new(UpdateType::Update, admit(pod("b", g))));
        tokio::task::yield_now().await;
    }
    gate.add_permits(100);
    wait_syncs(&w, "a", 2).await;
    wait_syncs(&w, "b", 2).await;
    assert_eq!(w.snapshot().len(), 2);
    // Two pods may sync at once, one pod never twice at once.
    assert!(script.max_in_flight.load(Ordering::SeqCst) <= 2);
    w.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pw2_a_burst_of_updates_becomes_one_sync_with_the_newest_pod() {
    let script = Arc::new(Script::default());
    let gate = Arc::new(Semaphore::new(0));
    *script.gate.lock() = Some(gate.clone());
    let w = workers(&script);
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("a", 1))));
    // The first sync is held; meanwhile a burst arrives.
    tokio::task::yield_now().await;
    for g in 2..=9 {
        w.update_pod(PodUpdate::new(UpdateType::Update, admit(pod("a", g))));
    }
    gate.add_permits(100);
    wait_syncs(&w, "a", 2).await;
    assert_eq!(script.calls(), vec!["sync a 1", "sync a 9"]);
    w.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pw2_a_termination_request_cancels_the_in_flight_sync() {
    let script = Arc::new(Script::default());
    let gate = Arc::new(Semaphore::new(0)); // never opened: sync_pod hangs
    *script.gate.lock() = Some(gate);
    let w = workers(&script);
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("a", 1))));
    tokio::task::yield_now().await;
    assert_eq!(script.in_flight.load(Ordering::SeqCst), 1);
    w.update_pod(PodUpdate::new(UpdateType::Kill, admit(pod("a", 2))));
    wait_phase(&w, "a", WorkerPhase::Finished).await;
    assert_eq!(
        script.in_flight.load(Ordering::SeqCst),
        0,
        "sync was dropped"
    );
    assert_eq!(
        script.calls(),
        vec!["terminating(30s) a 2", "terminated a 2"],
        "no sync completed; terminating and terminated ran once, in order"
    );
    w.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pw1_a_deletion_timestamp_requests_termination_with_the_pods_grace_period() {
    let script = Arc::new(Script::default());
    let w = workers(&script);
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("a", 1))));
    wait_syncs(&w, "a", 1).await;
    let mut deleted = pod("a", 2);
    deleted.metadata.deletion_timestamp =
        serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).ok();
    deleted.metadata.deletion_grace_period_seconds = Some(5);
    w.update_pod(PodUpdate::new(UpdateType::Update, admit(deleted)));
    wait_phase(&w, "a", WorkerPhase::Finished).await;
    assert_eq!(
        script.calls(),
        vec!["sync a 1", "terminating(5s) a 2", "terminated a 2"]
    );
    w.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pw3_a_successful_sync_is_repeated_after_one_to_one_and_a_half_resync_intervals() {
    let script = Arc::new(Script::default());
    let w = workers(&script);
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("a", 1))));
    wait_syncs(&w, "a", 1).await;
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(59)).await;
    assert_eq!(script.count("sync"), 1, "no resync before 60 s");
    wait_syncs(&w, "a", 2).await;
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(60) && waited < Duration::from_secs(90),
        "{waited:?}"
    );
    w.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pw3_a_failed_sync_is_retried_after_the_back_off_period_and_recorded() {
    let script = Arc::new(Script::default());
    script.fail_sync.store(true, Ordering::SeqCst);
    let w = workers(&script);
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("a", 1))));
    wait_syncs(&w, "a", 1).await;
    let snap = w.snapshot();
    assert_eq!(
        snap[0].last_error.as_deref(),
        Some("updating pod status: scripted failure")
    );
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(script.count("sync"), 1, "no retry before 10 s");
    script.fail_sync.store(false, Ordering::SeqCst);
    wait_syncs(&w, "a", 2).await;
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(15),
        "{waited:?}"
    );
    assert_eq!(w.snapshot()[0].last_error, None, "success clears the error");
    assert!(w.failed_syncing(None).is_empty(), "no longer failed");
    w.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn failed_syncing_names_the_pods_whose_last_sync_failed_among_those_asked() {
    let script = Arc::new(Script::default());
    script.fail_sync.store(true, Ordering::SeqCst);
    let w = workers(&script);
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("a", 1))));
    wait_syncs(&w, "a", 1).await;
    script.fail_sync.store(false, Ordering::SeqCst);
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("b", 1))));
    wait_syncs(&w, "b", 1).await;
    let (a, b) = (uid("a"), uid("b"));
    assert_eq!(w.failed_syncing(None), vec![a.clone()]);
    assert_eq!(
        w.failed_syncing(Some(&[a.clone(), b.clone()])),
        vec![a.clone()]
    );
    assert!(w.failed_syncing(Some(&[b])).is_empty(), "b synced");
    w.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pw3_a_pending_update_is_processed_at_once_not_after_the_resync_interval() {
    let script = Arc::new(Script::default());
    let w = workers(&script);
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("a", 1))));
    wait_syncs(&w, "a", 1).await;
    let start = Instant::now();
    w.update_pod(PodUpdate::new(UpdateType::Update, admit(pod("a", 2))));
    wait_syncs(&w, "a", 2).await;
    assert!(start.elapsed() < Duration::from_secs(1));
    assert_eq!(script.calls(), vec!["sync a 1", "sync a 2"]);
    w.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pw1_a_terminal_pod_terminates_and_a_failed_terminating_step_is_retried() {
    let script = Arc::new(Script::default());
    script.terminal.store(true, Ordering::SeqCst);
    script.fail_terminating_once.store(true, Ordering::SeqCst);
    let w = workers(&script);
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("a", 1))));
    wait_phase(&w, "a", WorkerPhase::Finished).await;
    assert_eq!(
        script.calls(),
        vec![
            "sync a 1",
            "terminating(30s) a 1",
            "terminating(30s) a 1",
            "terminated a 1"
        ]
    );
    w.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pw1_a_finished_pod_ignores_updates_until_its_worker_is_forgotten() {
    let script = Arc::new(Script::default());
    let w = workers(&script);
    w.update_pod(PodUpdate::new(UpdateType::Kill, admit(pod("a", 1))));
    wait_phase(&w, "a", WorkerPhase::Finished).await;
    w.update_pod(PodUpdate::new(UpdateType::Update, admit(pod("a", 2))));
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(script.count("sync"), 0);
    // Still desired: kept.
    assert!(w.sync_known_pods(&uids(&["a"])).is_empty());
    // No longer desired: forgotten, and a new pod with that UID starts afresh.
    assert_eq!(w.sync_known_pods(&HashSet::new()), vec![uid("a")]);
    assert_eq!(w.phase(&uid("a")), None);
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("a", 3))));
    wait_syncs(&w, "a", 1).await;
    assert_eq!(script.count("sync"), 1);
    w.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn pw1_sync_known_pods_terminates_workers_of_pods_no_longer_desired() {
    let script = Arc::new(Script::default());
    let w = workers(&script);
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("a", 1))));
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("b", 1))));
    wait_syncs(&w, "a", 1).await;
    wait_syncs(&w, "b", 1).await;
    w.sync_known_pods(&uids(&["a"]));
    wait_phase(&w, "b", WorkerPhase::Finished).await;
    assert_eq!(w.phase(&uid("a")), Some(WorkerPhase::Syncing));
    w.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_every_worker_and_later_updates_are_ignored() {
    let script = Arc::new(Script::default());
    let w = workers(&script);
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("a", 1))));
    wait_syncs(&w, "a", 1).await;
    w.shutdown().await;
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("b", 1))));
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(script.calls(), vec!["sync a 1"]);
}

// A pod without a usable UID (none, or not one path component) gets no worker, so
// nothing is ever synced for `pods/` or `pods/../x`: such a pod is never admitted, and an
// update carries only an admitted pod. A pod with a plain UID is synced.
#[tokio::test(start_paused = true)]
async fn a_pod_without_a_usable_uid_gets_no_worker() {
    let script = Arc::new(Script::default());
    let w = workers(&script);
    let mut missing = pod("x", 1);
    missing.metadata.uid = None;
    assert!(AdmittedPod::new(missing).is_err());
    for bad in ["", "../x", ".."] {
        assert!(AdmittedPod::new(pod(bad, 1)).is_err(), "{bad:?}");
    }
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("a", 1))));
    wait_syncs(&w, "a", 1).await;
    tokio::time::sleep(Duration::from_secs(300)).await;
    let uids: Vec<String> = w.snapshot().iter().map(|s| s.uid.to_string()).collect();
    assert_eq!(uids, ["a"]);
    assert!(
        script.calls().iter().all(|c| c.starts_with("sync a ")),
        "{:?}",
        script.calls()
    );
    w.shutdown().await;
}

/// A syncer whose sync keeps 16 KiB on its future across an await.
struct LargeSync;

impl PodSyncer for LargeSync {
    fn pod_desired(&self, _pod: &AdmittedPod) {}

    async fn sync_pod(&self, _pod: &AdmittedPod) -> Result<SyncOutcome, SyncError> {
        let scratch = [1u8; 16 * 1024];
        tokio::task::yield_now().await;
        Ok(if std::hint::black_box(&scratch)[0] == 1 {
            SyncOutcome::Running
        } else {
            SyncOutcome::Terminal
        })
    }

    async fn sync_terminating_pod(
        &self,
        _pod: TerminatingPod<'_>,
        _grace: Duration,
    ) -> Result<(), SyncError> {
        Ok(())
    }

    async fn sync_terminated_pod(&self, _pod: TerminatingPod<'_>) -> Result<(), SyncError> {
        Ok(())
    }
}

#[test]
fn an_idle_worker_does_not_keep_room_for_the_syncers_futures() {
    let worker = run_worker(
        Weak::<Inner<LargeSync>>::new(),
        Arc::new(LargeSync),
        uid("a"),
        Arc::new(Notify::new()),
        CancellationToken::new(),
    );
    // The worker's task lives as long as its pod: its future holds the sync only boxed.
    let size = std::mem::size_of_val(&worker);
    assert!(size < 2048, "a pod worker's future is {size} bytes");
}

fn with_phase(mut p: Pod, phase: &str) -> Pod {
    p.status = Some(k8s_openapi::api::core::v1::PodStatus {
        phase: Some(phase.into()),
        ..Default::default()
    });
    p
}

fn deleting(mut p: Pod) -> Pod {
    p.metadata.deletion_timestamp =
        serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).ok();
    p
}

// PW-4 / PW-13 / VM-4: `update_pod` is the one owner of "this pod is desired", so no sync can
// re-desire a terminating pod. Each
// update of a live pod records it (newest object) exactly once, synchronously: before
// `update_pod` returns, before any sync ran. Syncs and periodic resyncs record nothing.
#[tokio::test(start_paused = true)]
async fn pw4_update_pod_makes_a_live_pod_desired_before_it_returns_and_syncs_do_not() {
    let script = Arc::new(Script::default());
    let gate = Arc::new(Semaphore::new(0));
    *script.gate.lock() = Some(gate.clone());
    let w = workers(&script);
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("a", 1))));
    assert_eq!(
        script.desired(),
        ["a 1"],
        "desired before update_pod returned"
    );
    tokio::task::yield_now().await;
    assert_eq!(
        script.calls(),
        Vec::<String>::new(),
        "no sync has completed"
    );
    w.update_pod(PodUpdate::new(UpdateType::Update, admit(pod("a", 2))));
    w.update_pod(PodUpdate::new(UpdateType::Sync, admit(pod("a", 3))));
    assert_eq!(
        script.desired(),
        ["a 1", "a 2", "a 3"],
        "every update, newest object"
    );
    gate.add_permits(100);
    wait_syncs(&w, "a", 2).await;
    // Periodic resyncs (60–90 s) run SyncPod again and record nothing.
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert!(script.count("sync") >= 4, "{:?}", script.calls());
    assert_eq!(script.desired(), ["a 1", "a 2", "a 3"]);
    w.shutdown().await;
}

// PW-4 / VM-4: a kill, a pod being deleted and a pod in a terminal phase are never desired,
// neither on a new worker nor on a running one.
#[tokio::test(start_paused = true)]
async fn pw4_killed_deleting_and_terminal_pods_are_never_desired() {
    let script = Arc::new(Script::default());
    let w = workers(&script);
    w.update_pod(PodUpdate::new(UpdateType::Kill, admit(pod("k", 1))));
    w.update_pod(PodUpdate::new(
        UpdateType::Create,
        admit(deleting(pod("d", 1))),
    ));
    w.update_pod(PodUpdate::new(
        UpdateType::Create,
        admit(with_phase(pod("s", 1), "Succeeded")),
    ));
    w.update_pod(PodUpdate::new(
        UpdateType::Create,
        admit(with_phase(pod("f", 1), "Failed")),
    ));
    // A running pod that finishes: its terminal update is not desired.
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("r", 1))));
    wait_syncs(&w, "r", 1).await;
    w.update_pod(PodUpdate::new(
        UpdateType::Update,
        admit(with_phase(pod("r", 2), "Succeeded")),
    ));
    for u in ["k", "d"] {
        wait_phase(&w, u, WorkerPhase::Finished).await;
    }
    // (The scripted SyncPod does not look at the phase; ConfigSyncer's ends such pods.)
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(script.desired(), ["r 1"]);
    w.shutdown().await;
}

// PW-1: a pod known only by its directory on disk (its object gone) is a kill on first sight:
// its worker runs the termination callbacks with its UID and no object, and never makes it
// desired or syncs it.
#[tokio::test(start_paused = true)]
async fn pw1_a_pod_known_only_on_disk_is_terminated_by_its_uid_never_desired_nor_synced() {
    let script = Arc::new(Script::default());
    let w = workers(&script);
    w.update_pod(PodUpdate::kill_on_disk(uid("o")));
    assert!(w.is_termination_requested(&uid("o")));
    let snapshot = w.snapshot();
    assert_eq!(
        (snapshot[0].namespace.as_str(), snapshot[0].name.as_str()),
        ("", "")
    );
    wait_phase(&w, "o", WorkerPhase::Finished).await;
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(
        script.calls(),
        ["terminating(30s) o on-disk", "terminated o on-disk"],
        "default grace period, no object"
    );
    assert!(script.desired().is_empty());
    assert_eq!(script.count("sync"), 0);
    w.shutdown().await;
}

// A kill of the pod on disk for a pod whose worker has its object (a race of the start-up
// scan with the pod watch) requests termination but keeps the object: the termination
// callbacks still get it (and with it events and status).
#[tokio::test(start_paused = true)]
async fn a_kill_of_the_pod_on_disk_keeps_the_object_its_worker_has() {
    let script = Arc::new(Script::default());
    let gate = Arc::new(Semaphore::new(0)); // SyncPod hangs: termination cancels it
    *script.gate.lock() = Some(gate);
    let w = workers(&script);
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("a", 1))));
    tokio::task::yield_now().await;
    w.update_pod(PodUpdate::kill_on_disk(uid("a")));
    wait_phase(&w, "a", WorkerPhase::Finished).await;
    assert_eq!(script.calls(), ["terminating(30s) a 1", "terminated a 1"]);
    assert_eq!(script.desired(), ["a 1"]);
    w.shutdown().await;
}

// PW-14 / VM-4: once termination was requested, a late update (here without a deletion
// timestamp, as a stale watch event would be) never makes the pod desired again, so nothing
// re-registers or re-adds it while its volumes are torn down and it is unregistered.
#[tokio::test(start_paused = true)]
async fn pw14_an_update_after_the_termination_request_does_not_make_the_pod_desired_again() {
    let script = Arc::new(Script::default());
    let gate = Arc::new(Semaphore::new(0)); // SyncPod hangs: termination cancels it
    *script.gate.lock() = Some(gate);
    let w = workers(&script);
    w.update_pod(PodUpdate::new(UpdateType::Create, admit(pod("a", 1))));
    tokio::task::yield_now().await;
    w.update_pod(PodUpdate::new(UpdateType::Kill, admit(pod("a", 2))));
    assert!(w.is_termination_requested(&uid("a")));
    w.update_pod(PodUpdate::new(UpdateType::Update, admit(pod("a", 3))));
    wait_phase(&w, "a", WorkerPhase::Finished).await;
    w.update_pod(PodUpdate::new(UpdateType::Update, admit(pod("a", 4))));
    assert_eq!(script.desired(), ["a 1"]);
    w.shutdown().await;
}

/// Model test: random bursts of create/update/kill for a few pods, random sync outcomes.
/// Invariants: a pod's callbacks never overlap; each pod's callbacks follow the phase order
/// (sync* → terminating+ → terminated once); nothing runs after terminated; every killed pod
/// finishes; a pod never killed never terminates; every update of a pod not killed makes it
/// desired at once, and no update after its kill does (PW-14).
mod model {
    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Update(usize),
        Kill(usize),
        /// Let time pass (seconds) so resyncs and retries happen.
        Wait(u64),
        FailSyncs(bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..3usize).prop_map(Op::Update),
            1 => (0..3usize).prop_map(Op::Kill),
            2 => (0..90u64).prop_map(Op::Wait),
            1 => any::<bool>().prop_map(Op::FailSyncs),
        ]
    }

    async fn run(ops: Vec<Op>) {
        let script = Arc::new(Script::default());
        let w = workers(&script);
        let mut killed = HashSet::new();
        let mut generation = 0;
        for op in &ops {
            match op {
                Op::Update(p) => {
                    generation += 1;
                    let uid = p.to_string();
                    let before = script.desired_count(&uid);
                    w.update_pod(PodUpdate::new(
                        UpdateType::Update,
                        admit(pod(&uid, generation)),
                    ));
                    // PW-14: never desired again once termination was requested; else at once.
                    let expected = before + usize::from(!killed.contains(&uid));
                    assert_eq!(script.desired_count(&uid), expected, "pod {uid}");
                }
                Op::Kill(p) => {
                    generation += 1;
                    killed.insert(p.to_string());
                    w.update_pod(PodUpdate::new(
                        UpdateType::Kill,
                        admit(pod(&p.to_string(), generation)),
                    ));
                }
                Op::Wait(s) => tokio::time::sleep(Duration::from_secs(*s)).await,
                Op::FailSyncs(f) => script.fail_sync.store(*f, Ordering::SeqCst),
            }
            tokio::task::yield_now().await;
        }
        for uid in &killed {
            wait_phase(&w, uid, WorkerPhase::Finished).await;
        }
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert!(script.max_in_flight.load(Ordering::SeqCst) <= 3);
        for uid in ["0", "1", "2"] {
            let calls: Vec<String> = script
                .calls()
                .into_iter()
                .filter(|c| c.split(' ').nth(1) == Some(uid))
                .map(|c| c.split(['(', ' ']).next().unwrap_or_default().to_owned())
                .collect();
            // sync* terminating* terminated? — as a state machine.
            let mut stage = 0;
            for c in &calls {
                let next = match c.as_str() {
                    "sync" => 0,
                    "terminating" => 1,
                    "terminated" => 2,
                    other => panic!("unexpected call {other}"),
                };
                assert!(next >= stage, "pod {uid}: {calls:?}");
                assert!(!(stage == 2 && next == 2), "terminated twice: {calls:?}");
                stage = next;
            }
            let finished = calls.last().is_some_and(|c| c == "terminated");
            assert_eq!(finished, killed.contains(uid), "pod {uid}: {calls:?}");
        }
        w.shutdown().await;
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn random_update_and_kill_sequences_respect_the_phase_order(
            ops in proptest::collection::vec(op(), 1..30)
        ) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap_or_else(|e| panic!("runtime: {e}"));
            rt.block_on(run(ops));
        }
    }
}
