//! The hostPath volume plugin, `kubernetes.io/host-path` (PL-33): a path of the node itself,
//! checked against the volume's `type` (created for the `…OrCreate` types) and shown to the
//! containers as it is. Nothing is written under the pod directory and nothing is removed.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Volume;
use nodelet_core::PodVolume;

use super::api::{SetUpOutcome, VolumePlugin};
use super::host::{SetUpContext, TearDownContext};
use crate::SetUpError;

/// `kubernetes.io/host-path`. Checked once; never remounted; its tear-down does nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostPathPlugin;

/// Why a hostPath volume cannot be set up; `Display` is the kubelet's text.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum HostPathError {
    /// The path has a `..` element.
    #[error("invalid HostPath `{path}`: must not contain '..'")]
    Backsteps {
        /// The volume's `path`.
        path: String,
    },
    /// A `type` the API does not define.
    #[error("{type_} is an invalid volume type")]
    InvalidType {
        /// The volume's `type`.
        type_: String,
    },
    /// The path does not exist (a type other than the `…OrCreate` ones).
    #[error("hostPath {path} doesn't exist")]
    Missing {
        /// The volume's `path`.
        path: String,
    },
    /// The path is something else than its `type` says.
    #[error("hostPath type check failed: {path} is not a {expected}, it's a {actual}")]
    WrongType {
        /// The volume's `path`.
        path: String,
        /// What the type asks for (`directory`, `file`, `socket file`, …).
        expected: &'static str,
        /// What it is (`Directory`, `File`, `Socket`, `CharDevice`, `BlockDevice`).
        actual: &'static str,
    },
    /// The path's type could not be read, or is none of the five known.
    #[error(
        "hostPath type check failed, {path} is not a {expected}, unable to determine its type: {cause}"
    )]
    UnknownType {
        /// The volume's `path`.
        path: String,
        /// What the type asks for.
        expected: &'static str,
        /// Why its type is unknown.
        cause: Arc<io::Error>,
    },
    /// `DirectoryOrCreate` / `FileOrCreate` could not create the path.
    #[error("{op} {path}: {cause}")]
    Create {
        /// `mkdir` or `open`.
        op: &'static str,
        /// The volume's `path`.
        path: String,
        /// What failed.
        cause: Arc<io::Error>,
    },
}

#[async_trait]
impl VolumePlugin for HostPathPlugin {
    fn name(&self) -> &str {
        "kubernetes.io/host-path"
    }

    fn can_support(&self, volume: &Volume) -> bool {
        volume.host_path.is_some()
    }

    fn requires_remount(&self) -> bool {
        false
    }

    fn host_path(&self, volume: &PodVolume) -> Option<PathBuf> {
        volume.host_path().map(|h| PathBuf::from(&h.path))
    }

    async fn set_up(&self, ctx: &SetUpContext<'_>) -> Result<SetUpOutcome, SetUpError> {
        let Some(source) = ctx.volume.host_path() else {
            return Ok(SetUpOutcome::default());
        };
        let path = source.path.clone();
        let type_ = source.type_.clone().unwrap_or_default();
        let dir = PathBuf::from(&path);
        tokio::task::spawn_blocking(move || check(&path, &type_))
            .await
            .map_err(|_| SetUpError::TaskFailed { path: dir })?
            .map_err(SetUpError::from)?;
        Ok(SetUpOutcome::default())
    }

    /// The node's path stays as it is.
    async fn tear_down(&self, _ctx: &TearDownContext<'_>) -> Result<(), SetUpError> {
        Ok(())
    }
}

/// PL-33: the kubelet's hostPath `SetUp`:
/// 1. the path must not contain a `..` element;
/// 2. no `type` (`""`): nothing else is checked;
/// 3. `DirectoryOrCreate` creates a missing directory (0755, with its parents), `FileOrCreate`
///    a missing empty file (0644; its directory must exist), then they are checked as
///    `Directory` and `File`;
/// 4. `Directory`, `File`, `Socket`, `CharDevice`, `BlockDevice`: the path (symbolic links
///    followed) must exist and be of that type.
pub fn check(path: &str, type_: &str) -> Result<(), HostPathError> {
    // (1)
    if path.split('/').any(|part| part == "..") {
        return Err(HostPathError::Backsteps {
            path: path.to_owned(),
        });
    }
    let p = Path::new(path);
    let exists = || fs::metadata(p).is_ok();
    let create = |op, result: io::Result<()>| match result {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(HostPathError::Create {
            op,
            path: path.to_owned(),
            cause: Arc::new(e),
        }),
        _ => Ok(()),
    };
    // (2), (3)
    let (expected, description) = match type_ {
        "" => return Ok(()),
        "DirectoryOrCreate" => {
            if !exists() {
                let made = fs::DirBuilder::new().recursive(true).mode(0o755).create(p);
                create("mkdir", made)?;
            }
            ("Directory", "directory")
        }
        "Directory" => ("Directory", "directory"),
        "FileOrCreate" => {
            if !exists() {
                let opened = fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .mode(0o644)
                    .open(p)
                    .map(drop);
                create("open", opened)?;
            }
            ("File", "file")
        }
        "File" => ("File", "file"),
        "Socket" => ("Socket", "socket file"),
        "CharDevice" => ("CharDevice", "character device"),
        "BlockDevice" => ("BlockDevice", "block device"),
        other => {
            return Err(HostPathError::InvalidType {
                type_: other.to_owned(),
            });
        }
    };
    // (4)
    if !exists() {
        return Err(HostPathError::Missing {
            path: path.to_owned(),
        });
    }
    let actual = file_type(p).map_err(|cause| HostPathError::UnknownType {
        path: path.to_owned(),
        expected: description,
        cause: Arc::new(cause),
    })?;
    if actual != expected {
        return Err(HostPathError::WrongType {
            path: path.to_owned(),
            expected: description,
            actual,
        });
    }
    Ok(())
}

