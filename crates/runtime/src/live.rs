//! Changes made to a running container from outside it, for configuration that follows a
//! change (nodelet's own, FC-3, FC-5): a bind mount replaced in place by a new host path
//! ([`ProcessRuntime::rebind`]), and a signal to the container's main process
//! ([`ProcessRuntime::signal`]). The runtime only does what it is asked; which mount, which
//! path and when are the pod worker's (`nodelet_podworker::follow`).
//!
//! # Replacing a bind mount in place (FC-3)
//!
//! The container's mount namespace is the one place the new mount may appear: nothing is
//! mounted on the host, and nothing propagates back to it. The work runs on a thread of its
//! own, started for it and ended after it (a thread that joined another mount namespace is
//! never reused):
//!
//! 1. Open `/proc/<pid>/ns/mnt` of the container's process; check that the same instance
//!    still runs.
//! 2. In the agent's namespace, `open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)` each new source:
//!    a detached copy of the bind, not yet visible anywhere.
//! 3. `unshare(CLONE_FS)` (the thread alone), `setns` into the container's namespace, then
//!    `unshare(CLONE_NEWNS)`: a copy of it that only this thread sees, every mount private.
//! 4. In that copy, for each mount: detach the old mount (its root is the old source, which
//!    the swap removed: nothing can be mounted on it), attach the detached copy at the target, make it
//!    read-only when asked (keeping `nosuid`, `nodev`, `noexec`) and a slave (it receives the
//!    host's mounts, never sends any, as the binds the container started with), and clone it
//!    again: a detached, read-only copy. So the container never sees a writable instant.
//! 5. `setns` back into the container's namespace; for each mount: `move_mount` the read-only
//!    copy *beneath* the mount at the target (`MOVE_MOUNT_BENEATH`, Linux 6.5), then detach
//!    the old mount on top (`umount2(MNT_DETACH)`). A path lookup finds the old mount or the
//!    new one, whole; the container never sees the target missing.
//!
//! A process that holds the old file or directory open keeps reading the old content (the
//! old mount lives on, detached, as long as something uses it); a process whose working
//! directory is an old subPath directory stays in it. The target must be the mount the
//! container started with or one this put there; a mount the container itself placed over it
//! would be the one replaced.
//!
//! Needs root: joining the namespace of a container started in a user namespace of its own
//! (an agent without root) is refused by the kernel, and the call fails naming that step.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, setns, unshare};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use nodelet_core::PodUid;
use rustix::fs::CWD;
use rustix::mount::{MoveMountFlags, OpenTreeFlags, move_mount, open_tree};

use crate::spec::{LaunchSpec, MountSpec};
use crate::supervisor::ProcessRuntime;

/// One bind mount of a running container to replace: `target` (inside the container) shows
/// `source` (a host path) afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebind {
    /// The new host path (a file or a directory, as the old one).
    pub source: PathBuf,
    /// The path inside the container (the mount's `mountPath`).
    pub target: PathBuf,
    /// Mount the new source read-only.
    pub read_only: bool,
}

/// A running container instance and the bind mounts it was started with (its launch spec's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningMounts {
    /// The pid of the container's main process (also its instance: a restart has another).
    pub pid: i32,
    /// The bind mounts of its launch, in order.
    pub mounts: Vec<MountSpec>,
}

