//! Errors of the atomic writer: one variant per step that can fail, each carrying its path.

use std::io;
use std::path::PathBuf;

/// A payload key rejected by validation (AW-3 and the stricter checks documented in the crate
/// docs). `Display` reproduces the kubelet's texts exactly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidPath {
    /// AW-3 (1): the key is empty.
    #[error("invalid path: must not be empty: \"\"")]
    Empty,
    /// AW-3 (2): the key starts with `/`.
    #[error("invalid path: must be relative path: {path}")]
    Absolute {
        /// The raw key.
        path: String,
    },
    /// AW-3 (3): the key is longer than 4096 bytes.
    #[error("invalid path: must be less than or equal to 4096 characters")]
    TooLong {
        /// The raw key.
        path: String,
    },
    /// AW-3 (4): one element is exactly `..`.
    #[error("invalid path: must not contain '..': {path}")]
    ContainsDoubleDot {
        /// The raw key.
        path: String,
    },
    /// AW-3 (4): one element is longer than 255 bytes.
    #[error("invalid path: filenames must be less than or equal to 255 characters")]
    FileNameTooLong {
        /// The raw key.
        path: String,
    },
    /// AW-3 (5): the first element starts with `..` (reserved for the writer). Also reported
    /// when the *cleaned* key would start with `..` (e.g. `./..data`), which upstream lets through.
    #[error("invalid path: must not start with '..': {path}")]
    StartsWithDoubleDot {
        /// The raw key.
        path: String,
    },
    /// Beyond upstream: the key contains a NUL byte, which no file name can hold.
    #[error("invalid path: must not contain a NUL byte: {path:?}")]
    ContainsNul {
        /// The raw key.
        path: String,
    },
    /// Beyond upstream: the key cleans to `.` (e.g. `./`), the data directory itself.
    #[error("invalid path: must name a file: {path}")]
    NotAFile {
        /// The raw key.
        path: String,
    },
}

