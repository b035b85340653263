//! [`AtomicWriter`]: the write algorithm of the crate docs, steps (1)-(12).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, DirBuilder, File};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::config::WriterConfig;
use crate::config::fault::FaultPoint;
use crate::detect::differs;
use crate::error::Error;
use crate::fsops::{DIR_MODE, create_dir, set_mode, sync_dir, write_file};
use crate::layout::{
    self, DATA_DIR_NAME, DATA_TMP_NAME, MANIFEST_NAME, describe, is_data_dir_name,
    is_our_visible_link, visible_link_target,
};
use crate::payload::{FileProjection, Payload};
use crate::validate::validate_payload;

/// How many written files are kept open, waiting for their `fsync`, at most.
const SYNC_BATCH: usize = 128;
/// How many names to try when a new data directory name is already taken.
const CREATE_ATTEMPTS: usize = 16;

/// Writes payloads into one target directory atomically (see the crate docs).
///
/// Holding the writer by `&mut` is what makes writes to its directory sequential: create one
/// writer per directory and never let two processes or two writers share a directory.
#[derive(Debug)]
pub struct AtomicWriter {
    target: PathBuf,
    config: WriterConfig,
}

/// What [`AtomicWriter::write`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteOutcome {
    /// A new data directory was written and swapped in (`..data` changed).
    Written,
    /// The payload equals the current data (content, mode and owner): `..data` was left alone.
    /// Missing user-visible symlinks may still have been recreated.
    Unchanged,
}

/// The callback [`AtomicWriter::write`] takes to adjust ownership or modes of the new data
/// directory before it becomes visible (e.g. fsGroup).
pub type SetPerms<'a> = &'a mut dyn FnMut(&Path) -> io::Result<()>;

impl AtomicWriter {
    /// A writer for `target_dir`, which must exist (AW-1). Only "does not exist" fails; other
    /// `stat` errors are left for [`write`](Self::write) to report, as the kubelet does.
    ///
    /// # Errors
    ///
    /// [`Error::TargetMissing`] if `target_dir` does not exist.
    pub fn new(target_dir: &Path, config: WriterConfig) -> Result<Self, Error> {
        if let Err(e) = fs::metadata(target_dir)
            && e.kind() == io::ErrorKind::NotFound
        {
            return Err(Error::TargetMissing {
                path: target_dir.to_path_buf(),
            });
        }
        Ok(Self {
            target: target_dir.to_path_buf(),
            config,
        })
    }

    /// The directory this writer projects into.
    pub fn target_dir(&self) -> &Path {
        &self.target
    }

    /// The writer's options.
    pub fn config(&self) -> &WriterConfig {
        &self.config
    }

