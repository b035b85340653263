//! The target directory as one listing sees it (step (2)), and the steps that work from that
//! listing: the checks of (2), the visible names of (10) and (11), the old data of (12).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::config::WriterConfig;
use crate::config::fault::FaultPoint;
use crate::error::Error;
use crate::fsops;
use crate::layout::{
    DATA_DIR_NAME, DATA_TMP_NAME, describe, is_data_dir_name, is_our_visible_link,
    visible_link_target,
};

/// The entries of a target directory, listed once at the start of a write. Only the writer
/// changes the directory (one writer per directory), so the listing stays true for the whole
/// write; what the write creates itself, it knows.
pub(crate) struct Target<'a> {
    path: &'a Path,
    config: &'a WriterConfig,
    /// Entries whose names are UTF-8 (no other name is ours), with their type from the listing.
    entries: BTreeMap<String, fs::FileType>,
}

impl<'a> Target<'a> {
    /// (2) Lists `path` once.
    pub(crate) fn list(path: &'a Path, config: &'a WriterConfig) -> Result<Self, Error> {
        let entries = fsops::list(path).map_err(|cause| Error::ListTarget {
            path: path.to_path_buf(),
            cause,
        })?;
        let entries = entries
            .into_iter()
            .filter_map(|(name, kind)| Some((name.into_string().ok()?, kind)))
            .collect();
        Ok(Self {
            path,
            config,
            entries,
        })
    }

    /// `path` as a directory just created: nothing in it, nothing listed.
    pub(crate) fn empty(path: &'a Path, config: &'a WriterConfig) -> Self {
        Self {
            path,
            config,
            entries: BTreeMap::new(),
        }
    }

    /// Whether the listing holds `name` as a real directory.
    pub(crate) fn has_dir(&self, name: &str) -> bool {
        self.entries.get(name).is_some_and(fs::FileType::is_dir)
    }

    /// (2) The name of the data directory `..data` points to, if any.
    pub(crate) fn current_data_dir(&self) -> Result<Option<String>, Error> {
        let link = self.path.join(DATA_DIR_NAME);
        match self.entries.get(DATA_DIR_NAME) {
            None => return Ok(None),
            Some(kind) if !kind.is_symlink() => {
                let found = describe_path(&link);
                return Err(Error::ForeignData { path: link, found });
            }
            Some(_) => {}
        }
        let pointee = fsops::readlink(&link).map_err(|cause| Error::ReadDataLink {
            path: link.clone(),
            cause,
        })?;
        let name = match pointee.to_str() {
            Some(name) if is_data_dir_name(name) => name.to_owned(),
            _ => {
                return Err(Error::ForeignData {
                    found: format!("a symlink to {}", pointee.display()),
                    path: link,
                });
            }
        };
        // The data directory may have vanished (then everything is rewritten), but if it
        // exists it must be a real directory, not a symlink leading elsewhere.
        match self.entries.get(&name) {
            Some(kind) if !kind.is_dir() => Err(Error::ForeignData {
                found: format!(
                    "a symlink to {name}, which is {}",
                    describe_path(&self.path.join(&name))
                ),
                path: link,
            }),
            _ => Ok(Some(name)),
        }
    }

