//! Host paths as the init process reads them: the mount points of `/proc/self/mountinfo`, the
//! host trees it treats specially, and paths resolved inside the container's future root.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;

/// Host mounts bound recursively and writable rather than one by one and read-only.
pub(super) const KERNEL_TREES: [&str; 2] = ["/proc", "/sys"];

/// The container's own `/dev`, a tmpfs of its own: no host mount at or below it is bound.
pub(super) const DEV: &str = "/dev";

/// The directory that gets a fresh, empty tmpfs of its own.
pub(super) const TMP: &str = "/tmp";

/// Symbolic links followed while resolving one path (the kernel's `MAXSYMLINKS`).
const MAX_SYMLINKS: u32 = 40;

/// The mount points of `/proc/self/mountinfo` (field 5), in file order, unescaped.
pub(super) fn mount_points(mountinfo: &[u8]) -> Vec<PathBuf> {
    mountinfo
        .split(|&b| b == b'\n')
        .filter_map(|line| line.split(|&b| b == b' ').nth(4))
        .map(|field| PathBuf::from(OsString::from_vec(unescape_octal(field))))
        .collect()
}

/// Decodes the kernel's `\ooo` escapes (`\040` for a space).
fn unescape_octal(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut rest = field;
    while let Some((&first, tail)) = rest.split_first() {
        match tail {
            [a @ b'0'..=b'3', b @ b'0'..=b'7', c @ b'0'..=b'7', ..] if first == b'\\' => {
                out.push((a - b'0') * 64 + (b - b'0') * 8 + (c - b'0'));
                rest = &tail[3..];
            }
            _ => {
                out.push(first);
                rest = tail;
            }
        }
    }
    out
}

/// `path` (absolute, in the container) as a host path under `root`, its symbolic links followed
/// inside `root` (as they resolve once `root` is `/`), never on the host. Missing components
/// are kept as they are.
pub(super) fn resolve_in_root(root: &Path, path: &Path) -> io::Result<PathBuf> {
    fn names(path: &Path) -> impl DoubleEndedIterator<Item = OsString> + '_ {
        path.components().filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
    }
    let mut pending: Vec<OsString> = names(path).rev().collect();
    let mut inside = PathBuf::new();
    let mut links = 0;
    while let Some(name) = pending.pop() {
        if name == ".." {
            inside.pop();
            continue;
        }
        let candidate = root.join(&inside).join(&name);
        if !fs::symlink_metadata(&candidate).is_ok_and(|m| m.file_type().is_symlink()) {
            inside.push(name);
            continue;
        }
        links += 1;
        if links > MAX_SYMLINKS {
            return Err(Errno::ELOOP.into());
        }
        let link = fs::read_link(&candidate)?;
        if link.is_absolute() {
            inside.clear();
        }
        pending.extend(names(&link).rev());
    }
    Ok(root.join(inside))
}

/// `path` (absolute, in the container) without its root prefix, to join under a root.
pub(super) fn under(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_mount_points_are_unescaped_in_file_order() {
        let mountinfo = b"27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
            22 27 0:21 / /proc rw,relatime - proc proc rw\n\
            90 27 0:50 / /mnt/a\\040b\\011c\\134d rw - tmpfs tmpfs rw\n";
        assert_eq!(
            mount_points(mountinfo),
            [
                PathBuf::from("/"),
                PathBuf::from("/proc"),
                PathBuf::from("/mnt/a b\tc\\d")
            ]
        );
    }

    #[test]
    fn a_backslash_without_three_octal_digits_is_kept() {
        assert_eq!(unescape_octal(br"a\09x\4"), br"a\09x\4");
        assert_eq!(unescape_octal(br"\012\400"), b"\n\\400");
    }

    #[test]
    fn symlinks_resolve_inside_the_root_not_on_the_host() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        fs::create_dir_all(root.join("run/real")).unwrap();
        std::os::unix::fs::symlink("/run", root.join("var-run")).unwrap();
        std::os::unix::fs::symlink("../real", root.join("run/rel")).unwrap();
        std::os::unix::fs::symlink("/loop", root.join("loop")).unwrap();

        let resolve = |p: &str| resolve_in_root(root, Path::new(p));
        assert_eq!(resolve("/var-run/x").unwrap(), root.join("run/x"));
        assert_eq!(
            resolve("/run/rel/missing/y").unwrap(),
            root.join("real/missing/y")
        );
        assert_eq!(resolve("/../../etc").unwrap(), root.join("etc"));
        assert_eq!(
            resolve("/loop/z").unwrap_err().raw_os_error(),
            Some(Errno::ELOOP as i32)
        );
    }

    #[test]
    fn a_container_path_joins_under_the_root() {
        let root = Path::new("/s/root");
        assert_eq!(under(root, Path::new("/etc/x")), Path::new("/s/root/etc/x"));
        assert_eq!(under(root, Path::new("/")), root);
    }
}
