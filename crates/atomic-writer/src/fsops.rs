//! File-system primitives of the writer: every call it makes to the file system goes through
//! this module, which counts them by kind on the calling thread ([`probe`]), so tests can pin
//! how many inodes and syscalls a write costs.

use std::cell::Cell;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::error::Error;
use crate::payload::FileProjection;

/// Mode of data directories and of directories inside them (AW-5 step 5), umask-independent.
pub(crate) const DIR_MODE: u32 = 0o755;

/// Test-only seam: the file-system calls the writer made on this thread, by kind. **Not part
/// of the stable API.**
///
/// Each counted call is one syscall, except where noted: a `read_dir` is a listing (open,
/// `fstat`, `getdents64` until the end, close), an `open` or `create` implies its `close`, an
/// `fsync` of a directory its open and close, and a removed tree is one `unlinkat` per entry
/// plus a listing per directory. `creates + mkdirs + symlinks` is the number of
/// inodes the writer allocated.
///
/// ```
/// use nodelet_atomic_writer::{probe, AtomicWriter, FileProjection, Payload, WriterConfig};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let mut writer = AtomicWriter::new(dir.path(), WriterConfig::default().fsync(false))?;
/// let payload: Payload = [("a", FileProjection::new("1", 0o644))].into_iter().collect();
/// probe::take();
/// writer.write(&payload, None)?;
/// // The data directory, the file, `..data` and the visible `a`.
/// assert_eq!(probe::take().inodes(), 4);
/// # Ok(()) }
/// ```
#[doc(hidden)]
pub mod probe {
    use super::COUNTS;

    /// Calls by kind (see the [module docs](self)).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    #[non_exhaustive]
    pub struct OpCounts {
        /// Payload files created (`open(O_CREAT | O_EXCL)`).
        pub creates: u32,
        /// Directories created.
        pub mkdirs: u32,
        /// Symlinks created (`..data`, `..data_tmp`, visible names).
        pub symlinks: u32,
        /// `rename(2)`s.
        pub renames: u32,
        /// `fsync(2)`s of files and directories.
        pub fsyncs: u32,
        /// Files and symlinks removed (visible names, a stale `..data_tmp`).
        pub unlinks: u32,
        /// Directory trees removed (old data directories): `remove_dir_all`, an `openat`,
        /// `getdents64` and `close` per directory and an `unlinkat` per entry.
        pub remove_trees: u32,
        /// `chmod` / `fchmod`.
        pub chmods: u32,
        /// `fchown` / `lchown`.
        pub chowns: u32,
        /// `write(2)`s of file contents.
        pub writes: u32,
        /// `lstat`s.
        pub stats: u32,
        /// `readlink`s.
        pub readlinks: u32,
        /// Directory listings.
        pub read_dirs: u32,
        /// Opens of existing files (to compare contents, or to `fsync` a directory).
        pub opens: u32,
        /// `read(2)`s of file contents.
        pub reads: u32,
    }

    impl OpCounts {
        /// Inodes allocated: files, directories and symlinks created.
        pub fn inodes(&self) -> u32 {
            self.creates + self.mkdirs + self.symlinks
        }
    }

    /// `inodes N: <kind> <count>, …`, the kinds in declaration order, zeros left out.
    impl std::fmt::Display for OpCounts {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "inodes {}:", self.inodes())?;
            let kinds = [
                ("creates", self.creates),
                ("mkdirs", self.mkdirs),
                ("symlinks", self.symlinks),
                ("renames", self.renames),
                ("fsyncs", self.fsyncs),
                ("unlinks", self.unlinks),
                ("remove_trees", self.remove_trees),
                ("chmods", self.chmods),
                ("chowns", self.chowns),
                ("writes", self.writes),
                ("stats", self.stats),
                ("readlinks", self.readlinks),
                ("read_dirs", self.read_dirs),
                ("opens", self.opens),
                ("reads", self.reads),
            ];
            let mut first = true;
            for (name, n) in kinds.into_iter().filter(|(_, n)| *n > 0) {
                write!(f, "{} {name} {n}", if first { "" } else { "," })?;
                first = false;
            }
            Ok(())
        }
    }

    /// Returns this thread's counts and resets them.
    pub fn take() -> OpCounts {
        COUNTS.with(|c| c.replace(OpCounts::default()))
    }
}

use probe::OpCounts;

thread_local! {
    static COUNTS: Cell<OpCounts> = Cell::new(OpCounts::default());
}

fn count(kind: impl FnOnce(&mut OpCounts)) {
    COUNTS.with(|c| {
        let mut counts = c.get();
        kind(&mut counts);
        c.set(counts);
    });
}

/// `lstat`.
pub(crate) fn lstat(path: &Path) -> io::Result<fs::Metadata> {
    count(|c| c.stats += 1);
    fs::symlink_metadata(path)
}

