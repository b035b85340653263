//! The mount calls the init process makes, each one `mount(2)` or two: bind mounts, read-only
//! remounts that keep the flags the kernel locks, tmpfs and overlay mounts.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sys::statvfs::{FsFlags, statvfs};

/// Why [`bind_read_only`] left nothing mounted, or left a writable bind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReadOnlyBindError {
    /// The bind failed: nothing is mounted.
    Bind(Errno),
    /// The bind could not be made read-only and was detached again: nothing is mounted.
    Remount(Errno),
    /// The bind could not be made read-only (the first errno) nor detached (the second): a
    /// writable bind stays, and the container must not start.
    Detach(Errno, Errno),
}

/// A bind mount (`MS_BIND` and `flags`) of `source` on `target`.
pub(super) fn bind(source: &Path, target: &Path, flags: MsFlags) -> nix::Result<()> {
    let flags = MsFlags::MS_BIND | flags;
    mount(Some(source), target, None::<&str>, flags, None::<&str>)
}

/// A read-only bind of `source` (that one mount, not those below it) on `target`; a bind that
/// cannot be made read-only is detached.
pub(super) fn bind_read_only(source: &Path, target: &Path) -> Result<(), ReadOnlyBindError> {
    bind(source, target, MsFlags::empty()).map_err(ReadOnlyBindError::Bind)?;
    remount_read_only(target).map_err(|errno| match umount2(target, MntFlags::MNT_DETACH) {
        Ok(()) => ReadOnlyBindError::Remount(errno),
        Err(detach) => ReadOnlyBindError::Detach(errno, detach),
    })
}

/// Makes the bind mount at `target` read-only, keeping the `nosuid`, `nodev` and `noexec` it
/// has (in a user namespace, the kernel locks those of mounts inherited from the host, and a
/// remount that drops one fails with `EPERM`). No atime flag is given, so the kernel keeps the
/// mount's own (locked too).
pub(crate) fn remount_read_only(target: &Path) -> nix::Result<()> {
    let had = statvfs(target)?.flags();
    let mut flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
    for (st, ms) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
    ] {
        if had.contains(st) {
            flags |= ms;
        }
    }
    mount(None::<&str>, target, None::<&str>, flags, None::<&str>)
}

/// A tmpfs on `target` with `flags` and options `data`.
pub(super) fn mount_tmpfs(target: &Path, flags: MsFlags, data: &str) -> nix::Result<()> {
    mount(Some("tmpfs"), target, Some("tmpfs"), flags, Some(data))
}

/// An overlay on `target`: `lower` read-only beneath, `upper` and `work` (empty directories on
/// one filesystem) taking the writes. Paths in the options are escaped as overlayfs reads them.
pub(super) fn mount_overlay(
    lower: &Path,
    upper: &Path,
    work: &Path,
    target: &Path,
) -> nix::Result<()> {
    let mut options = b"lowerdir=".to_vec();
    escape_option(lower, &mut options);
    options.extend_from_slice(b",upperdir=");
    escape_option(upper, &mut options);
    options.extend_from_slice(b",workdir=");
    escape_option(work, &mut options);
    let options = OsStr::from_bytes(&options);
    let flags = MsFlags::empty();
    mount(
        Some("overlay"),
        target,
        Some("overlay"),
        flags,
        Some(options),
    )
}

/// Creates a missing mount target and its parents (in the container's writable root): a
/// directory, or an empty file.
pub(super) fn create_target(path: &Path, is_dir: bool) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    if is_dir {
        return fs::create_dir(path);
    }
    let _file = fs::File::options().append(true).create(true).open(path)?;
    Ok(())
}

/// Appends `path` to `out` as an overlayfs option value: `\`, `,` (between options) and `:`
/// (between lower layers) escaped with a backslash.
fn escape_option(path: &Path, out: &mut Vec<u8>) {
    for &byte in path.as_os_str().as_bytes() {
        if matches!(byte, b'\\' | b',' | b':') {
            out.push(b'\\');
        }
        out.push(byte);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_options_escape_separators() {
        let escaped = |path: &str| {
            let mut out = Vec::new();
            escape_option(Path::new(path), &mut out);
            out
        };
        assert_eq!(escaped("/a,b:c\\d/e"), br"/a\,b\:c\\d/e");
        assert_eq!(escaped("upper/3"), b"upper/3");
    }
}
