//! Termination messages (PW-24, PW-25): the file a container may write at its
//! `terminationMessagePath`, and the tail of its log for `FallbackToLogsOnError`.
//!
//! ```text
//! <root>/pods/<uid>/containers/<name>/<8 hex digits>   0666, empty, one per instance,
//!                                                       bound at terminationMessagePath
//! ```
//!
//! As the kubelet: the file is made empty (mode 0666, whatever the umask) for each instance,
//! under a random name, and bound into the container at `terminationMessagePath` (writable,
//! whatever user the container runs as). When the instance has ended, the last 4096 bytes of
//! the file are its message. With `FallbackToLogsOnError`, an instance that failed (exit code
//! other than 0) and left the file empty gets the last 80 lines of its log instead, at most
//! their last 2048 bytes.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Container;

use crate::logs::{self, ReadOptions};

/// The most of the file a message keeps: its last 4 KiB (the kubelet's
/// `MaxContainerTerminationMessageLength`).
pub(crate) const MAX_MESSAGE_BYTES: u64 = 4 * 1024;
/// The most of the log a fallback message keeps: the last 2 KiB …
pub(crate) const MAX_LOG_BYTES: usize = 2 * 1024;
/// … of its last 80 lines.
pub(crate) const MAX_LOG_LINES: usize = 80;

/// Where one instance's message comes from.
#[derive(Debug, Clone)]
pub(crate) struct MessageSource {
    /// The host file bound at `terminationMessagePath`; `None` when the path is empty.
    pub(crate) file: Option<PathBuf>,
    /// `terminationMessagePolicy: FallbackToLogsOnError`.
    pub(crate) fallback_to_logs: bool,
}

impl MessageSource {
    /// Makes the message file of a new instance of `container` in its runtime directory
    /// `dir` (the previous instance's is removed), when the container has a
    /// `terminationMessagePath`.
    ///
    /// # Errors
    /// When the file cannot be made.
    pub(crate) fn prepare(container: &Container, dir: &Path) -> io::Result<Self> {
        let fallback_to_logs =
            container.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
        let wanted = container
            .termination_message_path
            .as_deref()
            .is_some_and(|p| !p.is_empty());
        if !wanted {
            return Ok(Self {
                file: None,
                fallback_to_logs,
            });
        }
        remove_previous(dir);
        let file = dir.join(format!("{:08x}", rand::random::<u32>()));
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o666)
            .open(&file)?;
        // The umask narrowed the mode at creation; the container's user must write it.
        fs::set_permissions(&file, fs::Permissions::from_mode(0o666))?;
        Ok(Self {
            file: Some(file),
            fallback_to_logs,
        })
    }

    /// The message of an instance that ended with `exit_code`, whose log is `log_path`
    /// (`None`: no message).
    pub(crate) async fn read(&self, exit_code: i32, log_path: &Path) -> Option<String> {
        let fallback = self.fallback_to_logs && exit_code != 0;
        let from_file = match &self.file {
            None => None,
            Some(path) => match read_tail(path, MAX_MESSAGE_BYTES) {
                Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => {
                    return Some(format!(
                        "Error on reading termination log {}: {e}",
                        path.display()
                    ));
                }
            },
        };
        let message = match from_file {
            Some(m) if !m.is_empty() || !fallback => m,
            _ if fallback => log_tail(log_path).await,
            _ => String::new(),
        };
        (!message.is_empty()).then_some(message)
    }
}

