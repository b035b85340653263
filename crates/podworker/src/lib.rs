//! The kubelet's pod workers and the config side of its pod sync, for Rust node agents
//! (spec rules PW-1 … PW-14).
//!
//! # Principal types
//!
//! * [`PodWorkers`]: one task per pod UID; coalesced updates; phases sync → terminating →
//!   terminated → finished; re-queue with jitter and back-off (PW-1 … PW-3). Generic over a
//!   [`PodSyncer`], the three callbacks.
//! * [`ConfigSyncer`]: the production [`PodSyncer`]. SyncPod registers the pod with the
//!   ConfigMap and Secret managers, creates the pod directories, waits for volumes, reads image
//!   pull secrets, resolves each container's environment and hands it to a [`RuntimeHook`];
//!   SyncTerminatedPod waits for unmount, then unregisters (PW-4 … PW-7, PW-12 … PW-14).
//! * [`resolve_env`]: environment variables of one container (PW-8 … PW-11), usable alone.
//!   `fieldRef` / `resourceFieldRef` values come from `nodelet_volume_manager::downward`, the
//!   same code that renders downwardAPI volumes (one implementation, as in the kubelet); its
//!   errors surface as [`EnvError::DownwardApi`] with the kubelet's texts.
//! * Seams: [`Volumes`] (the volume manager), [`RuntimeHook`] (default [`EnvFileRuntime`],
//!   which writes `<root>/pods/<uid>/containers/<name>/env`), [`EventSink`], [`StatusSink`].
//!   [`EventSink`], [`EventType`] and [`NoEvents`] are re-exported from
//!   `nodelet_volume_manager::events`: an agent implements one event trait for both crates.
//!   Fakes live behind the `test-util` feature.
//!
//! ```text
//! update_pod(pod) ─► worker[uid]: pending = newest pod, wake
//!   Syncing:     ConfigSyncer::sync_pod ─► register ─► dirs ─► Volumes::wait_for_attach_and_mount
//!                  ─► pull secrets ─► resolve_env ─► RuntimeHook::create_container ─► StatusSink
//!                ok → again in [1, 1.5) × resync;  error → [1, 1.5) × back-off
//!   Kill / deletionTimestamp ─► cancel in-flight sync_pod
//!   Terminating: RuntimeHook::kill_pod ─► Volumes::remove_pod
//!   Terminated:  Volumes::wait_for_unmount ─► unregister ─► RuntimeHook::remove_pod ─► StatusSink::terminated
//!   Finished:    updates ignored until sync_known_pods forgets the worker
//! ```
//!
//! # Invariants
//!
//! * A pod's callbacks never overlap, and run in phase order; a finished pod never syncs again.
//! * A pod is registered with the managers before anything reads objects for it, and stays
//!   registered until its volumes are unmounted (PW-13, PW-14).
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
//! };
//! let pod: Pod = serde_json::from_value(serde_json::json!({
//!     "metadata": {"namespace": "default", "name": "web", "uid": "u1"},
//!     "spec": {"enableServiceLinks": true, "containers": [{"name": "c",
//!         "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "APP_"}],
//!         "env": [{"name": "GREETING", "value": "mode=$(APP_mode)"}]}]},
//! }))?;
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

mod env;
mod error;
mod expand;
mod runtime;
mod seams;
mod sync;
mod workers;

pub use env::{
    ContainerEnv, EnvFromNameCheck, EnvOptions, EnvSources, EnvValue, INVALID_ENV_NAMES,
    resolve_env,
};
pub use error::{EnvError, RuntimeError, SyncError, VolumeError};
pub use runtime::{ENV_FILE, ENV_JSON_FILE, EnvFileRuntime, RuntimeHook, env_file, env_json};
pub use seams::{
    ContainerConfigState, ContainerConfigStatus, EventSink, EventType, NoEvents, NoStatus,
    PodConfigStatus, Readiness, StatusSink, Volumes, reasons,
};
#[cfg(any(test, feature = "test-util"))]
pub use seams::{FakeVolumes, RecordedEvent, RecordingEvents, RecordingStatus};
pub use sync::{ConfigSyncer, SyncerConfig, SyncerParts};
pub use workers::{
    PodSyncer, PodUpdate, PodWorkers, SyncOutcome, UpdateType, WorkerConfig, WorkerPhase,
    WorkerSnapshot,
};
