//! The on-disk layout: reserved names, data directory naming, the mode manifest, the AW-8
//! removal set and the read side ([`read_visible`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::payload::FileProjection;

/// Name of the symlink to the current data directory (AW-2).
pub const DATA_DIR_NAME: &str = "..data";
/// Name of the transient symlink renamed over `..data` during a swap (AW-2).
pub const DATA_TMP_NAME: &str = "..data_tmp";
/// Name of the manifest this writer keeps inside each data directory: the requested mode and
/// owner of every file, so that change detection compares with what was asked for, not with
/// modes a `set_perms` hook (fsGroup) changed afterwards. Never reachable through visible names.
pub const MANIFEST_NAME: &str = "..nodelet_manifest";

const MANIFEST_HEADER: &str = "nodelet-atomic-writer manifest 1\n";

/// A new data directory name: `..<UTC yyyy_MM_dd_HH_mm_ss>.<random decimal digits>` (AW-2).
pub(crate) fn new_data_dir_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    let random = hasher.finish() % 10_000_000_000;
    format!(
        "..{}.{random}",
        chrono::Utc::now().format("%Y_%m_%d_%H_%M_%S")
    )
}

/// Whether `name` has the shape of a data directory name (AW-2), ours or the kubelet's.
pub(crate) fn is_data_dir_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("..") else {
        return false;
    };
    let Some((stamp, random)) = rest.split_once('.') else {
        return false;
    };
    let stamp = stamp.as_bytes();
    let stamp_ok = stamp.len() == 19
        && stamp.iter().enumerate().all(|(i, b)| match i {
            4 | 7 | 10 | 13 | 16 => *b == b'_',
            _ => b.is_ascii_digit(),
        });
    stamp_ok && !random.is_empty() && random.bytes().all(|b| b.is_ascii_digit())
}

/// The target of a user-visible symlink for the top-level name `name` (AW-9).
pub(crate) fn visible_link_target(name: &str) -> String {
    format!("{DATA_DIR_NAME}/{name}")
}

/// Whether `path` is a symlink this writer would have created for `name`.
pub(crate) fn is_our_visible_link(path: &Path, name: &str) -> io::Result<bool> {
    let meta = fs::symlink_metadata(path)?;
    if !meta.file_type().is_symlink() {
        return Ok(false);
    }
    Ok(fs::read_link(path)? == Path::new(&visible_link_target(name)))
}

/// A short description of what occupies `path`, for error messages.
pub(crate) fn describe(meta: &fs::Metadata, path: &Path) -> String {
    let kind = meta.file_type();
    if kind.is_symlink() {
        match fs::read_link(path) {
            Ok(target) => format!("a symlink to {}", target.display()),
            Err(_) => "a symlink".to_owned(),
        }
    } else if kind.is_dir() {
        "a directory".to_owned()
    } else if kind.is_file() {
        "a regular file".to_owned()
    } else {
        "a special file".to_owned()
    }
}

/// Requested mode and owner of one file, as recorded in the manifest.
pub(crate) type ManifestEntry = (u32, Option<u32>);

/// Serialises the manifest for `files` (cleaned path → file).
pub(crate) fn encode_manifest(files: &BTreeMap<String, &FileProjection>) -> Vec<u8> {
    let mut out = MANIFEST_HEADER.as_bytes().to_vec();
    for (path, file) in files {
        let uid = file
            .fs_user
            .map_or_else(|| "-".to_owned(), |u| u.to_string());
        out.extend_from_slice(format!("{:o} {uid} {} {path}\n", file.mode, path.len()).as_bytes());
    }
    out
}

/// Reads the manifest of the data directory `dir`; `None` if it is absent or not ours.
pub(crate) fn read_manifest(dir: &Path) -> io::Result<Option<BTreeMap<String, ManifestEntry>>> {
    let bytes = match fs::read(dir.join(MANIFEST_NAME)) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(decode_manifest(&bytes))
}

