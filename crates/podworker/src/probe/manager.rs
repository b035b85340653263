//! [`ProbeManager`]: the prober's one handle (the kubelet's probe manager): workers started
//! per pod, stopped at termination; what the probes make of each container (`started`,
//! `ready`, kills); result changes announced.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use nodelet_core::events::EventSink;
use nodelet_core::runtime::{ContainerStatus, is_sidecar};
use nodelet_core::{AdmittedPod, PodUid};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::shared::{Key, Shared};
use super::types::{
    ContainerProbeStatus, ProbeKill, ProbeKind, ProbeResult, ProbeTarget, ProbeUpdate,
};
use super::worker::Worker;

/// The least a container killed for a failed probe is given before SIGKILL (the kubelet's
/// `minimumGracePeriodInSeconds`).
const MINIMUM_GRACE_PERIOD: Duration = Duration::from_secs(2);

/// Options of a [`ProbeManager`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProbeConfig {
    /// The pods' IP: where `httpGet` (without `host`), `tcpSocket` (without `host`) and
    /// `grpc` probes connect. On the host network, the node's address.
    pub pod_ip: String,
}

impl ProbeConfig {
    /// Probes connect to `pod_ip`.
    pub fn new(pod_ip: impl Into<String>) -> Self {
        Self {
            pod_ip: pod_ip.into(),
        }
    }
}

/// The prober (PW-30 … PW-34). Cheap to clone; every clone is the same prober.
///
/// One worker per probe of each regular container, started by [`add_pod`](Self::add_pod), on
/// `tracker`, until its pod ends, [`stop_liveness_and_startup`](Self::stop_liveness_and_startup)
/// or [`remove_pod`](Self::remove_pod) stops it, or `shutdown` is cancelled. Every change of
/// a result is announced on [`updates`](Self::updates).
#[derive(Clone)]
pub struct ProbeManager {
    shared: Arc<Shared>,
    tracker: TaskTracker,
}

impl std::fmt::Debug for ProbeManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeManager")
            .field("pod_ip", &self.shared.pod_ip)
            .finish_non_exhaustive()
    }
}

