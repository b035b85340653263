//! The files of a container's log directory: the path of an instance's current file, the
//! instances present, their rotated files, and pruning old instances.

use std::io;
use std::path::{Path, PathBuf};

use tokio::fs;

use super::error::LogError;

/// `<pod_log_dir>/<container>/<restart_count>.log`: the current log file of one container
/// instance, as the kubelet names it. `pod_log_dir` comes from `PodDirs::pod_logs`; the
/// previous instance (`previous`) is `restart_count - 1`.
pub fn container_log_path(pod_log_dir: &Path, container: &str, restart_count: u32) -> PathBuf {
    pod_log_dir
        .join(container)
        .join(format!("{restart_count}.log"))
}

/// The restart counts of the container instances that have a current log file in
/// `container_dir` (`<pod log dir>/<container>`), in ascending order; empty if the directory
/// does not exist. The last is the newest instance, the one before it the `previous` one.
/// Blocking (one directory listing).
///
/// # Errors
///
/// [`LogError::ListDir`] when the directory cannot be read.
pub fn instances(container_dir: &Path) -> Result<Vec<u32>, LogError> {
    let mut found: Vec<u32> = list_dir_blocking(container_dir)?
        .into_iter()
        .filter_map(|name| name.strip_suffix(".log")?.parse().ok())
        .collect();
    found.sort_unstable();
    Ok(found)
}

/// Deletes the log files (current and rotated) in `container_dir` of every instance below
/// `keep_from`. When instance `n + 1` starts, pass `n`: the previous instance's files stay for
/// `kubectl logs --previous`, as the kubelet keeps them. Other files are left alone. Returns how
/// many files were deleted. Idempotent; blocking (a directory listing and the deletions).
///
/// # Errors
///
/// [`LogError::ListDir`] or [`LogError::Remove`]; a file that is already gone is no error.
pub fn prune_instances(container_dir: &Path, keep_from: u32) -> Result<usize, LogError> {
    let mut removed = 0;
    for name in list_dir_blocking(container_dir)? {
        if instance_of(&name).is_none_or(|instance| instance >= keep_from) {
            continue;
        }
        let path = container_dir.join(&name);
        match std::fs::remove_file(&path) {
            Ok(()) => removed += 1,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(LogError::Remove { path, source }),
        }
    }
    Ok(removed)
}

/// The rotated files of the current file `path`, oldest first: `<name>.<YYYYMMDD-HHMMSS>` and
/// `<name>.<YYYYMMDD-HHMMSS>.<k>`, ordered by stamp, then `k`.
pub(super) async fn rotated_files(path: &Path) -> Result<Vec<PathBuf>, LogError> {
    Ok(rotated_entries(path)
        .await?
        .into_iter()
        .map(|(_, path)| path)
        .collect())
}

/// [`rotated_files`] with their sort keys.
pub(super) async fn rotated_entries(
    path: &Path,
) -> Result<Vec<((String, u32), PathBuf)>, LogError> {
    let name = file_name(path);
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut found: Vec<_> = list_dir(dir)
        .await?
        .into_iter()
        .filter_map(|entry| {
            let key = rotation_key(&entry, &name)?;
            Some((key, dir.join(entry)))
        })
        .collect();
    found.sort();
    Ok(found)
}

/// The sort key of a rotated file name of `current`, or `None` for any other name (`.gz`,
/// `.tmp`, other instances).
pub(super) fn rotation_key(file_name: &str, current: &str) -> Option<(String, u32)> {
    let suffix = file_name.strip_prefix(current)?.strip_prefix('.')?;
    let (stamp, clash) = match suffix.split_once('.') {
        Some((stamp, clash)) => (stamp, clash.parse().ok()?),
        None => (suffix, 0),
    };
    let valid = stamp.len() == 15
        && stamp.bytes().enumerate().all(|(at, byte)| {
            if at == 8 {
                byte == b'-'
            } else {
                byte.is_ascii_digit()
            }
        });
    valid.then(|| (stamp.to_owned(), clash))
}

/// The instance a file of a container directory belongs to: `<n>.log` or `<n>.log.<anything>`.
fn instance_of(file_name: &str) -> Option<u32> {
    let (instance, rest) = file_name.split_once(".log")?;
    if !(rest.is_empty() || rest.starts_with('.')) {
        return None;
    }
    instance.parse().ok()
}

/// The UTF-8 names in `dir`; none if it does not exist.
fn list_dir_blocking(dir: &Path) -> Result<Vec<String>, LogError> {
    let list_error = |source| LogError::ListDir {
        path: dir.to_path_buf(),
        source,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(list_error(error)),
    };
    let mut names = Vec::new();
    for entry in entries {
        if let Ok(name) = entry.map_err(list_error)?.file_name().into_string() {
            names.push(name);
        }
    }
    Ok(names)
}

/// [`list_dir_blocking`] on the blocking pool.
async fn list_dir(dir: &Path) -> Result<Vec<String>, LogError> {
    let owned = dir.to_path_buf();
    tokio::task::spawn_blocking(move || list_dir_blocking(&owned))
        .await
        .unwrap_or_else(|join| {
            Err(LogError::ListDir {
                path: dir.to_path_buf(),
                source: io::Error::other(join),
            })
        })
}

/// Deletes `path`; `false` if it was already gone.
pub(super) async fn remove_file(path: &Path) -> Result<bool, LogError> {
    match fs::remove_file(path).await {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(LogError::Remove {
            path: path.to_path_buf(),
            source,
        }),
    }
}

pub(super) fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_path_is_the_kubelets() {
        assert_eq!(
            container_log_path(Path::new("/var/log/pods/ns_web_u-1"), "app", 3),
            Path::new("/var/log/pods/ns_web_u-1/app/3.log")
        );
    }

    #[test]
    fn rotated_names_sort_by_stamp_then_clash_and_other_names_are_not_rotated_files() {
        assert_eq!(
            rotation_key("0.log.20240101-000000", "0.log"),
            Some(("20240101-000000".to_owned(), 0))
        );
        assert_eq!(
            rotation_key("0.log.20240101-000000.12", "0.log"),
            Some(("20240101-000000".to_owned(), 12))
        );
        for other in [
            "0.log",
            "0.log.tmp",
            "0.log.20240101-000000.gz",
            "10.log.20240101-000000",
            "0.log.2024010-0000000",
        ] {
            assert_eq!(rotation_key(other, "0.log"), None, "{other}");
        }
    }

    #[test]
    fn prune_instances_keeps_the_previous_and_current_instances() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "0.log",
            "0.log.20240101-000000",
            "1.log",
            "1.log.20240101-000000.1",
            "2.log",
            "3.log",
            "notes.txt",
            "4.logfile",
        ] {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        assert_eq!(instances(dir.path()).unwrap(), [0, 1, 2, 3]);
        // Instance 3 started: 2 is the previous one.
        assert_eq!(prune_instances(dir.path(), 2).unwrap(), 4);
        assert_eq!(prune_instances(dir.path(), 2).unwrap(), 0);
        let mut left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["2.log", "3.log", "4.logfile", "notes.txt"]);
        assert_eq!(
            instances(&dir.path().join("missing")).unwrap(),
            Vec::<u32>::new()
        );
    }
}
