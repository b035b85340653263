//! Step 5's `/dev`: the container's own, as runc and containerd make it — a small tmpfs with the
//! few device nodes a program needs, a `devpts` instance, a `/dev/shm` and the usual symbolic
//! links — so that nothing the container creates or changes in `/dev` reaches the host's.

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use nix::mount::{MsFlags, mount};
use nix::sys::stat::{Mode, SFlag, mknod};
use nix::unistd::{Gid, Uid, chown};

use super::binds;
use super::error::SandboxError;
use super::paths::{self, DEV};

/// The host's device nodes the container gets in `/dev` (runc's default devices).
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// The symbolic links in `/dev` and their targets (runc's).
const LINKS: [(&str, &str); 6] = [
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
    ("core", "/proc/kcore"),
];

/// The `/dev` tmpfs's options: runc's.
const DEV_OPTIONS: &str = "mode=755,size=65536k";

/// A new `devpts` instance's options: runc's without `gid=5` (a `tty` group the host may number
/// otherwise, and a user namespace does not map), so a terminal gets its opener's group.
const DEVPTS_OPTIONS: &str = "newinstance,ptmxmode=0666,mode=0620";

/// The host's `devpts`, bound when the kernel refuses a new instance.
const HOST_PTS: &str = "/dev/pts";

/// How the device nodes get into the container's `/dev`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Nodes {
    /// Made with `mknod(2)` like the host's (type, numbers, mode, owner), as root: a `chmod`
    /// or `chown` inside changes the container's node only.
    Made,
    /// The host's, each bound on an empty file: in a user namespace, which may not make device
    /// nodes nor open one on a filesystem mounted there. A `chmod` inside is refused (they are
    /// owned by ids the namespace does not map).
    Bound,
}

/// Mounts the container's `/dev` on the root's (`root` is `<scratch>/root`) and fills it:
///
/// 1. a tmpfs (`nosuid`, `strictatime`, mode 0755, 64 MiB) on `<root>/dev`, created if
///    missing;
/// 2. `null`, `zero`, `full`, `random`, `urandom` and `tty` as `nodes` says; one the host
///    lacks, or that is not a character device there, is left out (logged at debug level);
/// 3. `pts`: a new `devpts` instance (`nosuid`, `noexec`, `ptmxmode=0666,mode=0620`); if the
///    kernel refuses, the host's `/dev/pts` bound; failing that, an empty directory (both
///    logged at debug level);
/// 4. `shm`: a tmpfs (`nosuid`, `nodev`, `noexec`, mode 1777);
/// 5. the links `fd`, `stdin`, `stdout`, `stderr` (into `/proc/self/fd`), `ptmx` (to
///    `pts/ptmx`) and `core` (to `/proc/kcore`).
///
/// The host's mounts below `/dev` (`/dev/shm`, `/dev/pts`, `/dev/mqueue`, ...) are not
/// bound: the caller leaves them out.
///
/// # Errors
///
/// [`SandboxError::PrepareDev`], naming the path in the container.
pub(super) fn mount_dev(root: &Path, nodes: Nodes) -> Result<(), SandboxError> {
    let dev_err = |name: &str| {
        let path = Path::new(DEV).join(name);
        move |e: io::Error| SandboxError::PrepareDev(path, e)
    };
    // (1)
    let dev = paths::resolve_in_root(root, Path::new(DEV))
        .and_then(|dev| {
            fs::create_dir_all(&dev)?;
            let flags = MsFlags::MS_NOSUID | MsFlags::MS_STRICTATIME;
            binds::mount_tmpfs(&dev, flags, DEV_OPTIONS)?;
            Ok(dev)
        })
        .map_err(|e| SandboxError::PrepareDev(PathBuf::from(DEV), e))?;
    // (2)
    for name in DEVICES {
        let host = Path::new(DEV).join(name);
        let meta = match fs::metadata(&host) {
            Ok(meta) if meta.file_type().is_char_device() => meta,
            _ => {
                let path = host.display();
                tracing::debug!(%path, "no such character device on the host, left out");
                continue;
            }
        };
        let inside = dev.join(name);
        match nodes {
            Nodes::Made => make_node(&inside, &meta),
            Nodes::Bound => bind_node(&host, &inside),
        }
        .map_err(dev_err(name))?;
    }
    // (3)
    let pts = dev.join("pts");
    fs::create_dir(&pts).map_err(dev_err("pts"))?;
    mount_pts(&pts);
    // (4)
    let shm = dev.join("shm");
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    fs::create_dir(&shm)
        .and_then(|()| Ok(binds::mount_tmpfs(&shm, flags, "mode=1777")?))
        .map_err(dev_err("shm"))?;
    // (5)
    for (name, target) in LINKS {
        symlink(target, dev.join(name)).map_err(dev_err(name))?;
    }
    Ok(())
}

/// A character device at `path` like the host's whose metadata is `host`.
fn make_node(path: &Path, host: &fs::Metadata) -> io::Result<()> {
    let mode = host.mode() & 0o777;
    mknod(
        path,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(mode),
        host.rdev(),
    )?;
    let (uid, gid) = (Uid::from_raw(host.uid()), Gid::from_raw(host.gid()));
    chown(path, Some(uid), Some(gid))?;
    // mknod's mode went through the umask.
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

/// The host's device node `host` bound on a new empty file at `path`.
fn bind_node(host: &Path, path: &Path) -> io::Result<()> {
    binds::create_target(path, false)?;
    Ok(binds::bind(host, path, MsFlags::empty())?)
}

/// Step 3 of [`mount_dev`] on the directory `pts`.
fn mount_pts(pts: &Path) {
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    let Err(errno) = mount(
        Some("devpts"),
        pts,
        Some("devpts"),
        flags,
        Some(DEVPTS_OPTIONS),
    ) else {
        return;
    };
    tracing::debug!(%errno, "no new devpts instance, binding the host's");
    if let Err(errno) = binds::bind(Path::new(HOST_PTS), pts, MsFlags::empty()) {
        tracing::debug!(%errno, "host devpts not bound, /dev/pts left empty");
    }
}
