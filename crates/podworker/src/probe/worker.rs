//! [`Worker`]: one probe of one container, probed every `periodSeconds` until its pod ends
//! (the kubelet's probe worker, PW-31).
//!
//! ```text
//! start ─► (prober started less than a period ago: sleep a random part of the period)
//!   loop: do_probe ─► wait for the next tick (every period) or a trigger ─► again
//!   stop (its token) ─► results of its container forgotten, worker unregistered
//! do_probe:
//!   pod terminal (Succeeded, Failed) ──────────────────────────────► end
//!   container unknown / never started ─────────────────────────────► wait
//!   new container instance ─► result = the kind's initial one, probing resumes
//!   on hold (liveness/startup failed this instance) ───────────────► wait
//!   not running ─► result Failure; ended under restartPolicy Never (not a sidecar) ─► end
//!   pod being deleted and liveness/startup ─► result Success ───────► end
//!   running < initialDelaySeconds ─────────────────────────────────► wait
//!   startup probe of a started container / other probe of one not started ─► wait
//!   probe ─► same result `threshold` times in a row? ─► set it; liveness/startup Failure ─► on hold
//! ```

use std::sync::{Arc, Weak};
use std::time::Duration;

use k8s_openapi::api::core::v1::Container;
use nodelet_core::AdmittedPod;
use nodelet_core::runtime::{ContainerState, is_sidecar};
use tokio::sync::Notify;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::prober;
use super::shared::{Key, Shared};
use super::types::{ProbeKind, ProbeResult, ProbeSpec};

/// One probe worker; [`run`](Self::run) is its task.
pub(crate) struct Worker {
    shared: Weak<Shared>,
    key: Key,
    pod: AdmittedPod,
    container: Container,
    spec: ProbeSpec,
    stop: CancellationToken,
    trigger: Arc<Notify>,
    serial: u64,
    /// The instance probed last (empty before the first).
    container_id: String,
    /// The last probe's result and how many times in a row it came.
    last_result: Option<ProbeResult>,
    result_run: u32,
    /// Liveness or startup failed this instance: nothing to probe until the next one.
    on_hold: bool,
}

impl Worker {
    /// A worker for `kind` of `container` of `pod`, registered in `shared`; `None` when the
    /// container has no such probe or a worker for it runs already.
    pub(crate) fn new(
        shared: &Arc<Shared>,
        pod: &AdmittedPod,
        container: &Container,
        kind: ProbeKind,
    ) -> Option<Self> {
        let probe = kind.of(container)?;
        let key = Key {
            pod_uid: pod.uid().clone(),
            container: container.name.clone(),
            kind,
        };
        let (stop, trigger, serial) = shared.add_worker(&key)?;
        Some(Self {
            shared: Arc::downgrade(shared),
            key,
            pod: pod.clone(),
            container: container.clone(),
            spec: ProbeSpec::new(probe),
            stop,
            trigger,
            serial,
            container_id: String::new(),
            last_result: None,
            result_run: 0,
            on_hold: false,
        })
    }

    /// Probes until the pod ends or the worker is stopped, then forgets what it set.
    pub(crate) async fn run(mut self) {
        let stop = self.stop.clone();
        tokio::select! {
            biased;
            () = stop.cancelled() => {}
            () = self.probe_loop() => {}
        }
        if let Some(shared) = self.shared.upgrade() {
            if !self.container_id.is_empty() {
                shared.remove_result(&self.key, &self.container_id);
            }
            shared.remove_worker(&self.key, self.serial);
        }
    }

    async fn probe_loop(&mut self) {
        let period = self.spec.period;
        // A prober that just started (the agent restarted) would probe every container at
        // once: each worker first waits a random part of its period.
        let just_started = self
            .shared
            .upgrade()
            .is_some_and(|s| period > s.clock.since_start());
        if just_started {
            tokio::time::sleep(period.mul_f64(rand::random::<f64>())).await;
        }
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
        while self.do_probe().await {
            tokio::select! {
                _ = ticker.tick() => {}
                () = self.trigger.notified() => {}
            }
        }
    }

    /// One round of the diagram in the module docs; whether to go on.
    async fn do_probe(&mut self) -> bool {
        let Some(shared) = self.shared.upgrade() else {
            return false;
        };
        let kind = self.key.kind;
        let statuses = shared.target.statuses(self.pod.uid());
        if crate::phase::pod_phase(&self.pod, &statuses).is_terminal() {
            return false;
        }
        let Some(status) = statuses
            .into_iter()
            .find(|s| s.name == self.container.name && !s.container_id.is_empty())
        else {
            return true;
        };
        if self.container_id != status.container_id {
            if !self.container_id.is_empty() {
                shared.remove_result(&self.key, &self.container_id);
            }
            self.container_id = status.container_id.clone();
            shared.set_result(&self.key, &self.container_id, kind.initial_result());
            self.on_hold = false;
        }
        if self.on_hold {
            return true;
        }
        let ContainerState::Running { started_at } = status.state else {
            shared.set_result(&self.key, &self.container_id, ProbeResult::Failure);
            let policy = self
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.restart_policy.as_deref());
            let ended = matches!(status.state, ContainerState::Terminated(_));
            // A sidecar is restarted whatever the pod's policy says (PW-61).
            let restarts = policy != Some("Never") || is_sidecar(&self.container);
            return !ended || restarts;
        };
        if self.pod.metadata.deletion_timestamp.is_some()
            && matches!(kind, ProbeKind::Liveness | ProbeKind::Startup)
        {
            // A quiet end: nothing kills a container of a pod that is going away.
            shared.set_result(&self.key, &self.container_id, ProbeResult::Success);
            return false;
        }
        let running_for = shared
            .clock
            .now()
            .duration_since(started_at)
            .unwrap_or(Duration::ZERO);
        if running_for.as_secs() < self.spec.initial_delay_seconds {
            return true;
        }
        let started = shared.is_started(self.pod.uid(), &self.container.name, &self.container_id);
        if started == (kind == ProbeKind::Startup) {
            // The startup probe is done once the container started; the others wait for it.
            return true;
        }
        let Some(result) =
            prober::probe(&shared, kind, &self.pod, &self.container, &self.spec).await
        else {
            return true;
        };
        if self.last_result == Some(result) {
            self.result_run += 1;
        } else {
            self.last_result = Some(result);
            self.result_run = 1;
        }
        let threshold = match result {
            ProbeResult::Failure => self.spec.failure_threshold,
            ProbeResult::Success => self.spec.success_threshold,
            ProbeResult::Unknown => 1,
        };
        if self.result_run < threshold {
            return true;
        }
        shared.set_result(&self.key, &self.container_id, result);
        if result == ProbeResult::Failure && kind != ProbeKind::Readiness {
            // The container will be killed: nothing more to probe until its next instance.
            self.on_hold = true;
            self.result_run = 0;
        }
        true
    }
}