/// `readlink`: `InvalidInput` (EINVAL) when `path` is not a symlink.
pub(crate) fn readlink(path: &Path) -> io::Result<std::path::PathBuf> {
    count(|c| c.readlinks += 1);
    fs::read_link(path)
}

/// One listing of `dir`: names (as given) with their type from the directory entry.
pub(crate) fn list(dir: &Path) -> io::Result<Vec<(std::ffi::OsString, fs::FileType)>> {
    count(|c| c.read_dirs += 1);
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        // `d_type` from `getdents64`; `file_type` falls back to an `lstat` only on file
        // systems that do not fill it in.
        out.push((entry.file_name(), entry.file_type()?));
    }
    Ok(out)
}

/// `mkdir` with mode 0755 then `chmod` to exactly 0755 (umask-independent).
pub(crate) fn mkdir(path: &Path) -> io::Result<()> {
    count(|c| c.mkdirs += 1);
    DirBuilder::new().mode(DIR_MODE).create(path)?;
    chmod(path, DIR_MODE)
}

/// `chmod`.
pub(crate) fn chmod(path: &Path, mode: u32) -> io::Result<()> {
    count(|c| c.chmods += 1);
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

/// `symlink`.
pub(crate) fn symlink(target: &str, link: &Path) -> io::Result<()> {
    count(|c| c.symlinks += 1);
    std::os::unix::fs::symlink(target, link)
}

/// `lchown` (uid only).
pub(crate) fn lchown(path: &Path, uid: u32) -> io::Result<()> {
    count(|c| c.chowns += 1);
    std::os::unix::fs::lchown(path, Some(uid), None)
}

/// `rename`.
pub(crate) fn rename(from: &Path, to: &Path) -> io::Result<()> {
    count(|c| c.renames += 1);
    fs::rename(from, to)
}

/// `unlink` of a file or symlink.
pub(crate) fn unlink(path: &Path) -> io::Result<()> {
    count(|c| c.unlinks += 1);
    fs::remove_file(path)
}

/// Removes the directory `dir` and everything in it with `std::fs::remove_dir_all`, which
/// works from directory descriptors (`openat`, `getdents64`, `unlinkat`), so a directory
/// swapped for a symlink meanwhile is never followed.
pub(crate) fn remove_tree(dir: &Path) -> io::Result<()> {
    count(|c| c.remove_trees += 1);
    fs::remove_dir_all(dir)
}

/// Opens an existing file for reading.
pub(crate) fn open(path: &Path) -> io::Result<File> {
    count(|c| c.opens += 1);
    File::open(path)
}

/// One `read(2)`.
pub(crate) fn read(file: &mut File, buffer: &mut [u8]) -> io::Result<usize> {
    count(|c| c.reads += 1);
    file.read(buffer)
}

/// (6) A parent directory inside the new data directory, mode exactly 0755.
pub(crate) fn create_dir(path: &Path) -> Result<(), Error> {
    mkdir(path).map_err(|cause| Error::CreateDir {
        path: path.to_path_buf(),
        cause,
    })
}

/// (6) Creates `path` (which must not exist) with the payload mode, writes the data, `chown`s
/// to `fs_user` (gid unchanged), then sets the mode exactly (umask independent; after `chown`,
/// which may clear set-id bits). Returns the open file for a later `fsync`.
pub(crate) fn write_file(path: &Path, file: &FileProjection) -> Result<File, Error> {
    let wrap = |cause| Error::WriteFile {
        path: path.to_path_buf(),
        cause,
    };
    count(|c| c.creates += 1);
    let mut handle = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(file.mode)
        .open(path)
        .map_err(wrap)?;
    if !file.data.is_empty() {
        count(|c| c.writes += 1);
        handle.write_all(&file.data).map_err(wrap)?;
    }
    if let Some(uid) = file.fs_user {
        count(|c| c.chowns += 1);
        std::os::unix::fs::fchown(&handle, Some(uid), None).map_err(|cause| Error::Chown {
            path: path.to_path_buf(),
            uid,
            cause,
        })?;
    }
    count(|c| c.chmods += 1);
    handle
        .set_permissions(fs::Permissions::from_mode(file.mode))
        .map_err(|cause| Error::SetMode {
            path: path.to_path_buf(),
            cause,
        })?;
    Ok(handle)
}

/// `fsync` of an open file.
pub(crate) fn sync_file(path: &Path, file: &File) -> Result<(), Error> {
    count(|c| c.fsyncs += 1);
    file.sync_all().map_err(|cause| Error::Sync {
        path: path.to_path_buf(),
        cause,
    })
}

/// `fsync` of a directory, making its entries (creations, renames, removals) durable.
pub(crate) fn sync_dir(path: &Path) -> Result<(), Error> {
    count(|c| {
        c.opens += 1;
        c.fsyncs += 1;
    });
    File::open(path)
        .and_then(|dir| dir.sync_all())
        .map_err(|cause| Error::Sync {
            path: path.to_path_buf(),
            cause,
        })
}
