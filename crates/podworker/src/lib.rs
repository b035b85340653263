//! The kubelet's pod workers and the config side of its pod sync, for Rust node agents
//! (spec rules PW-1 … PW-14).
//!
//! # Principal types
//!
//! * [`PodWorkers`]: one task per pod UID; coalesced updates; phases sync → terminating →
//!   terminated → finished; re-queue with jitter and back-off (PW-1 … PW-3). Generic over a
//!   [`PodSyncer`]: the synchronous [`pod_desired`](PodSyncer::pod_desired) hook and the
//!   three callbacks. [`PodWorkers::update_pod`] is the one owner of "this pod is desired"
//!   (the kubelet's pod manager and pod workers in one): the only entry for pods from the pod
//!   source, it calls `pod_desired` for a live pod before it returns. A [`PodUpdate`] targets
//!   a pod the API has, or a pod known only by its UID ([`UpdateTarget::OnDisk`]: its
//!   directory left by a previous run, its object gone), which is only terminated; the
//!   termination callbacks get a [`TerminatingPod`] (the UID, and the object when there is
//!   one).
//! * [`ConfigSyncer`]: the production [`PodSyncer`]. `pod_desired` registers the pod with the
//!   Secret and ConfigMap managers and adds it to the volumes (the only place either happens);
//!   SyncPod creates the pod directories, waits for volumes, reads image pull secrets, asks
//!   the [`RuntimeHook`] for the pod's sandbox ([`RuntimeHook::run_pod_sandbox`]), decides
//!   over the runtime's typed states which containers to start, stop or restart now and which
//!   wait for their crash back-off (`plan/`, the kubelet's `computePodActions` and its
//!   back-off kept per container, on this side of the runtime seam; a restart asked by
//!   [`ConfigSyncer::restart_container`] has none, PW-70), resolves each
//!   one's environment (and, in a sandbox, its mounts, `/etc/hosts` and
//!   expanded command line: [`make_mounts`]) and hands it over, then publishes the pod's API
//!   status, made by [`generate_pod_status`] (the kubelet's `generateAPIPodStatus`, for every
//!   runtime) from the runtime's typed container states, the probes' verdicts and the pod's
//!   phase ([`pod_phase`], the kubelet's `getPhase`);
//!   SyncTerminatedPod waits for unmount, then unregisters (PW-4 … PW-7, PW-12 … PW-14).
//!   In a sandbox, a container's `postStart` hook runs right after it
//!   started, and `preStop` before it is stopped, within the grace period (`hooks.rs`,
//!   PW-20 … PW-23: exec through [`RuntimeHook::exec_sync`], httpGet through
//!   `nodelet_runtime::handlers`, sleep).
//!   Termination of a pod without an object sends no event and no status.
//! * [`ProbeManager`]: the kubelet's prober (PW-30 … PW-35), for a runtime that runs
//!   processes ([`SyncerParts::probes`]): workers per startup, liveness and readiness probe,
//!   their results turned into the containers' `started` / `ready` ([`PodConfigStatus::probes`])
//!   and into kills of containers whose liveness or startup probe failed, before the runtime
//!   plans; a result change is a [`ProbeUpdate`], after which the agent calls
//!   [`ConfigSyncer::probe_result_changed`] and syncs the pod. Its seam to the runtime is
//!   [`ProbeTarget`].
//! * [`resolve_env`]: environment variables of one container (PW-8 … PW-11), usable alone.
//!   `fieldRef` / `resourceFieldRef` values come from `nodelet_core::downward`, the
//!   same code that renders downwardAPI volumes (one implementation, as in the kubelet); its
//!   errors surface as [`EnvError::DownwardApi`] with the kubelet's texts. `fileKeyRef` reads
//!   an env file in one of the pod's emptyDir volumes ([`EnvOptions::pod_volumes`]).
//! * Seams: [`Volumes`] (implemented here for `nodelet_volume_manager::VolumeManager`, whose
//!   typed error [`VolumeError::Failed`] carries to the `FailedMount` event), [`RuntimeHook`]
//!   (default [`EnvFileRuntime`], which writes `<root>/pods/<uid>/containers/<name>/env`),
//!   [`EventSink`], [`StatusSink`] (both in `nodelet-core`; the status sink gets a k8s-openapi
//!   `PodStatus`). `nodelet_runtime::ProcessRuntime` is the second
//!   [`RuntimeHook`] (containers as local processes; implemented here, `process.rs`). Pods
//!   cross every seam as `nodelet_core::AdmittedPod` (the agent's pod source validated the
//!   UID once), as a `nodelet_core::PodUid`, or, where a pod known only on disk may arrive
//!   ([`RuntimeHook::remove_pod`]), as a [`TerminatingPod`]; directories
//!   are spelled by `nodelet_core::PodDirs`. [`EventSink`] and [`NoEvents`] are re-exported
//!   from `nodelet_core::events`: an agent implements one event trait for both
//!   crates (events are typed `nodelet_core::EventType`). Fakes live behind the `test-util`
//!   feature.
//!
//! ```text
//! update_pod(PodUpdate) ─► live pod, worker new or Syncing (checked under the workers' lock):
//!                      ConfigSyncer::pod_desired ─► register (secrets, configmaps) ─► Volumes::add_pod
//!                  ─► worker[uid]: pending = newest pod, wake            (all before returning)
//!   Syncing:     ConfigSyncer::sync_pod ─► dirs ─► Volumes::wait_for_attach_and_mount (reprocess + wait)
//!                  ─► pull secrets ─► RuntimeHook::run_pod_sandbox ─► plan (statuses) ─► resolve_env (+ make_mounts)
//!                  ─► RuntimeHook::create_container (─► postStart) ─► generate_pod_status ─► StatusSink
//!                  (a terminal phase → SyncOutcome::Terminal)
//!                ok → again in [1, 1.5) × resync;  error → [1, 1.5) × back-off
//!   Kill / deletionTimestamp ─► cancel in-flight sync_pod
//!   Kill of a pod known only on disk ─► new worker, Terminating at once (no pod_desired)
//!   Terminating: per running container: Killing, preStop, RuntimeHook::stop_container
//!                ─► RuntimeHook::kill_pod ─► Volumes::remove_pod
//!   Terminated:  Volumes::wait_for_unmount ─► unregister ─► RuntimeHook::remove_pod ─► StatusSink::terminated
//!                (events and status only for a pod with an object)
//!   Finished:    updates ignored until sync_known_pods forgets the worker
//! ```
//!
//! # Invariants
//!
//! * A pod's callbacks never overlap, and run in phase order; a finished pod never syncs again.
//! * A live pod is registered with the managers and desired by the volumes before
//!   [`PodWorkers::update_pod`] returns, so before anything reads objects for it (PW-4, PW-13);
//!   every update registers and adds it again, so new references and the newest pod object are
//!   picked up (PW-14, VM-5). Syncs never register or add a pod.
//! * Once termination of a pod was requested, nothing registers or adds it again (the check
//!   and the hook run under the lock that moves the phase); it is unregistered only after
//!   its volumes are unmounted (PW-6, PW-14, VM-4).
//! * A container's environment is resolved once, when it is created; later syncs leave it
//!   alone (UP-3), also across agent restarts (the runtime reports what exists).
//! * A failed sync is logged once, in the worker's span; the syncer returns errors and
//!   publishes events, it does not log them.
//! * Values never reach logs or `Debug`: [`EnvValue`]'s `Debug` prints byte counts.
//!
//! # Differences from the kubelet
//!
//! * No service-link variables (`<SVC>_SERVICE_HOST`, ...): nodelet has no service lister, so
//!   the service variable set is empty and the "services have not yet been read" error cannot
//!   occur.
//! * Output order of variables is sorted by name (upstream: unspecified map order).
//! * `fieldRef` `status.hostIP(s)` and `status.podIP(s)` come from the pod's status (there is
//!   no sandbox and no node IP lookup).
//! * The `envFrom` name check is a switch ([`EnvFromNameCheck`]), default *current* (none).
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
//! use nodelet_object_manager::{ConfigMapManager, ManagerConfig, SecretManager, source::FakeSource};
//! use nodelet_podworker::{resolve_env, EnvOptions, EnvSources};
//!
//! let cms = FakeSource::<ConfigMap>::new();
//! cms.apply("default", serde_json::from_value(serde_json::json!({
//!     "metadata": {"name": "settings"}, "data": {"mode": "fast"}}))?);
//! let sources = EnvSources {
//!     configmaps: ConfigMapManager::with_sources(Arc::new(cms), None, ManagerConfig::default())?,
//!     secrets: SecretManager::with_sources(
//!         Arc::new(FakeSource::<Secret>::new()), None, ManagerConfig::default())?,
//!     services: None, // no service variables (the agent passes its `ServiceLister`)
//! };
//! let pod: Pod = serde_json::from_value(serde_json::json!({
//!     "metadata": {"namespace": "default", "name": "web", "uid": "u1"},
//!     "spec": {"enableServiceLinks": true, "containers": [{"name": "c",
//!         "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "APP_"}],
//!         "env": [{"name": "GREETING", "value": "mode=$(APP_mode)"}]}]},
//! }))?;
//! let pod = nodelet_core::AdmittedPod::new(pod)?; // the agent's pod source admits it once
//! sources.configmaps.register_pod(&pod); // the pod worker does this first (PW-13)
//! let container = &pod.spec.as_ref().map(|s| s.containers[0].clone()).unwrap_or_default();
//! let env = resolve_env(&pod, container, &sources, &EnvOptions::default()).await?;
//! assert_eq!(env.get("APP_mode"), Some(&b"fast"[..]));
//! assert_eq!(env.get("GREETING"), Some(&b"mode=fast"[..]));
//! # Ok(())
//! # }
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod admission;
mod deadline;
mod env;
mod env_context;
mod env_file;
mod ephemeral;
mod error;
mod expand;
pub mod follow;
mod hooks;
mod mounts;
mod phase;
mod plan;
mod probe;
mod process;
mod runtime;
mod seams;
mod status;
mod sync;
mod sysctls;
mod termination_order;
mod workers;