    /// Projects `payload` into the target directory, atomically (steps (1)-(12) of the crate
    /// docs).
    ///
    /// `set_perms`, if given, is called once with the **full path of the new data directory**
    /// after every file is written and before anything becomes visible (step 7); it is not
    /// called when the payload is unchanged. (The kubelet passes the directory's base name;
    /// fsGroup hooks usually ignore the argument and walk the whole target directory.)
    ///
    /// Blocking: call it from `spawn_blocking` in async code. Idempotent: writing the same
    /// payload again returns [`WriteOutcome::Unchanged`] and touches nothing but missing
    /// visible symlinks and leftovers of a crash.
    ///
    /// ```
    /// use std::os::unix::fs::PermissionsExt;
    /// use std::path::Path;
    /// use nodelet_atomic_writer::{AtomicWriter, FileProjection, Payload, WriteOutcome, WriterConfig};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let mut writer = AtomicWriter::new(dir.path(), WriterConfig::default())?;
    /// let payload: Payload = [("token", FileProjection::new("t0k3n", 0o600))].into_iter().collect();
    ///
    /// // Let the group read the token before it becomes visible (what fsGroup does).
    /// let mut group_read = |data_dir: &Path| -> std::io::Result<()> {
    ///     std::fs::set_permissions(data_dir.join("token"), std::fs::Permissions::from_mode(0o640))
    /// };
    /// assert_eq!(writer.write(&payload, Some(&mut group_read))?, WriteOutcome::Written);
    ///
    /// // Modes changed by the hook are not a difference: the next sync rewrites nothing.
    /// assert_eq!(writer.write(&payload, Some(&mut group_read))?, WriteOutcome::Unchanged);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Validation errors ([`Error::is_invalid_payload`]) before anything on disk changes;
    /// [`Error::ForeignData`] / [`Error::VisibleNameOccupied`] if the target holds entries this
    /// writer did not create (nothing changes either); otherwise the variant of the step that
    /// failed. After any error, readers still see the complete old or the complete new payload
    /// and the next write converges.
    pub fn write(
        &mut self,
        payload: &Payload,
        set_perms: Option<SetPerms<'_>>,
    ) -> Result<WriteOutcome, Error> {
        let span = tracing::debug_span!(
            "atomic write",
            target = %self.target.display(),
            files = payload.len(),
            bytes = payload.total_bytes(),
        );
        let _entered = span.enter();

        // (1) Validate every key and clean it; nothing on disk is touched yet.
        let files = validate_payload(payload)?;
        let visible: BTreeSet<&str> = files.keys().map(|p| top_level(p)).collect();

        // (2) Read `..data`, refuse foreign contents, drop a stale `..data_tmp`.
        let old = self.current_data_dir()?;
        self.check_visible_names(&visible)?;
        self.remove_stale_data_tmp()?;

        // (3) Paths of the current data that the payload no longer has.
        // (4) Does the payload differ from the current data?
        let changed = match &old {
            None => true,
            Some(name) => {
                let old_dir = self.target.join(name);
                let through_link = self.target.join(DATA_DIR_NAME);
                let to_remove = layout::paths_to_remove(&old_dir, files.keys().map(String::as_str))
                    .map_err(|cause| {
                        Error::ListCurrentData {
                            path: old_dir.clone(),
                            cause,
                        }
                        .relocated(&old_dir, &through_link)
                    })?;
                // A manifest of an older version of this writer goes with a rewrite.
                let legacy = fs::symlink_metadata(old_dir.join(MANIFEST_NAME)).is_ok();
                !to_remove.is_empty()
                    || legacy
                    || differs(&self.target, name, &files)
                        .map_err(|e| e.relocated(&old_dir, &through_link))?
            }
        };

        let current = if changed {
            // (5)-(9) Write a new data directory and swap it in.
            let name = self.swap_in(&files, set_perms)?;
            // (9) The swap is made durable before anything old is removed. From here on a
            // failure leaves the complete new data in place.
            self.sync_target()?;
            name
        } else {
            tracing::debug!("payload unchanged");
            old.unwrap_or_default()
        };

        // (10) Create missing user-visible symlinks.
        let owners: BTreeMap<&str, u32> = files
            .iter()
            .filter(|(path, _)| !path.contains('/'))
            .filter_map(|(path, file)| Some((path.as_str(), file.fs_user?)))
            .collect();
        let mut touched = self.create_visible_links(&visible, &owners)?;
        // (11) Remove user-visible symlinks the payload no longer has.
        touched |= self.remove_stale_visible_links(&visible)?;
        if touched {
            self.sync_target()?;
        }

        // (12) Remove the old data directory and any orphan left by a crash.
        self.remove_old_data_dirs(&current)?;

        tracing::debug!(changed, "atomic write done");
        Ok(if changed {
            WriteOutcome::Written
        } else {
            WriteOutcome::Unchanged
        })
    }

