//! The prober's vocabulary: probe kinds and results, a probe's settings with the API's
//! defaults ([`ProbeSpec`]), what the prober tells the rest of the agent ([`ProbeUpdate`],
//! [`ContainerProbeStatus`], [`ProbeKill`]) and the seam to the runtime ([`ProbeTarget`]).

use std::fmt;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, Probe};
use nodelet_core::PodUid;
use nodelet_core::runtime::ContainerStatus;
use nodelet_runtime::handlers::{ExecError, ExecResult};
use tokio::time::Instant;

/// Which probe (PW-30).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeKind {
    /// `livenessProbe`: failing past its threshold, the container is killed and restarted.
    Liveness,
    /// `readinessProbe`: the container's `ready`, and with it the pod's `Ready`.
    Readiness,
    /// `startupProbe`: the container's `started`; holds the other two back until it succeeds.
    Startup,
}

impl ProbeKind {
    /// The kubelet's spelling in events (`Liveness probe failed: …`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Liveness => "Liveness",
            Self::Readiness => "Readiness",
            Self::Startup => "Startup",
        }
    }

    /// The container's probe of this kind, if it has one.
    pub fn of(self, container: &Container) -> Option<&Probe> {
        match self {
            Self::Liveness => container.liveness_probe.as_ref(),
            Self::Readiness => container.readiness_probe.as_ref(),
            Self::Startup => container.startup_probe.as_ref(),
        }
    }

    /// What a container's result is before its first probe counts (PW-31): readiness fails,
    /// liveness succeeds, startup is unknown.
    pub(crate) fn initial_result(self) -> ProbeResult {
        match self {
            Self::Readiness => ProbeResult::Failure,
            Self::Liveness => ProbeResult::Success,
            Self::Startup => ProbeResult::Unknown,
        }
    }

    /// Every kind, in the order the kubelet starts their workers.
    pub(crate) const ALL: [ProbeKind; 3] = [Self::Startup, Self::Readiness, Self::Liveness];
}

impl fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The standing result of one probe of one container instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    /// Not known yet (a startup probe before its threshold).
    Unknown,
    /// Passed, `successThreshold` times in a row.
    Success,
    /// Failed, `failureThreshold` times in a row (or the container is not running).
    Failure,
}

/// What one check said (Go's `probe.Result` and its output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Success,
    /// Passed, with something to say (a redirect not followed).
    Warning(String),
    Failure(String),
}

/// A probe result changed (the kubelet's results manager update): the pod is synced again and
/// its status published with the new readiness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeUpdate {
    /// The pod.
    pub pod_uid: PodUid,
    /// The container.
    pub container: String,
    /// The probe.
    pub kind: ProbeKind,
    /// The new result.
    pub result: ProbeResult,
}

impl ProbeUpdate {
    /// Whether the pod should be synced for it (the kubelet syncs on every readiness and
    /// startup change, and on liveness failures).
    pub fn needs_sync(&self) -> bool {
        self.kind != ProbeKind::Liveness || self.result == ProbeResult::Failure
    }
}

/// `started` and `ready` of one regular container as the probes make them (PW-33).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerProbeStatus {
    /// The container.
    pub name: String,
    /// Running, and its startup probe succeeded (or it has none).
    pub started: bool,
    /// Started, and its readiness probe succeeded (or it has none).
    pub ready: bool,
}

/// A running container a liveness or startup probe failed: it is to be killed (PW-34).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeKill {
    /// The container.
    pub container: String,
    /// The probe that failed.
    pub kind: ProbeKind,
    /// The `Killing` event's message: `Container <c> failed liveness probe, will be
    /// restarted` (without the last part under `restartPolicy: Never`).
    pub message: String,
    /// SIGKILL after this long (the probe's `terminationGracePeriodSeconds`, else the pod's).
    pub grace_period: Duration,
}

/// What the prober needs of the container runtime: the containers' states and a command run
/// in a running container (the CRI's `ExecSync`). `nodelet_runtime::ProcessRuntime` is the
/// production target.
#[async_trait]
pub trait ProbeTarget: Send + Sync + 'static {
    /// The runtime's statuses of pod `uid`'s containers (never-started ones absent).
    fn statuses(&self, uid: &PodUid) -> Vec<ContainerStatus>;

    /// Runs `command` in the running instance of `container`, at most `timeout`.
    ///
    /// # Errors
    /// [`ExecError`]; [`ExecError::Timeout`] when it outlived `timeout`.
    async fn exec_sync(
        &self,
        uid: &PodUid,
        container: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecResult, ExecError>;
}

