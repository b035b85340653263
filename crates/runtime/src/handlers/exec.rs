//! [`ProcessRuntime::exec_sync`]: a command in a running container, to its end (the CRI's
//! `ExecSync`, which the kubelet's exec probes and exec lifecycle hooks use).

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use nodelet_core::PodUid;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::error::ExecError;
use crate::supervisor::ProcessRuntime;

/// How much of each of a command's streams is kept (the kubelet's probes read 10 KiB); the
/// rest is read and dropped.
pub const MAX_EXEC_OUTPUT: usize = 10 * 1024;

/// A command that ran in a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecResult {
    /// Its exit code (128 + the signal when a signal ended it). `container-exec` itself
    /// exits 127 when the command is not found and 126 when it could not be started (see
    /// `sandbox::exec_main`).
    pub exit_code: i32,
    /// Its standard output, up to [`MAX_EXEC_OUTPUT`].
    pub stdout: Vec<u8>,
    /// Its standard error, up to [`MAX_EXEC_OUTPUT`].
    pub stderr: Vec<u8>,
}

impl ExecResult {
    /// Standard output followed by standard error: the output the kubelet's
    /// `RunInContainer` returns.
    pub fn output(&self) -> Vec<u8> {
        let mut out = self.stdout.clone();
        out.extend_from_slice(&self.stderr);
        out
    }

    /// The CRI's text for a command that exited non-zero (`command '<cmd>' exited with
    /// <code>: <stderr>`); `None` for exit code 0.
    pub fn failure(&self, command: &[String]) -> Option<String> {
        (self.exit_code != 0).then(|| {
            format!(
                "command '{}' exited with {}: {}",
                command.join(" "),
                self.exit_code,
                String::from_utf8_lossy(&self.stderr)
            )
        })
    }
}

impl ProcessRuntime {
    /// Runs `command` in the running instance of `container` of pod `uid`, in its namespaces,
    /// as its user, with its environment (`<exec_command> PID SPEC -- command…`), and waits for
    /// it to end, at most `timeout` (none: no limit). Stdin is empty. A command that outlives
    /// the timeout is killed with its process group.
    ///
    /// # Errors
    /// [`ExecError::NotRunning`], [`ExecError::NoExecCommand`], [`ExecError::Spawn`],
    /// [`ExecError::Wait`], [`ExecError::Timeout`].
    ///
    /// # Cancel safety
    /// Dropping the future kills the command's process group.
    pub async fn exec_sync(
        &self,
        uid: &PodUid,
        container: &str,
        command: &[String],
        timeout: Option<Duration>,
    ) -> Result<ExecResult, ExecError> {
        let Some((pid, spec)) = self.exec_target(uid, container) else {
            return Err(ExecError::NotRunning {
                container: container.to_owned(),
            });
        };
        let exec = &self.config().exec_command;
        let Some(program) = exec.first() else {
            return Err(ExecError::NoExecCommand);
        };
        let mut child = tokio::process::Command::new(program)
            .args(&exec[1..])
            .arg(pid.to_string())
            .arg(&spec)
            .arg("--")
            .args(command)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| ExecError::Spawn {
                container: container.to_owned(),
                source,
            })?;
        let group = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .map(Pid::from_raw);
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let run = async {
            let (out, err) = tokio::join!(read_capped(stdout), read_capped(stderr));
            let status = child.wait().await;
            (out, err, status)
        };
        let finished = match timeout {
            Some(limit) => tokio::time::timeout(limit, run).await.ok(),
            None => Some(run.await),
        };
        let Some((out, err, status)) = finished else {
            if let Some(group) = group {
                let _ = killpg(group, Signal::SIGKILL);
            }
            return Err(ExecError::Timeout {
                command: command.join(" "),
                timeout: timeout.unwrap_or_default(),
            });
        };
        let wait_err = |source| ExecError::Wait {
            container: container.to_owned(),
            source,
        };
        let status = status.map_err(wait_err)?;
        let (stdout, stderr) = (out.map_err(wait_err)?, err.map_err(wait_err)?);
        // The command's own children, if it left any running, go with it.
        if let Some(group) = group {
            let _ = killpg(group, Signal::SIGKILL);
        }
        Ok(ExecResult {
            exit_code: exit_code(status),
            stdout,
            stderr,
        })
    }
}

/// Reads `stream` to its end, keeping the first [`MAX_EXEC_OUTPUT`] bytes.
async fn read_capped<R: AsyncRead + Unpin>(stream: Option<R>) -> std::io::Result<Vec<u8>> {
    let Some(mut stream) = stream else {
        return Ok(Vec::new());
    };
    let mut kept = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(kept);
        }
        let room = MAX_EXEC_OUTPUT.saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
    }
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 255,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_command_is_described_as_the_cri_does() {
        let result = ExecResult {
            exit_code: 3,
            stdout: b"out\n".to_vec(),
            stderr: b"err\n".to_vec(),
        };
        let command = ["sh".to_owned(), "-c".to_owned(), "exit 3".to_owned()];
        assert_eq!(
            result.failure(&command).as_deref(),
            Some("command 'sh -c exit 3' exited with 3: err\n")
        );
        assert_eq!(result.output(), b"out\nerr\n");
        let ok = ExecResult {
            exit_code: 0,
            ..result
        };
        assert_eq!(ok.failure(&command), None);
    }

    #[tokio::test]
    async fn only_the_first_bytes_of_a_stream_are_kept() {
        let long = vec![b'x'; MAX_EXEC_OUTPUT + 5000];
        let kept = read_capped(Some(&long[..])).await.unwrap();
        assert_eq!(kept.len(), MAX_EXEC_OUTPUT);
        assert!(read_capped(None::<&[u8]>).await.unwrap().is_empty());
    }
}
