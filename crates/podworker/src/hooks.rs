//! Lifecycle hooks (PW-20 … PW-23): the kubelet's `postStart` right after a container started
//! and `preStop` before it is stopped, each an `exec`, `httpGet` or `sleep` handler, on the
//! kubelet's side of the runtime seam (its `kuberuntime` runs them around the CRI's
//! `StartContainer` and `StopContainer`).
//!
//! ```text
//! sync_pod: create_container ─► Started ─► post_start (synchronous: the sync, and so the
//!     container's Running status, waits for it)
//!       └ failed ─► Warning FailedPostStartHook "PostStartHook failed"
//!                   ─► kill_container("FailedPostStartHook") ─► waiting PostStartHookError
//! sync_terminating_pod: stop_running ─► for each running container, side by side:
//!     kill_container: Normal Killing ─► pre_stop (within the grace period; failed ─► Warning
//!     FailedPreStopHook "PreStopHook failed") ─► a sidecar waits for its turn (PW-62,
//!     `TerminationOrder`) ─► stop_container(grace left, at least 2 s)
//! ```
//!
//! A handler's own text (its output, its error) goes only to the log: the kubelet keeps it
//! out of events, which anyone who can read the pod can read.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler};
use nodelet_core::runtime::is_sidecar;
use nodelet_core::{AdmittedPod, EventType};
use nodelet_runtime::format_pod;
use nodelet_runtime::handlers::HttpGet;
use tokio::task::JoinSet;
use tracing::{debug, info};

use crate::error::RuntimeError;
use crate::runtime::RuntimeHook;
use crate::seams::EventSink;
use crate::termination_order::TerminationOrder;

/// The waiting reason of a container whose `postStart` hook failed (the kubelet's
/// `ErrPostStartHook`).
pub const POST_START_HOOK_ERROR: &str = "PostStartHookError";

/// Event reasons of lifecycle hooks, with the kubelet's spelling.
pub mod reasons {
    /// A `postStart` hook failed: `PostStartHook failed`.
    pub const FAILED_POST_START_HOOK: &str = "FailedPostStartHook";
    /// A `preStop` hook failed: `PreStopHook failed`.
    pub const FAILED_PRE_STOP_HOOK: &str = "FailedPreStopHook";
    /// An `https` hook was answered in plain HTTP and the retry over `http` succeeded.
    pub const LIFECYCLE_HTTP_FALLBACK: &str = "LifecycleHTTPFallback";
}

/// The kubelet's least grace period of a container being stopped.
const MIN_GRACE: Duration = Duration::from_secs(2);

/// Runs a pod's lifecycle hooks through the runtime (exec) or the network (httpGet).
#[derive(Clone)]
pub(crate) struct Lifecycle {
    runtime: Arc<dyn RuntimeHook>,
    events: Arc<dyn EventSink>,
    /// The pod's IP (the node's under a runtime of processes): an `httpGet` without a host
    /// goes there.
    pod_ip: Option<String>,
}

impl Lifecycle {
    pub(crate) fn new(
        runtime: Arc<dyn RuntimeHook>,
        events: Arc<dyn EventSink>,
        pod_ip: Option<String>,
    ) -> Self {
        Self {
            runtime,
            events,
            pod_ip,
        }
    }

