//! [`AtomicWriter`]: the write algorithm of the crate docs, steps (1)-(12).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use crate::config::WriterConfig;
use crate::config::fault::FaultPoint;
use crate::detect::differs;
use crate::error::Error;
use crate::fsops::{self, create_dir, write_file};
use crate::layout::{self, CurrentData, DATA_DIR_NAME, DATA_TMP_NAME};
use crate::payload::{FileProjection, Payload};
use crate::target::Target;
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
    /// The target is known to be empty (see [`AtomicWriter::for_new_dir`]): the next write
    /// skips its listing.
    empty: bool,
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
            empty: false,
        })
    }

    /// A writer for `target_dir`, a directory the caller has just created and that holds
    /// nothing yet (a new volume). Its first write takes the directory as empty instead of
    /// listing it, and nothing checks that it exists (the write fails if it does not); later
    /// writes are those of [`new`](Self::new). For a directory that may hold anything, use
    /// [`new`](Self::new): a name already there makes the first write fail where it would
    /// have been refused or replaced.
    pub fn for_new_dir(target_dir: &Path, config: WriterConfig) -> Self {
        Self {
            target: target_dir.to_path_buf(),
            config,
            empty: true,
        }
    }

    /// A writer for `target_dir`, a directory its caller has just seen exist (a volume
    /// directory it has just checked): [`new`](Self::new) without its `stat`. Should the
    /// directory be gone after all, the first write fails listing it
    /// ([`Error::ListTarget`]) instead of [`Error::TargetMissing`] here.
    pub fn for_existing_dir(target_dir: &Path, config: WriterConfig) -> Self {
        Self {
            target: target_dir.to_path_buf(),
            config,
            empty: false,
        }
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

        // (2) One listing of the target (none for a new one); read `..data`, refuse foreign
        // contents, drop a stale `..data_tmp`.
        let target = if std::mem::take(&mut self.empty) {
            Target::empty(&self.target, &self.config)
        } else {
            Target::list(&self.target, &self.config)?
        };
        let old = target.current_data_dir()?;
        let linked = target.check_visible_names(&visible)?;
        target.remove_stale_data_tmp()?;

        // (3) Paths of the current data that the payload no longer has.
        // (4) Does the payload differ from the current data?
        let changed = match &old {
            None => true,
            Some(name) => {
                let old_dir = self.target.join(name);
                let through_link = self.target.join(DATA_DIR_NAME);
                let current = if target.has_dir(name) {
                    layout::scan_current_data(&old_dir, files.keys().map(String::as_str)).map_err(
                        |cause| {
                            Error::ListCurrentData {
                                path: old_dir.clone(),
                                cause,
                            }
                            .relocated(&old_dir, &through_link)
                        },
                    )?
                } else {
                    // Vanished: every payload file is missing, so it differs.
                    CurrentData::default()
                };
                // A manifest of an older version of this writer goes with a rewrite.
                !current.to_remove.is_empty()
                    || current.legacy_manifest
                    || differs(&self.target, name, &files)
                        .map_err(|e| e.relocated(&old_dir, &through_link))?
            }
        };

        // (5)-(9) Write a new data directory and switch `..data` to it. From then on a failure
        // leaves the complete new data in place.
        let first_write = old.is_none();
        let current = if changed {
            self.swap_in(&files, set_perms, first_write)?
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
        let mut touched = changed;
        touched |= target.create_visible_links(&visible, &linked, &owners)?;
        // (11) Remove user-visible symlinks the payload no longer has: only after the switch
        // is durable, so a power loss cannot keep the old data without one of its names.
        let stale = target.stale_visible_links(&visible);
        if !stale.is_empty() {
            if touched {
                self.sync_target()?;
            }
            target.remove_visible_links(stale)?;
            touched = true;
        }
        // The switch and the names are made durable before anything old is removed. A first
        // write has nothing old to protect: a power loss before its entries reach the disk
        // leaves the volume as empty as before, or `..data` without some of the new names (the
        // state a crash between steps 9 and 10 leaves), and the next write of the volume (an
        // update's `fsync` of the target before its rename, or a remount's repair) completes
        // it; no old data directory goes on the strength of this write's switch.
        if touched && !first_write {
            self.sync_target()?;
        }

        // Between the switch and the removal of the old data: the caller's hook.
        if changed && let Some(hook) = &self.config.on_switch {
            hook(&self.target.join(&current));
        }

        // (12) Remove the old data directory and any orphan left by a crash.
        target.remove_old_data_dirs(&current)?;

        tracing::debug!(changed, "atomic write done");
        Ok(if changed {
            WriteOutcome::Written
        } else {
            WriteOutcome::Unchanged
        })
    }

    /// (5)-(9) Writes a new data directory and makes `..data` point to it. Returns its name.
    /// On failure, removes what it created; `..data` then still points to the old data.
    fn swap_in(
        &self,
        files: &BTreeMap<String, &FileProjection>,
        set_perms: Option<SetPerms<'_>>,
        first_write: bool,
    ) -> Result<String, Error> {
        // (5) Create the new data directory, mode exactly 0755, its name recording the
        // requested modes and owners.
        let (name, dir) = self.create_data_dir(layout::modes_digest(files))?;
        let result = self
            .fill_data_dir(&dir, files, set_perms)
            .and_then(|unsynced| self.publish(&name, &dir, unsynced, first_write));
        match result {
            Ok(()) => Ok(name),
            Err(e) => {
                // Best effort: a leftover is removed by step (12) of the next write.
                let _ = fsops::remove_tree(&dir);
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
                .and_then(|()| fsops::mkdir(&dir));
            match created {
                Ok(()) => return Ok((name, dir)),
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

    /// (6) and (7): files, then `set_perms`. Returns what is left to `fsync` in (8).
    fn fill_data_dir(
        &self,
        dir: &Path,
        files: &BTreeMap<String, &FileProjection>,
        set_perms: Option<SetPerms<'_>>,
    ) -> Result<Unsynced, Error> {
        // (6) Parent directories (0755), then each file with its exact mode and owner; the
        // fsyncs come in step (8), after every write. Parents are created once each, in path
        // order, so every `mkdir` finds its parent in place.
        let mut unsynced = Unsynced::default();
        for (relative, file) in files {
            let path = dir.join(relative);
            if let Some(parent) = Path::new(relative).parent() {
                let mut current = dir.to_path_buf();
                for element in parent.components() {
                    current.push(element);
                    if !unsynced.dirs.contains(&current) {
                        create_dir(&current)?;
                        unsynced.dirs.insert(current.clone());
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
                unsynced.files.push((path, handle));
                if unsynced.files.len() >= SYNC_BATCH {
                    self.sync_files(&mut unsynced.files)?;
                }
            }
        }

        // (7) The caller's permission hook, on the full path of the new data directory.
        if let Some(hook) = set_perms {
            hook(dir).map_err(|cause| Error::SetPerms {
                path: dir.to_path_buf(),
                cause,
            })?;
        }
        Ok(unsynced)
    }

    /// (8) and (9): make the new tree durable and switch `..data` to it.
    ///
    /// An update creates `..data_tmp` *before* the `fsync`s, so that on a journaling file
    /// system the first `fsync` commits it with the files and the later ones find nothing new
    /// to commit; the `fsync` of the target then makes the new directory's entry durable
    /// before the rename can be. A first write has no old data to protect and creates `..data`
    /// directly (no `..data_tmp`, no rename, no `fsync` of the target before it): if a power
    /// loss keeps `..data` but not the directory it names, `..data` dangles and the volume is
    /// as empty as before the write; the files themselves are durable before `..data` exists.
    fn publish(
        &self,
        name: &str,
        dir: &Path,
        mut unsynced: Unsynced,
        first_write: bool,
    ) -> Result<(), Error> {
        let data = self.target.join(DATA_DIR_NAME);
        let tmp = self.target.join(DATA_TMP_NAME);
        // (8) Point `..data_tmp` at the new data directory.
        if !first_write {
            self.config
                .inject(FaultPoint::CreateDataTmp)
                .and_then(|()| fsops::symlink(name, &tmp))
                .map_err(|cause| Error::CreateDataTmp {
                    path: tmp.clone(),
                    cause,
                })?;
        }
        let switched = (|| {
            // (8) Files, their directories, the data directory and, for an update, the target.
            if self.config.fsync {
                self.sync_files(&mut unsynced.files)?;
                for sub in unsynced.dirs.iter().rev() {
                    fsops::sync_dir(sub)?;
                }
                fsops::sync_dir(dir)?;
                if !first_write {
                    self.sync_target()?;
                }
            }
            // (9) Atomically replace (or create) `..data`.
            let switch = self.config.inject(FaultPoint::SwapData);
            if first_write {
                switch
                    .and_then(|()| fsops::symlink(name, &data))
                    .map_err(|cause| Error::CreateDataLink { path: data, cause })
            } else {
                switch
                    .and_then(|()| fsops::rename(&tmp, &data))
                    .map_err(|cause| Error::SwapData {
                        path: tmp.clone(),
                        cause,
                    })
            }
        })();
        if switched.is_err() && !first_write {
            let _ = fsops::unlink(&tmp);
        }
        switched
    }

    /// `fsync` of written files (still open: modes like 0o000 cannot be reopened), emptying
    /// `files`.
    fn sync_files(&self, files: &mut Vec<(PathBuf, File)>) -> Result<(), Error> {
        if files.is_empty() {
            return Ok(());
        }
        self.config
            .inject(FaultPoint::SyncDataDir)
            .map_err(|cause| Error::Sync {
                path: files.first().map(|(p, _)| p.clone()).unwrap_or_default(),
                cause,
            })?;
        for (path, handle) in files.drain(..) {
            fsops::sync_file(&path, &handle)?;
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
        fsops::sync_dir(&self.target)
    }
}

/// Written files still open for their `fsync`, and the directories created inside the new
/// data directory.
#[derive(Default)]
struct Unsynced {
    files: Vec<(PathBuf, File)>,
    dirs: BTreeSet<PathBuf>,
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
    fn the_switch_hook_runs_once_per_switch_while_the_old_data_is_still_there() {
        use std::sync::{Arc, Mutex};
        let tmp = tempfile::tempdir().unwrap();
        /// (new content, old content still there) per call.
        type Calls = Vec<(String, Option<String>)>;
        let seen: Arc<Mutex<Calls>> = Arc::default();
        let record = seen.clone();
        let target = tmp.path().to_path_buf();
        let hook: crate::SwitchHook = Arc::new(move |new: &std::path::Path| {
            // The old data directory, if any, besides the new one.
            let mut old = std::fs::read_dir(&target)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("..") && n.len() > 2 && !n.starts_with("..data"))
                .filter(|n| Some(n.as_str()) != new.file_name().and_then(|f| f.to_str()))
                .map(|n| std::fs::read_to_string(target.join(n).join("k")).unwrap());
            let content = std::fs::read_to_string(new.join("k")).unwrap();
            record.lock().unwrap().push((content, old.next()));
        });
        let config = WriterConfig::default().fsync(false).on_switch(hook);
        let mut writer = AtomicWriter::new(tmp.path(), config).unwrap();
        let payload = |v: &str| {
            let mut p = Payload::new();
            p.insert(
                "k",
                crate::FileProjection::new(v.as_bytes().to_vec(), 0o644),
            );
            p
        };
        writer.write(&payload("1"), None).unwrap();
        writer.write(&payload("1"), None).unwrap();
        writer.write(&payload("2"), None).unwrap();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            [
                ("1".to_owned(), None),
                ("2".to_owned(), Some("1".to_owned()))
            ],
            "a first write, no call for an unchanged payload, then the old data still readable"
        );
    }

    #[test]
    fn top_level_is_the_first_element() {
        assert_eq!(top_level("a/b/c"), "a");
        assert_eq!(top_level("a"), "a");
    }
}
