//! Step 5 without root: the container's root as a tmpfs holding a copy of the host's tree, made
//! of overlays of the host's directories where overlayfs takes them.
//!
//! In a user namespace, the mounts inherited from the host are locked to their parents (their
//! contents must not be uncovered), and overlayfs refuses a lower layer with a locked mount
//! below it: `lowerdir=/` fails with `EINVAL`, and so does a plain bind of a host mount with
//! mounts below it. So the tree is copied from `/` down to every place something is mounted or
//! created, and overlaid from there:
//!
//! 1. A [`Plan`] names the host directories to copy — those with a host mount point, a masked
//!    directory below them, and the directory where a missing mount target is to be created
//!    (with their parents) — and the paths that get only an empty
//!    directory or file: leaf host mount points (bound there afterwards), masked directories,
//!    the scratch directory, `/proc`, `/sys`, `/dev` and `/tmp`.
//! 2. Each entry of a copied directory becomes, in the root: an empty directory or file (when
//!    the plan says so); a copied directory (same mode, owned by the container's user) filled
//!    the same way; an overlay of the host's directory (its upper and work directories
//!    `<scratch>/upper/<n>` and `<scratch>/work/<n>`; its top directory shows the host's mode
//!    but the upper directory's owner, the container's user); the same symbolic link; or, for
//!    a file or any other entry, an empty file with the host's bound on it read-only.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use super::binds::{self, ReadOnlyBindError};
use super::error::SandboxError;
use super::paths::{self, DEV, KERNEL_TREES, TMP};

/// Which host directories are copied into the root, and which paths there stay empty.
#[derive(Debug, Default)]
pub(super) struct Plan {
    /// Host directories copied entry by entry (`/` among them).
    copied: HashSet<PathBuf>,
    /// Host paths that get an empty directory or file of their type.
    empty: HashSet<PathBuf>,
}

impl Plan {
    /// The plan for `host_mounts` (the host's mount points to bind into the root: not `/`,
    /// none under the scratch directory or a masked one), the `masked` directories, the
    /// `scratch` directory, and `creation_dirs`, the host directories where missing mount
    /// targets are created ([`creation_dir`]).
    pub(super) fn new(
        host_mounts: &[PathBuf],
        masked: &[PathBuf],
        scratch: &Path,
        creation_dirs: impl IntoIterator<Item = PathBuf>,
    ) -> Self {
        let mut plan = Self::default();
        for mount in host_mounts {
            plan.copy_parents(mount);
        }
        // A mount point with mounts below it is copied too: it cannot be bound on its own.
        let leaves = host_mounts.iter().filter(|m| !plan.copied.contains(*m));
        let leaves: Vec<PathBuf> = leaves.cloned().collect();
        plan.empty.extend(leaves);
        for dir in masked {
            // Mounts below it (other pods' volumes) keep its parents from being overlaid.
            plan.copy_parents(dir);
            plan.empty.insert(dir.clone());
        }
        // Only the init process's own (unlocked) mounts are below it: it may be overlaid.
        plan.empty.insert(scratch.to_path_buf());
        let trees = KERNEL_TREES
            .into_iter()
            .chain([DEV, TMP])
            .map(PathBuf::from);
        plan.empty.extend(trees);
        for dir in creation_dirs {
            plan.copy_parents(&dir);
            plan.copied.insert(dir);
        }
        plan
    }

    /// Whether the host directory `path` is copied into the root rather than left empty (to
    /// be bound or mounted on) or overlaid.
    pub(super) fn is_copied(&self, path: &Path) -> bool {
        self.copied.contains(path) && !self.empty.contains(path)
    }

    fn copy_parents(&mut self, path: &Path) {
        let parents = path.ancestors().skip(1).map(Path::to_path_buf);
        self.copied.extend(parents);
    }
}

/// The deepest existing host directory on the way to the container path `target` (its
/// symbolic links followed on the host's tree) when `target` is missing: where step 7 will
/// create it, so it must be a directory the container's user owns.
pub(super) fn creation_dir(target: &Path) -> Option<PathBuf> {
    let host = paths::resolve_in_root(Path::new("/"), target).ok()?;
    if fs::symlink_metadata(&host).is_ok() {
        return None;
    }
    let existing = host
        .ancestors()
        .skip(1)
        .find(|dir| fs::symlink_metadata(dir).is_ok())?;
    existing.is_dir().then(|| existing.to_path_buf())
}

/// Fills `root` (an empty tmpfs) as `plan` says; overlays take their upper and work directories
/// under `scratch`, the working directory.
///
/// # Errors
///
/// [`SandboxError::CopyHostEntry`], [`SandboxError::OverlayHostDir`], [`SandboxError::Scratch`],
/// or [`SandboxError::BindHostReadOnly`] when a file's bind could be neither made read-only nor
/// detached. An unreadable host directory is copied empty, and a file that cannot be bound
/// stays empty (logged at debug level).
pub(super) fn populate(root: &Path, scratch: &Path, plan: &Plan) -> Result<(), SandboxError> {
    let mut copier = Copier {
        root,
        scratch,
        plan,
        layers: 0,
    };
    copier.copy_dir(Path::new("/"))
}

