//! The payload: relative paths mapped to file projections (AW-2), with redacting `Debug`.

use std::collections::BTreeMap;
use std::fmt;

/// One file of a [`Payload`]: its bytes, permission bits and optional owner (AW-2).
///
/// `Debug` never prints `data`, only its length, so payloads holding Secret values can be
/// logged safely.
///
/// ```
/// use nodelet_atomic_writer::FileProjection;
/// let file = FileProjection::new(b"hunter2".to_vec(), 0o600).with_fs_user(1000);
/// assert_eq!(
///     format!("{file:?}"),
///     "FileProjection { data: <7 bytes>, mode: 0o600, fs_user: Some(1000) }"
/// );
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct FileProjection {
    /// File contents, written verbatim.
    pub data: Vec<u8>,
    /// Permission bits applied exactly (independent of the umask); at most `0o7777`.
    pub mode: u32,
    /// If set, the file is `chown`ed to this uid (the gid is left unchanged).
    pub fs_user: Option<u32>,
}

/// A set of files to project into a target directory: relative path → [`FileProjection`].
///
/// Keys are stored as given; [`AtomicWriter::write`](crate::AtomicWriter::write) validates and
/// cleans them (AW-3, AW-4). Iteration is in byte order of the keys. `Debug` redacts file
/// contents.
///
/// ```
/// use nodelet_atomic_writer::{FileProjection, Payload};
/// let payload: Payload = [
///     ("app.conf", FileProjection::new(b"port = 80\n".to_vec(), 0o644)),
///     ("tls/key.pem", FileProjection::new(b"secret".to_vec(), 0o600)),
/// ]
/// .into_iter()
/// .collect();
/// assert_eq!(payload.len(), 2);
/// assert_eq!(payload.get("tls/key.pem").map(|f| f.mode), Some(0o600));
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Payload {
    files: BTreeMap<String, FileProjection>,
}

impl FileProjection {
    /// A file with the given contents and permission bits, owned by whoever runs the writer.
    pub fn new(data: impl Into<Vec<u8>>, mode: u32) -> Self {
        Self {
            data: data.into(),
            mode,
            fs_user: None,
        }
    }

    /// The same file, to be `chown`ed to `uid` after it is written.
    #[must_use]
    pub fn with_fs_user(mut self, uid: u32) -> Self {
        self.fs_user = Some(uid);
        self
    }
}

impl fmt::Debug for FileProjection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileProjection")
            .field("data", &format_args!("<{} bytes>", self.data.len()))
            .field("mode", &format_args!("{:#o}", self.mode))
            .field("fs_user", &self.fs_user)
            .finish()
    }
}

impl Payload {
    /// An empty payload. Writing it leaves only `..data` and an empty data directory (AW-11).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces the file at `path`, returning the previous one.
    pub fn insert(
        &mut self,
        path: impl Into<String>,
        file: FileProjection,
    ) -> Option<FileProjection> {
        self.files.insert(path.into(), file)
    }

    /// Removes the file at `path` (exact key), returning it.
    pub fn remove(&mut self, path: &str) -> Option<FileProjection> {
        self.files.remove(path)
    }

    /// The file stored under exactly this key.
    pub fn get(&self, path: &str) -> Option<&FileProjection> {
        self.files.get(path)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Entries in byte order of their keys.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &FileProjection)> {
        self.files.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Total number of data bytes, handy for logging instead of the contents.
    pub fn total_bytes(&self) -> usize {
        self.files.values().map(|f| f.data.len()).sum()
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.files.iter()).finish()
    }
}

impl<K: Into<String>> FromIterator<(K, FileProjection)> for Payload {
    fn from_iter<I: IntoIterator<Item = (K, FileProjection)>>(iter: I) -> Self {
        Self {
            files: iter.into_iter().map(|(k, v)| (k.into(), v)).collect(),
        }
    }
}

impl<K: Into<String>> Extend<(K, FileProjection)> for Payload {
    fn extend<I: IntoIterator<Item = (K, FileProjection)>>(&mut self, iter: I) {
        self.files
            .extend(iter.into_iter().map(|(k, v)| (k.into(), v)));
    }
}

impl<'a> IntoIterator for &'a Payload {
    type Item = (&'a String, &'a FileProjection);
    type IntoIter = std::collections::btree_map::Iter<'a, String, FileProjection>;

    fn into_iter(self) -> Self::IntoIter {
        self.files.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_of_a_payload_shows_keys_and_sizes_but_never_contents() {
        let payload: Payload = [(
            "token",
            FileProjection::new(b"s3cr3t-value".to_vec(), 0o400),
        )]
        .into_iter()
        .collect();
        let shown = format!("{payload:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(
            shown.contains("token") && shown.contains("<12 bytes>"),
            "{shown}"
        );
    }

    #[test]
    fn insert_returns_the_replaced_file() {
        let mut payload = Payload::new();
        assert!(
            payload
                .insert("a", FileProjection::new("1", 0o644))
                .is_none()
        );
        let old = payload.insert("a", FileProjection::new("2", 0o644));
        assert_eq!(old.map(|f| f.data), Some(b"1".to_vec()));
        assert_eq!(payload.len(), 1);
        assert_eq!(payload.total_bytes(), 1);
    }
}