    /// (2) The name of the data directory `..data` points to, if any.
    fn current_data_dir(&self) -> Result<Option<String>, Error> {
        let link = self.target.join(DATA_DIR_NAME);
        let meta = match fs::symlink_metadata(&link) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(cause) => return Err(Error::ReadDataLink { path: link, cause }),
        };
        if !meta.file_type().is_symlink() {
            let found = describe(&meta, &link);
            return Err(Error::ForeignData { path: link, found });
        }
        let pointee = fs::read_link(&link).map_err(|cause| Error::ReadDataLink {
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
        match fs::symlink_metadata(self.target.join(&name)) {
            Ok(meta) if !meta.is_dir() => Err(Error::ForeignData {
                found: format!(
                    "a symlink to {name}, which is {}",
                    describe(&meta, &self.target.join(&name))
                ),
                path: link,
            }),
            _ => Ok(Some(name)),
        }
    }

    /// (2) Every visible name the payload needs is free or already our symlink.
    fn check_visible_names(&self, visible: &BTreeSet<&str>) -> Result<(), Error> {
        for name in visible {
            let path = self.target.join(name);
            match fs::symlink_metadata(&path) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(cause) => return Err(Error::CreateVisibleLink { path, cause }),
                Ok(meta) => {
                    if !is_our_visible_link(&path, name).unwrap_or(false) {
                        let found = describe(&meta, &path);
                        return Err(Error::VisibleNameOccupied { path, found });
                    }
                }
            }
        }
        Ok(())
    }

