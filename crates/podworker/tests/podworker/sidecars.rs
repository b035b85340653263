//! Sidecar containers through the ConfigSyncer (PW-60 … PW-64), on paused time, against a
//! runtime of pretend processes: when the syncer's plan starts the init container after a
//! sidecar (once that sidecar's instance started), how it stops the sidecars once the app
//! containers are done, and the order in which a pod's containers stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, Pod, Secret};
use nodelet_core::runtime::{
    ContainerLaunch, ContainerState, ContainerStatus, PodNetwork, PodSandbox, Termination,
};
use nodelet_core::{AdmittedPod, PodUid};
use nodelet_object_manager::Strategy;
use nodelet_podworker::{
    ConfigSyncer, ContainerEnv, FakeVolumes, PodSyncer, ProbeConfig, ProbeManager, ProbeTarget,
    RecordingEvents, RecordingStatus, RuntimeError, RuntimeHook, SyncOutcome, SyncerConfig,
    SyncerParts, TerminatingPod,
};
use nodelet_runtime::handlers::{ExecError, ExecResult};
use nodelet_testutil::PodBuilder;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::support::{admit, api};

/// Pretend processes: a container started by `create_container` runs until
/// `stop_container` (which ends it at once) or the test ends it.
struct Processes {
    t0: Instant,
    statuses: Mutex<Vec<ContainerStatus>>,
    /// `(seconds since t0, what)`: `start <c>`, `stop <c> grace=<s>`.
    log: Mutex<Vec<(u64, String)>>,
    /// What an exec probe answers: exit 0 when set.
    probe_passes: AtomicBool,
}

impl Processes {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            t0: Instant::now(),
            statuses: Mutex::default(),
            log: Mutex::default(),
            probe_passes: AtomicBool::new(false),
        })
    }

    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn note(&self, what: String) {
        let at = self.t0.elapsed().as_secs();
        Self::lock(&self.log).push((at, what));
    }

    fn log(&self) -> Vec<(u64, String)> {
        Self::lock(&self.log).clone()
    }

    /// What the log says of starts (or stops), in order.
    fn logged(&self, what: &str) -> Vec<String> {
        self.log()
            .into_iter()
            .filter(|(_, w)| w.starts_with(what))
            .map(|(_, w)| w)
            .collect()
    }

    fn run(&self, name: &str) {
        let mut statuses = Self::lock(&self.statuses);
        statuses.retain(|s| s.name != name);
        statuses.push(ContainerStatus {
            name: name.to_owned(),
            state: ContainerState::Running {
                started_at: SystemTime::now(),
            },
            last_state: None,
            restart_count: 0,
            container_id: format!("fake://{name}"),
        });
    }

    fn end(&self, name: &str, exit_code: i32) {
        for s in Self::lock(&self.statuses).iter_mut() {
            if s.name == name && s.is_running() {
                s.state = ContainerState::Terminated(Termination {
                    exit_code,
                    signal: None,
                    reason: if exit_code == 0 { "Completed" } else { "Error" }.to_owned(),
                    message: None,
                    started_at: SystemTime::UNIX_EPOCH,
                    finished_at: SystemTime::now(),
                });
            }
        }
    }
}

#[async_trait]
impl RuntimeHook for Processes {
    async fn run_pod_sandbox(
        &self,
        _pod: &AdmittedPod,
    ) -> Result<Option<PodSandbox>, RuntimeError> {
        Ok(Some(PodSandbox {
            network: PodNetwork::Host,
        }))
    }

    async fn create_container(
        &self,
        _pod: &AdmittedPod,
        container: &Container,
        _env: &ContainerEnv,
        _launch: &ContainerLaunch,
        _pull_secrets: &[Arc<Secret>],
    ) -> Result<(), RuntimeError> {
        self.note(format!("start {}", container.name));
        self.run(&container.name);
        Ok(())
    }

    fn statuses(&self, _uid: &PodUid) -> Vec<ContainerStatus> {
        Self::lock(&self.statuses).clone()
    }

    async fn stop_container(
        &self,
        _uid: &PodUid,
        container: &str,
        grace_period: Duration,
    ) -> Result<bool, RuntimeError> {
        self.note(format!("stop {container} grace={}", grace_period.as_secs()));
        self.end(container, 143);
        Ok(true)
    }

    async fn kill_pod(&self, _uid: &PodUid, _grace: Duration) -> Result<Vec<String>, RuntimeError> {
        Ok(Vec::new())
    }