    /// PW-20: runs `container`'s `postStart` hook, if any, right after it started. When the
    /// hook fails: the Warning event, then the container is killed as the kubelet kills it
    /// (its `preStop` included); the error is the hook's message, the container's waiting
    /// message.
    ///
    /// # Errors
    /// The hook's failure text (for the container's status and the sync's error).
    pub(crate) async fn post_start(
        &self,
        pod: &AdmittedPod,
        container: &Container,
    ) -> Result<(), String> {
        let Some(handler) = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.post_start.as_ref())
        else {
            return Ok(());
        };
        let Err(message) = self.run(pod, container, handler).await else {
            return Ok(());
        };
        info!(container = %container.name, %message, "postStart hook failed");
        self.events.event(
            pod,
            EventType::Warning,
            reasons::FAILED_POST_START_HOOK,
            "PostStartHook failed".to_owned(),
        );
        if let Err(error) = self
            .kill_container(pod, container, "FailedPostStartHook", kill_grace(pod))
            .await
        {
            info!(container = %container.name, %error, "container not killed after its postStart hook failed");
        }
        Err(message)
    }

    /// PW-21, PW-22: stops every running container of `pod` as the kubelet's `killPod`,
    /// side by side, each with `grace_period` ([`Self::kill_container`]); a pod with sidecars
    /// stops them after its app containers, in reverse order (PW-62).
    ///
    /// # Errors
    /// The first container that would not stop.
    pub(crate) async fn stop_running(
        &self,
        pod: &AdmittedPod,
        grace_period: Duration,
    ) -> Result<(), RuntimeError> {
        let running: Vec<Container> = self
            .runtime
            .statuses(pod.uid())
            .into_iter()
            // A container without an instance ID has no process to stop (the config-only
            // runtime's).
            .filter(|s| s.is_running() && !s.container_id.is_empty())
            .filter_map(|s| container_spec(pod, &s.name).cloned())
            .collect();
        // PW-62: with sidecars, the app containers stop first, then the sidecars in reverse
        // order.
        let has_sidecars = pod
            .spec
            .iter()
            .flat_map(|s| s.init_containers.iter().flatten())
            .any(is_sidecar);
        let order = has_sidecars.then(|| {
            let names: Vec<String> = running.iter().map(|c| c.name.clone()).collect();
            Arc::new(TerminationOrder::new(pod, &names))
        });
        let mut kills = JoinSet::new();
        for container in running {
            let (this, pod, order) = (self.clone(), pod.clone(), order.clone());
            kills.spawn(async move {
                this.kill_in_order(&pod, &container, "", grace_period, order.as_deref())
                    .await
            });
        }
        let mut first_error = None;
        while let Some(done) = kills.join_next().await {
            let result = done.unwrap_or_else(|source| {
                Err(RuntimeError::Task {
                    what: "container stop",
                    source,
                })
            });
            if let Err(e) = result {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The kubelet's `killContainer`: a Normal `Killing` event (`message`, else `Stopping
    /// container <name>`), the `preStop` hook when there is one and time for it (within
    /// `grace_period`; its whole seconds are taken off the grace period), then SIGTERM and,
    /// after what is left of the grace period (at least 2 s), SIGKILL.
    ///
    /// # Errors
    /// [`RuntimeError`] when the container would not stop.
    pub(crate) async fn kill_container(
        &self,
        pod: &AdmittedPod,
        container: &Container,
        message: &str,
        grace_period: Duration,
    ) -> Result<bool, RuntimeError> {
        self.kill_in_order(pod, container, message, grace_period, None)
            .await
    }

    /// [`kill_container`](Self::kill_container) within a pod's [`TerminationOrder`] (PW-62):
    /// after the `preStop` hook, the container waits for its turn (within what is left of
    /// the grace period, whose waited whole seconds come off it), and its stop lets the
    /// containers waiting for it go on.
    async fn kill_in_order(
        &self,
        pod: &AdmittedPod,
        container: &Container,
        message: &str,
        grace_period: Duration,
        order: Option<&TerminationOrder>,
    ) -> Result<bool, RuntimeError> {
        let message = if message.is_empty() {
            format!("Stopping container {}", container.name)
        } else {
            message.to_owned()
        };
        self.events.event(
            pod,
            EventType::Normal,
            crate::seams::reasons::KILLING,
            message,
        );
        let mut grace = Duration::from_secs(grace_period.as_secs());
        let pre_stop = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref());
        if let Some(handler) = pre_stop.filter(|_| !grace.is_zero()) {
            let started = tokio::time::Instant::now();
            match tokio::time::timeout(grace, self.run(pod, container, handler)).await {
                Ok(Ok(())) => debug!(container = %container.name, "preStop hook completed"),
                Ok(Err(message)) => {
                    info!(container = %container.name, %message, "preStop hook failed");
                    self.events.event(
                        pod,
                        EventType::Warning,
                        reasons::FAILED_PRE_STOP_HOOK,
                        "PreStopHook failed".to_owned(),
                    );
                }
                Err(_) => {
                    info!(container = %container.name, ?grace, "preStop hook not completed in grace period");
                }
            }
            grace = grace.saturating_sub(Duration::from_secs(started.elapsed().as_secs()));
        }
        if let Some(order) = order {
            let waited = order.wait_for_turn(&container.name, grace).await;
            grace = grace.saturating_sub(Duration::from_secs(waited));
        }
        let stopped = self
            .runtime
            .stop_container(pod.uid(), &container.name, grace.max(MIN_GRACE))
            .await?;
        if let Some(order) = order {
            order.stopped(&container.name);
        }
        Ok(stopped)
    }

    /// The kubelet's handler runner: `Err` with its text when the handler failed.
    async fn run(
        &self,
        pod: &AdmittedPod,
        container: &Container,
        handler: &LifecycleHandler,
    ) -> Result<(), String> {
        let who = || {
            format!(
                "Container {:?} in Pod {:?}",
                container.name,
                format_pod(pod)
            )
        };
        if let Some(exec) = &handler.exec {
            let command = exec.command.clone().unwrap_or_default();
            let failure = match self
                .runtime
                .exec_sync(pod.uid(), &container.name, &command, None)
                .await
            {
                Ok(result) => result
                    .failure(&command)
                    .map(|error| (error, result.output())),
                Err(error) => Some((error.to_string(), Vec::new())),
            };
            return match failure {
                None => Ok(()),
                Some((error, output)) => Err(format!(
                    "Exec lifecycle hook ([{}]) for {} failed - error: {error}, message: {:?}",
                    command.join(" "),
                    who(),
                    String::from_utf8_lossy(&output)
                )),
            };
        }
        if let Some(action) = &handler.http_get {
            return self
                .http_get(pod, container, action)
                .await
                .map_err(|error| {
                    format!(
                        "HTTP lifecycle hook ({}) for {} failed - error: {error}",
                        action.path.as_deref().unwrap_or_default(),
                        who()
                    )
                });
        }
        if let Some(sleep) = &handler.sleep {
            let seconds = u64::try_from(sleep.seconds).unwrap_or(0);
            tokio::time::sleep(Duration::from_secs(seconds)).await;
            return Ok(());
        }
        Err("Cannot run handler: invalid handler".to_owned())
    }

    /// An `httpGet` hook: any response will do; an `https` one answered in plain HTTP is
    /// tried again over `http` (PW-23).
    async fn http_get(
        &self,
        pod: &AdmittedPod,
        container: &Container,
        action: &k8s_openapi::api::core::v1::HTTPGetAction,
    ) -> Result<(), String> {
        let pod_ip = match (&action.host, &self.pod_ip) {
            (Some(host), _) if !host.is_empty() => host.clone(),
            (_, Some(ip)) => ip.clone(),
            _ => return Err("failed to find networking container".to_owned()),
        };
        let request = HttpGet::from_action(action, container, &pod_ip, "lifecycle")
            .map_err(|e| e.to_string())?;
        match request.send(None).await {
            Ok(_) => Ok(()),
            Err(error) if error.is_http_response_to_https() => {
                let plain = request.over_http();
                plain.send(None).await.map_err(|_| error.to_string())?;
                self.events.event(
                    pod,
                    EventType::Warning,
                    reasons::LIFECYCLE_HTTP_FALLBACK,
                    format!(
                        "request to HTTPS lifecycle hook {} got HTTP response, retry with HTTP \
                         succeeded",
                        plain.authority()
                    ),
                );
                Ok(())
            }
            Err(error) => Err(error.to_string()),
        }
    }
}

/// The grace period the kubelet gives a container it kills on its own (a failed `postStart`):
/// the pod's deletion grace period, else its `terminationGracePeriodSeconds`, else 2 s.
pub(crate) fn kill_grace(pod: &AdmittedPod) -> Duration {
    let seconds = pod.metadata.deletion_grace_period_seconds.or_else(|| {
        pod.spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
    });
    seconds
        .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
        .unwrap_or(MIN_GRACE)
}

/// `name`'s spec among `pod`'s init and regular containers.
fn container_spec<'a>(pod: &'a AdmittedPod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .find(|c| c.name == name)
}
