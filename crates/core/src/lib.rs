//! The types every nodelet crate shares: how the node names a pod, an object and a pod's
//! directories. The `kube-core` of the workspace: small, synchronous, no client.
//!
//! # Principal types
//!
//! * [`AdmittedPod`]: a pod that entered the node — the pod object (`Arc<Pod>`) with its
//!   validated [`PodUid`]. Made once, by the agent's pod source; every seam between crates
//!   takes `&AdmittedPod` (or only `&PodUid`), never a raw `Pod` — volume manager, object
//!   managers, pod workers, runtime hook, status and event sinks — so nothing after the pod
//!   source validates a UID again. Its pod's `spec.volumes` are moved out at admission into
//!   [`PodVolume`]s ([`AdmittedPod::volumes`]): the pod it dereferences to has none, and
//!   [`AdmittedPod::to_pod`] rebuilds the whole object.
//! * [`PodVolume`] / [`VolumeSource`]: one pod volume, compact (its name and the one source
//!   set, about 100 bytes instead of a k8s-openapi `Volume`'s 3 KB); losslessly back to a
//!   `Volume` with [`PodVolume::to_volume`], for the plugin API and anything that serializes.
//! * [`PodUid`] / [`PodUidError`]: a pod UID that is non-empty and one path component; the key
//!   of pod workers, volume-manager state and the object managers' reference counts.
//! * [`ObjectRef`] / [`ObjectKind`]: one ConfigMap or Secret (kind, namespace, name): the
//!   object managers' store key and notifications, the objects a volume reads.
//! * [`PodDirs`]: the only place `<root>/pods/<uid>/{volumes,plugins,containers}/…` is spelled.
//! * [`NodeAllocatable`]: the node's allocatable CPU, memory and ephemeral storage.
//! * [`AllocatorHooks`]: what the program's global allocator reports (its name, the live
//!   heap, a trim), handed by the binary to the agent's configuration and metrics.
//! * [`glibc_tunables`]: turning glibc's per-thread caches off for the running program (it
//!   runs itself again with one more `GLIBC_TUNABLES` entry, then puts the operator's back).
//! * [`node_labels`]: the NodeRestriction rules for the labels a node may set on itself, used
//!   by the agent (its `nodeLabels`) and by nodelet-apiserver (admission).
//! * [`backoff::Backoff`] / [`backoff::Jitter`]: the one exponential back-off and jitter.
//! * `kubeconfig` (feature `kubeconfig`): kubeconfig files from kube's types, written
//!   atomically with mode 0600.
//! * [`events`]: [`EventType`] (`Normal` or `Warning`), the [`EventSink`] seam the node crates
//!   (volume manager, sources, pod workers) report pod events through, and the
//!   [`events::reasons`] they use; [`status`]: the [`StatusSink`] seam the pod workers hand
//!   each pod's API status to.
//! * [`downward`]: the downward API, one implementation for downwardAPI volumes (PL-13) and
//!   environment variables (PW-10): `fieldRef` and `resourceFieldRef` values with the
//!   kubelet's rendering and texts.
//! * [`SourceRef`] / [`SourceChange`]: what a volume reads besides its pod (objects, trust
//!   bundles, pod certificates) and the one change type the sources announce; the volume
//!   manager matches the two without knowing which source is which.
//! * [`runtime`]: what a pod worker hands a container runtime to start a container
//!   ([`runtime::ContainerLaunch`]) and the statuses the runtime reports back.
//! * [`FeatureGates`] / [`Feature`]: the Kubernetes feature gates nodelet follows, with a
//!   v1.36 kubelet's defaults.
//!
//! # Invariants
//!
//! * An [`AdmittedPod`] exists only for a pod whose UID passed [`PodUid::from_pod`]; its UID is
//!   the pod's `metadata.uid` verbatim. Its pod object has no `spec.volumes`; they are in
//!   [`AdmittedPod::volumes`], and [`AdmittedPod::to_pod`] equals the pod as admitted.
//! * [`PodDirs`] builds paths only and never leaves `<root>/pods/<uid>/` for a [`PodUid`].
//! * No async (but `RecordingSink::wait_for` under the `test-util` feature), no API client,
//!   no disk writes.
//!
//! # Example
//!
//! ```
//! use k8s_openapi::api::core::v1::Pod;
//! use nodelet_core::{AdmittedPod, PodDirs};
//!
//! let mut pod = Pod::default();
//! pod.metadata.namespace = Some("default".into());
//! pod.metadata.name = Some("web".into());
//! pod.metadata.uid = Some("1234-abcd".into());
//! let pod = AdmittedPod::new(pod)?; // validated once, where the pod enters the node
//!
//! let dirs = PodDirs::new("/var/lib/nodelet");
//! assert_eq!(
//!     dirs.volume(pod.uid(), "kubernetes.io/configmap", "cfg"),
//!     std::path::Path::new("/var/lib/nodelet/pods/1234-abcd/volumes/kubernetes.io~configmap/cfg"),
//! );
//!
//! let mut nameless = Pod::default();
//! nameless.metadata.uid = Some("../escape".into());
//! assert!(AdmittedPod::new(nameless).is_err()); // never a directory outside pods/
//! # Ok::<(), nodelet_core::PodUidError>(())
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod admitted;
mod allocatable;
mod allocator;
pub mod backoff;
pub mod capacity;
pub mod downward;
pub mod events;
mod feature_gates;
pub mod glibc_tunables;
pub mod go;
#[cfg(feature = "kubeconfig")]
pub mod kubeconfig;
mod layout;
pub mod node_labels;
mod object_ref;
mod pod_uid;
pub mod runtime;
mod sources;
pub mod status;
mod volume;

pub use admitted::AdmittedPod;
pub use allocatable::NodeAllocatable;
pub use allocator::AllocatorHooks;
pub use events::{EventSink, EventType};
pub use feature_gates::{Feature, FeatureGates};
pub use layout::{PodDirs, escape_plugin_name, unescape_plugin_name};
pub use object_ref::{ObjectKind, ObjectRef};
pub use pod_uid::{PodUid, PodUidError};
pub use sources::{SourceChange, SourceRef};
pub use status::{NoStatus, StatusSink};
pub use volume::{PodVolume, VolumeSource, volume_type};

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