impl ProbeManager {
    /// A prober of `target`'s containers, recording its events in `events`, running its
    /// workers on `tracker` until `shutdown`.
    pub fn new(
        config: ProbeConfig,
        target: Arc<dyn ProbeTarget>,
        events: Arc<dyn EventSink>,
        tracker: TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            shared: Arc::new(Shared::new(config.pod_ip, target, events, shutdown)),
            tracker,
        }
    }

    /// Every later change of a probe result.
    pub fn updates(&self) -> broadcast::Receiver<ProbeUpdate> {
        self.shared.subscribe()
    }

    /// Starts a worker for each probe of `pod`'s regular containers and sidecars (PW-64)
    /// that has none (the kubelet's `AddPod`). Idempotent; must be called inside a tokio
    /// runtime.
    pub fn add_pod(&self, pod: &AdmittedPod) {
        for container in probed_containers(pod) {
            for kind in ProbeKind::ALL {
                if let Some(worker) = Worker::new(&self.shared, pod, container, kind) {
                    self.tracker.spawn(worker.run());
                }
            }
        }
    }

    /// Stops the liveness and startup workers of pod `uid` (its termination began: nothing
    /// kills its containers any more); readiness goes on while the containers stop.
    pub fn stop_liveness_and_startup(&self, uid: &PodUid) {
        self.shared
            .stop_workers(uid, |kind| kind != ProbeKind::Readiness);
    }

    /// Stops every worker of pod `uid`; their results go with them.
    pub fn remove_pod(&self, uid: &PodUid) {
        self.shared.stop_workers(uid, |_| true);
    }

    /// `started` and `ready` of each regular container and sidecar of `pod` with a status
    /// in `statuses` (the kubelet's `UpdatePodStatus`, PW-33, PW-64). A started container
    /// whose readiness probe has no success yet has that probe run at once.
    pub fn container_states(
        &self,
        pod: &AdmittedPod,
        statuses: &[ContainerStatus],
    ) -> Vec<ContainerProbeStatus> {
        let uid = pod.uid();
        probed_containers(pod)
            .filter_map(|c| statuses.iter().find(|s| s.name == c.name))
            .map(|s| {
                let started =
                    s.is_running() && self.shared.is_started(uid, &s.name, &s.container_id);
                let key = Key {
                    pod_uid: uid.clone(),
                    container: s.name.clone(),
                    kind: ProbeKind::Readiness,
                };
                let ready = started
                    && match self.shared.result(&key, &s.container_id) {
                        Some(ProbeResult::Success) => true,
                        _ if self.shared.has_worker(&key) => {
                            self.shared.trigger(&key);
                            false
                        }
                        _ => true,
                    };
                ContainerProbeStatus {
                    name: s.name.clone(),
                    started,
                    ready,
                }
            })
            .collect()
    }

    /// The container IDs of `pod`'s running sidecar instances that started (PW-60): their
    /// startup probe succeeded, or they have none. The runtime's plan lets the init container
    /// after a sidecar start only then.
    pub fn started_sidecars(&self, pod: &AdmittedPod, statuses: &[ContainerStatus]) -> Vec<String> {
        let uid = pod.uid();
        pod.spec
            .iter()
            .flat_map(|s| s.init_containers.iter().flatten())
            .filter(|c| is_sidecar(c))
            .filter_map(|c| statuses.iter().find(|s| s.name == c.name))
            .filter(|s| s.is_running() && self.shared.is_started(uid, &s.name, &s.container_id))
            .map(|s| s.container_id.clone())
            .collect()
    }

    /// The running containers of `pod` whose current instance failed its liveness probe
    /// (else its startup probe): each is to be killed, and restarted unless `restartPolicy`
    /// is `Never` (the kubelet's `computePodActions`, PW-34).
    pub fn kills(&self, pod: &AdmittedPod, statuses: &[ContainerStatus]) -> Vec<ProbeKill> {
        let uid = pod.uid();
        let Some(spec) = pod.spec.as_ref() else {
            return Vec::new();
        };
        let restart = spec.restart_policy.as_deref() != Some("Never");
        probed_containers(pod)
            .filter_map(|c| {
                let s = statuses.iter().find(|s| s.name == c.name)?;
                if !s.is_running() {
                    return None;
                }
                let failed = |kind| {
                    let key = Key {
                        pod_uid: uid.clone(),
                        container: c.name.clone(),
                        kind,
                    };
                    self.shared.result(&key, &s.container_id) == Some(ProbeResult::Failure)
                };
                let kind = [ProbeKind::Liveness, ProbeKind::Startup]
                    .into_iter()
                    .find(|k| failed(*k))?;
                let probe = kind.of(c)?;
                let sidecar = !spec.containers.iter().any(|a| a.name == c.name);
                let mut message = format!(
                    "{} {} failed {} probe",
                    if sidecar {
                        "Init container"
                    } else {
                        "Container"
                    },
                    c.name,
                    kind.as_str().to_lowercase()
                );
                // PW-64: a sidecar always restarts, and its message does not say so.
                if restart && !sidecar {
                    message.push_str(", will be restarted");
                }
                Some(ProbeKill {
                    container: c.name.clone(),
                    kind,
                    message,
                    grace_period: kill_grace_period(pod, probe.termination_grace_period_seconds),
                })
            })
            .collect()
    }
}

/// The containers of `pod` that are probed: its sidecars (PW-64), then its regular
/// containers.
fn probed_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.iter().flat_map(|s| {
        s.init_containers
            .iter()
            .flatten()
            .filter(|c| is_sidecar(c))
            .chain(&s.containers)
    })
}

/// How long a container killed for a failed probe has before SIGKILL (the kubelet's
/// `setTerminationGracePeriod`): the pod's deletion grace period if it is being deleted, else
/// the probe's `terminationGracePeriodSeconds`, else the pod's; at least 2 s.
fn kill_grace_period(pod: &Pod, probe_grace: Option<i64>) -> Duration {
    let seconds = pod
        .metadata
        .deletion_grace_period_seconds
        .or(probe_grace)
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(30);
    Duration::from_secs(u64::try_from(seconds).unwrap_or(0)).max(MINIMUM_GRACE_PERIOD)
}

