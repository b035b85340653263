//! [`RuntimeConfig`]: the process runtime's options.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::images::ImageTable;
use crate::logs::LogConfig;

/// Options of a [`ProcessRuntime`](crate::ProcessRuntime).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RuntimeConfig {
    /// The agent's root directory.
    pub root_dir: PathBuf,
    /// Images → local programs.
    pub images: ImageTable,
    /// Whether a container may run as root (`--allow-root-containers`).
    pub allow_root: bool,
    /// The program (and its first arguments) that runs [`crate::sandbox::init_main`]; the
    /// spec's path is appended.
    pub init_command: Vec<OsString>,
    /// The program (and its first arguments) that runs [`crate::sandbox::exec_main`]
    /// (`nodelet container-exec`): commands in running containers
    /// ([`ProcessRuntime::exec_sync`](crate::ProcessRuntime::exec_sync): exec hooks and
    /// probes). Empty: none can run.
    pub exec_command: Vec<OsString>,
    /// Log file size and count.
    pub logs: LogConfig,
    /// Host directories hidden from containers (the root directory is always hidden).
    pub masked: Vec<PathBuf>,
}

impl RuntimeConfig {
    /// Defaults under `root_dir`, with `init_command` starting the init process.
    pub fn new(root_dir: &Path, init_command: Vec<OsString>) -> Self {
        Self {
            root_dir: root_dir.to_path_buf(),
            images: ImageTable::default(),
            allow_root: false,
            init_command,
            exec_command: Vec::new(),
            logs: LogConfig::default(),
            masked: Vec::new(),
        }
    }
}
