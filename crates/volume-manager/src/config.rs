//! [`Config`]: the volume manager's options, with the kubelet's timing constants as defaults
//! (VM-1, VM-9).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nodelet_core::{AdmittedPod, NodeAllocatable};

use crate::plugins::PluginRegistry;

/// Where memory-medium volumes (secret, projected, downwardAPI, emptyDir `Memory`) live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoryMedium {
    /// Probe at start-up: a tmpfs when the agent can mount one (root with `CAP_SYS_ADMIN`),
    /// else node disk with one warning.
    #[default]
    Auto,
    /// Always a tmpfs; mounts fail when the agent may not mount.
    Tmpfs,
    /// Always node disk (unprivileged agents, tests).
    Disk,
}

/// Options of a [`VolumeManager`](crate::VolumeManager). Start from [`Config::new`] and set
/// fields; every default is the kubelet's where it has one.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// The agent's root directory (the kubelet's `--root-dir`); volumes live under
    /// `<root_dir>/pods/<uid>/volumes/` (PL-1).
    pub root_dir: PathBuf,
    /// tmpfs or disk for memory-medium volumes (default [`MemoryMedium::Auto`]).
    pub memory_medium: MemoryMedium,
    /// `fsync` disk volumes before their `..data` swap (default `true`; tmpfs is never
    /// synced).
    pub fsync: bool,
    /// VM-1 `podAttachAndMountTimeout`: how long the two waits wait (default 2 min 3 s).
    pub wait_timeout: Duration,
    /// VM-9: first delay before retrying a failed operation (default 500 ms), doubled per
    /// failure.
    pub initial_backoff: Duration,
    /// VM-9: the largest retry delay (default 2 min 2 s).
    pub max_backoff: Duration,
    /// Safety net: every mounted volume is set up again this often even if no change was
    /// notified (default 60 s, the kubelet's pod sync period; `None`: never).
    pub resync_interval: Option<Duration>,
    /// Node allocatable resources for `resourceFieldRef` (default: detected from the machine).
    pub node_allocatable: Option<NodeAllocatable>,
    /// The volume plugins (default: configMap, secret, projected, downwardAPI, emptyDir).
    pub plugins: PluginRegistry,
    /// Called in each write of a configMap, secret, projected or downwardAPI volume that
    /// switched `..data`, before the old data is removed (default none).
    pub after_swap: Option<AfterSwap>,
}

/// A hook the writer of a configMap, secret, projected or downwardAPI volume calls between
/// the `..data` switch and the removal of the old data directory
/// (`nodelet_atomic_writer::WriterConfig::on_switch`), with the pod, the volume's name and
/// its directory. It runs on the write's blocking thread, before the SetUp completes (so
/// before its [`VolumeUpdate`](crate::VolumeUpdate)); it must not touch the volume directory.
/// The agent uses it to move running containers' subPath binds to the new data (FC-3).
#[derive(Clone)]
pub struct AfterSwap(pub Arc<AfterSwapFn>);

/// The function an [`AfterSwap`] holds: pod, volume name, volume directory.
pub type AfterSwapFn = dyn Fn(&AdmittedPod, &str, &Path) + Send + Sync;

impl std::fmt::Debug for AfterSwap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AfterSwap(<hook>)")
    }
}

impl Config {
    /// The defaults, with volumes under `root_dir`.
    pub fn new(root_dir: impl Into<PathBuf>) -> Self {
        Self {
            root_dir: root_dir.into(),
            memory_medium: MemoryMedium::Auto,
            fsync: true,
            wait_timeout: Duration::from_secs(123),
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(122),
            resync_interval: Some(Duration::from_secs(60)),
            node_allocatable: None,
            plugins: PluginRegistry::default(),
            after_swap: None,
        }
    }
}