#[cfg(test)]
mod tests {
    //! The prober's timing and decisions under paused time, against a fake runtime whose
    //! exec probes answer from a script.

    use std::time::SystemTime;

    use async_trait::async_trait;
    use nodelet_core::runtime::ContainerState;
    use nodelet_runtime::handlers::{ExecError, ExecResult};
    use nodelet_testutil::PodBuilder;
    use parking_lot::Mutex;
    use serde_json::{Value, json};
    use tokio::time::Instant;

    use super::*;
    use crate::RecordingEvents;

    /// How an exec probe's command answers at a time (since the test's start).
    type Script = Box<dyn Fn(&str, Duration) -> Result<i32, ExecError> + Send + Sync>;

    /// A runtime with one container `c` whose instances the test starts; exec probes answer
    /// by `script` and are recorded with their time.
    struct FakeRuntime {
        t0: Instant,
        wall0: SystemTime,
        uid: PodUid,
        statuses: Mutex<Vec<ContainerStatus>>,
        script: Script,
        calls: Mutex<Vec<(Duration, String)>>,
    }

    impl FakeRuntime {
        fn new(uid: &PodUid, script: Script) -> Arc<Self> {
            Arc::new(Self {
                t0: Instant::now(),
                wall0: SystemTime::now(),
                uid: uid.clone(),
                statuses: Mutex::default(),
                script,
                calls: Mutex::default(),
            })
        }

        /// Instance `id` of container `c` is running from now on.
        fn start(&self, id: &str) {
            *self.statuses.lock() = vec![ContainerStatus {
                name: "c".into(),
                state: ContainerState::Running {
                    started_at: self.wall0 + self.t0.elapsed(),
                },
                last_state: None,
                restart_count: 0,
                container_id: id.into(),
            }];
        }

        /// The seconds (since the test's start) at which `command` was probed.
        fn calls_of(&self, command: &str) -> Vec<u64> {
            self.calls
                .lock()
                .iter()
                .filter(|(_, c)| c == command)
                .map(|(t, _)| t.as_secs())
                .collect()
        }
    }

    #[async_trait]
    impl ProbeTarget for FakeRuntime {
        fn statuses(&self, uid: &PodUid) -> Vec<ContainerStatus> {
            if *uid == self.uid {
                self.statuses.lock().clone()
            } else {
                Vec::new()
            }
        }

        async fn exec_sync(
            &self,
            _uid: &PodUid,
            _container: &str,
            command: &[String],
            _timeout: Duration,
        ) -> Result<ExecResult, ExecError> {
            let command = command.join(" ");
            let at = self.t0.elapsed();
            self.calls.lock().push((at, command.clone()));
            let exit_code = (self.script)(&command, at)?;
            Ok(ExecResult {
                exit_code,
                stdout: Vec::new(),
                stderr: if exit_code == 0 {
                    Vec::new()
                } else {
                    format!("{command}: failed").into_bytes()
                },
            })
        }
    }

    /// A pod with container `c` and `probes` (its `livenessProbe` etc.).
    fn pod(probes: Value) -> AdmittedPod {
        let mut container = json!({"name": "c", "image": "busybox"});
        if let (Some(c), Value::Object(p)) = (container.as_object_mut(), probes) {
            c.extend(p);
        }
        let pod = PodBuilder::new("ns", "p")
            .uid("u1")
            .container(container)
            .spec(json!({"terminationGracePeriodSeconds": 30}))
            .build();
        AdmittedPod::new(pod).unwrap_or_else(|e| panic!("{e}"))
    }

    fn exec(command: &str, extra: Value) -> Value {
        let mut probe = json!({"exec": {"command": command.split(' ').collect::<Vec<_>>()}});
        if let (Some(p), Value::Object(extra)) = (probe.as_object_mut(), extra) {
            p.extend(extra);
        }
        probe
    }

    struct Fixture {
        runtime: Arc<FakeRuntime>,
        events: RecordingEvents,
        probes: ProbeManager,
        updates: broadcast::Receiver<ProbeUpdate>,
        pod: AdmittedPod,
    }

