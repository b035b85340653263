//! The kubelet's volume manager and its configMap, secret, projected, downwardAPI (and
//! emptyDir) volume plugins, with event-driven updates (spec rules PL-1 … PL-22, VM-1 … VM-13,
//! UP-1 … UP-4).
//!
//! The agent says which pods should run here; this crate turns their volumes into directories
//! under `<root>/pods/<uid>/volumes/<plugin>/<volume>` laid out exactly as a kubelet lays them
//! out, keeps them current while the objects they read change, and removes them when the pods
//! go.
//!
//! # Principal types
//!
//! * [`VolumeManager`] — the handle the pod worker uses (it implements the pod worker's
//!   `Volumes` seam in nodelet-podworker): [`add_pod`](VolumeManager::add_pod) /
//!   [`update_pod`](VolumeManager::update_pod) / [`remove_pod`](VolumeManager::remove_pod)
//!   (the desired state; only the owner of "desired" calls them: in nodelet the pod workers'
//!   `update_pod`, through its syncer's `pod_desired` hook),
//!   [`wait_for_attach_and_mount`](VolumeManager::wait_for_attach_and_mount) (the kubelet's
//!   `ReprocessPod` — [`reprocess_pod`](VolumeManager::reprocess_pod) — and wait; it never
//!   adds a pod and fails at once with [`Error::PodNotDesired`] for a pod not added),
//!   [`wait_for_unmount`](VolumeManager::wait_for_unmount), [`run`](VolumeManager::run) (the
//!   reconciler task), [`snapshot`](VolumeManager::snapshot) for a `/pods` endpoint and
//!   [`subscribe_updates`](VolumeManager::subscribe_updates): a [`VolumeUpdate`] per volume
//!   set up again after an object change or remounted with new content (the agent's
//!   propagation histogram, reload signals).
//! * [`Config`] — root directory, tmpfs policy, the kubelet's time-outs and backoff, resync.
//! * [`VolumePlugin`] and [`PluginRegistry`] — the plugin seam, open to other crates; the
//!   built-in [`plugins`] are configMap, secret, projected, downwardAPI, emptyDir (PL-30) and
//!   hostPath (PL-33). They share a [`plugins::VolumeHost`]: the object managers, the one
//!   handle to the other sources and the common write path (wrapper directory, nested
//!   mountpoints, fsGroup, atomic write). A plugin names what a volume reads through one method,
//!   [`VolumePlugin::sources`] (`nodelet_core::SourceRef`s: objects, trust bundles, the pod's
//!   certificates).
//! * Sources — `nodelet_sources::Sources`, built by the agent and handed to
//!   [`VolumeManager::new`]: service account tokens, and ClusterTrustBundles (PL-17) and pod
//!   certificates (PL-21) when the agent built them (their feature gates are read there, not
//!   here). This crate knows volumes, not sources: one stream of changes (the object
//!   managers' `ObjectRef`s and the sources' `nodelet_core::SourceChange`s) remounts the
//!   volumes whose sources a change affects; a source the agent did not build answers a
//!   volume with the kubelet's text for a disabled feature.
//! * Pods arrive as `nodelet_core::AdmittedPod` (UID validated once, by the agent's pod
//!   source) and are named by `nodelet_core::PodUid`; directories are spelled by
//!   `nodelet_core::PodDirs`; the node's allocatable is `nodelet_core::NodeAllocatable`; the
//!   downward API is `nodelet_core::downward` (one implementation for volumes and env).
//! * Events go to a `nodelet_core::EventSink` (`FailedMount`, `FailedUnmount`,
//!   `UnsupportedVolume`: `nodelet_core::events::reasons`).
//! * [`remove_pods`] — what a stopped agent's volume manager left in `<root>/pods` (the pods'
//!   directories, their tmpfs mounts) unmounted and removed: `nodelet reset`, or the agent
//!   told to clean up at exit.
//! * [`Error`] / [`SetUpError`] — `Display` reproduces the kubelet's texts;
//!   [`SetUpError::node_fault`] classifies a failure as node-side ([`NodeFault`]: disk full,
//!   quota, read-only or failing file system, no memory or file descriptors) — see
//!   [Logging](#logging).
//!
//! ```text
//!  add_pod / update_pod / remove_pod   object managers + sources: one change stream ──┐
//!        │  (populator, VM-4)                                                 │
//!        ▼                                                                    ▼
//!  desired state (DSW) ──┐                         ┌── mark remount-required (live updates)
//!                        ├─► reconciler pass ──────┤
//!  actual state (ASW) ◄──┘   (VM-8: unmount,       └── operations, ≤ 1 per volume, backoff
//!        ▲                    then mount/remount)           │  plugin.set_up / tear_down
//!        └──────────── result of each operation ◄───────────┘  (spawn_blocking → AtomicWriter)
//! ```
//!
//! # Desired state and actual state
//!
//! The **desired state** (DSW) is what the agent asked for: for every pod added and not
//! removed, the latest pod object and one entry per volume that some container uses and some
//! plugin supports, named `<plugin>/<pod uid>-<volume>` (VM-2). Unused volumes are ignored
//! (VM-4); used volumes without a plugin (hostPath, PVC, CSI, …) are recorded as unsupported,
//! reported once with an `UnsupportedVolume` event, and never block the pod.
//!
//! The **actual state** (ASW) is what is on disk: per unique volume name, the directory, the
//! state (*mounted*, or *uncertain* for directories found after a restart), the objects and
//! resourceVersions of the last SetUp, a token refresh deadline, and the `remount_required`
//! flag. The flag is set by a pod update, a wait (`ReprocessPod`), an object change, a token
//! refresh deadline and the periodic resync; only a SetUp that *started after* the last such event clears it.
//!
//! The **reconciler** makes the actual state follow the desired one (VM-8): first it tears
//! down volumes on disk that are no longer desired, then it sets up volumes not on disk and
//! sets up again those marked `remount_required`. Each operation runs as its own task, at most
//! one per volume, and a failed one is retried after 500 ms, 1 s, 2 s, … up to 2 min 2 s
//! (VM-9). The loop sleeps until something changes: a pod is added, updated or removed, an
//! object changes, an operation ends, a backoff or token deadline passes, or the resync is due.
//! With nothing to do it does nothing — no 100 ms polling. A changed object or source starts
//! a pass over its readers' volumes only, a pod added, updated or processed again a pass over
//! that pod's volumes, an operation ending with work left a pass over its volume (each pass
//! keeps the token and backoff deadlines of the volumes it looks at), so the cost of these does
//! not grow with the node's other volumes; a pod removed, an unmount ended, a deadline and the
//! resync start a pass over all of them.
//!
//! # The update path, step by step
//!
//! `reconciler.rs` carries the same `// (n)` markers.
//!
//! 1. **The object manager sees new content** — a watch event (Watch strategy) or a refreshed
//!    TTL entry (Cache) — and sends the object's key to its subscribers (a source sends a
//!    `SourceChange`: a trust bundle changed, a pod's certificate request moved on).
//! 2. **The reconciler marks** every mounted volume of a desired pod that reads what changed
//!    (one of its plugin's `sources`) `remount_required` (and any operation in flight on it as stale), ends
//!    the backoff of every such volume whose last operation failed (the object may have been
//!    what was missing), records when it saw the change, and runs a pass at once.
//! 3. **The pass starts a remount** for each marked volume that has no operation in flight
//!    and is not backing off.
//! 4. **The plugin sets the volume up again**: it reads the object through the manager (no
//!    API request with Watch), builds the payload (PL-7, PL-8, PL-10, PL-13) and hands it to
//!    the atomic writer on the blocking pool. The writer compares it with the current data and,
//!    if anything differs, writes a new timestamped directory and swaps `..data` to it in one
//!    `rename(2)`: readers see the old or the new content, never a mix.
//! 5. **The result is recorded**: success marks the volume mounted and clears the flag (unless
//!    another change arrived meanwhile, which triggers step 3 again); failure keeps the old
//!    content on disk, emits `FailedMount` with `MountVolume.SetUp failed for volume "<vol>" :
//!    <error>`, keeps the flag and retries after the backoff — at once if an object the
//!    volume reads changed while the operation ran. A node-side failure is also logged, once
//!    per volume and state change (see [Logging](#logging)). Waiters are woken. A
//!    [`VolumeUpdate`] reports a SetUp that took in a change, and any remount that wrote new
//!    content: a remount for a pod update may read an object's new content before the
//!    object's notification reached step 2, and the notification's own remount then finds
//!    nothing to write.
//!
//! Pod updates (downward API labels and annotations), waits
//! ([`VolumeManager::wait_for_attach_and_mount`] reprocesses the pod, as every SyncPod did in
//! UP-1), token refreshes (at 80 % of the token's lifetime), pod certificate deadlines and
//! changes of a pod's PodCertificateRequests (PL-21, PL-22) and the periodic resync enter at
//! step 2.
//!
//! # Where this crate differs from the kubelet
//!
//! * **Event-driven.** The kubelet remounts only on the next pod sync (UP-1, up to ~90 s);
//!   here an object change remounts at once (the benchmark's p99 is tens of milliseconds).
//!   The populator runs when a pod is added or updated instead of every 100 ms, the waits are
//!   woken by state changes instead of polling every 300 ms, and the reconciler sleeps when
//!   there is nothing to do.
//! * **New information ends a backoff.** The kubelet retries a failed mount only when its
//!   backoff (VM-9, up to 2 min 2 s) expires, even if the missing object appeared meanwhile;
//!   here a change of an object the volume reads starts the retry at once. The backoff still
//!   holds, and keeps doubling, for repeated failures with no new information.
//! * **A failed remount never removes or empties a live volume** (upstream #113242, PL-6
//!   quirk): a SetUp tears its directory down on failure only if that same SetUp created it.
//! * **Secrets on tmpfs only when possible**: [`MemoryMedium::Auto`] probes once whether the
//!   agent can mount; if not, memory volumes go to node disk and one warning is logged.
//! * **ClusterTrustBundles** (PL-20): a bundle change remounts the volumes that read it at
//!   once (the kubelet waits for the pod's next sync); cached results are dropped for the
//!   bundle's name and its signer; the anchors' random order is fixed per process, so an
//!   unchanged set never rewrites a file; a server without the API is named in the error.
//! * **Pod certificates**: the kubelet's pod certificate manager runs its own work queue and a
//!   refresh pass every minute, and a mounted volume only sees a new certificate at its next pod
//!   sync; here the state machine is stepped by the volume's SetUp, a change of the pod's
//!   request (seen by the node's watch) remounts at once, and the volume asks to be set up again
//!   at `beginRefreshAt` (plus jitter) and when an overdue/expired event is due. The
//!   `Denied`/`Failed` event's message is the kubelet's intended text (its `Eventf` call passes
//!   the condition's reason as the format). The 10 min "never seen" deadline counts from the
//!   create on this node's clock, not from `creationTimestamp`, and the request is made again
//!   in the same SetUp. A failed refresh create fails the remount (old files stay, backoff,
//!   `FailedMount`), as for tokens.
//! * **Tokens**: when a refresh fails the remount fails (old token stays on disk, event,
//!   backoff) instead of silently keeping the old token until the next sync.
//! * **Restart**: volumes found on disk are adopted as *uncertain* and set up again without
//!   rewriting unchanged content (leftovers of interrupted writes are cleaned by the writer);
//!   those of pods no longer desired are torn down after [`VolumeManager::pods_synced`].
//! * The actual state is keyed by unique volume name (which contains the pod UID) rather than
//!   by volume with a pod list; for these non-attachable plugins it is the same.
//! * [`VolumeManager::wait_for_unmount`] also waits for *uncertain* volumes, so when it
//!   returns the directories are gone (PW-6).
//! * [`VolumeManager::wait_for_attach_and_mount`] for a pod with volumes that is not desired
//!   fails at once with [`Error::PodNotDesired`]; the kubelet's wait would time out after
//!   2 min 3 s (VM-11). Only [`VolumeManager::add_pod`] makes a pod desired.
//!
//! # Logging
//!
//! The crate returns errors and reports failed SetUps and TearDowns as `FailedMount` /
//! `FailedUnmount` events (and in [`VolumeManager::snapshot`]'s `last_error`), not in the log.
//! The exception is a failure the node itself causes, which no change of the pod or its
//! objects can cure and an operator must hear of: a SetUp whose error
//! [is node-side](SetUpError::is_node_side) — `ENOSPC`, `EDQUOT`, `EROFS`, `EIO`, `ENOMEM`,
//! `EMFILE`/`ENFILE` from the file system under the root directory or the kernel, classified
//! by [`NodeFault::of`] from the typed error (never its text). Per volume:
//!
//! * **WARN** `volume cannot be written: node-side failure, retrying` when the volume enters
//!   the state (first mount or remount), with `pod.namespace`, `pod.name`, `volume`, `path`
//!   (the volume directory), `fault` (the `errno` name) and `error` (the event's text: paths and
//!   key names, never payload bytes);
//! * nothing more while the retries (with the backoff) fail with the same fault, nor for a
//!   failure in between that is not node-side (a deleted ConfigMap, say: that one is an event);
//! * **WARN** again, with `previous_fault`, if the fault changes (`ENOSPC` → `EROFS`);
//! * **INFO** `volume written again after a node-side failure` when a SetUp succeeds again,
//!   with `failures` (the failed attempts) and `failing_for` (since the first).
//!
//! A volume whose pod is removed is forgotten without a line. The crate's other WARN lines are
//! about the node as well: memory volumes on node disk ([`MemoryMedium::Auto`], once), fsGroup
//! not applied to every entry, a directory left after a failed first SetUp, a pod directory
//! that is not a pod UID, the ClusterTrustBundle watch failing. Each SetUp is a DEBUG line.
//!
//! # Invariants
//!
//! * At most one operation runs per volume; writes to one directory are sequential.
//! * A mounted volume's directory is only removed when its pod is no longer desired.
//! * Only `add_pod` / `update_pod` add a pod to the desired state; `reprocess_pod` and the
//!   waits never do (VM-4, VM-11).
//! * `add_pod`, `update_pod`, `reprocess_pod`, `remove_pod` and `pods_synced` never block; the waits are
//!   cancel-safe; [`VolumeManager::run`] stops when its token is cancelled and then waits for
//!   running operations.
//! * Payload bytes and tokens never reach logs, events or `Debug` output: events carry error
//!   texts (object names, keys, paths); `nodelet_sources::Token` and `PrivateKeyPem` redact
//!   themselves.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
//! use nodelet_object_manager::{ConfigMapManager, ManagerConfig, SecretManager, source::FakeSource};
//! use nodelet_core::AdmittedPod;
//! use nodelet_core::events::NoEvents;
//! use nodelet_sources::{Sources, TokenManager, token::FakeTokenSource};
//! use nodelet_volume_manager::{Config, MemoryMedium, VolumeManager};
//! use serde_json::json;
//! use tokio_util::sync::CancellationToken;
//!
//! // In production: `ConfigMapManager::new(client, ..)` and `KubeTokenSource::new(client)`
//! // (with the trust bundle and pod certificate managers the feature gates ask for).
//! let api = FakeSource::<ConfigMap>::new();
//! api.apply("default", serde_json::from_value(json!({
//!     "metadata": {"name": "settings"}, "data": {"port": "8080"}}))?);
//! let configmaps = ConfigMapManager::with_sources(Arc::new(api), None, ManagerConfig::default())?;
//! let secrets = SecretManager::with_sources(
//!     Arc::new(FakeSource::<Secret>::new()), None, ManagerConfig::default())?;
//!
//! let sources = Sources::new(TokenManager::new(Arc::new(FakeTokenSource::new())));
//! let root = tempfile::tempdir()?;
//! let mut config = Config::new(root.path());
//! config.memory_medium = MemoryMedium::Disk;
//! let volumes = VolumeManager::new(
//!     config, configmaps.clone(), secrets, sources, Arc::new(NoEvents))?;
//! let shutdown = CancellationToken::new();
//! tokio::spawn({
//!     let (volumes, shutdown) = (volumes.clone(), shutdown.clone());
//!     async move { volumes.run(shutdown).await }
//! });
//!
//! let pod: Pod = serde_json::from_value(json!({
//!     "metadata": {"name": "web", "namespace": "default", "uid": "uid-1"},
//!     "spec": {"containers": [{"name": "c", "volumeMounts": [{"name": "cfg", "mountPath": "/etc/app"}]}],
//!              "volumes": [{"name": "cfg", "configMap": {"name": "settings", "defaultMode": 420}}]}}))?;
//! let pod = AdmittedPod::new(pod)?; // validated once, where the pod enters the node
//! configmaps.register_pod(&pod); // the pod worker registers first (PW-4)
//! volumes.add_pod(&pod); // desired (VM-4): in nodelet, when the pod worker gets the pod
//! volumes.wait_for_attach_and_mount(&pod).await?; // SyncPod: reprocess, wait (VM-11)
//! let dir = volumes.host().volume_dir(pod.uid(), "kubernetes.io/configmap", "cfg");
//! assert_eq!(std::fs::read_to_string(dir.join("port"))?, "8080");
//!
//! volumes.remove_pod(pod.uid()); // containers stopped (VM-13)
//! volumes.wait_for_unmount(pod.uid()).await?;
//! assert!(!dir.exists());
//! shutdown.cancel();
//! # Ok(())
//! # }
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod asw;
mod changes;
mod config;
mod dsw;
mod error;
mod executor;
mod leftovers;
mod manager;
pub mod memory;
mod node_faults;
mod operation;
pub mod plugins;
mod populator;
mod reconciler;
mod reconstruct;
mod snapshot;
mod updates;

pub use config::{AfterSwap, AfterSwapFn, Config, MemoryMedium};
pub use error::{Error, NodeFault, SetUpError, WaitCause};
pub use leftovers::{PodsRemoved, RemovePodsError, remove_pods};
pub use manager::VolumeManager;
pub use plugins::{PluginRegistry, VolumePlugin};
pub use snapshot::{PodVolumes, VolumeSnapshot, VolumeState};
pub use updates::VolumeUpdate;

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