fn decode_manifest(bytes: &[u8]) -> Option<BTreeMap<String, ManifestEntry>> {
    let mut rest = bytes.strip_prefix(MANIFEST_HEADER.as_bytes())?;
    let mut entries = BTreeMap::new();
    while !rest.is_empty() {
        let (mode, after) = split_field(rest)?;
        let (uid, after) = split_field(after)?;
        let (len, after) = split_field(after)?;
        let mode = u32::from_str_radix(mode, 8).ok()?;
        let uid = match uid {
            "-" => None,
            n => Some(n.parse().ok()?),
        };
        let len: usize = len.parse().ok()?;
        let path = after.get(..len)?;
        if after.get(len) != Some(&b'\n') {
            return None;
        }
        entries.insert(String::from_utf8(path.to_vec()).ok()?, (mode, uid));
        rest = after.get(len + 1..)?;
    }
    Some(entries)
}

fn split_field(bytes: &[u8]) -> Option<(&str, &[u8])> {
    let space = bytes.iter().position(|b| *b == b' ')?;
    let field = std::str::from_utf8(bytes.get(..space)?).ok()?;
    Some((field, bytes.get(space + 1..)?))
}

/// AW-8: every path under the data directory `dir` (files and directories, relative, reserved
/// top-level names excluded) that is neither a payload path nor an ancestor of one. Empty if
/// `dir` does not exist or is not a directory.
pub(crate) fn paths_to_remove<'a>(
    dir: &Path,
    payload: impl IntoIterator<Item = &'a str>,
) -> io::Result<BTreeSet<String>> {
    let mut existing = BTreeSet::new();
    match fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => walk(dir, "", &mut existing)?,
        Ok(_) => return Ok(existing),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(existing),
        Err(e) => return Err(e),
    }
    for path in payload {
        existing.remove(path);
        for (index, _) in path.match_indices('/') {
            existing.remove(&path[..index]);
        }
    }
    Ok(existing)
}

fn walk(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if prefix.is_empty() && name.starts_with("..") {
            continue;
        }
        let relative = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        if entry.file_type()?.is_dir() {
            walk(&entry.path(), &relative, out)?;
        }
        out.insert(relative);
    }
    Ok(())
}

/// What a container sees through the user-visible names of `target`: every regular file
/// reachable from a top-level entry whose name does not start with `..`, keyed by its path
/// relative to `target`, with its contents and permission bits (`mode & 0o7777`).
///
/// Top-level symlinks are followed (that is how the visible names work); below them, only
/// real directories are descended into. A dangling top-level symlink is skipped.
///
/// Handy as a test oracle (it is the one the kubelet's own tests use, AW-12):
///
/// ```
/// use nodelet_atomic_writer::{read_visible, AtomicWriter, FileProjection, Payload, WriterConfig};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let mut writer = AtomicWriter::new(dir.path(), WriterConfig::default().fsync(false))?;
/// let payload: Payload = [("a/b.txt", FileProjection::new(b"hi".to_vec(), 0o640))].into_iter().collect();
/// writer.write(&payload, None)?;
/// let seen = read_visible(dir.path())?;
/// assert_eq!(seen.get("a/b.txt"), Some(&(b"hi".to_vec(), 0o640)));
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// Any I/O error listing or reading the tree.
pub fn read_visible(target: &Path) -> io::Result<BTreeMap<String, (Vec<u8>, u32)>> {
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(target)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("..") {
            continue;
        }
        let path = entry.path();
        let meta = match fs::metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        read_entry(&path, &name, &meta, &mut out)?;
    }
    Ok(out)
}

