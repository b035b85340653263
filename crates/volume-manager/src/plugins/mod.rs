//! Volume plugins: the [`VolumePlugin`] trait (`api.rs`), the contexts it receives and the
//! shared [`VolumeHost`] (`host.rs`), the [`PluginRegistry`] (`registry.rs`), and the built-in
//! plugins (configMap, secret, projected, downwardAPI, emptyDir, hostPath), one file each
//! (emptyDir's memory sizing in `memory_size.rs`). This module
//! only declares and re-exports: the files depend on each other, never on it.

mod api;
mod configmap;
mod downward_api;
mod empty_dir;
mod host;
mod host_path;
mod memory_size;
mod ownership;
mod payload;
mod projected;
mod registry;
mod secret;

pub use api::{ObjectVersion, SetUpOutcome, VolumePlugin};
pub use configmap::ConfigMapPlugin;
pub use downward_api::{DownwardApiPlugin, collect_downward_api_data};
pub use empty_dir::{EmptyDirError, EmptyDirPlugin};
pub(crate) use host::probe_tmpfs as host_probe_tmpfs;
pub use host::{Medium, SetUpContext, TearDownContext, VolumeHost, WRITE_SLOTS, WriteSlot};
pub use host_path::{HostPathError, HostPathPlugin, check as check_host_path};
pub use memory_size::{memory_volume_size, pod_memory_limit};
pub use ownership::{set_volume_ownership, set_writable_volume_ownership};
pub use payload::{config_map_payload, secret_payload};
pub use projected::ProjectedPlugin;
pub use registry::PluginRegistry;
pub use secret::SecretPlugin;
