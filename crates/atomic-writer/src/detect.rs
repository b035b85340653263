//! Step (4): change detection against the current data directory (AW-7, plus modes/owners).

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::error::Error;
use crate::fsops;
use crate::layout;
use crate::payload::FileProjection;

/// (4) Whether any payload file is missing from the current data directory `old_name`, is not
/// a regular file there, or has other bytes, mode or owner. Modes and owners are compared with
/// what the previous write asked for when its directory name records it (so `set_perms`
/// changes do not count), else (the kubelet's directories) with the files on disk.
pub(crate) fn differs(
    target: &Path,
    old_name: &str,
    files: &BTreeMap<String, &FileProjection>,
) -> Result<bool, Error> {
    let old_dir = target.join(old_name);
    let recorded = layout::recorded_digest(old_name);
    if recorded.is_some_and(|digest| digest != layout::modes_digest(files)) {
        return Ok(true);
    }
    for (relative, file) in files {
        let path = old_dir.join(relative);
        let meta = match fsops::lstat(&path) {
            Ok(meta) => meta,
            // Missing, or an old file sits where the payload now has a directory.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(true);
            }
            Err(cause) => return Err(Error::CompareCurrentData { path, cause }),
        };
        if !meta.is_file() || meta.len() != file.data.len() as u64 {
            return Ok(true);
        }
        if recorded.is_none() {
            let mode = meta.permissions().mode() & 0o7777;
            let owner_matches = file.fs_user.is_none_or(|uid| uid == meta.uid());
            if mode != file.mode || !owner_matches {
                return Ok(true);
            }
        }
        match same_contents(&path, &file.data) {
            Ok(true) => {}
            Ok(false) => return Ok(true),
            // A file we may not read (mode 0o200, or chowned away, when not running as root)
            // is simply rewritten.
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Ok(true),
            Err(cause) => return Err(Error::CompareCurrentData { path, cause }),
        }
    }
    Ok(false)
}

/// Compares a file whose size is known to be `expected.len()` with `expected`, in chunks,
/// stopping at the first difference. The size was checked, so no read past the end is needed
/// to see the end (and an empty file is not even opened).
fn same_contents(path: &Path, expected: &[u8]) -> io::Result<bool> {
    if expected.is_empty() {
        return Ok(true);
    }
    let mut file = fsops::open(path)?;
    let mut buffer = vec![0u8; expected.len().min(64 * 1024)];
    let mut offset = 0;
    while offset < expected.len() {
        let want = expected.len().min(offset + buffer.len()) - offset;
        let Some(chunk) = buffer.get_mut(..want) else {
            return Ok(false);
        };
        let read = fsops::read(&mut file, chunk)?;
        if read == 0 {
            // Shrunk since the `lstat`: not the payload.
            return Ok(false);
        }
        if chunk.get(..read) != expected.get(offset..offset + read) {
            return Ok(false);
        }
        offset += read;
    }
    Ok(true)
}
