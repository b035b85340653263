//! [`remove_pods`]: what the volume manager leaves in `<root>/pods` when its agent stops — the
//! pods' directories and the tmpfs mounts of their secret and token volumes, kept for the next
//! agent to adopt — unmounted and removed, for a reset of the node or an agent told to clean
//! up at exit. Steps (markers `// (n)`):
//!
//! 1. `<root>/pods` resolved (symbolic links followed once, here); nothing there: nothing to do;
//! 2. every mount strictly inside it unmounted, deepest first (busy: detached), never one
//!    outside it;
//! 3. if no mount is left inside, `<root>/pods` removed (symbolic links removed, never
//!    followed); else nothing is removed.

use std::path::{Path, PathBuf};

use nix::errno::Errno;

/// What [`remove_pods`] did (or, with `dry_run`, would do).
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct PodsRemoved {
    /// Mount points unmounted, deepest first.
    pub unmounted: Vec<PathBuf>,
    /// `<root>/pods`, when it was there and is removed.
    pub removed: Option<PathBuf>,
}

/// Why [`remove_pods`] stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemovePodsError {
    /// `/proc/self/mountinfo` could not be read (2).
    #[error("reading /proc/self/mountinfo")]
    ReadMounts(#[source] std::io::Error),
    /// A mount inside `<root>/pods` would not go (2); nothing was removed.
    #[error("unmounting {}", mount.display())]
    Unmount {
        /// The mount point.
        mount: PathBuf,
        /// Why.
        #[source]
        source: Errno,
    },
    /// A mount is still there after the unmounts (3); nothing was removed.
    #[error("{} is still mounted; nothing under {} was removed", mount.display(), pods.display())]
    StillMounted {
        /// The mount point.
        mount: PathBuf,
        /// `<root>/pods`.
        pods: PathBuf,
    },
    /// Removing `<root>/pods` failed part way (3).
    #[error("removing {}", pods.display())]
    Remove {
        /// `<root>/pods`.
        pods: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Unmounts every mount inside `<root>/pods`, then removes `<root>/pods` if nothing stays
/// mounted (module docs); with `dry_run` only says what it would do. The caller makes sure no
/// agent runs on `root` (it holds the root directory's lock: `nodelet reset`, or the agent
/// itself after its shutdown).
///
/// # Errors
/// [`RemovePodsError`], naming the step: a mount that would not go (then nothing is removed),
/// or a file that could not be removed.
pub fn remove_pods(root: &Path, dry_run: bool) -> Result<PodsRemoved, RemovePodsError> {
    let mut report = PodsRemoved::default();
    // (1)
    let Ok(pods) = nodelet_core::PodDirs::new(root).pods().canonicalize() else {
        return Ok(report);
    };
    // (2)
    for mount in mounts_inside(&pods).map_err(RemovePodsError::ReadMounts)? {
        if !dry_run {
            nix::mount::umount2(&mount, nix::mount::MntFlags::empty())
                .or_else(|e| match e {
                    Errno::EBUSY => nix::mount::umount2(&mount, nix::mount::MntFlags::MNT_DETACH),
                    other => Err(other),
                })
                .map_err(|source| RemovePodsError::Unmount {
                    mount: mount.clone(),
                    source,
                })?;
        }
        report.unmounted.push(mount);
    }
    // (3)
    if !dry_run {
        let still = mounts_inside(&pods).map_err(RemovePodsError::ReadMounts)?;
        if let Some(mount) = still.into_iter().next() {
            return Err(RemovePodsError::StillMounted { mount, pods });
        }
        std::fs::remove_dir_all(&pods).map_err(|source| RemovePodsError::Remove {
            pods: pods.clone(),
            source,
        })?;
    }
    report.removed = Some(pods);
    Ok(report)
}

/// Mount points strictly inside `dir`, deepest first (2). `dir` is canonical, so a symlink can
/// never lead outside it here: mount points in `mountinfo` are canonical paths too.
fn mounts_inside(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mut found: Vec<PathBuf> = info
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape(field)))
        .filter(|p| p.starts_with(dir) && p != dir)
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    Ok(found)
}

/// `mountinfo` escapes space, tab, newline and backslash as `\NNN` (octal).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let v = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dry_run_names_the_pods_directory_and_a_real_run_removes_it_and_nothing_beside_it() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let volume = root
            .path()
            .join("pods/uid-1/volumes/kubernetes.io~configmap/cfg");
        std::fs::create_dir_all(&volume).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(root.path().join("beside"), "kept").unwrap_or_else(|e| panic!("{e}"));
        let pods = root
            .path()
            .join("pods")
            .canonicalize()
            .unwrap_or_else(|e| panic!("{e}"));

        let dry = remove_pods(root.path(), true).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(dry.removed.as_deref(), Some(pods.as_path()));
        assert!(dry.unmounted.is_empty());
        assert!(volume.is_dir(), "a dry run changed nothing");

        let done = remove_pods(root.path(), false).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(done.removed.as_deref(), Some(pods.as_path()));
        assert!(!pods.exists());
        assert!(root.path().join("beside").is_file());
        let again = remove_pods(root.path(), false).unwrap_or_else(|e| panic!("{e}"));
        assert!(again.removed.is_none(), "nothing left to remove");
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape("/a\\040b/c\\134d"), "/a b/c\\d");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("/trailing\\04"), "/trailing\\04");
    }
}