    /// (2) Every visible name the payload needs is free or already our symlink. Returns the
    /// names that are our symlinks already.
    pub(crate) fn check_visible_names<'v>(
        &self,
        visible: &BTreeSet<&'v str>,
    ) -> Result<BTreeSet<&'v str>, Error> {
        let mut linked = BTreeSet::new();
        for &name in visible {
            let Some(kind) = self.entries.get(name) else {
                continue;
            };
            let path = self.path.join(name);
            let ours = kind.is_symlink()
                && match is_our_visible_link(&path, name) {
                    Ok(ours) => ours,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(cause) => return Err(Error::CreateVisibleLink { path, cause }),
                };
            if !ours {
                let found = describe_path(&path);
                return Err(Error::VisibleNameOccupied { path, found });
            }
            linked.insert(name);
        }
        Ok(linked)
    }

    /// (2) Removes a `..data_tmp` symlink left by a crash between steps 8 and 9.
    pub(crate) fn remove_stale_data_tmp(&self) -> Result<(), Error> {
        let path = self.path.join(DATA_TMP_NAME);
        match self.entries.get(DATA_TMP_NAME) {
            None => Ok(()),
            Some(kind) if !kind.is_symlink() => {
                let found = describe_path(&path);
                Err(Error::ForeignData { path, found })
            }
            Some(_) => {
                tracing::debug!("removing stale ..data_tmp");
                match self
                    .config
                    .inject(FaultPoint::RemoveStaleDataTmp)
                    .and_then(|()| fsops::unlink(&path))
                {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => {
                        Err(Error::RemoveStaleDataTmp { path, cause: e })
                    }
                    _ => Ok(()),
                }
            }
        }
    }

    /// (10) Creates `name -> ..data/name` for every top-level payload name that is not linked
    /// yet, and gives the link of a top-level file with an `fs_user` that owner (`lchown`, as
    /// kubelets do since 1.36), when it has another.
    pub(crate) fn create_visible_links(
        &self,
        visible: &BTreeSet<&str>,
        linked: &BTreeSet<&str>,
        owners: &BTreeMap<&str, u32>,
    ) -> Result<bool, Error> {
        let mut touched = false;
        for name in visible {
            let path = self.path.join(name);
            let owner = if linked.contains(name) {
                // Checked in (2); only its owner may need a look.
                match owners.get(name) {
                    Some(_) => Some(
                        fsops::lstat(&path)
                            .map(|meta| std::os::unix::fs::MetadataExt::uid(&meta))
                            .map_err(|cause| Error::CreateVisibleLink {
                                path: path.clone(),
                                cause,
                            })?,
                    ),
                    None => None,
                }
            } else {
                self.config
                    .inject(FaultPoint::CreateVisibleLink)
                    .and_then(|()| fsops::symlink(&visible_link_target(name), &path))
                    .map_err(|cause| Error::CreateVisibleLink {
                        path: path.clone(),
                        cause,
                    })?;
                touched = true;
                None
            };
            if let Some(&uid) = owners.get(name)
                && owner != Some(uid)
            {
                fsops::lchown(&path, uid).map_err(|cause| Error::Chown { path, uid, cause })?;
                touched = true;
            }
        }
        Ok(touched)
    }

    /// (11) Our symlinks (`x -> ..data/x`) among the listed top-level entries whose name the
    /// payload no longer has. Other entries are never touched.
    pub(crate) fn stale_visible_links(&self, visible: &BTreeSet<&str>) -> Vec<PathBuf> {
        self.entries
            .iter()
            .filter(|(name, kind)| {
                kind.is_symlink() && !name.starts_with("..") && !visible.contains(name.as_str())
            })
            .map(|(name, _)| (name, self.path.join(name)))
            .filter(|(name, path)| is_our_visible_link(path, name).unwrap_or(false))
            .map(|(_, path)| path)
            .collect()
    }

    /// (11) Removes the given stale symlinks. Continues past failures and returns the last
    /// one (AW-10).
    pub(crate) fn remove_visible_links(&self, stale: Vec<PathBuf>) -> Result<(), Error> {
        let mut last_error = None;
        for path in stale {
            let removed = self
                .config
                .inject(FaultPoint::RemoveVisibleLink)
                .and_then(|()| fsops::unlink(&path));
            match removed {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    last_error = Some(Error::RemoveVisibleLink { path, cause: e });
                }
                _ => {}
            }
        }
        last_error.map_or(Ok(()), Err)
    }

    /// (12) Removes every listed data directory other than `current` (the old one and orphans
    /// of crashed writes). Only real directories with the data directory name shape are
    /// removed.
    pub(crate) fn remove_old_data_dirs(&self, current: &str) -> Result<(), Error> {
        let mut first_error = None;
        let old = self
            .entries
            .iter()
            .filter(|(name, kind)| *name != current && is_data_dir_name(name) && kind.is_dir());
        for (name, _) in old {
            let path = self.path.join(name);
            tracing::debug!(dir = %name, "removing old data directory");
            let removed = self
                .config
                .inject(FaultPoint::RemoveOldDataDir)
                .and_then(|()| fsops::remove_tree(&path));
            match removed {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(cause) => {
                    first_error.get_or_insert(Error::RemoveOldDataDir {
                        path: self.path.to_path_buf(),
                        cause,
                    });
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// What occupies `path`, for error messages (one `lstat`, on the error path only).
fn describe_path(path: &Path) -> String {
    match fs::symlink_metadata(path) {
        Ok(meta) => describe(&meta, path),
        Err(_) => "something".to_owned(),
    }
}