/// How a probe checks (`exec`, `httpGet`, `tcpSocket`, `grpc`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Handler {
    Exec(Vec<String>),
    HttpGet(k8s_openapi::api::core::v1::HTTPGetAction),
    TcpSocket(k8s_openapi::api::core::v1::TCPSocketAction),
    Grpc(k8s_openapi::api::core::v1::GRPCAction),
    /// None set (the API refuses it; the kubelet answers `missing probe handler`).
    Missing,
}

/// A probe's settings, with the API server's defaults for the fields left out (PW-31):
/// period 10 s, timeout 1 s, success threshold 1, failure threshold 3, no initial delay.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProbeSpec {
    pub(crate) handler: Handler,
    pub(crate) initial_delay_seconds: u64,
    pub(crate) period: Duration,
    pub(crate) timeout: Duration,
    pub(crate) success_threshold: u32,
    pub(crate) failure_threshold: u32,
    /// `terminationGracePeriodSeconds` of the probe.
    pub(crate) termination_grace_period: Option<Duration>,
}

impl ProbeSpec {
    pub(crate) fn new(probe: &Probe) -> Self {
        let positive = |v: Option<i32>, default: u32| {
            v.and_then(|v| u32::try_from(v).ok())
                .filter(|v| *v > 0)
                .unwrap_or(default)
        };
        let handler = if let Some(exec) = &probe.exec {
            Handler::Exec(exec.command.clone().unwrap_or_default())
        } else if let Some(get) = &probe.http_get {
            Handler::HttpGet(get.clone())
        } else if let Some(tcp) = &probe.tcp_socket {
            Handler::TcpSocket(tcp.clone())
        } else if let Some(grpc) = &probe.grpc {
            Handler::Grpc(grpc.clone())
        } else {
            Handler::Missing
        };
        Self {
            handler,
            initial_delay_seconds: probe
                .initial_delay_seconds
                .and_then(|v| u64::try_from(v).ok())
                .unwrap_or(0),
            period: Duration::from_secs(positive(probe.period_seconds, 10).into()),
            timeout: Duration::from_secs(positive(probe.timeout_seconds, 1).into()),
            success_threshold: positive(probe.success_threshold, 1),
            failure_threshold: positive(probe.failure_threshold, 3),
            termination_grace_period: probe
                .termination_grace_period_seconds
                .and_then(|v| u64::try_from(v).ok())
                .map(Duration::from_secs),
        }
    }
}

/// Wall-clock time that advances with tokio's clock: `SystemTime` when it was made plus the
/// tokio time since. Containers' start times are wall-clock times; measuring them against
/// this clock keeps the initial delay testable under paused time (it is the real time
/// otherwise, give or take a step of the system clock).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    wall: SystemTime,
    start: Instant,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Self {
            wall: SystemTime::now(),
            start: Instant::now(),
        }
    }

    /// Now, as wall-clock time.
    pub(crate) fn now(&self) -> SystemTime {
        self.wall + self.start.elapsed()
    }

    /// How long ago the clock (the prober) was made.
    pub(crate) fn since_start(&self) -> Duration {
        self.start.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_without_settings_gets_the_api_defaults() {
        let spec = ProbeSpec::new(&Probe::default());
        assert_eq!(spec.handler, Handler::Missing);
        assert_eq!(spec.initial_delay_seconds, 0);
        assert_eq!(spec.period, Duration::from_secs(10));
        assert_eq!(spec.timeout, Duration::from_secs(1));
        assert_eq!((spec.success_threshold, spec.failure_threshold), (1, 3));
        assert_eq!(spec.termination_grace_period, None);
        let set = ProbeSpec::new(&Probe {
            initial_delay_seconds: Some(15),
            period_seconds: Some(2),
            timeout_seconds: Some(5),
            success_threshold: Some(2),
            failure_threshold: Some(1),
            termination_grace_period_seconds: Some(5),
            ..Probe::default()
        });
        assert_eq!(set.initial_delay_seconds, 15);
        assert_eq!(set.period, Duration::from_secs(2));
        assert_eq!(set.timeout, Duration::from_secs(5));
        assert_eq!((set.success_threshold, set.failure_threshold), (2, 1));
        assert_eq!(set.termination_grace_period, Some(Duration::from_secs(5)));
    }

    #[test]
    fn only_liveness_successes_need_no_sync() {
        let update = |kind, result| ProbeUpdate {
            pod_uid: PodUid::new("u").unwrap_or_else(|e| panic!("{e}")),
            container: "c".into(),
            kind,
            result,
        };
        assert!(!update(ProbeKind::Liveness, ProbeResult::Success).needs_sync());
        assert!(update(ProbeKind::Liveness, ProbeResult::Failure).needs_sync());
        assert!(update(ProbeKind::Readiness, ProbeResult::Success).needs_sync());
        assert!(update(ProbeKind::Startup, ProbeResult::Failure).needs_sync());
    }
}