    /// A prober that started long ago (no first-probe jitter) and `pod`, whose container
    /// `c` starts (instance `c-1`) as the pod is added.
    async fn fixture(pod: AdmittedPod, script: Script) -> Fixture {
        let runtime = FakeRuntime::new(pod.uid(), script);
        let events = RecordingEvents::new();
        let probes = ProbeManager::new(
            ProbeConfig::new("127.0.0.1"),
            runtime.clone(),
            Arc::new(events.clone()),
            TaskTracker::new(),
            CancellationToken::new(),
        );
        let updates = probes.updates();
        tokio::time::advance(Duration::from_secs(3600)).await;
        runtime.start("c-1");
        probes.add_pod(&pod);
        Fixture {
            runtime,
            events,
            probes,
            updates,
            pod,
        }
    }

    impl Fixture {
        /// Lets `secs` seconds pass (from the pod's start), the workers running meanwhile.
        async fn run_until(&self, secs: u64) {
            let until = self.runtime.t0 + Duration::from_secs(3600 + secs);
            while Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }

        /// The updates so far: (seconds since the pod's start, kind, result).
        fn updates(&mut self) -> Vec<(ProbeKind, ProbeResult)> {
            std::iter::from_fn(|| self.updates.try_recv().ok())
                .map(|u| (u.kind, u.result))
                .collect()
        }

        fn states(&self) -> Vec<ContainerProbeStatus> {
            let statuses = self.runtime.statuses.lock().clone();
            self.probes.container_states(&self.pod, &statuses)
        }

        fn kills(&self) -> Vec<ProbeKill> {
            let statuses = self.runtime.statuses.lock().clone();
            self.probes.kills(&self.pod, &statuses)
        }
    }

    /// Probe times in seconds since the pod's start (the fixture let an hour pass first).
    fn since_start(calls: Vec<u64>) -> Vec<u64> {
        calls.into_iter().map(|t| t - 3600).collect()
    }

    fn always(code: i32) -> Script {
        Box::new(move |_, _| Ok(code))
    }

    #[tokio::test(start_paused = true)]
    async fn pw31_readiness_waits_for_the_initial_delay_and_the_next_period_tick() {
        let probe = exec("ready", json!({"initialDelaySeconds": 15}));
        let mut f = fixture(pod(json!({"readinessProbe": probe})), always(0)).await;
        f.run_until(12).await;
        assert_eq!(
            f.states(),
            [ContainerProbeStatus {
                name: "c".into(),
                started: true,
                ready: false
            }],
            "not ready before the first success"
        );
        // That status asked for a probe at once; inside the delay, none ran.
        f.run_until(19).await;
        assert!(
            f.runtime.calls_of("ready").is_empty(),
            "no probe before 15 s"
        );
        assert_eq!(
            f.updates(),
            [(ProbeKind::Readiness, ProbeResult::Failure)],
            "the initial result"
        );
        f.run_until(35).await;
        // Ticks every 10 s from the start: 0 and 10 are inside the delay, 20 is the first.
        assert_eq!(since_start(f.runtime.calls_of("ready")), [20, 30]);
        assert_eq!(f.updates(), [(ProbeKind::Readiness, ProbeResult::Success)]);
        assert!(f.states()[0].ready);
    }

    #[tokio::test(start_paused = true)]
    async fn pw34_liveness_fails_after_failure_threshold_probes_then_holds_until_a_new_instance() {
        let probe = exec(
            "alive",
            json!({"failureThreshold": 3, "terminationGracePeriodSeconds": 5}),
        );
        let mut f = fixture(pod(json!({"livenessProbe": probe})), always(1)).await;
        f.run_until(5).await;
        assert_eq!(
            f.updates(),
            [(ProbeKind::Liveness, ProbeResult::Success)],
            "liveness starts out passing"
        );
        assert!(f.kills().is_empty());
        f.run_until(25).await;
        assert_eq!(since_start(f.runtime.calls_of("alive")), [0, 10, 20]);
        assert_eq!(f.updates(), [(ProbeKind::Liveness, ProbeResult::Failure)]);
        assert_eq!(
            f.kills(),
            [ProbeKill {
                container: "c".into(),
                kind: ProbeKind::Liveness,
                message: "Container c failed liveness probe, will be restarted".into(),
                grace_period: Duration::from_secs(5),
            }]
        );
        let unhealthy: Vec<String> = f
            .events
            .events()
            .into_iter()
            .filter(|e| e.reason == "Unhealthy")
            .map(|e| e.message)
            .collect();
        assert_eq!(unhealthy, ["Liveness probe failed: alive: failed"; 3]);
        // On hold: the failed instance is not probed again.
        f.run_until(45).await;
        assert_eq!(since_start(f.runtime.calls_of("alive")), [0, 10, 20]);
        // The restarted instance is probed from the next tick, passing again at first.
        f.runtime.start("c-2");
        assert!(f.kills().is_empty(), "the new instance did not fail");
        f.run_until(55).await;
        assert_eq!(since_start(f.runtime.calls_of("alive")), [0, 10, 20, 50]);
        assert_eq!(f.updates(), [(ProbeKind::Liveness, ProbeResult::Success)]);
    }