/// The state of one [`populate`].
struct Copier<'a> {
    root: &'a Path,
    scratch: &'a Path,
    plan: &'a Plan,
    /// Overlays mounted so far.
    layers: usize,
}

impl Copier<'_> {
    /// Copies the entries of a host directory whose copy exists in the root.
    fn copy_dir(&mut self, host_dir: &Path) -> Result<(), SandboxError> {
        let entries = match fs::read_dir(host_dir) {
            Ok(entries) => entries,
            Err(error) => {
                let path = host_dir.display();
                tracing::debug!(%path, %error, "host directory unreadable, copied empty");
                return Ok(());
            }
        };
        for entry in entries {
            match entry {
                Ok(entry) => self.copy_entry(&entry.path())?,
                Err(error) => {
                    let path = host_dir.display();
                    tracing::debug!(%path, %error, "host directory entry unreadable, skipped");
                }
            }
        }
        Ok(())
    }

    /// Step 2 for one entry.
    fn copy_entry(&mut self, host: &Path) -> Result<(), SandboxError> {
        let inside = paths::under(self.root, host);
        let copy_err = |e| SandboxError::CopyHostEntry(host.to_path_buf(), e);
        let Ok(meta) = fs::symlink_metadata(host) else {
            tracing::debug!(path = %host.display(), "host entry vanished, not copied");
            return Ok(());
        };
        if self.plan.empty.contains(host) {
            // Emptiness wins over copying: nothing below an empty path is reached.
            return binds::create_target(&inside, meta.is_dir()).map_err(copy_err);
        }
        if meta.file_type().is_symlink() {
            let link = fs::read_link(host).map_err(copy_err)?;
            return symlink(link, &inside).map_err(copy_err);
        }
        if !meta.is_dir() {
            binds::create_target(&inside, false).map_err(copy_err)?;
            return match binds::bind_read_only(host, &inside) {
                Ok(()) => Ok(()),
                Err(ReadOnlyBindError::Bind(errno) | ReadOnlyBindError::Remount(errno)) => {
                    let path = host.display();
                    tracing::debug!(%path, %errno, "host file not bound, left empty");
                    Ok(())
                }
                Err(ReadOnlyBindError::Detach(errno, _)) => {
                    Err(SandboxError::BindHostReadOnly(host.to_path_buf(), errno))
                }
            };
        }
        let mode = fs::Permissions::from_mode(meta.permissions().mode() & 0o1777);
        fs::create_dir(&inside)
            .and_then(|()| fs::set_permissions(&inside, mode.clone()))
            .map_err(copy_err)?;
        if self.plan.is_copied(host) {
            return self.copy_dir(host);
        }
        self.layers += 1;
        let layer = self.layers.to_string();
        let (upper, work) = (
            Path::new("upper").join(&layer),
            Path::new("work").join(&layer),
        );
        // The overlay's top directory has the upper directory's owner (the container's
        // user) and mode (the host directory's).
        let layers = fs::create_dir(&upper)
            .and_then(|()| fs::set_permissions(&upper, mode))
            .and_then(|()| fs::create_dir(&work));
        layers.map_err(|e| SandboxError::Scratch(self.scratch.join(&upper), e))?;
        binds::mount_overlay(host, &upper, &work, &inside)
            .map_err(|e| SandboxError::OverlayHostDir(host.to_path_buf(), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn directories_above_mounts_are_copied_and_leaf_mounts_left_empty() {
        let mounts = paths(&[
            "/proc",
            "/proc/sys/fs/binfmt_misc",
            "/run",
            "/run/user/1000",
            "/home",
        ]);
        let masked = paths(&["/var/lib/nodelet"]);
        let scratch = Path::new("/var/lib/nodelet/pods/p/containers/c/scratch");
        let created = paths(&["/etc"]);

        let plan = Plan::new(&mounts, &masked, scratch, created);

        for copied in [
            "/",
            "/run",
            "/run/user",
            "/var",
            "/var/lib",
            "/etc",
            "/proc/sys/fs",
        ] {
            assert!(plan.is_copied(Path::new(copied)), "{copied} is copied");
        }
        for not_copied in ["/home", "/usr", "/var/lib/nodelet", "/run/user/1000"] {
            assert!(
                !plan.is_copied(Path::new(not_copied)),
                "{not_copied} is not"
            );
        }
        for empty in [
            "/home",
            "/run/user/1000",
            "/var/lib/nodelet",
            "/proc",
            "/tmp",
            "/dev",
        ] {
            assert!(
                plan.empty.contains(Path::new(empty)),
                "{empty} is left empty"
            );
        }
        assert!(!plan.empty.contains(Path::new("/run")));
    }

    #[test]
    fn an_existing_target_needs_no_creation_directory() {
        let dir = tempfile::tempdir().unwrap();
        let existing = dir.path().join("file");
        fs::write(&existing, "x").unwrap();
        assert_eq!(creation_dir(&existing), None);
        assert_eq!(
            creation_dir(&dir.path().join("a/b")).as_deref(),
            Some(dir.path())
        );
        assert_eq!(creation_dir(&existing.join("below")), None);
    }
}
