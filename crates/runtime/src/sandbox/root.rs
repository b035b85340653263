//! Steps 5 to 7 of the init process: the container's root on the scratch directory with the
//! host's mounts in it, the masked directories covered, and the spec's bind mounts.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use nix::mount::MsFlags;

use super::binds::{self, ReadOnlyBindError};
use super::dev::{self, Nodes};
use super::error::SandboxError;
use super::mirror::{self, Plan};
use super::paths::{self, DEV, KERNEL_TREES, TMP};
use super::security;
use crate::spec::LaunchSpec;

/// How the init process holds the privilege to mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Privilege {
    /// It runs as root on the host.
    Root,
    /// It runs as another user, in a user namespace it made.
    UserNamespace,
}

/// Step 5: the scratch tmpfs, the root (an overlay of `/` as root; a copy of the host's tree
/// without, see [`mirror`]), the host's other mounts (but those under a masked directory:
/// hidden anyway, and a copy would pin, say, another pod's tmpfs volume while the container
/// runs; and those at or below `/dev`), the container's own `/dev` (see [`dev`]) and a fresh
/// tmpfs on `/tmp`; returns `<scratch>/root`. Leaves the scratch directory the working
/// directory.
pub(super) fn build_root(spec: &LaunchSpec, privilege: Privilege) -> Result<PathBuf, SandboxError> {
    let scratch = fs::canonicalize(&spec.scratch)
        .map_err(|e| SandboxError::Scratch(spec.scratch.clone(), e))?;
    let root = scratch.join("root");
    let prepare = || -> io::Result<()> {
        binds::mount_tmpfs(&scratch, MsFlags::empty(), "mode=0755")?;
        for dir in ["upper", "work", "root"] {
            fs::create_dir(scratch.join(dir))?;
        }
        // Layer paths relative to the scratch directory need no escaping of `,` or `:`.
        std::env::set_current_dir(&scratch)
    };
    prepare().map_err(|e| SandboxError::Scratch(scratch.clone(), e))?;

    let mountinfo = fs::read("/proc/self/mountinfo").map_err(SandboxError::ReadMountInfo)?;
    let host_mounts: Vec<PathBuf> = paths::mount_points(&mountinfo)
        .into_iter()
        .filter(|host| {
            host != Path::new("/")
                && !host.starts_with(DEV)
                && !host.starts_with(&scratch)
                && !spec.masked.iter().any(|dir| host.starts_with(dir))
        })
        .collect();
    let plan = match privilege {
        Privilege::Root => {
            let (lower, upper, work) = (Path::new("/"), Path::new("upper"), Path::new("work"));
            binds::mount_overlay(lower, upper, work, Path::new("root"))
                .map_err(|e| SandboxError::MountOverlay(root.clone(), e))?;
            None
        }
        Privilege::UserNamespace => {
            binds::mount_tmpfs(&root, MsFlags::empty(), "mode=0755")
                .map_err(|e| SandboxError::Scratch(root.clone(), e.into()))?;
            let targets = spec.mounts.iter();
            let creation_dirs = targets.filter_map(|m| mirror::creation_dir(&m.target));
            let plan = Plan::new(&host_mounts, &spec.masked, &scratch, creation_dirs);
            mirror::populate(&root, &scratch, &plan)?;
            Some(plan)
        }
    };
    bind_host_mounts(&root, &host_mounts, plan.as_ref())?;

    let nodes = match privilege {
        Privilege::Root => Nodes::Made,
        Privilege::UserNamespace => Nodes::Bound,
    };
    match spec.privileged {
        true => security::bind_host_dev(&root)?,
        false => dev::mount_dev(&root, nodes)?,
    }
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    paths::resolve_in_root(&root, Path::new(TMP))
        .and_then(|target| {
            fs::create_dir_all(&target)?;
            Ok(binds::mount_tmpfs(&target, flags, "mode=1777")?)
        })
        .map_err(|e| SandboxError::MountTmpfs(PathBuf::from(TMP), e))?;
    Ok(root)
}