    #[tokio::test(start_paused = true)]
    async fn pw32_startup_holds_liveness_and_readiness_back_and_readiness_runs_once_it_passes() {
        // The startup file appears 32 s after the start.
        let script: Script = Box::new(|command, at| {
            Ok(match command {
                "startup" if at < Duration::from_secs(3600 + 32) => 1,
                _ => 0,
            })
        });
        let mut f = fixture(
            pod(json!({
                "startupProbe": exec("startup", json!({"periodSeconds": 5, "failureThreshold": 100})),
                "readinessProbe": exec("ready", json!({"periodSeconds": 30})),
                "livenessProbe": exec("alive", json!({"periodSeconds": 10})),
            })),
            script,
        )
        .await;
        f.run_until(33).await;
        assert_eq!(
            since_start(f.runtime.calls_of("startup")),
            [0, 5, 10, 15, 20, 25, 30]
        );
        assert!(f.runtime.calls_of("alive").is_empty());
        assert!(f.runtime.calls_of("ready").is_empty());
        assert_eq!(
            f.states(),
            [ContainerProbeStatus {
                name: "c".into(),
                started: false,
                ready: false
            }]
        );
        f.run_until(36).await;
        assert_eq!(
            since_start(f.runtime.calls_of("startup")),
            [0, 5, 10, 15, 20, 25, 30, 35]
        );
        assert!(
            f.updates()
                .contains(&(ProbeKind::Startup, ProbeResult::Success))
        );
        // The status of a started container runs its readiness probe at once, not at the
        // readiness worker's next tick (60 s).
        assert!(!f.states()[0].ready);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(since_start(f.runtime.calls_of("ready")), [36]);
        assert!(f.states()[0].ready && f.states()[0].started);
        f.run_until(41).await;
        assert_eq!(since_start(f.runtime.calls_of("alive")), [40]);
        // The startup probe stops probing a started container.
        assert_eq!(since_start(f.runtime.calls_of("startup")).len(), 8);
    }

