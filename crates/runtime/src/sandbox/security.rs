//! The security steps of the init process (and of `container-exec`): the read-only root and
//! the kernel trees a container that is not privileged may not write (step 7b), the
//! capability bounding set (before the user switch, step 9a) and the capabilities and
//! `no_new_privs` the program runs with (after it, step 9b).

use std::fs;
use std::path::{Path, PathBuf};

use caps::{CapSet, Capability, CapsHashSet};
use nix::mount::MsFlags;
use nix::unistd::Uid;

use super::binds;
use super::error::SandboxError;
use super::paths;
use crate::spec::LaunchSpec;

/// Paths under `/proc` a container that is not privileged sees read-only (runc's
/// `readonlyPaths`, as containerd sets them).
const READ_ONLY_PATHS: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Paths a container that is not privileged does not see (runc's `maskedPaths`, as containerd
/// sets them): a file is covered by `/dev/null`, a directory by an empty read-only tmpfs.
const MASKED_PATHS: [&str; 11] = [
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// Step 7b, under `root` before `pivot_root` (PW-42, PW-44); `as_root`: the init process runs
/// as root (not in a user namespace of its own):
/// 1. not privileged (and the agent is root): `/sys` and every mount below it read-only, the
///    read-only paths of `/proc` bound read-only on themselves, the masked paths covered;
/// 2. `read_only_root`: the root and the container's `/tmp` remounted read-only (the
///    volumes, `/dev` and `/proc` keep their own flags). Without root the root is a tree of
///    overlays that cannot be made read-only at once: refused.
///
/// # Errors
/// [`SandboxError::ProtectKernelTree`], [`SandboxError::ReadOnlyRoot`],
/// [`SandboxError::ReadOnlyRootWithoutRoot`].
pub(super) fn protect(root: &Path, spec: &LaunchSpec, as_root: bool) -> Result<(), SandboxError> {
    // (1)
    if !spec.privileged && as_root {
        let mountinfo = fs::read("/proc/self/mountinfo").map_err(SandboxError::ReadMountInfo)?;
        let sys = root.join("sys");
        for mount in paths::mount_points(&mountinfo) {
            if mount.starts_with(&sys) {
                binds::remount_read_only(&mount)
                    .map_err(|e| SandboxError::ProtectKernelTree(mount.clone(), e))?;
            }
        }
        for path in READ_ONLY_PATHS {
            let inside = paths::under(root, Path::new(path));
            if fs::symlink_metadata(&inside).is_err() {
                continue;
            }
            binds::bind(&inside, &inside, MsFlags::MS_REC)
                .and_then(|()| binds::remount_read_only(&inside))
                .map_err(|e| SandboxError::ProtectKernelTree(inside.clone(), e))?;
        }
        let null = root.join("dev/null");
        for path in MASKED_PATHS {
            let inside = paths::under(root, Path::new(path));
            let Ok(meta) = fs::symlink_metadata(&inside) else {
                continue;
            };
            let masked = match meta.is_dir() {
                true => binds::mount_tmpfs(
                    &inside,
                    MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                    "mode=0755,size=4k",
                ),
                false => binds::bind(&null, &inside, MsFlags::empty()),
            };
            masked.map_err(|e| SandboxError::ProtectKernelTree(inside.clone(), e))?;
        }
    }
    // (2)
    if spec.read_only_root {
        if !as_root {
            return Err(SandboxError::ReadOnlyRootWithoutRoot);
        }
        for target in [
            root.to_path_buf(),
            paths::under(root, Path::new(paths::TMP)),
        ] {
            binds::remount_read_only(&target)
                .map_err(|e| SandboxError::ReadOnlyRoot(target.clone(), e))?;
        }
    }
    Ok(())
}

/// Step 9a, before the user switch (PW-44): every capability not in `spec.capabilities` leaves
/// the bounding set, so no later `execve` can gain it; the ambient set is emptied. Nothing to
/// do for a privileged container.
///
/// # Errors
/// [`SandboxError::Capabilities`].
pub(super) fn limit_bounding_set(spec: &LaunchSpec) -> Result<(), SandboxError> {
    let Some(kept) = wanted(spec)? else {
        return Ok(());
    };
    let err = |step| move |source| SandboxError::Capabilities { step, source };
    let bounding = caps::read(None, CapSet::Bounding).map_err(err("reading the bounding set"))?;
    for cap in bounding.difference(&kept) {
        caps::drop(None, CapSet::Bounding, *cap).map_err(err("dropping from the bounding set"))?;
    }
    // The ambient set may be unsupported (Linux before 4.3): then it is empty anyway.
    let _ = caps::clear(None, CapSet::Ambient);
    Ok(())
}

/// Step 9b, after the user switch (PW-43, PW-44): a process still root keeps exactly
/// `spec.capabilities` (effective and permitted; inheritable empty), as runc sets them; then
/// `no_new_privs` when asked. (A process of another user lost its capabilities at the switch.)
///
/// # Errors
/// [`SandboxError::Capabilities`], [`SandboxError::NoNewPrivs`].
pub(super) fn restrict_process(spec: &LaunchSpec) -> Result<(), SandboxError> {
    if let Some(kept) = wanted(spec)? {
        let err = |step| move |source| SandboxError::Capabilities { step, source };
        caps::clear(None, CapSet::Inheritable).map_err(err("clearing the inheritable set"))?;
        if Uid::effective().is_root() {
            caps::set(None, CapSet::Effective, &kept).map_err(err("setting the effective set"))?;
            caps::set(None, CapSet::Permitted, &kept).map_err(err("setting the permitted set"))?;
        }
    }
    if spec.no_new_privs {
        nix::sys::prctl::set_no_new_privs().map_err(SandboxError::NoNewPrivs)?;
    }
    Ok(())
}

/// The capabilities the spec keeps; `None` for every one (privileged).
fn wanted(spec: &LaunchSpec) -> Result<Option<CapsHashSet>, SandboxError> {
    let Some(names) = spec.capabilities.as_ref() else {
        return Ok(None);
    };
    let mut set = CapsHashSet::new();
    for name in names {
        let cap: Capability = name.parse().map_err(|source| SandboxError::Capabilities {
            step: "reading the spec's capabilities",
            source,
        })?;
        set.insert(cap);
    }
    Ok(Some(set))
}

/// The host's `/dev`, bound recursively at `<root>/dev` for a privileged container (its
/// devices, as containerd gives a privileged container the host's).
///
/// # Errors
/// [`SandboxError::HostDev`].
pub(super) fn bind_host_dev(root: &Path) -> Result<(), SandboxError> {
    let target: PathBuf = paths::under(root, Path::new(paths::DEV));
    fs::create_dir_all(&target).map_err(SandboxError::HostDev)?;
    binds::bind(Path::new(paths::DEV), &target, MsFlags::MS_REC)
        .map_err(|e| SandboxError::HostDev(e.into()))
}
