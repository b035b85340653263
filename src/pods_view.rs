//! The `/pods` document as types: what the agent serves (`views.rs`) and what `nodelet pods`
//! reads (`inspect.rs`), one definition for both ends. Field names are the JSON's
//! (camelCase); every field defaults when absent, so a newer agent's document still reads.

use serde::{Deserialize, Serialize};

/// The whole `/pods` document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct PodsView {
    /// The agent's node name.
    pub node: String,
    /// The health of the agent's watches.
    pub api: ApiView,
    /// Every pod with a worker.
    pub pods: Vec<PodView>,
}

/// Whether the API server answers the agent's watches.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct ApiView {
    /// No watch is failing.
    pub reachable: bool,
    /// The pod watch, then one row per watched ConfigMap and Secret.
    pub watches: Vec<WatchView>,
}

/// One watch's health.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct WatchView {
    /// `pods`, `configmaps` or `secrets`.
    pub resource: String,
    /// The watch runs (not idle-stopped, not immutable).
    pub running: bool,
    /// When the API server last answered it (RFC 3339).
    pub last_success: Option<String>,
    /// Since when it fails (RFC 3339), if it does.
    pub failing_since: Option<String>,
    /// Failures in a row.
    pub failures: u32,
    /// The latest failure.
    pub last_error: Option<String>,
    /// The pod watch's field selector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<String>,
    /// A watched object's namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// A watched object's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// One pod: its worker and its volumes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct PodView {
    /// The pod's UID.
    pub uid: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The worker's phase (`Syncing`, `Terminating`, `Terminated`, `Finished`).
    pub phase: String,
    /// Syncs run so far.
    pub syncs: u64,
    /// When the last sync ended (RFC 3339).
    pub last_sync: Option<String>,
    /// The last sync's error, if it failed.
    pub last_error: Option<String>,
    /// The pod's volumes.
    pub volumes: Vec<VolumeView>,
    /// Its running containers and what they see through their volumes (the process runtime
    /// only; FC-8).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<ContainerView>,
}

/// What a running container sees through its configMap, secret, projected and downwardAPI
/// volume mounts and through its environment (FC-8, FC-15).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct ContainerView {
    /// The container's name.
    pub name: String,
    /// Every mount sees the current content, and its environment is current.
    pub current: bool,
    /// One per such mount.
    pub mounts: Vec<MountView>,
    /// One per ConfigMap or Secret its `env` and `envFrom` read (FC-15).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvView>,
}

/// What a running container's environment was made from: one object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct EnvView {
    /// `ConfigMap` or `Secret`.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// The resourceVersion its environment comes from (none: an optional object that did not
    /// exist).
    pub resource_version: Option<String>,
    /// No change of the object since, or one that left the environment as it is.
    pub current: bool,
}

/// What one mount of a container shows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct MountView {
    /// The volume's name.
    pub volume: String,
    /// The mount's path in the container.
    pub mount_path: String,
    /// A subPath mount.
    pub sub_path: bool,
    /// A subPath mount that follows updates (`nodelet.io/follow-subpath`).
    pub follows: bool,
    /// The objects it shows, with the resourceVersion it shows (none when unknown).
    pub objects: Vec<ObjectView>,
    /// It shows the volume's current content.
    pub current: bool,
}

/// One volume of a pod.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct VolumeView {
    /// The volume's name in the pod.
    pub name: String,
    /// The plugin that mounts it, if one does.
    pub plugin: Option<String>,
    /// `Pending`, `Mounted`, `Uncertain`, `Unmounting` or `Unsupported`.
    pub state: String,
    /// Its host directory.
    pub path: Option<String>,
    /// A change of an object it reads waits to be written.
    pub remount_pending: bool,
    /// The last mount's error.
    pub last_error: Option<String>,
    /// The API objects it projects.
    pub objects: Vec<ObjectView>,
}

/// An API object a volume projects.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
#[non_exhaustive]
pub struct ObjectView {
    /// `ConfigMap` or `Secret`.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// The resourceVersion written, once one is.
    pub resource_version: Option<String>,
}
