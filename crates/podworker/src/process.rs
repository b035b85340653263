//! The process runtime (`nodelet_runtime::ProcessRuntime`) as a [`RuntimeHook`]: containers
//! run as local processes, each pod in a sandbox on the host's network.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, Secret};
use nodelet_core::runtime::{ContainerLaunch, ContainerStatus, PodNetwork, PodSandbox};
use nodelet_core::{AdmittedPod, PodUid};
use nodelet_runtime::ProcessRuntime;
use nodelet_runtime::handlers::{ExecError, ExecResult};

use crate::env::ContainerEnv;
use crate::error::RuntimeError;
use crate::probe::ProbeTarget;
use crate::runtime::RuntimeHook;
use crate::workers::TerminatingPod;

#[async_trait]
impl RuntimeHook for ProcessRuntime {
    async fn run_pod_sandbox(&self, pod: &AdmittedPod) -> Result<Option<PodSandbox>, RuntimeError> {
        // PW-41: no sandbox, nothing started, for a pod naming a RuntimeClass.
        if let Some(message) = crate::admission::runtime_class_refusal(pod) {
            return Err(RuntimeError::Sandbox { message });
        }
        // PW-58: the pod's IPC namespace and its sysctls, before any container.
        self.prepare_sandbox(pod)
            .map_err(|e| RuntimeError::Sandbox {
                message: e.to_string(),
            })?;
        Ok(Some(PodSandbox {
            network: PodNetwork::Host,
        }))
    }

    async fn create_container(
        &self,
        pod: &AdmittedPod,
        container: &Container,
        env: &ContainerEnv,
        launch: &ContainerLaunch,
        _pull_secrets: &[Arc<Secret>],
    ) -> Result<(), RuntimeError> {
        let vars: Vec<(String, Vec<u8>)> = env
            .vars
            .iter()
            .map(|v| (v.name.clone(), v.value.clone()))
            .collect();
        self.start_container(pod, container, &vars, launch)
            .await
            .map_err(|error| RuntimeError::NotStarted {
                container: container.name.clone(),
                error,
            })
    }

    fn statuses(&self, uid: &PodUid) -> Vec<ContainerStatus> {
        ProcessRuntime::statuses(self, uid)
    }

    fn restart_for_new_env(&self, uid: &PodUid, container: &str, container_id: &str) -> bool {
        ProcessRuntime::restart_for_new_env(self, uid, container, container_id)
    }

    async fn kill_pod(
        &self,
        uid: &PodUid,
        grace_period: Duration,
    ) -> Result<Vec<String>, RuntimeError> {
        Ok(ProcessRuntime::kill_pod(self, uid, grace_period).await?)
    }

    async fn exec_sync(
        &self,
        uid: &PodUid,
        container: &str,
        command: &[String],
        timeout: Option<Duration>,
    ) -> Result<ExecResult, RuntimeError> {
        Ok(ProcessRuntime::exec_sync(self, uid, container, command, timeout).await?)
    }

    async fn stop_container(
        &self,
        uid: &PodUid,
        container: &str,
        grace_period: Duration,
    ) -> Result<bool, RuntimeError> {
        Ok(ProcessRuntime::stop_container(self, uid, container, grace_period).await?)
    }

    /// A pod known only on disk was deleted while the agent was down: its logs go too.
    async fn remove_pod(&self, pod: TerminatingPod<'_>) -> Result<(), RuntimeError> {
        let deleted = pod
            .object()
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some());
        Ok(ProcessRuntime::remove_pod(self, pod.uid(), deleted).await?)
    }
}

/// The process runtime is what the prober probes: its containers' states, and commands run in
/// them by `container-exec`.
#[async_trait]
impl ProbeTarget for ProcessRuntime {
    fn statuses(&self, uid: &PodUid) -> Vec<ContainerStatus> {
        ProcessRuntime::statuses(self, uid)
    }

    async fn exec_sync(
        &self,
        uid: &PodUid,
        container: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecResult, ExecError> {
        ProcessRuntime::exec_sync(self, uid, container, command, Some(timeout)).await
    }
}
