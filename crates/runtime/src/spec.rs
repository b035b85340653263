//! [`LaunchSpec`]: what the supervisor tells the container's first process (the
//! `nodelet-container-init` program) to set up before it executes the container's program.
//!
//! The spec travels as a JSON file named on the init program's command line. The container's
//! environment is not in it: it is the init process's own environment (the supervisor starts
//! it with exactly the container's variables), so values never touch the disk here.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Everything the init process sets up, in the order it does it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchSpec {
    /// The program: an absolute path, or a name looked up in the container's `PATH` (its
    /// environment) once the container's root is in place.
    pub program: String,
    /// `argv[1..]`.
    pub args: Vec<String>,
    /// The user the program runs as.
    pub uid: u32,
    /// Its primary group.
    pub gid: u32,
    /// Its supplementary groups (`supplementalGroups`, `fsGroup`), without `gid`.
    pub groups: Vec<u32>,
    /// The working directory inside the container (absolute; created if missing, as container
    /// runtimes do).
    pub working_dir: PathBuf,
    /// The container's host name (a UTS namespace of its own).
    pub hostname: String,
    /// Bind mounts, in order (volumes, then `/etc/hosts`, `/etc/hostname`).
    pub mounts: Vec<MountSpec>,
    /// A host directory (existing, empty, 0700) where the init process mounts its scratch
    /// tmpfs inside its own mount namespace; the host never sees what is mounted there.
    pub scratch: PathBuf,
    /// Host directories the container must not see (the agent's root directory: other pods'
    /// volumes); each is covered by an empty read-only tmpfs.
    pub masked: Vec<PathBuf>,
    /// The abstract unix socket name (without the leading NUL) the init process connects to
    /// first: it writes a start error there, or lets `execve` close the socket on success.
    pub status_socket: String,
    /// `privileged: true`: the host's `/dev`, and `/proc` and `/sys` as writable as the
    /// host's (PW-44).
    #[serde(default)]
    pub privileged: bool,
    /// The capabilities (`CAP_…` names) the process keeps when it runs as root; `None`: every
    /// capability (privileged). A process of another user has none once it runs (PW-44).
    #[serde(default)]
    pub capabilities: Option<Vec<String>>,
    /// `no_new_privs` is set before the program runs (`allowPrivilegeEscalation: false`,
    /// PW-43).
    #[serde(default)]
    pub no_new_privs: bool,
    /// The container's root is read-only, its mounts as they are (`readOnlyRootFilesystem`,
    /// PW-42).
    #[serde(default)]
    pub read_only_root: bool,
    /// The `RuntimeDefault` seccomp filter is installed before the program runs (PW-46).
    #[serde(default)]
    pub seccomp_runtime_default: bool,
    /// The IPC namespace to join (a namespace file the agent holds open, PW-58); `None`: the
    /// host's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipc_namespace: Option<PathBuf>,
}

/// One bind mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MountSpec {
    /// The host path (a directory or a file).
    pub source: PathBuf,
    /// The absolute path inside the container; created (in the container's writable layer)
    /// when missing.
    pub target: PathBuf,
    /// Mounted read-only.
    pub read_only: bool,
}