    #[tokio::test(start_paused = true)]
    async fn pw31_a_prober_that_just_started_spreads_first_probes_over_a_period() {
        let uid = PodUid::new("u1").unwrap_or_else(|e| panic!("{e}"));
        let runtime = FakeRuntime::new(&uid, always(0));
        let probes = ProbeManager::new(
            ProbeConfig::new("127.0.0.1"),
            runtime.clone(),
            Arc::new(RecordingEvents::new()),
            TaskTracker::new(),
            CancellationToken::new(),
        );
        runtime.start("c-1");
        probes.add_pod(&pod(json!({"livenessProbe": exec("alive", json!({}))})));
        tokio::time::sleep(Duration::from_secs(35)).await;
        let calls = runtime.calls_of("alive");
        assert!(calls.len() >= 3, "{calls:?}");
        assert!(calls[0] < 10, "the first probe within a period: {calls:?}");
        for (i, at) in calls.iter().enumerate() {
            assert_eq!(
                *at,
                calls[0] + 10 * i as u64,
                "then every period: {calls:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn pw34_termination_stops_liveness_but_not_readiness() {
        let mut f = fixture(
            pod(json!({
                "readinessProbe": exec("ready", json!({"periodSeconds": 2})),
                "livenessProbe": exec("alive", json!({"periodSeconds": 2, "failureThreshold": 1})),
            })),
            Box::new(|command, at| {
                Ok(i32::from(
                    command == "alive" && at > Duration::from_secs(3600 + 5),
                ))
            }),
        )
        .await;
        f.run_until(3).await;
        f.probes.stop_liveness_and_startup(f.pod.uid());
        f.run_until(11).await;
        assert_eq!(since_start(f.runtime.calls_of("alive")), [0, 2]);
        assert_eq!(
            since_start(f.runtime.calls_of("ready")),
            [0, 2, 4, 6, 8, 10]
        );
        assert!(f.kills().is_empty(), "no liveness result left");
        assert!(
            !f.updates()
                .contains(&(ProbeKind::Liveness, ProbeResult::Failure))
        );
        f.probes.remove_pod(f.pod.uid());
        f.run_until(20).await;
        assert_eq!(since_start(f.runtime.calls_of("ready")).len(), 6);
        assert!(f.states()[0].ready, "no readiness probe left: ready");
    }

    #[tokio::test(start_paused = true)]
    async fn pw32_a_timed_out_exec_probe_fails_with_the_cris_text() {
        let f = fixture(
            pod(json!({"readinessProbe": exec("sleep 10", json!({"failureThreshold": 1}))})),
            Box::new(|command, _| {
                Err(ExecError::Timeout {
                    command: command.to_owned(),
                    timeout: Duration::from_secs(1),
                })
            }),
        )
        .await;
        f.run_until(1).await;
        let messages: Vec<(String, String)> = f.events.reasons_and_messages();
        assert_eq!(
            messages,
            [(
                "Unhealthy".to_owned(),
                "Readiness probe failed: command \"sleep 10\" timed out".to_owned()
            )]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn pw34_a_failed_startup_probe_kills_without_restart_under_restart_policy_never() {
        let mut pod = Pod::clone(&pod(json!({
            "startupProbe": exec("startup", json!({"failureThreshold": 2}))
        })));
        if let Some(spec) = pod.spec.as_mut() {
            spec.restart_policy = Some("Never".into());
        }
        let pod = AdmittedPod::new(pod).unwrap_or_else(|e| panic!("{e}"));
        let f = fixture(pod, always(1)).await;
        f.run_until(11).await;
        let kills: Vec<(ProbeKind, String, Duration)> = f
            .kills()
            .into_iter()
            .map(|k| (k.kind, k.message, k.grace_period))
            .collect();
        assert_eq!(
            kills,
            [(
                ProbeKind::Startup,
                "Container c failed startup probe".to_owned(),
                Duration::from_secs(30)
            )]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn pw64_a_sidecars_probes_run_and_its_failed_liveness_probe_kills_it_to_restart() {
        // Container `c` as a sidecar: moved to the init containers, `restartPolicy: Always`.
        let mut pod = Pod::clone(&pod(json!({
            "livenessProbe": exec("alive", json!({"failureThreshold": 1})),
            "readinessProbe": exec("ready", json!({})),
        })));
        if let Some(spec) = pod.spec.as_mut() {
            let mut sidecar = spec.containers.remove(0);
            sidecar.restart_policy = Some("Always".into());
            spec.init_containers = Some(vec![sidecar]);
            spec.containers = vec![Container {
                name: "app".into(),
                ..Container::default()
            }];
            spec.restart_policy = Some("Never".into());
        }
        let pod = AdmittedPod::new(pod).unwrap_or_else(|e| panic!("{e}"));
        let f = fixture(
            pod,
            Box::new(|command, _| Ok(i32::from(command == "alive"))),
        )
        .await;
        f.run_until(1).await;
        assert_eq!(
            f.states(),
            [ContainerProbeStatus {
                name: "c".into(),
                started: true,
                ready: true,
            }]
        );
        let statuses = f.runtime.statuses.lock().clone();
        assert_eq!(f.probes.started_sidecars(&f.pod, &statuses), ["c-1"]);
        let kills: Vec<String> = f.kills().into_iter().map(|k| k.message).collect();
        assert_eq!(kills, ["Init container c failed liveness probe"]);
    }
}
