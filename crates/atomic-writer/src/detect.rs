//! Step (4): change detection against the current data directory (AW-7, plus modes/owners).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::error::Error;
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
        let meta = match fs::symlink_metadata(&path) {
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

/// Compares a file with `expected` in chunks, stopping at the first difference.
fn same_contents(path: &Path, expected: &[u8]) -> io::Result<bool> {
    let mut file = File::open(path)?;
    let mut buffer = vec![0u8; 64 * 1024];
    let mut offset = 0;
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            return Ok(offset == expected.len());
        }
        let Some(want) = expected.get(offset..offset + read) else {
            return Ok(false);
        };
        if buffer.get(..read) != Some(want) {
            return Ok(false);
        }
        offset += read;
    }
}