fn read_entry(
    path: &Path,
    relative: &str,
    meta: &fs::Metadata,
    out: &mut BTreeMap<String, (Vec<u8>, u32)>,
) -> io::Result<()> {
    if meta.is_file() {
        let mut data = Vec::with_capacity(usize::try_from(meta.size()).unwrap_or(0));
        fs::File::open(path)?.read_to_end(&mut data)?;
        out.insert(
            relative.to_owned(),
            (data, meta.permissions().mode() & 0o7777),
        );
    } else if meta.is_dir() {
        for entry in fs::read_dir(path)? {
            let entry = entry?;
            let child = format!("{relative}/{}", entry.file_name().to_string_lossy());
            let child_meta = entry.metadata()?;
            read_entry(&entry.path(), &child, &child_meta, out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_data_dir_names_have_the_kubelet_shape() {
        let name = new_data_dir_name();
        assert!(is_data_dir_name(&name), "{name}");
        assert_ne!(name, new_data_dir_name());
    }

    #[test]
    fn data_dir_name_shape_is_strict() {
        assert!(is_data_dir_name("..2024_05_01_10_20_30.1234567890"));
        assert!(is_data_dir_name("..2024_01_31_12_00_05.8"));
        assert!(!is_data_dir_name("..data"));
        assert!(!is_data_dir_name("..data_tmp"));
        assert!(!is_data_dir_name("..2024_05_01_10_20_30."));
        assert!(!is_data_dir_name("..2024_05_01_10_20_30.12a"));
        assert!(!is_data_dir_name("2024_05_01_10_20_30.1"));
        assert!(!is_data_dir_name("..2024-05-01_10_20_30.1"));
    }

    #[test]
    fn manifest_round_trips_paths_with_spaces_and_newlines() {
        let a = FileProjection::new(b"x".to_vec(), 0o600).with_fs_user(1000);
        let b = FileProjection::new(b"y".to_vec(), 0o644);
        let files: BTreeMap<String, &FileProjection> = [
            ("dir/with space".to_owned(), &a),
            ("new\nline".to_owned(), &b),
        ]
        .into_iter()
        .collect();
        let decoded = decode_manifest(&encode_manifest(&files));
        let expected: BTreeMap<String, ManifestEntry> = [
            ("dir/with space".to_owned(), (0o600, Some(1000))),
            ("new\nline".to_owned(), (0o644, None)),
        ]
        .into_iter()
        .collect();
        assert_eq!(decoded, Some(expected));
    }

    #[test]
    fn a_damaged_manifest_is_ignored() {
        assert_eq!(decode_manifest(b"garbage"), None);
        assert_eq!(
            decode_manifest(b"nodelet-atomic-writer manifest 1\n644 - 9 short\n"),
            None
        );
    }

    // AW-12 `TestPathsToRemove`: the AW-8 test vectors.

    fn removal(old: &[&str], new: &[&str]) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        for path in old {
            let full = dir.path().join(path);
            fs::create_dir_all(full.parent().unwrap()).unwrap();
            fs::write(full, b"x").unwrap();
        }
        paths_to_remove(dir.path(), new.iter().copied())
            .unwrap()
            .into_iter()
            .collect()
    }

    #[test]
    fn paths_to_remove_simple() {
        assert_eq!(removal(&["foo.txt", "bar.txt"], &["foo.txt"]), ["bar.txt"]);
    }

    #[test]
    fn paths_to_remove_simple_2() {
        assert_eq!(
            removal(&["foo.txt", "zip/bar.txt"], &["foo.txt"]),
            ["zip", "zip/bar.txt"]
        );
    }

    #[test]
    fn paths_to_remove_subdirs_1() {
        assert_eq!(
            removal(&["foo.txt", "zip/zap/bar.txt"], &["foo.txt"]),
            ["zip", "zip/zap", "zip/zap/bar.txt"]
        );
    }

    #[test]
    fn paths_to_remove_subdirs_2() {
        assert_eq!(
            removal(
                &[
                    "foo.txt",
                    "zap/1/2/3/4/bar.txt",
                    "zap/1/2/c/bar.txt",
                    "zap/1/2/magic.txt"
                ],
                &["foo.txt", "zap/1/2/magic.txt"]
            ),
            [
                "zap/1/2/3",
                "zap/1/2/3/4",
                "zap/1/2/3/4/bar.txt",
                "zap/1/2/c",
                "zap/1/2/c/bar.txt"
            ]
        );
    }

    #[test]
    fn paths_to_remove_subdirs_3_nothing_when_the_payload_is_unchanged() {
        assert!(removal(&["a/b/c.txt", "d.txt"], &["a/b/c.txt", "d.txt"]).is_empty());
    }

    #[test]
    fn paths_to_remove_subdirs_4_keeps_ancestors_of_new_paths() {
        assert_eq!(removal(&["a/b/c.txt"], &["a/x.txt"]), ["a/b", "a/b/c.txt"]);
    }

    #[test]
    fn paths_to_remove_subdirs_5_ignores_reserved_top_level_names() {
        assert_eq!(removal(&["..nodelet_manifest", "a.txt"], &[]), ["a.txt"]);
    }

    #[test]
    fn paths_to_remove_is_empty_when_the_old_data_dir_vanished() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("..2024_01_01_00_00_00.1");
        assert!(paths_to_remove(&gone, ["a"]).unwrap().is_empty());
    }
}