/// Removes the message files of earlier instances (names of 8 hex digits) from `dir`.
fn remove_previous(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let is_message = name
            .to_str()
            .is_some_and(|n| n.len() == 8 && n.bytes().all(|b| b.is_ascii_hexdigit()));
        if is_message {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// The last `max` bytes of `path`.
fn read_tail(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let mut file = fs::File::open(path)?;
    let len = file.metadata()?.len();
    if len > max {
        file.seek(SeekFrom::Start(len - max))?;
    }
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The last [`MAX_LOG_BYTES`] of the last [`MAX_LOG_LINES`] lines of the log.
async fn log_tail(log_path: &Path) -> String {
    let options = ReadOptions {
        tail_lines: Some(MAX_LOG_LINES),
        ..ReadOptions::default()
    };
    let mut out = Vec::new();
    if let Err(e) = logs::read_logs(log_path, &options, std::future::ready(()), &mut out).await {
        return format!("Error on reading termination message from logs: {e}");
    }
    let start = out.len().saturating_sub(MAX_LOG_BYTES);
    String::from_utf8_lossy(&out[start..]).into_owned()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::logs::LogConfig;

    fn container(path: Option<&str>, policy: Option<&str>) -> Container {
        Container {
            name: "c".into(),
            termination_message_path: path.map(str::to_owned),
            termination_message_policy: policy.map(str::to_owned),
            ..Container::default()
        }
    }

    async fn write_log(dir: &Path, stdout: &[u8]) -> PathBuf {
        let path = logs::container_log_path(dir, "c", 0);
        logs::copy_streams(stdout, &b""[..], path.clone(), LogConfig::default())
            .await
            .unwrap();
        path
    }

    #[tokio::test]
    async fn the_message_is_the_end_of_the_file_the_container_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let source =
            MessageSource::prepare(&container(Some("/dev/termination-log"), None), dir.path())
                .unwrap();
        let file = source.file.clone().unwrap();
        assert_eq!(fs::metadata(&file).unwrap().mode() & 0o777, 0o666);
        let log = write_log(dir.path(), b"log line\n").await;
        assert_eq!(
            source.read(1, &log).await,
            None,
            "an empty file: no message"
        );
        let mut text = "x".repeat(5000);
        text.push_str("END");
        fs::write(&file, &text).unwrap();
        let message = source.read(0, &log).await.unwrap();
        assert_eq!(message.len(), 4096);
        assert!(message.ends_with("xEND"));
        // A new instance gets a new, empty file; the old one goes.
        let next =
            MessageSource::prepare(&container(Some("/dev/termination-log"), None), dir.path())
                .unwrap();
        assert!(!file.exists() || next.file.as_ref() == Some(&file));
        assert_eq!(fs::metadata(next.file.unwrap()).unwrap().len(), 0);
    }

    #[tokio::test]
    async fn a_failed_container_with_an_empty_file_falls_back_to_its_log_tail() {
        let dir = tempfile::tempdir().unwrap();
        let lines: String = (0..100).map(|i| format!("line {i:03}\n")).collect();
        let log = write_log(dir.path(), lines.as_bytes()).await;
        let fallback = MessageSource::prepare(
            &container(Some("/dev/termination-log"), Some("FallbackToLogsOnError")),
            dir.path(),
        )
        .unwrap();
        let message = fallback.read(2, &log).await.unwrap();
        // 80 lines of 9 bytes: 720 bytes, all within 2 KiB.
        assert!(message.starts_with("line 020\n"), "{message}");
        assert!(message.ends_with("line 099\n"));
        assert_eq!(fallback.read(0, &log).await, None, "succeeded: no fallback");
        fs::write(fallback.file.as_ref().unwrap(), "from file").unwrap();
        assert_eq!(fallback.read(2, &log).await.as_deref(), Some("from file"));
        let long: String = (0..80)
            .map(|i| format!("{i:02}{}\n", "y".repeat(97)))
            .collect();
        let log = write_log(dir.path(), long.as_bytes()).await;
        let no_file =
            MessageSource::prepare(&container(None, Some("FallbackToLogsOnError")), dir.path())
                .unwrap();
        let message = no_file.read(1, &log).await.unwrap();
        assert_eq!(message.len(), MAX_LOG_BYTES);
        assert!(message.ends_with(&format!("79{}\n", "y".repeat(97))));
    }
}