/// The kubelet's `GetFileType`: `Directory`, `File`, `Socket`, `CharDevice` or `BlockDevice`
/// (symbolic links followed).
fn file_type(path: &Path) -> io::Result<&'static str> {
    let t = fs::metadata(path)?.file_type();
    if t.is_dir() {
        Ok("Directory")
    } else if t.is_file() {
        Ok("File")
    } else if t.is_socket() {
        Ok("Socket")
    } else if t.is_char_device() {
        Ok("CharDevice")
    } else if t.is_block_device() {
        Ok("BlockDevice")
    } else {
        Err(io::Error::other(
            "only recognise file, directory, socket, block device and character device",
        ))
    }
}

impl From<HostPathError> for SetUpError {
    fn from(e: HostPathError) -> Self {
        SetUpError::HostPath(e)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixListener;

    use super::*;

    fn text(r: Result<(), HostPathError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn each_type_accepts_its_kind_and_names_the_kind_it_found() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_str().unwrap().to_owned();
        let file = format!("{dir}/f");
        fs::write(&file, "x").unwrap();
        let socket = format!("{dir}/s");
        let _listener = UnixListener::bind(&socket).unwrap();
        check(&dir, "").unwrap();
        check(&format!("{dir}/nothing"), "").unwrap();
        check(&dir, "Directory").unwrap();
        check(&file, "File").unwrap();
        check(&socket, "Socket").unwrap();
        check("/dev/null", "CharDevice").unwrap();
        assert_eq!(
            text(check(&file, "Directory")),
            format!("hostPath type check failed: {file} is not a directory, it's a File")
        );
        assert_eq!(
            text(check(&dir, "File")),
            format!("hostPath type check failed: {dir} is not a file, it's a Directory")
        );
        assert_eq!(
            text(check("/dev/null", "BlockDevice")),
            "hostPath type check failed: /dev/null is not a block device, it's a CharDevice"
        );
        assert_eq!(
            text(check(&file, "Socket")),
            format!("hostPath type check failed: {file} is not a socket file, it's a File")
        );
        assert_eq!(
            text(check(&format!("{dir}/gone"), "File")),
            format!("hostPath {dir}/gone doesn't exist")
        );
        assert_eq!(text(check(&dir, "Pipe")), "Pipe is an invalid volume type");
        assert_eq!(
            text(check("/a/../b", "")),
            "invalid HostPath `/a/../b`: must not contain '..'"
        );
    }

    #[test]
    fn the_or_create_types_create_what_is_missing_and_keep_what_is_there() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        let d = dir.to_str().unwrap();
        check(d, "DirectoryOrCreate").unwrap();
        assert!(dir.is_dir());
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o755 & !umask()
        );
        let file = dir.join("f");
        let f = file.to_str().unwrap();
        check(f, "FileOrCreate").unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"");
        fs::write(&file, "kept").unwrap();
        check(f, "FileOrCreate").unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"kept");
        // The wrong kind already there is still a type error.
        assert_eq!(
            text(check(f, "DirectoryOrCreate")),
            format!("hostPath type check failed: {f} is not a directory, it's a File")
        );
        // FileOrCreate does not create directories.
        let deep = tmp.path().join("x/y/f");
        let message = text(check(deep.to_str().unwrap(), "FileOrCreate"));
        assert!(
            message.starts_with(&format!("open {}: ", deep.display())),
            "{message}"
        );
    }

    /// The process's umask, as `/proc/self/status` shows it (setting it to read it would race
    /// the other tests).
    fn umask() -> u32 {
        let status = fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
        u32::from_str_radix(line.split_whitespace().nth(1).unwrap(), 8).unwrap()
    }
}
