//! The kubelet's side of the runtime seam: what a pod sync does to the pod's containers
//! ([`Planner`]: the kubelet's `computePodActions`, `walk.rs`) and the crash back-off kept per
//! container (`backoff.rs`), over the typed states the runtime reports. The runtime only
//! starts, stops and reports; the pod worker decides.

mod actions;
mod backoff;
mod walk;

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use nodelet_core::backoff::Schedule;
use nodelet_core::runtime::ContainerStatus;
use nodelet_core::{AdmittedPod, PodUid};
use parking_lot::Mutex;
use tokio::time::Instant;

pub(crate) use actions::PodActions;

use backoff::PodBackoff;

/// Plans each sync of a pod and keeps, per pod, its containers' crash back-offs and the
/// restarts asked for (PW-70). Its state of a pod goes with [`forget`](Self::forget).
#[derive(Debug)]
pub(crate) struct Planner {
    schedule: Schedule,
    pods: Mutex<HashMap<PodUid, PodState>>,
}

/// The planner's state of one pod.
#[derive(Debug, Default)]
struct PodState {
    backoff: PodBackoff,
    /// When the earliest back-off of the last plan ends.
    wake: Option<Instant>,
}

/// What a sync knows besides the pod when it plans.
pub(crate) struct PlanInput<'a> {
    /// The runtime's states of the pod's containers.
    pub(crate) statuses: &'a [ContainerStatus],
    /// The container IDs of the sidecar instances that started (PW-60).
    pub(crate) started: &'a [String],
    /// Whether the pod has a sandbox.
    pub(crate) sandbox: bool,
}

impl Planner {
    /// A planner whose crash back-off is `schedule`.
    pub(crate) fn new(schedule: Schedule) -> Self {
        Self {
            schedule,
            pods: Mutex::default(),
        }
    }

    /// What to do now with `pod`'s containers (the walk of `walk.rs`). When a container waits
    /// for its back-off, [`next_sync`](Self::next_sync) says when it ends.
    pub(crate) fn plan(&self, pod: &AdmittedPod, input: &PlanInput<'_>) -> PodActions {
        let Some(spec) = pod.spec.as_ref() else {
            return PodActions::default();
        };
        let message = |c: &k8s_openapi::api::core::v1::Container, delay: Duration| {
            format!(
                "back-off {} restarting failed container={} pod={}",
                nodelet_core::go::format(delay),
                c.name,
                nodelet_runtime::format_pod(pod)
            )
        };
        let walk = walk::Walk {
            policy: spec.restart_policy.as_deref().unwrap_or("Always"),
            statuses: input.statuses,
            now: SystemTime::now(),
            schedule: self.schedule,
            started: input.started,
            sandbox: input.sandbox,
            message: &message,
        };
        let mut pods = self.pods.lock();
        let state = pods.entry(pod.uid().clone()).or_default();
        let (actions, wake) = walk.plan(spec, &mut state.backoff);
        state.wake = wake.map(|d| Instant::now() + d);
        actions
    }

    /// When the earliest back-off of pod `uid`'s last plan ends: its next sync is due then.
    pub(crate) fn next_sync(&self, uid: &PodUid) -> Option<Instant> {
        self.pods.lock().get(uid).and_then(|p| p.wake)
    }

    /// Asks for the running `container` of pod `uid` to be stopped and started again at the
    /// pod's next sync, for a reason that is not a crash (PW-70); `message` goes into its
    /// `Killing` event. A container that does not run then is left alone.
    pub(crate) fn request_restart(&self, uid: &PodUid, container: &str, message: String) {
        self.pods
            .lock()
            .entry(uid.clone())
            .or_default()
            .backoff
            .request_restart(container, message);
    }

    /// `statuses` of pod `uid` as the kubelet reports them: a container the last plan held
    /// back waits with `CrashLoopBackOff`.
    pub(crate) fn show_waiting(&self, uid: &PodUid, statuses: &mut [ContainerStatus]) {
        if let Some(pod) = self.pods.lock().get(uid) {
            pod.backoff.show_waiting(statuses);
        }
    }

    /// Forgets pod `uid` (it was removed).
    pub(crate) fn forget(&self, uid: &PodUid) {
        self.pods.lock().remove(uid);
    }
}