    /// (2) Removes a `..data_tmp` symlink left by a crash between steps 8 and 9.
    fn remove_stale_data_tmp(&self) -> Result<(), Error> {
        let path = self.target.join(DATA_TMP_NAME);
        match fs::symlink_metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(cause) => Err(Error::RemoveStaleDataTmp { path, cause }),
            Ok(meta) if !meta.file_type().is_symlink() => {
                let found = describe(&meta, &path);
                Err(Error::ForeignData { path, found })
            }
            Ok(_) => {
                tracing::debug!("removing stale ..data_tmp");
                self.config
                    .inject(FaultPoint::RemoveStaleDataTmp)
                    .and_then(|()| fs::remove_file(&path))
                    .map_err(|cause| Error::RemoveStaleDataTmp { path, cause })
            }
        }
    }

    /// (5)-(9) Writes a new data directory and makes `..data` point to it. Returns its name.
    /// On failure, removes what it created; `..data` then still points to the old data.
    fn swap_in(
        &self,
        files: &BTreeMap<String, &FileProjection>,
        set_perms: Option<SetPerms<'_>>,
    ) -> Result<String, Error> {
        // (5) Create the new data directory, mode exactly 0755, its name recording the
        // requested modes and owners.
        let (name, dir) = self.create_data_dir(layout::modes_digest(files))?;
        let result = self
            .fill_data_dir(&dir, files, set_perms)
            .and_then(|()| self.publish(&name));
        match result {
            Ok(()) => Ok(name),
            Err(e) => {
                // Best effort: a leftover is removed by step (12) of the next write.
                let _ = fs::remove_dir_all(&dir);
                // The payload path, not the random data directory name, in the message.
                Err(e.relocated(&dir, &self.target))
            }
        }
    }

    /// (5) Creates `..<timestamp>.<random>` with mode 0755.
    fn create_data_dir(&self, digest: u64) -> Result<(String, PathBuf), Error> {
        let mut last = None;
        for _ in 0..CREATE_ATTEMPTS {
            let name = layout::new_data_dir_name(digest);
            let dir = self.target.join(&name);
            let created = self
                .config
                .inject(FaultPoint::CreateDataDir)
                .and_then(|()| DirBuilder::new().mode(DIR_MODE).create(&dir));
            match created {
                Ok(()) => {
                    set_mode(&dir, DIR_MODE).map_err(|e| e.relocated(&dir, &self.target))?;
                    return Ok((name, dir));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(cause) => {
                    return Err(Error::CreateDataDir {
                        path: self.target.clone(),
                        cause,
                    });
                }
            }
        }
        let cause = last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists));
        Err(Error::CreateDataDir {
            path: self.target.clone(),
            cause,
        })
    }

    /// (6) and (7): files, `set_perms`, then the durability syncs of the new tree.
    fn fill_data_dir(
        &self,
        dir: &Path,
        files: &BTreeMap<String, &FileProjection>,
        set_perms: Option<SetPerms<'_>>,
    ) -> Result<(), Error> {
        // (6) Parent directories (0755), then each file with its exact mode and owner. The
        // fsyncs come after all writes: one journal commit then covers most of them.
        let mut dirs: BTreeSet<PathBuf> = BTreeSet::new();
        let mut unsynced: Vec<(PathBuf, File)> = Vec::new();
        for (relative, file) in files {
            let path = dir.join(relative);
            if let Some(parent) = Path::new(relative).parent() {
                let mut current = dir.to_path_buf();
                for element in parent.components() {
                    current.push(element);
                    if dirs.insert(current.clone()) {
                        create_dir(&current)?;
                    }
                }
            }
            self.config
                .inject(FaultPoint::WriteFile)
                .map_err(|cause| Error::WriteFile {
                    path: path.clone(),
                    cause,
                })?;
            let handle = write_file(&path, file)?;
            if self.config.fsync {
                unsynced.push((path, handle));
                if unsynced.len() >= SYNC_BATCH {
                    self.sync_files(&mut unsynced)?;
                }
            }
        }

        // (7) The caller's permission hook, on the full path of the new data directory; then
        // the files (with what the hook changed), the directories and the data directory
        // itself are made durable.
        if let Some(hook) = set_perms {
            hook(dir).map_err(|cause| Error::SetPerms {
                path: dir.to_path_buf(),
                cause,
            })?;
        }
        if self.config.fsync {
            self.sync_files(&mut unsynced)?;
            for sub in dirs.iter().rev() {
                sync_dir(sub)?;
            }
            sync_dir(dir)?;
        }
        Ok(())
    }

    /// (8) and (9): `..data_tmp` → new dir, renamed over `..data`, both made durable.
    fn publish(&self, name: &str) -> Result<(), Error> {
        // (8) Point `..data_tmp` at the new data directory.
        let tmp = self.target.join(DATA_TMP_NAME);
        self.config
            .inject(FaultPoint::CreateDataTmp)
            .and_then(|()| std::os::unix::fs::symlink(name, &tmp))
            .map_err(|cause| Error::CreateDataTmp {
                path: tmp.clone(),
                cause,
            })?;
        let swapped = (|| {
            self.sync_target()?;
            // (9) Atomically replace `..data`.
            self.config
                .inject(FaultPoint::SwapData)
                .and_then(|()| fs::rename(&tmp, self.target.join(DATA_DIR_NAME)))
                .map_err(|cause| Error::SwapData {
                    path: tmp.clone(),
                    cause,
                })
        })();
        if swapped.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        swapped
    }

    /// `fsync` of written files (still open: modes like 0o000 cannot be reopened), emptying
    /// `files`.
    fn sync_files(&self, files: &mut Vec<(PathBuf, File)>) -> Result<(), Error> {
        self.config
            .inject(FaultPoint::SyncDataDir)
            .map_err(|cause| Error::Sync {
                path: files.first().map(|(p, _)| p.clone()).unwrap_or_default(),
                cause,
            })?;
        for (path, handle) in files.drain(..) {
            handle
                .sync_all()
                .map_err(|cause| Error::Sync { path, cause })?;
        }
        Ok(())
    }

    /// `fsync` of the target directory, if enabled.
    fn sync_target(&self) -> Result<(), Error> {
        if !self.config.fsync {
            return Ok(());
        }
        self.config
            .inject(FaultPoint::SyncTarget)
            .map_err(|cause| Error::Sync {
                path: self.target.clone(),
                cause,
            })?;
        sync_dir(&self.target)
    }

    /// (10) Creates `name -> ..data/name` for every top-level payload name that lacks it, and
    /// gives the link of a top-level file with an `fs_user` that owner (`lchown`, as kubelets
    /// do since 1.36), when it has another.
    fn create_visible_links(
        &self,
        visible: &BTreeSet<&str>,
        owners: &BTreeMap<&str, u32>,
    ) -> Result<bool, Error> {
        let mut touched = false;
        for name in visible {
            let path = self.target.join(name);
            let owner = match fs::symlink_metadata(&path) {
                Ok(meta) => {
                    if !is_our_visible_link(&path, name).unwrap_or(false) {
                        let found = describe(&meta, &path);
                        return Err(Error::VisibleNameOccupied { path, found });
                    }
                    Some(std::os::unix::fs::MetadataExt::uid(&meta))
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.config
                        .inject(FaultPoint::CreateVisibleLink)
                        .and_then(|()| std::os::unix::fs::symlink(visible_link_target(name), &path))
                        .map_err(|cause| Error::CreateVisibleLink {
                            path: path.clone(),
                            cause,
                        })?;
                    touched = true;
                    None
                }
                Err(cause) => return Err(Error::CreateVisibleLink { path, cause }),
            };
            if let Some(&uid) = owners.get(name)
                && owner != Some(uid)
            {
                std::os::unix::fs::lchown(&path, Some(uid), None)
                    .map_err(|cause| Error::Chown { path, uid, cause })?;
                touched = true;
            }
        }
        Ok(touched)
    }

    /// The entries of the target directory whose names are UTF-8 (no other name is ours).
    fn target_entries(&self) -> io::Result<Vec<(String, fs::DirEntry)>> {
        let mut entries = Vec::new();
        for entry in fs::read_dir(&self.target)? {
            let entry = entry?;
            if let Ok(name) = entry.file_name().into_string() {
                entries.push((name, entry));
            }
        }
        Ok(entries)
    }

    /// (11) Removes every top-level symlink of ours (`x -> ..data/x`) whose name the payload no
    /// longer has. Other entries are never touched. Continues past failures and returns the
    /// last one (AW-10).
    fn remove_stale_visible_links(&self, visible: &BTreeSet<&str>) -> Result<bool, Error> {
        let mut touched = false;
        let mut last_error = None;
        let entries = self
            .target_entries()
            .map_err(|cause| Error::RemoveVisibleLink {
                path: self.target.clone(),
                cause,
            })?;
        for (name, entry) in entries {
            if name.starts_with("..") || visible.contains(name.as_str()) {
                continue;
            }
            let path = entry.path();
            if !is_our_visible_link(&path, &name).unwrap_or(false) {
                continue;
            }
            let removed = self
                .config
                .inject(FaultPoint::RemoveVisibleLink)
                .and_then(|()| fs::remove_file(&path));
            match removed {
                Ok(()) => touched = true,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(cause) => last_error = Some(Error::RemoveVisibleLink { path, cause }),
            }
        }
        last_error.map_or(Ok(touched), Err)
    }

    /// (12) Removes every data directory other than `current` (the old one and orphans of
    /// crashed writes). Only real directories with the data directory name shape are removed.
    fn remove_old_data_dirs(&self, current: &str) -> Result<(), Error> {
        let mut first_error = None;
        let entries = self
            .target_entries()
            .map_err(|cause| Error::RemoveOldDataDir {
                path: self.target.clone(),
                cause,
            })?;
        for (name, entry) in entries {
            if name == current || !is_data_dir_name(&name) {
                continue;
            }
            let path = entry.path();
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            tracing::debug!(dir = %name, "removing old data directory");
            let removed = self
                .config
                .inject(FaultPoint::RemoveOldDataDir)
                .and_then(|()| fs::remove_dir_all(&path));
            match removed {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(cause) => {
                    first_error.get_or_insert(Error::RemoveOldDataDir {
                        path: self.target.clone(),
                        cause,
                    });
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// The first element of a cleaned payload path.
fn top_level(path: &str) -> &str {
    path.split('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_can_move_to_a_blocking_thread() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<AtomicWriter>();
        assert_send_sync::<Payload>();
        assert_send_sync::<Error>();
    }

    #[test]
    fn top_level_is_the_first_element() {
        assert_eq!(top_level("a/b/c"), "a");
        assert_eq!(top_level("a"), "a");
    }
}