    async fn remove_pod(&self, _pod: TerminatingPod<'_>) -> Result<(), RuntimeError> {
        Ok(())
    }
}

#[async_trait]
impl ProbeTarget for Processes {
    fn statuses(&self, _uid: &PodUid) -> Vec<ContainerStatus> {
        Self::lock(&self.statuses).clone()
    }

    async fn exec_sync(
        &self,
        _uid: &PodUid,
        _container: &str,
        _command: &[String],
        _timeout: Duration,
    ) -> Result<ExecResult, ExecError> {
        let exit_code = i32::from(!self.probe_passes.load(Ordering::SeqCst));
        Ok(ExecResult {
            exit_code,
            stdout: Vec::new(),
            stderr: Vec::new(),
        })
    }
}

struct Fixture {
    _root: TempDir,
    processes: Arc<Processes>,
    events: RecordingEvents,
    status: RecordingStatus,
    syncer: ConfigSyncer,
}

fn fixture(with_prober: bool) -> Fixture {
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let api = api(Strategy::Watch).with_fixtures("ns");
    let processes = Processes::new();
    let events = RecordingEvents::new();
    let status = RecordingStatus::new();
    let probes = with_prober.then(|| {
        ProbeManager::new(
            ProbeConfig::new("127.0.0.1"),
            processes.clone(),
            Arc::new(events.clone()),
            TaskTracker::new(),
            CancellationToken::new(),
        )
    });
    let syncer = ConfigSyncer::new(
        SyncerConfig::new(root.path()).with_host_ips(vec!["127.0.0.1".to_owned()]),
        SyncerParts {
            sources: api.sources.clone(),
            volumes: Arc::new(FakeVolumes::new()),
            runtime: processes.clone(),
            events: Arc::new(events.clone()),
            status: Arc::new(status.clone()),
            probes,
            env_follow: None,
            follow: None,
        },
    );
    Fixture {
        _root: root,
        processes,
        events,
        status,
        syncer,
    }
}

fn sidecar(name: &str, extra: Value) -> Value {
    let mut c = json!({"name": name, "image": "x", "restartPolicy": "Always"});
    if let (Some(c), Value::Object(extra)) = (c.as_object_mut(), extra) {
        c.extend(extra);
    }
    c
}

fn sleep_pre_stop(seconds: u64) -> Value {
    json!({"lifecycle": {"preStop": {"sleep": {"seconds": seconds}}}})
}

/// A pod `ns/p` (uid `u1`) whose containers the test adds.
fn builder() -> PodBuilder {
    PodBuilder::new("ns", "p")
        .uid("u1")
        .spec(json!({"enableServiceLinks": false}))
}

fn admitted(pod: Pod, f: &Fixture) -> AdmittedPod {
    let pod = admit(pod);
    f.syncer.pod_desired(&pod);
    pod
}

#[tokio::test(start_paused = true)]
async fn pw62_app_containers_stop_first_then_the_sidecars_in_reverse_order() {
    let f = fixture(false);
    let pod = builder()
        .init_container(sidecar("s1", sleep_pre_stop(3)))
        .init_container(sidecar("s2", json!({})))
        .container(
            json!({"name": "a", "image": "x", "lifecycle": {"preStop": {"sleep": {"seconds": 5}}}}),
        )
        .container(json!({"name": "b", "image": "x"}))
        .build();
    let pod = admitted(pod, &f);
    for c in ["s1", "s2", "a", "b"] {
        f.processes.run(c);
    }
    let stopped = f
        .syncer
        .sync_terminating_pod(TerminatingPod::from(&pod), Duration::from_secs(30))
        .await;
    assert!(stopped.is_ok(), "{stopped:?}");
    // b stops at once; a after its 5 s preStop; s2 waits for both (5 s); s1 ran its own
    // 3 s preStop at once, then waited 2 s more for s2: every grace period lost 5 s but b's.
    assert_eq!(
        f.processes.log(),
        [
            (0, "stop b grace=30".to_owned()),
            (5, "stop a grace=25".to_owned()),
            (5, "stop s2 grace=25".to_owned()),
            (5, "stop s1 grace=25".to_owned()),
        ]
    );
    let killing = f
        .events
        .reasons_and_messages()
        .into_iter()
        .filter(|(reason, _)| reason == "Killing")
        .count();
    assert_eq!(killing, 4, "every running container gets its Killing event");
}

