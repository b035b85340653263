//! Test helpers: payload builders, the visible-tree oracle and the layout invariants.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nodelet_atomic_writer::{
    AtomicWriter, DATA_DIR_NAME, DATA_TMP_NAME, FileProjection, Payload, WriterConfig, clean_path,
    read_visible,
};

/// What a container should see: cleaned path → (bytes, mode).
pub(crate) type Tree = BTreeMap<String, (Vec<u8>, u32)>;

/// A payload from `(path, contents, mode)` triples.
pub(crate) fn payload(entries: &[(&str, &[u8], u32)]) -> Payload {
    entries
        .iter()
        .map(|(path, data, mode)| (*path, FileProjection::new(data.to_vec(), *mode)))
        .collect()
}

/// A payload of text files with mode 0644, contents given.
pub(crate) fn text(entries: &[(&str, &str)]) -> Payload {
    entries
        .iter()
        .map(|(path, data)| (*path, FileProjection::new(data.as_bytes().to_vec(), 0o644)))
        .collect()
}

/// The tree a payload should produce (AW-4 cleaning; greatest raw key wins on collision).
pub(crate) fn expected(payload: &Payload) -> Tree {
    payload
        .iter()
        .map(|(path, file)| (clean_path(path), (file.data.clone(), file.mode)))
        .collect()
}

/// A writer without fsync (tests run on a throw-away directory).
pub(crate) fn writer(dir: &Path) -> AtomicWriter {
    AtomicWriter::new(dir, WriterConfig::default().fsync(false)).unwrap()
}

/// Names of the data directories in `dir`.
pub(crate) fn data_dirs(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("..") && n != DATA_DIR_NAME && n != DATA_TMP_NAME)
        .collect();
    names.sort();
    names
}

/// The `..data` link target, if any.
pub(crate) fn data_link(dir: &Path) -> Option<PathBuf> {
    fs::read_link(dir.join(DATA_DIR_NAME)).ok()
}

/// The tree under `..data` (files, every one of them); empty without `..data`.
pub(crate) fn data_tree(dir: &Path) -> Tree {
    let Some(target) = data_link(dir) else {
        return Tree::new();
    };
    let mut out = Tree::new();
    collect(&dir.join(target), "", &mut out);
    out
}

fn collect(dir: &Path, prefix: &str, out: &mut Tree) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let relative = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let meta = fs::symlink_metadata(entry.path()).unwrap();
        if meta.is_dir() {
            collect(&entry.path(), &relative, out);
        } else {
            let data = fs::read(entry.path()).unwrap();
            out.insert(relative, (data, meta.permissions().mode() & 0o7777));
        }
    }
}

/// Asserts the state after a successful write of `payload` (AW-6, AW-11): the visible tree
/// equals the payload exactly, the data directory holds exactly the payload's files, `..data`
/// points to the only data directory, no `..data_tmp`
/// remains, and every top-level name of the payload is a symlink `name -> ..data/name`.
pub(crate) fn assert_layout(dir: &Path, payload: &Payload) {
    let want = expected(payload);
    assert_eq!(
        read_visible(dir).unwrap(),
        want,
        "visible tree of {}",
        dir.display()
    );
    let dirs = data_dirs(dir);
    assert_eq!(dirs.len(), 1, "exactly one data directory: {dirs:?}");
    assert_eq!(data_link(dir), Some(PathBuf::from(&dirs[0])));
    assert!(
        fs::symlink_metadata(dir.join(DATA_TMP_NAME)).is_err(),
        "no ..data_tmp"
    );
    let mode = fs::metadata(dir.join(&dirs[0]))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o755, "data directory mode");
    // Containers list the data directory: it holds exactly the payload, nothing of the writer's.
    let held: Vec<String> = data_tree(dir).into_keys().collect();
    let files: Vec<String> = want.keys().cloned().collect();
    assert_eq!(held, files, "files in the data directory");
    for path in want.keys() {
        let top = path.split('/').next().unwrap();
        assert_eq!(
            fs::read_link(dir.join(top)).unwrap(),
            PathBuf::from(format!("..data/{top}"))
        );
    }
}

/// Every entry of `dir`, recursively, without following symlinks: path → description.
/// Used to assert that a failed write changed nothing.
pub(crate) fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    snap(dir, "", &mut out);
    out
}

fn snap(dir: &Path, prefix: &str, out: &mut BTreeMap<String, String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let relative = format!("{prefix}{}", entry.file_name().to_string_lossy());
        let meta = fs::symlink_metadata(entry.path()).unwrap();
        let mode = meta.permissions().mode() & 0o7777;
        let what = if meta.file_type().is_symlink() {
            format!("link {}", fs::read_link(entry.path()).unwrap().display())
        } else if meta.is_dir() {
            snap(&entry.path(), &format!("{relative}/"), out);
            format!("dir {mode:o}")
        } else {
            format!("file {mode:o} {:?}", fs::read(entry.path()).unwrap())
        };
        out.insert(relative, what);
    }
}

/// 125 bytes of binary data with an ELF-like header (AW-12 "basic 2").
pub(crate) fn binary_bytes() -> Vec<u8> {
    let mut bytes = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
    bytes.extend((0u8..117).map(|i| i.wrapping_mul(37) ^ 0xa5));
    assert_eq!(bytes.len(), 125);
    bytes
}