/// Binds each host mount (parent before child) at its path under the root: `/proc` and `/sys`
/// recursively and writable, the others one by one and read-only. Skips (logged at debug
/// level) a mount shadowed in the root or that cannot be bound or made read-only, and, without
/// root, one the [`Plan`] copies.
fn bind_host_mounts(
    root: &Path,
    host_mounts: &[PathBuf],
    plan: Option<&Plan>,
) -> Result<(), SandboxError> {
    let mut recursive: Vec<&Path> = Vec::new();
    for host in host_mounts {
        if recursive.iter().any(|tree| host.starts_with(tree))
            || plan.is_some_and(|plan| plan.is_copied(host))
        {
            continue;
        }
        let path = host.display();
        let inside = paths::under(root, host);
        let reachable = paths::resolve_in_root(root, host).is_ok_and(|p| p == inside);
        if !reachable || fs::symlink_metadata(&inside).is_err() {
            tracing::debug!(%path, "host mount shadowed, not bound");
            continue;
        }
        if KERNEL_TREES.iter().any(|tree| host.starts_with(tree)) {
            match binds::bind(host, &inside, MsFlags::MS_REC) {
                Ok(()) => recursive.push(host),
                Err(errno) => tracing::debug!(%path, %errno, "host mount not bound"),
            }
            continue;
        }
        match binds::bind_read_only(host, &inside) {
            Ok(()) => {}
            // E.g. a FUSE mount root cannot enter, nor (without root) a mount with mounts
            // below it: the container sees the directory beneath, read-only or in memory.
            Err(ReadOnlyBindError::Bind(errno)) => {
                tracing::debug!(%path, %errno, "host mount not bound");
            }
            Err(ReadOnlyBindError::Remount(errno)) => {
                tracing::debug!(%path, %errno, "host mount not read-only, detached");
            }
            Err(ReadOnlyBindError::Detach(errno, _)) => {
                return Err(SandboxError::BindHostReadOnly(host.clone(), errno));
            }
        }
    }
    Ok(())
}

/// Step 6: covers each masked directory visible in the root with an empty read-only tmpfs.
pub(super) fn mask(root: &Path, masked: &[PathBuf]) -> Result<(), SandboxError> {
    let flags = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    for dir in masked {
        // Not visible in the container (missing, or under its private /tmp): nothing to hide.
        match paths::resolve_in_root(root, dir) {
            Ok(target) if target.is_dir() => {
                binds::mount_tmpfs(&target, flags, "mode=0755,size=4k")
                    .map_err(|e| SandboxError::Mask(dir.clone(), e.into()))?
            }
            Ok(_) => {}
            Err(err) => return Err(SandboxError::Mask(dir.clone(), err)),
        }
    }
    Ok(())
}

/// Step 7 for one mount: check the source, create the target, bind, remount read-only.
pub(super) fn bind_volume(
    root: &Path,
    source: &Path,
    target: &Path,
    read_only: bool,
) -> Result<(), SandboxError> {
    let is_dir = fs::metadata(source)
        .map_err(|e| SandboxError::MountSource(source.to_path_buf(), target.to_path_buf(), e))?
        .is_dir();
    let create_err = |e| SandboxError::CreateMountTarget(target.to_path_buf(), e);
    let host_target = paths::resolve_in_root(root, target).map_err(create_err)?;
    match fs::metadata(&host_target) {
        Ok(meta) if meta.is_dir() != is_dir => {
            let (target, source) = (target.to_path_buf(), source.to_path_buf());
            return Err(SandboxError::MountTargetType(target, source));
        }
        Ok(_) => {}
        Err(_) => binds::create_target(&host_target, is_dir).map_err(create_err)?,
    }
    let bind_err = |errno| SandboxError::BindMount {
        source_path: source.to_path_buf(),
        target: target.to_path_buf(),
        source: errno,
    };
    binds::bind(source, &host_target, MsFlags::MS_REC).map_err(bind_err)?;
    if read_only {
        binds::remount_read_only(&host_target).map_err(bind_err)?;
    }
    Ok(())
}