/// Why a change to a running container failed. Nothing was changed in the container, except
/// for [`LiveError::DetachOld`] (the new mount is in place beneath the old one).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LiveError {
    /// The container has no running instance (or another one than the one named).
    #[error("container {container:?} is not running")]
    NotRunning {
        /// The container's name.
        container: String,
    },
    /// Its launch spec could not be read.
    #[error("reading the launch spec {path}")]
    ReadLaunch {
        /// The spec's path.
        path: PathBuf,
        /// What failed underneath.
        #[source]
        source: io::Error,
    },
    /// Its launch spec is not valid JSON.
    #[error("parsing the launch spec {path}")]
    ParseLaunch {
        /// The spec's path.
        path: PathBuf,
        /// What failed underneath.
        #[source]
        source: serde_json::Error,
    },
    /// Step 1: the container's mount namespace could not be opened.
    #[error("opening the mount namespace of process {pid}")]
    OpenNamespace {
        /// The container's process.
        pid: i32,
        /// What failed underneath.
        #[source]
        source: io::Error,
    },
    /// Step 2: the new source could not be copied.
    #[error("copying the bind of {path}: {errno}")]
    OpenSource {
        /// The new source.
        path: PathBuf,
        /// The kernel's answer.
        errno: Errno,
    },
    /// Step 3 or 5: the thread could not enter the container's mount namespace (or its own
    /// copy of it).
    #[error("entering the container's mount namespace ({step}): {errno}")]
    EnterNamespace {
        /// `unshare(CLONE_FS)`, `setns`, `unshare(CLONE_NEWNS)` or making the copy private.
        step: &'static str,
        /// The kernel's answer.
        errno: Errno,
    },
    /// Step 4: the read-only copy could not be made.
    #[error("preparing the new mount for {target}: {errno}")]
    Stage {
        /// The path inside the container.
        target: PathBuf,
        /// The kernel's answer.
        errno: Errno,
    },
    /// Step 5: the new mount could not be placed beneath the old one (Linux before 6.5
    /// answers `EINVAL`).
    #[error("mounting beneath {target}: {errno} (needs Linux 6.5 or later)")]
    MountBeneath {
        /// The path inside the container.
        target: PathBuf,
        /// The kernel's answer.
        errno: Errno,
    },
    /// Step 5: the new mount is in place beneath, but the old one could not be detached: the
    /// container still sees the old content.
    #[error("detaching the old mount at {target}: {errno}")]
    DetachOld {
        /// The path inside the container.
        target: PathBuf,
        /// The kernel's answer.
        errno: Errno,
    },
    /// The thread that does the work could not be started or ended without an answer.
    #[error("running the remount thread")]
    Thread(#[source] io::Error),
    /// The signal could not be sent.
    #[error("sending {signal} to process {pid}: {errno}")]
    Signal {
        /// The container's process.
        pid: i32,
        /// The signal.
        signal: Signal,
        /// The kernel's answer.
        errno: Errno,
    },
}

impl ProcessRuntime {
    /// The running instance of `container` of pod `uid` and the bind mounts its launch spec
    /// names.
    ///
    /// # Errors
    /// [`LiveError::NotRunning`], or the spec could not be read.
    pub fn running_mounts(
        &self,
        uid: &PodUid,
        container: &str,
    ) -> Result<RunningMounts, LiveError> {
        let (pid, path) = self
            .exec_target(uid, container)
            .ok_or_else(|| not_running(container))?;
        let text = std::fs::read(&path).map_err(|source| LiveError::ReadLaunch {
            path: path.clone(),
            source,
        })?;
        let spec: LaunchSpec = serde_json::from_slice(&text)
            .map_err(|source| LiveError::ParseLaunch { path, source })?;
        Ok(RunningMounts {
            pid,
            mounts: spec.mounts,
        })
    }

    /// Replaces each of `binds` in the running instance `pid` of `container` (module docs,
    /// steps 1 to 5), in order; stops at the first failure (the binds before it are done).
    /// Blocks until done (a millisecond or two): call it from a blocking context.
    ///
    /// # Errors
    /// [`LiveError`]: the step that failed.
    pub fn rebind(
        &self,
        uid: &PodUid,
        container: &str,
        pid: i32,
        binds: Vec<Rebind>,
    ) -> Result<(), LiveError> {
        // (1)
        let path = format!("/proc/{pid}/ns/mnt");
        let ns = File::open(&path).map_err(|source| LiveError::OpenNamespace { pid, source })?;
        if self.exec_target(uid, container).map(|(p, _)| p) != Some(pid) {
            return Err(not_running(container));
        }
        std::thread::Builder::new()
            .name("nodelet-rebind".into())
            .spawn(move || rebind_in(&ns, &binds))
            .map_err(LiveError::Thread)?
            .join()
            .map_err(|_| {
                LiveError::Thread(io::Error::other(
                    "the remount thread ended without an answer",
                ))
            })?
    }