#[tokio::test(start_paused = true)]
async fn pw62_a_sidecar_waits_for_its_turn_no_longer_than_its_grace_period() {
    let f = fixture(false);
    let pod = builder()
        .init_container(sidecar("s", json!({})))
        .container(json!({"name": "a", "image": "x", "lifecycle": {"preStop": {"sleep": {"seconds": 60}}}}))
        .build();
    let pod = admitted(pod, &f);
    for c in ["s", "a"] {
        f.processes.run(c);
    }
    let stopped = f
        .syncer
        .sync_terminating_pod(TerminatingPod::from(&pod), Duration::from_secs(10))
        .await;
    assert!(stopped.is_ok(), "{stopped:?}");
    // a's preStop is cut at 10 s; the sidecar stopped waiting then too, with the least
    // grace period left (2 s).
    let log = f.processes.log();
    assert!(log.contains(&(10, "stop s grace=2".to_owned())), "{log:?}");
    assert!(log.contains(&(10, "stop a grace=2".to_owned())), "{log:?}");
}

#[tokio::test(start_paused = true)]
async fn pw63_the_sidecars_stop_once_the_app_containers_ended_and_the_pod_succeeds() {
    let f = fixture(false);
    let pod = builder()
        .init_container(sidecar("s1", json!({})))
        .init_container(sidecar("s2", json!({})))
        .container(json!({"name": "a", "image": "x"}))
        .spec(json!({"restartPolicy": "Never", "terminationGracePeriodSeconds": 20}))
        .build();
    let pod = admitted(pod, &f);
    // One sync per container: each sidecar runs (and, without a startup probe, has
    // started) before the next container starts.
    for _ in 0..3 {
        let synced = f.syncer.sync_pod(&pod).await;
        assert_eq!(synced.ok(), Some(SyncOutcome::Running));
    }
    assert_eq!(
        f.processes.logged("start"),
        ["start s1", "start s2", "start a"]
    );
    let phase = |f: &Fixture| f.status.status("u1").and_then(|s| s.phase);
    assert_eq!(phase(&f).as_deref(), Some("Running"));
    // The app container is done; the sidecars still run: the pod is not done yet.
    f.processes.end("a", 0);
    let last = f.syncer.sync_pod(&pod).await;
    assert_eq!(last.ok(), Some(SyncOutcome::Terminal));
    assert_eq!(
        f.processes.logged("stop"),
        ["stop s2 grace=20", "stop s1 grace=20"]
    );
    assert_eq!(
        f.processes.logged("start").len(),
        3,
        "nothing started again"
    );
    assert_eq!(
        phase(&f).as_deref(),
        Some("Succeeded"),
        "the killed sidecars (143) do not fail the pod"
    );
}

#[tokio::test(start_paused = true)]
async fn pw60_the_next_init_container_starts_only_once_the_sidecars_startup_probe_passed() {
    let f = fixture(true);
    // A prober that started long ago: its workers probe at once.
    tokio::time::advance(Duration::from_secs(3600)).await;
    let probe = json!({"startupProbe": {
        "exec": {"command": ["ready"]}, "periodSeconds": 1, "failureThreshold": 100}});
    let pod = builder()
        .init_container(sidecar("s", probe))
        .init_container(sidecar("t", json!({})))
        .container(json!({"name": "a", "image": "x"}))
        .build();
    let pod = admitted(pod, &f);
    let synced = f.syncer.sync_pod(&pod).await;
    assert!(synced.is_ok(), "{synced:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let synced = f.syncer.sync_pod(&pod).await;
    assert!(synced.is_ok(), "{synced:?}");
    assert_eq!(
        f.processes.logged("start"),
        ["start s"],
        "s runs, its startup probe fails: t waits"
    );
    f.processes.probe_passes.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let synced = f.syncer.sync_pod(&pod).await;
    assert!(synced.is_ok(), "{synced:?}");
    assert_eq!(f.processes.logged("start"), ["start s", "start t"]);
    let synced = f.syncer.sync_pod(&pod).await;
    assert!(synced.is_ok(), "{synced:?}");
    assert_eq!(
        f.processes.logged("start"),
        ["start s", "start t", "start a"],
        "t has no startup probe: it counts once it runs"
    );
    // Its status: started and ready (no readiness probe) once the startup probe passed.
    let init = f
        .status
        .status("u1")
        .and_then(|s| s.init_container_statuses)
        .unwrap_or_default();
    let s = init.iter().find(|c| c.name == "s");
    assert!(
        s.is_some_and(|s| s.started == Some(true) && s.ready),
        "{init:?}"
    );
}