pub use admission::{
    NODE_OS, Rejection, admit, admit_ports, rejection_reasons, runtime_class_refusal,
};
pub use deadline::{
    DEADLINE_EXCEEDED, DEADLINE_EXCEEDED_MESSAGE, PodEviction, past_active_deadline,
};
pub use env::{
    ContainerEnv, EnvFromNameCheck, EnvOptions, EnvSource, EnvSources, EnvValue, INVALID_ENV_NAMES,
    PodVolumes, ServiceEndpoint, resolve_env, service_variables,
};
pub use env_context::EnvContext;
pub use error::{EnvError, RuntimeError, SyncError, VolumeError};
pub use hooks::{POST_START_HOOK_ERROR, reasons as hook_reasons};
pub use mounts::{
    DEFAULT_CLUSTER_DOMAIN, MountError, SubPathError, hostname_file_content, hosts_file_content,
    kernel_hostname, make_mounts, pod_hostname, should_mount_hosts_file,
};
pub use phase::{PodPhase, pod_phase, pod_phase_with};
pub use probe::{
    ContainerProbeStatus, ProbeConfig, ProbeKill, ProbeKind, ProbeManager, ProbeResult,
    ProbeTarget, ProbeUpdate,
};
pub use runtime::{ENV_FILE, ENV_JSON_FILE, EnvFileRuntime, RuntimeHook, env_file, env_json};
pub use seams::{
    ContainerConfigState, ContainerConfigStatus, EventSink, NoEvents, NoStatus, PodConfigStatus,
    Readiness, StatusSink, Volumes, reasons,
};
#[cfg(any(test, feature = "test-util"))]
pub use seams::{FakeVolumes, RecordedEvent, RecordingEvents, RecordingStatus};
pub use status::{
    CONFIG_CURRENT_CONDITION, CONFIG_READY_CONDITION, CONFIG_STALE_REASON, generate_pod_status,
};
pub use sync::{ConfigSyncer, SyncerConfig, SyncerParts};
pub use sysctls::{SYSCTL_FORBIDDEN, SysctlPatternError, SysctlPolicy, admit_sysctls};
pub use workers::{
    PodSyncer, PodUpdate, PodWorkers, SyncOutcome, TerminatingPod, UpdateTarget, UpdateType,
    WorkerConfig, WorkerPhase, WorkerSnapshot,
};

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