    /// Sends `signal` to the main process of `container`'s running instance; returns its pid.
    ///
    /// # Errors
    /// [`LiveError::NotRunning`], [`LiveError::Signal`].
    pub fn signal(&self, uid: &PodUid, container: &str, signal: Signal) -> Result<i32, LiveError> {
        let (pid, _) = self
            .exec_target(uid, container)
            .ok_or_else(|| not_running(container))?;
        kill(Pid::from_raw(pid), signal).map_err(|errno| LiveError::Signal {
            pid,
            signal,
            errno,
        })?;
        Ok(pid)
    }
}

fn not_running(container: &str) -> LiveError {
    LiveError::NotRunning {
        container: container.to_owned(),
    }
}

/// Steps 2 to 5, on a thread of its own that ends afterwards.
fn rebind_in(ns: &File, binds: &[Rebind]) -> Result<(), LiveError> {
    let clone = OpenTreeFlags::OPEN_TREE_CLONE
        | OpenTreeFlags::OPEN_TREE_CLOEXEC
        | OpenTreeFlags::AT_RECURSIVE;
    // (2)
    let trees = binds
        .iter()
        .map(|b| {
            open_tree(CWD, &b.source, clone).map_err(|e| LiveError::OpenSource {
                path: b.source.clone(),
                errno: errno(e),
            })
        })
        .collect::<Result<Vec<OwnedFd>, _>>()?;
    // (3)
    let enter = |step: &'static str| move |errno| LiveError::EnterNamespace { step, errno };
    unshare(CloneFlags::CLONE_FS).map_err(enter("unshare(CLONE_FS)"))?;
    setns(ns, CloneFlags::CLONE_NEWNS).map_err(enter("setns"))?;
    unshare(CloneFlags::CLONE_NEWNS).map_err(enter("unshare(CLONE_NEWNS)"))?;
    let private = MsFlags::MS_REC | MsFlags::MS_PRIVATE;
    mount(None::<&str>, "/", None::<&str>, private, None::<&str>)
        .map_err(enter("making the copy private"))?;
    // (4)
    let mut staged = Vec::with_capacity(binds.len());
    for (tree, b) in trees.iter().zip(binds) {
        staged.push(stage(tree, b, clone).map_err(|errno| LiveError::Stage {
            target: b.target.clone(),
            errno,
        })?);
    }
    // (5)
    setns(ns, CloneFlags::CLONE_NEWNS).map_err(enter("setns"))?;
    for (copy, b) in staged.iter().zip(binds) {
        let beneath = MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_BENEATH;
        move_mount(copy, "", CWD, &b.target, beneath).map_err(|e| LiveError::MountBeneath {
            target: b.target.clone(),
            errno: errno(e),
        })?;
        umount2(&b.target, MntFlags::MNT_DETACH).map_err(|errno| LiveError::DetachOld {
            target: b.target.clone(),
            errno,
        })?;
    }
    Ok(())
}

/// Step 4 for one mount, in the thread's private copy of the container's namespace.
fn stage(tree: &OwnedFd, b: &Rebind, clone: OpenTreeFlags) -> Result<OwnedFd, Errno> {
    let target: &Path = &b.target;
    // The old mount's root is the old source, removed by the swap: nothing can be mounted on
    // it. In this copy only, it goes first.
    umount2(target, MntFlags::MNT_DETACH)?;
    move_mount(
        tree,
        "",
        CWD,
        target,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(errno)?;
    if b.read_only {
        crate::sandbox::binds::remount_read_only(target)?;
    }
    let slave = MsFlags::MS_REC | MsFlags::MS_SLAVE;
    mount(None::<&str>, target, None::<&str>, slave, None::<&str>)?;
    open_tree(CWD, target, clone).map_err(errno)
}

fn errno(e: rustix::io::Errno) -> Errno {
    Errno::from_raw(e.raw_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_error_keeps_its_number_across_the_two_crates() {
        let e = rustix::io::Errno::INVAL;
        assert_eq!(errno(e), Errno::EINVAL);
    }

    #[test]
    fn a_failed_mount_beneath_names_the_kernel_it_needs() {
        let e = LiveError::MountBeneath {
            target: PathBuf::from("/etc/app.conf"),
            errno: Errno::EINVAL,
        };
        assert_eq!(
            e.to_string(),
            "mounting beneath /etc/app.conf: EINVAL: Invalid argument (needs Linux 6.5 or later)"
        );
    }
}
