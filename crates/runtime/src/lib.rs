//! A container runtime for dev nodes: a pod's containers run as local processes, each in a
//! mount namespace of its own, with the kubelet's lifecycle, users and log files.
//!
//! # Principal types
//!
//! * [`ProcessRuntime`]: starts containers ([`ProcessRuntime::start_container`]), follows them
//!   to their end, stops them (one: [`ProcessRuntime::stop_container`]; a pod's on
//!   termination: SIGTERM to the process group, SIGKILL after the grace period) and reports
//!   typed [`ContainerStatus`]es and [`StartError`]s. What to start or restart, and the crash
//!   back-off, are decided by the pod worker (crate `nodelet-podworker`, the kubelet's side of
//!   the CRI). A restarted agent kills the containers its previous run left and reports them
//!   ended: no process runs untracked.
//! * [`ImageTable`] / [`ImageEntry`]: images → local programs (glob patterns), with the image's
//!   default arguments, `PATH` directories, user and working directory;
//!   [`ImageEntry::command_line`] applies Kubernetes' `command`/`args` rules.
//! * [`Identity`]: `runAsUser`, `runAsGroup`, `supplementalGroups`, `fsGroup`, `runAsNonRoot`
//!   (the kubelet's texts); root only with the agent's permission.
//! * [`Security`]: the rest of a container's `securityContext` as a CRI runtime applies it —
//!   capabilities (containerd's default set, `add`/`drop`, all when `privileged`),
//!   `no_new_privs` for `allowPrivilegeEscalation: false`, a read-only root for
//!   `readOnlyRootFilesystem`, a seccomp filter for `seccompProfile: RuntimeDefault`.
//! * [`sandbox`]: the container's first process — mount and UTS namespaces, a writable root
//!   whose writes vanish with the container, the volumes bind-mounted at their `mountPath`s, a
//!   private `/tmp`, then the container's user and program ([`sandbox::init_main`]).
//! * [`logs`]: the kubelet's container log files (CRI format, rotated by size) and their
//!   reader.
//!
//! The pod worker (crate `nodelet-podworker`) computes what the kubelet computes — the
//! environment, the mounts (`subPath`, `/etc/hosts`), the expanded `command` and `args`
//! ([`nodelet_core::runtime::ContainerLaunch`]) — and this crate runs it.
//!
//! # Invariants
//!
//! * Nothing a container mounts is visible on the host: every mount is made inside its own
//!   namespace, which ends with its last process; a container's directories are removed with
//!   its pod.
//! * Environment values never touch the disk or the logs: the init process receives them as
//!   its own environment.
//! * A container runs as uid 0 only when [`RuntimeConfig::allow_root`] is set.
//!
//! # Differences from a kubelet with a CRI runtime
//!
//! * No image pulls: `imagePullPolicy` is ignored; an image missing from the table waits with
//!   `ErrImageNeverPull`.
//! * Containers share the host's network and PID namespaces; a pod's containers share an IPC
//!   namespace of their own when the agent runs as root (the host's for `hostIPC` pods and
//!   without root); there are no cgroup limits.
//! * The namespaces need root (uid 0 on the host), or a kernel that lets an ordinary user make
//!   a user namespace (Linux 5.11 or later): the container then runs as the agent's user,
//!   without supplementary groups; see [`sandbox::check_support`] and [`sandbox`].
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod config;
mod error;
pub mod handlers;
mod images;
mod ipc;
mod launch;
mod live;
pub mod logs;
mod records;
mod recovery;
pub mod sandbox;
mod security;
pub mod spec;
mod supervisor;
mod termination;
mod users;

pub use config::RuntimeConfig;
pub use error::{Error, StartError};
pub use images::{ImageEntry, ImageTable, glob_match, normalize};
pub use ipc::PodSandboxError;
pub use live::{LiveError, Rebind, RunningMounts};
pub use nodelet_core::runtime::{ContainerState, ContainerStatus, Termination};
pub use security::{DEFAULT_CAPABILITIES, Security};
pub use supervisor::ProcessRuntime;
pub use users::{Identity, format_pod};
