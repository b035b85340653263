//! The on-disk layout: reserved names, data directory naming (with the modes digest), the AW-8
//! removal set and the read side ([`read_visible`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::fsops;
use crate::payload::FileProjection;

/// Name of the symlink to the current data directory (AW-2).
pub const DATA_DIR_NAME: &str = "..data";
/// Name of the transient symlink renamed over `..data` during a swap (AW-2).
pub const DATA_TMP_NAME: &str = "..data_tmp";
/// Name of the manifest older versions of this writer kept inside each data directory. A data
/// directory holding one is adopted, and replaced by the next write (which writes none).
pub const MANIFEST_NAME: &str = "..nodelet_manifest";

/// Digits of the random part of a data directory name this writer creates.
const RANDOM_DIGITS: usize = 10;
/// Digits of the requested-modes digest that follows the random part.
const DIGEST_DIGITS: usize = 20;

/// A new data directory name: `..<UTC yyyy_MM_dd_HH_mm_ss>.<random decimal digits>` (AW-2),
/// the digits being 10 random ones followed by the 20-digit [`modes_digest`] of the payload
/// (the kubelet's random part has at most 10 digits, so a 30-digit one is always ours).
pub(crate) fn new_data_dir_name(digest: u64) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    // `RandomState` keys are random per thread and differ for every call; no `getpid`.
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let random = hasher.finish() % 10_000_000_000;
    format!(
        "..{}.{random:0rw$}{digest:0dw$}",
        chrono::Utc::now().format("%Y_%m_%d_%H_%M_%S"),
        rw = RANDOM_DIGITS,
        dw = DIGEST_DIGITS,
    )
}

/// The [`modes_digest`] recorded in a data directory name made by [`new_data_dir_name`];
/// `None` for names of the kubelet or of older versions of this writer.
pub(crate) fn recorded_digest(name: &str) -> Option<u64> {
    let (_, random) = name.strip_prefix("..")?.split_once('.')?;
    if random.len() != RANDOM_DIGITS + DIGEST_DIGITS || !random.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    random.get(RANDOM_DIGITS..)?.parse().ok()
}

/// A digest of what the payload asks for beyond contents: every cleaned path with its mode
/// and owner (64-bit FNV-1a, stable across versions and platforms). Recorded in the data
/// directory's name, it lets change detection compare requested modes with requested modes,
/// not with modes a `set_perms` hook (fsGroup) changed afterwards, without a file of ours in the
/// data directory.
pub(crate) fn modes_digest(files: &BTreeMap<String, &FileProjection>) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(PRIME);
        }
    };
    for (path, file) in files {
        let uid = file
            .fs_user
            .map_or_else(|| "-".to_owned(), |u| u.to_string());
        // Length-prefixed path: no two payloads feed the same bytes.
        feed(format!("{} {path} {:o} {uid}\n", path.len(), file.mode).as_bytes());
    }
    hash
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

/// Whether the symlink at `path` (known to be a symlink from a listing) is one this writer
/// created for `name`: one `readlink`.
pub(crate) fn is_our_visible_link(path: &Path, name: &str) -> io::Result<bool> {
    Ok(fsops::readlink(path)? == Path::new(&visible_link_target(name)))
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

/// What steps (3) and (4) learn from one walk of the current data directory.
#[derive(Debug, Default)]
pub(crate) struct CurrentData {
    /// AW-8: every path under the data directory (files and directories, relative, reserved
    /// top-level names excluded) that is neither a payload path nor an ancestor of one.
    pub(crate) to_remove: BTreeSet<String>,
    /// Whether it holds the manifest of an older version of this writer ([`MANIFEST_NAME`]).
    pub(crate) legacy_manifest: bool,
}

/// Walks the current data directory `dir` once (one listing per directory): the AW-8 removal
/// set and whether a legacy manifest is there. Empty if `dir` does not exist.
pub(crate) fn scan_current_data<'a>(
    dir: &Path,
    payload: impl IntoIterator<Item = &'a str>,
) -> io::Result<CurrentData> {
    let mut current = CurrentData::default();
    match walk(dir, "", &mut current) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(CurrentData::default()),
        Err(e) => return Err(e),
    }
    for path in payload {
        current.to_remove.remove(path);
        for (index, _) in path.match_indices('/') {
            current.to_remove.remove(&path[..index]);
        }
    }
    Ok(current)
}

