//! [`SandboxError`]: why a container could not be started, or why this machine cannot start
//! any; and [`report`], the one line the init process writes about it.

use std::io;
use std::path::PathBuf;

use nix::errno::Errno;

/// Why a container could not be started; its text (with its sources, [`init_main`] joins
/// them with `: `) is what the supervisor reports. Paths in the container are as seen there.
///
/// [`init_main`]: super::init_main
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The command line is not `SPEC.json`.
    #[error("usage: nodelet-container-init SPEC.json")]
    Usage,
    /// The command line is not `PID SPEC.json -- COMMAND [ARG...]` ([`exec_main`]).
    ///
    /// [`exec_main`]: super::exec_main
    #[error("usage: nodelet container-exec PID SPEC.json -- COMMAND [ARG...]")]
    ExecUsage,
    /// The environment of the container's process (its pid) could not be read.
    #[error("cannot read the environment of the container's process {0}")]
    ReadEnviron(i32, #[source] io::Error),
    /// A namespace file of the container's process (`/proc/<pid>/ns/<kind>`) could not be
    /// opened or compared with this process's.
    #[error("cannot open the namespace {0}")]
    OpenNamespace(PathBuf, #[source] io::Error),
    /// `setns` into a namespace of the container's process (its file) failed.
    #[error("cannot join the namespace {0}")]
    JoinNamespace(PathBuf, #[source] Errno),
    /// The spec file (named) could not be read.
    #[error("cannot read the launch spec {0}")]
    ReadSpec(PathBuf, #[source] io::Error),
    /// The spec file (named) is not a valid [`LaunchSpec`](crate::spec::LaunchSpec).
    #[error("cannot parse the launch spec {0}")]
    ParseSpec(PathBuf, #[source] serde_json::Error),
    /// The supervisor's status socket (named) could not be reached.
    #[error("cannot connect to the status socket @{0}")]
    ConnectStatus(String, #[source] io::Error),
    /// A kernel tree (`/sys`, a read-only or masked path of `/proc`, named as under the new
    /// root) could not be protected for a container that is not privileged.
    #[error("cannot protect {0} in the container")]
    ProtectKernelTree(PathBuf, #[source] Errno),
    /// `readOnlyRootFilesystem`: the root or `/tmp` (named as under the new root) could not be
    /// remounted read-only.
    #[error("cannot make {0} read-only")]
    ReadOnlyRoot(PathBuf, #[source] Errno),
    /// `readOnlyRootFilesystem` asked of an agent that is not root.
    #[error(
        "readOnlyRootFilesystem needs an agent running as root: without root the container's \
         root is a tree of overlays that cannot be made read-only"
    )]
    ReadOnlyRootWithoutRoot,
    /// A step of the container's capabilities failed.
    #[error("cannot set the container's capabilities: {step}")]
    Capabilities {
        /// What was being done.
        step: &'static str,
        /// What failed.
        #[source]
        source: caps::errors::CapsError,
    },
    /// The `RuntimeDefault` seccomp filter could not be built or installed.
    #[error("cannot install the RuntimeDefault seccomp filter: {0}")]
    Seccomp(String),
    /// `prctl(PR_SET_NO_NEW_PRIVS)` failed.
    #[error("cannot set no_new_privs")]
    NoNewPrivs(#[source] Errno),
    /// A privileged container's `/dev` (the host's) could not be bound.
    #[error("cannot bind the host's /dev for a privileged container")]
    HostDev(#[source] io::Error),
    /// `setsid` failed.
    #[error("cannot start a new session")]
    NewSession(#[source] Errno),
    /// `unshare(CLONE_NEWNS | CLONE_NEWUTS)` failed (the agent runs as root).
    #[error("cannot create the mount and UTS namespaces")]
    Unshare(#[source] Errno),
    /// The spec asks for supplementary groups, which an agent that is not root cannot give:
    /// in the user namespace it makes, `setgroups` is denied.
    #[error(
        "a non-root agent cannot give the container supplementary groups {0:?} \
         (supplementalGroups, fsGroup): setgroups is denied in the user namespace it makes; \
         run the agent as root or drop the groups from the pod"
    )]
    SupplementaryGroups(Vec<u32>),
    /// `unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWUTS)` failed (the agent is not root).
    #[error("cannot create the user, mount and UTS namespaces (the agent is not root)")]
    UnshareUser(#[source] Errno),
    /// A line of the new user namespace's setup could not be written to its `/proc` file.
    #[error("cannot write {line:?} to {file}")]
    MapIds {
        /// `/proc/self/setgroups`, `/proc/self/uid_map` or `/proc/self/gid_map`.
        file: &'static str,
        /// What was written.
        line: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// `sethostname` failed.
    #[error("cannot set the host name {0:?}")]
    SetHostname(String, #[source] Errno),
    /// Making `/` a recursive slave failed.
    #[error("cannot make / a slave mount")]
    MakeRootSlave(#[source] Errno),
    /// The scratch directory (its tmpfs, `upper`, `work`, `root`) could not be prepared.
    #[error("cannot prepare the scratch directory {0}")]
    Scratch(PathBuf, #[source] io::Error),
    /// The overlay root could not be mounted on `<scratch>/root`.
    #[error("cannot mount the container's overlay root on {0}")]
    MountOverlay(PathBuf, #[source] Errno),
    /// Without root: an entry of a host directory (named) could not be copied into the
    /// container's root.
    #[error("cannot copy the host's {0} into the container's root")]
    CopyHostEntry(PathBuf, #[source] io::Error),
    /// Without root: the overlay of a host directory (named) could not be mounted in the
    /// container's root.
    #[error("cannot mount an overlay of the host directory {0} in the container's root")]
    OverlayHostDir(PathBuf, #[source] Errno),
    /// `/proc/self/mountinfo` could not be read.
    #[error("cannot read /proc/self/mountinfo")]
    ReadMountInfo(#[source] io::Error),
    /// A host mount (its mount point) or, without root, a host file, bound into the
    /// container, could be neither made read-only nor detached again.
    #[error("cannot bind the host's {0} read-only into the container")]
    BindHostReadOnly(PathBuf, #[source] Errno),
    /// The fresh tmpfs on `/tmp` could not be mounted.
    #[error("cannot mount a tmpfs on {0}")]
    MountTmpfs(PathBuf, #[source] io::Error),
    /// The container's own `/dev`, or an entry of it (named, as in the container), could not
    /// be made.
    #[error("cannot prepare the container's {0}")]
    PrepareDev(PathBuf, #[source] io::Error),
    /// A masked host directory could not be covered.
    #[error("cannot mask {0}")]
    Mask(PathBuf, #[source] io::Error),
    /// A mount's source (host path) for a target (in the container) does not exist.
    #[error("mount source {0} for {1}")]
    MountSource(PathBuf, PathBuf, #[source] io::Error),
    /// A mount's target (in the container), or one of its parents, could not be created.
    #[error("cannot create the mount target {0}")]
    CreateMountTarget(PathBuf, #[source] io::Error),
    /// A mount's target (in the container) exists with another type (directory or file) than
    /// its source (host path).
    #[error("mount target {0} and its source {1} are not both directories or both files")]
    MountTargetType(PathBuf, PathBuf),
    /// The bind mount, or its read-only remount, failed.
    #[error("cannot bind {source_path} on {target}")]
    BindMount {
        /// The host path.
        source_path: PathBuf,
        /// The target in the container.
        target: PathBuf,
        /// Why.
        #[source]
        source: Errno,
    },
    /// `pivot_root` into `<scratch>/root`, or detaching the old root, failed.
    #[error("cannot pivot_root into {0}")]
    PivotRoot(PathBuf, #[source] Errno),
    /// `setgroups` (as root), `setresgid` or `setresuid` failed.
    #[error("cannot switch to uid {uid}, gid {gid}, groups {groups:?}")]
    SwitchUser {
        /// The spec's uid.
        uid: u32,
        /// The spec's gid.
        gid: u32,
        /// The spec's supplementary groups.
        groups: Vec<u32>,
        /// Why.
        #[source]
        source: Errno,
    },
    /// The working directory (in the container) could not be entered.
    #[error("cannot change to the working directory {0}")]
    WorkingDir(PathBuf, #[source] io::Error),
    /// The program is a name not found in `PATH`.
    #[error("exec: \"{0}\": executable file not found in $PATH")]
    ProgramNotFound(String),
    /// The program is a path that cannot be `stat`ed.
    #[error("exec: \"{0}\": stat {0}: {reason}", reason = go_text(*.1))]
    ProgramStat(String, Errno),
    /// The program is a path to a directory or to a file without execute permission.
    #[error("exec: \"{0}\": permission denied")]
    ProgramPermission(String),
    /// `execve` of the program (its path) failed.
    #[error("exec: \"{0}\": {reason}", reason = go_text(*.1))]
    Exec(String, Errno),
    /// The agent does not run as root and the kernel does not let it make the user namespace
    /// it would need instead; `missing` says why.
    #[error(
        "the process runtime needs root (uid 0), or unprivileged user namespaces: {missing} \
         (the agent runs as uid {uid})"
    )]
    NoUserNamespaces {
        /// The agent's effective uid.
        uid: u32,
        /// What the kernel lacks or refuses.
        missing: UserNamespaceGap,
    },
    /// The kernel lacks a filesystem (`overlay`, `tmpfs`) the runtime mounts.
    #[error("the kernel has no {0} filesystem (/proc/filesystems)")]
    MissingFilesystem(&'static str),
    /// `/proc/filesystems` could not be read.
    #[error("cannot read /proc/filesystems")]
    ReadFilesystems(#[source] io::Error),
}

/// What keeps an agent that is not root from making the user namespace a container needs
/// ([`SandboxError::NoUserNamespaces`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UserNamespaceGap {
    /// A sysctl (its `/proc/sys` path) has a value that forbids it.
    #[error("{path} is {value}")]
    Sysctl {
        /// The sysctl's file.
        path: &'static str,
        /// Its value.
        value: String,
    },
    /// A sysctl (its `/proc/sys` path) could not be read: a kernel without user namespaces
    /// has no `/proc/sys/user/max_user_namespaces`.
    #[error("cannot read {path}: {error}")]
    ReadSysctl {
        /// The sysctl's file.
        path: &'static str,
        /// Why.
        error: io::Error,
    },
    /// Ubuntu's AppArmor restriction is on and the agent runs unconfined, so a user namespace
    /// it makes has no capabilities.
    #[error(
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns is 1 and the agent runs \
         unconfined (give it an AppArmor profile with `userns,`)"
    )]
    AppArmor,
    /// The kernel (its release) is older than 5.11, the first to mount overlayfs in a user
    /// namespace.
    #[error("the kernel is {0}; overlayfs in a user namespace needs Linux 5.11 or later")]
    OldKernel(String),
}

/// The error and its sources on one line, `: `-separated.
pub(super) fn report(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text.replace('\n', " ")
}

/// An errno as Go, and so the container runtimes, print it: `no such file or directory`.
fn go_text(errno: Errno) -> String {
    let mut chars = errno.desc().chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_lowercase().chain(chars).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_as_the_container_runtimes_texts() {
        assert_eq!(go_text(Errno::ENOENT), "no such file or directory");
        let err = SandboxError::ProgramStat("/x".into(), Errno::ENOENT);
        assert_eq!(
            report(&err),
            r#"exec: "/x": stat /x: no such file or directory"#
        );
        let err = SandboxError::WorkingDir("/w".into(), io::Error::from(Errno::EACCES));
        assert_eq!(
            report(&err),
            "cannot change to the working directory /w: Permission denied (os error 13)"
        );
    }

    #[test]
    fn a_missing_user_namespace_says_what_is_missing() {
        let err = SandboxError::NoUserNamespaces {
            uid: 1000,
            missing: UserNamespaceGap::Sysctl {
                path: "/proc/sys/kernel/unprivileged_userns_clone",
                value: "0".into(),
            },
        };
        assert_eq!(
            report(&err),
            "the process runtime needs root (uid 0), or unprivileged user namespaces: \
             /proc/sys/kernel/unprivileged_userns_clone is 0 (the agent runs as uid 1000)"
        );
    }
}