/// Everything [`AtomicWriter`](crate::AtomicWriter) can fail with.
///
/// Variants are named after the step that failed (see the numbered algorithm in the crate docs)
/// and carry the path involved. I/O variants show their cause in `Display` (kubelet style:
/// `<what failed> <path>: <cause>`) and do not repeat it as [`std::error::Error::source`];
/// use [`Error::io_error`] to classify by [`io::ErrorKind`].
///
/// Validation variants ([`Error::InvalidPath`], [`Error::InvalidMode`], [`Error::PathConflict`])
/// are reported before anything on disk is touched.
///
/// Paths never contain a timestamped data directory's name (it is random, so a message with it
/// would differ on every retry and defeat event aggregation): a path inside the *new* data
/// directory is reported as the payload path in the target directory
/// (`<target>/<payload path>`, the data directory itself as `<target>`), a path inside the
/// *current* one through `..data` (`<target>/..data/<payload path>`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// AW-1: the target directory does not exist.
    #[error("target directory {} does not exist", path.display())]
    TargetMissing {
        /// The target directory.
        path: PathBuf,
    },
    /// Step (1): a payload key failed AW-3 validation.
    #[error(transparent)]
    InvalidPath(#[from] InvalidPath),
    /// Step (1): a file mode has bits outside `0o7777`.
    #[error("invalid mode for {path}: {mode:#o} has bits outside 0o7777")]
    InvalidMode {
        /// The raw payload key.
        path: String,
        /// The rejected mode.
        mode: u32,
    },
    /// Step (1): one payload path is a file and also the parent directory of another path.
    #[error("invalid payload: {file} is a file, but {nested} needs it to be a directory")]
    PathConflict {
        /// The cleaned path that would be a file.
        file: String,
        /// The cleaned path that needs it to be a directory.
        nested: String,
    },
    /// Step (2): the target directory could not be listed.
    #[error("list target directory {}: {cause}", path.display())]
    ListTarget {
        /// The target directory.
        path: PathBuf,
        /// Underlying error.
        cause: io::Error,
    },
    /// Step (2): `..data` could not be read.
    #[error("read symlink {}: {cause}", path.display())]
    ReadDataLink {
        /// Path of `..data`.
        path: PathBuf,
        /// Underlying error.
        cause: io::Error,
    },
    /// Step (2): `..data` is not a symlink to a timestamped data directory, or `..data_tmp` is
    /// not a symlink: the target directory holds something this writer did not create, and
    /// nothing is changed.
    #[error("{} is not a symlink created by the atomic writer (found {found}); refusing to write", path.display())]
    ForeignData {
        /// Path of `..data` or `..data_tmp`.
        path: PathBuf,
        /// What was found instead.
        found: String,
    },
    /// Step (2): a stale `..data_tmp` (left by a crash) could not be inspected or removed, or it
    /// is not a symlink (something we did not create).
    #[error("remove stale {}: {cause}", path.display())]
    RemoveStaleDataTmp {
        /// Path of `..data_tmp`.
        path: PathBuf,
        /// Underlying error.
        cause: io::Error,
    },
    /// Step (2): a user-visible name the payload needs is occupied by something that is not
    /// this writer's symlink; nothing is changed.
    #[error("user-visible path {} exists and is not a symlink into ..data (found {found}); refusing to write", path.display())]
    VisibleNameOccupied {
        /// The occupied path.
        path: PathBuf,
        /// What was found there.
        found: String,
    },
    /// Step (3): walking the current data directory failed.
    #[error("list current data directory {}: {cause}", path.display())]
    ListCurrentData {
        /// The path that could not be read.
        path: PathBuf,
        /// Underlying error.
        cause: io::Error,
    },
    /// Step (4): reading a current file for change detection failed.
    #[error("compare with current data {}: {cause}", path.display())]
    CompareCurrentData {
        /// The path that could not be read.
        path: PathBuf,
        /// Underlying error.
        cause: io::Error,
    },
    /// Step (5): the new timestamped data directory could not be created.
    #[error("create data directory in {}: {cause}", path.display())]
    CreateDataDir {
        /// The target directory.
        path: PathBuf,
        /// Underlying error.
        cause: io::Error,
    },
    /// Step (6): a parent directory inside the new data directory could not be created.
    #[error("create directory {}: {cause}", path.display())]
    CreateDir {
        /// The directory path.
        path: PathBuf,
        /// Underlying error.
        cause: io::Error,
    },
    /// Step (6): a payload file could not be written.
    #[error("write file {}: {cause}", path.display())]
    WriteFile {
        /// The file path.
        path: PathBuf,
        /// Underlying error.
        cause: io::Error,
    },
    /// Step (6): a file or directory mode could not be set.
    #[error("chmod {}: {cause}", path.display())]
    SetMode {
        /// The path.
        path: PathBuf,
        /// Underlying error.
        cause: io::Error,
    },
    /// Step (6): a file could not be `chown`ed to its `fs_user`.
    #[error("chown {} to uid {uid}: {cause}", path.display())]
    Chown {
        /// The file path.
        path: PathBuf,
        /// The requested owner.
        uid: u32,
        /// Underlying error.
        cause: io::Error,
    },
    /// Step (7): the caller's `set_perms` hook failed.
    #[error("set permissions on the new data for {}: {cause}", path.display())]
    SetPerms {
        /// The target directory (the hook got the new data directory).
        path: PathBuf,
        /// The hook's error.
        cause: io::Error,
    },
    /// Steps (6)-(9): an `fsync` failed.
    #[error("fsync {}: {cause}", path.display())]
    Sync {
        /// The path being synced.
        path: PathBuf,
        /// Underlying error.
        cause: io::Error,
    },
    /// Step (8): the `..data_tmp` symlink could not be created.
    #[error("create symlink {}: {cause}", path.display())]
    CreateDataTmp {
        /// Path of `..data_tmp`.
        path: PathBuf,
        /// Underlying error.
        cause: io::Error,
    },
    /// Step (9) of a first write: the `..data` symlink could not be created.
    #[error("create symlink {}: {cause}", path.display())]
    CreateDataLink {
        /// Path of `..data`.
        path: PathBuf,
        /// Underlying error.
        cause: io::Error,
    },
    /// Step (9): renaming `..data_tmp` over `..data` failed.
    #[error("rename {} over ..data: {cause}", path.display())]
    SwapData {
        /// Path of `..data_tmp`.
        path: PathBuf,
        /// Underlying error.
        cause: io::Error,
    },
    /// Step (10): a user-visible symlink could not be created.
    #[error("create user-visible symlink {}: {cause}", path.display())]
    CreateVisibleLink {
        /// The symlink path.
        path: PathBuf,
        /// Underlying error.
        cause: io::Error,
    },
    /// Step (11): a stale user-visible symlink could not be removed (the last such error).
    #[error("remove user-visible symlink {}: {cause}", path.display())]
    RemoveVisibleLink {
        /// The symlink path.
        path: PathBuf,
        /// Underlying error.
        cause: io::Error,
    },
    /// Step (12): an old or orphaned data directory could not be removed.
    #[error("remove old data directory in {}: {cause}", path.display())]
    RemoveOldDataDir {
        /// The target directory.
        path: PathBuf,
        /// Underlying error.
        cause: io::Error,
    },
}