fn walk(dir: &Path, prefix: &str, out: &mut CurrentData) -> io::Result<()> {
    for (raw, kind) in fsops::list(dir)? {
        let name = raw.to_string_lossy().into_owned();
        let relative = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        if kind.is_dir() {
            walk(&dir.join(&raw), &relative, out)?;
        }
        if prefix.is_empty() && name.starts_with("..") {
            out.legacy_manifest |= name == MANIFEST_NAME;
            continue;
        }
        out.to_remove.insert(relative);
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
        let name = new_data_dir_name(7);
        assert!(is_data_dir_name(&name), "{name}");
        assert_ne!(name, new_data_dir_name(7));
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
    fn new_names_are_kubelet_shaped_and_carry_the_modes_digest() {
        let a = FileProjection::new(b"x".to_vec(), 0o600).with_fs_user(1000);
        let files: BTreeMap<String, &FileProjection> =
            [("dir/with space".to_owned(), &a)].into_iter().collect();
        let digest = modes_digest(&files);
        let name = new_data_dir_name(digest);
        assert!(is_data_dir_name(&name), "{name}");
        assert_eq!(recorded_digest(&name), Some(digest));
        assert_eq!(recorded_digest(&new_data_dir_name(0)), Some(0));
        assert_eq!(
            recorded_digest(&new_data_dir_name(u64::MAX)),
            Some(u64::MAX)
        );
        // The kubelet's and older nodelets' names carry none.
        assert_eq!(recorded_digest("..2024_05_01_10_20_30.1234567890"), None);
    }

    #[test]
    fn the_modes_digest_changes_with_any_path_mode_or_owner_but_not_contents() {
        let base = FileProjection::new(b"x".to_vec(), 0o600);
        let other_bytes = FileProjection::new(b"y".to_vec(), 0o600);
        let other_mode = FileProjection::new(b"x".to_vec(), 0o640);
        let owned = FileProjection::new(b"x".to_vec(), 0o600).with_fs_user(0);
        let digest = |path: &str, f: &FileProjection| {
            modes_digest(&[(path.to_owned(), f)].into_iter().collect())
        };
        let d = digest("a", &base);
        assert_eq!(digest("a", &other_bytes), d);
        assert_ne!(digest("a", &other_mode), d);
        assert_ne!(digest("a", &owned), d);
        assert_ne!(digest("b", &base), d);
    }

    // AW-12 `TestPathsToRemove`: the AW-8 test vectors.

    fn removal(old: &[&str], new: &[&str]) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        for path in old {
            let full = dir.path().join(path);
            fs::create_dir_all(full.parent().unwrap()).unwrap();
            fs::write(full, b"x").unwrap();
        }
        scan_current_data(dir.path(), new.iter().copied())
            .unwrap()
            .to_remove
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
    fn the_same_walk_finds_a_legacy_manifest() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.txt"), b"x").unwrap();
        assert!(
            !scan_current_data(dir.path(), ["a.txt"])
                .unwrap()
                .legacy_manifest
        );
        fs::write(dir.path().join(MANIFEST_NAME), b"{}").unwrap();
        assert!(
            scan_current_data(dir.path(), ["a.txt"])
                .unwrap()
                .legacy_manifest
        );
    }

    #[test]
    fn paths_to_remove_is_empty_when_the_old_data_dir_vanished() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("..2024_01_01_00_00_00.1");
        let current = scan_current_data(&gone, ["a"]).unwrap();
        assert!(current.to_remove.is_empty() && !current.legacy_manifest);
    }
}
