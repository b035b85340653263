//! File-system primitives of steps (6)-(9): exact modes, owner, and `fsync`.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::error::Error;
use crate::payload::FileProjection;

/// Mode of data directories and of directories inside them (AW-5 step 5), umask-independent.
pub(crate) const DIR_MODE: u32 = 0o755;

/// (6) A parent directory inside the new data directory, mode exactly 0755.
pub(crate) fn create_dir(path: &Path) -> Result<(), Error> {
    match DirBuilder::new().mode(DIR_MODE).create(path) {
        Ok(()) => set_mode(path, DIR_MODE),
        Err(cause) => Err(Error::CreateDir {
            path: path.to_path_buf(),
            cause,
        }),
    }
}

/// (6) Creates `path` (which must not exist), writes the data, `chown`s to `fs_user` (gid
/// unchanged), then sets the mode exactly (umask independent; after `chown`, which may clear
/// set-id bits). Returns the open file for a later `fsync`.
pub(crate) fn write_file(path: &Path, file: &FileProjection) -> Result<File, Error> {
    let wrap = |cause| Error::WriteFile {
        path: path.to_path_buf(),
        cause,
    };
    let mut handle = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(file.mode)
        .open(path)
        .map_err(wrap)?;
    handle.write_all(&file.data).map_err(wrap)?;
    if let Some(uid) = file.fs_user {
        std::os::unix::fs::fchown(&handle, Some(uid), None).map_err(|cause| Error::Chown {
            path: path.to_path_buf(),
            uid,
            cause,
        })?;
    }
    handle
        .set_permissions(fs::Permissions::from_mode(file.mode))
        .map_err(|cause| Error::SetMode {
            path: path.to_path_buf(),
            cause,
        })?;
    Ok(handle)
}

pub(crate) fn set_mode(path: &Path, mode: u32) -> Result<(), Error> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|cause| Error::SetMode {
        path: path.to_path_buf(),
        cause,
    })
}

/// `fsync` of a directory, making its entries (creations, renames, removals) durable.
pub(crate) fn sync_dir(path: &Path) -> Result<(), Error> {
    File::open(path)
        .and_then(|dir| dir.sync_all())
        .map_err(|cause| Error::Sync {
            path: path.to_path_buf(),
            cause,
        })
}