impl Error {
    /// The underlying I/O error, if this variant has one (for classifying by kind, e.g.
    /// `StorageFull`, without matching on message text).
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            Error::ReadDataLink { cause, .. }
            | Error::RemoveStaleDataTmp { cause, .. }
            | Error::ListCurrentData { cause, .. }
            | Error::CompareCurrentData { cause, .. }
            | Error::CreateDataDir { cause, .. }
            | Error::CreateDir { cause, .. }
            | Error::WriteFile { cause, .. }
            | Error::SetMode { cause, .. }
            | Error::Chown { cause, .. }
            | Error::SetPerms { cause, .. }
            | Error::Sync { cause, .. }
            | Error::CreateDataTmp { cause, .. }
            | Error::CreateDataLink { cause, .. }
            | Error::ListTarget { cause, .. }
            | Error::SwapData { cause, .. }
            | Error::CreateVisibleLink { cause, .. }
            | Error::RemoveVisibleLink { cause, .. }
            | Error::RemoveOldDataDir { cause, .. } => Some(cause),
            Error::TargetMissing { .. }
            | Error::InvalidPath(_)
            | Error::InvalidMode { .. }
            | Error::PathConflict { .. }
            | Error::ForeignData { .. }
            | Error::VisibleNameOccupied { .. } => None,
        }
    }

    /// The same error with a path under `from` (a timestamped data directory) reported under
    /// `to` instead (see the type's docs).
    pub(crate) fn relocated(mut self, from: &std::path::Path, to: &std::path::Path) -> Self {
        match &mut self {
            Error::ListCurrentData { path, .. }
            | Error::CompareCurrentData { path, .. }
            | Error::CreateDataDir { path, .. }
            | Error::CreateDir { path, .. }
            | Error::WriteFile { path, .. }
            | Error::SetMode { path, .. }
            | Error::Chown { path, .. }
            | Error::SetPerms { path, .. }
            | Error::Sync { path, .. }
            | Error::RemoveOldDataDir { path, .. } => {
                if let Ok(rest) = path.strip_prefix(from) {
                    *path = to.join(rest);
                }
            }
            _ => {}
        }
        self
    }

    /// Whether the payload itself was rejected (validation, step 1). Such errors are permanent:
    /// retrying the same payload fails the same way. Nothing on disk was changed.
    pub fn is_invalid_payload(&self) -> bool {
        matches!(
            self,
            Error::InvalidPath(_) | Error::InvalidMode { .. } | Error::PathConflict { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_variants_show_the_cause_once_in_display_and_not_as_source() {
        let err = Error::WriteFile {
            path: PathBuf::from("/v/..2024_01_01_00_00_00.1/key"),
            cause: io::Error::from(io::ErrorKind::StorageFull),
        }
        .relocated(
            std::path::Path::new("/v/..2024_01_01_00_00_00.1"),
            std::path::Path::new("/v"),
        );
        let text = err.to_string();
        assert!(text.starts_with("write file /v/key: "), "{text}");
        assert!(std::error::Error::source(&err).is_none());
        assert_eq!(
            err.io_error().map(io::Error::kind),
            Some(io::ErrorKind::StorageFull)
        );
        assert!(!err.is_invalid_payload());
    }

    #[test]
    fn validation_variants_display_exactly_the_kubelet_text() {
        let err = Error::from(InvalidPath::Absolute {
            path: "/etc/passwd".into(),
        });
        assert_eq!(
            err.to_string(),
            "invalid path: must be relative path: /etc/passwd"
        );
        assert!(err.is_invalid_payload());
        assert!(err.io_error().is_none());
    }
}
