//! A kubectl wrapper that always names its kubeconfig and context explicitly, so a run never acts
//! on whatever cluster the user's current context happens to point at.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// kubectl bound to one kubeconfig file and one context.
#[derive(Debug, Clone)]
pub(crate) struct Kubectl {
    pub(crate) kubeconfig: PathBuf,
    pub(crate) context: String,
}

impl Kubectl {
    /// Binds to `context` of `kubeconfig`, or to the file's current context when `None`.
    pub(crate) fn new(kubeconfig: &Path, context: Option<&str>) -> Result<Self> {
        let context = match context {
            Some(c) => c.to_string(),
            None => {
                let out = run_plain(
                    Command::new("kubectl")
                        .arg("--kubeconfig")
                        .arg(kubeconfig)
                        .args(["config", "current-context"]),
                    None,
                )
                .with_context(|| {
                    format!("reading the current context of {}", kubeconfig.display())
                })?;
                out.trim().to_string()
            }
        };
        if context.is_empty() {
            bail!(
                "{} has no current context; pass --context",
                kubeconfig.display()
            );
        }
        Ok(Kubectl {
            kubeconfig: kubeconfig.to_path_buf(),
            context,
        })
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--context")
            .arg(&self.context);
        cmd
    }

    /// Runs kubectl with `args`, returning stdout; a failure carries the command and stderr.
    pub(crate) fn run(&self, args: &[&str]) -> Result<String> {
        run_plain(self.command().args(args), None)
    }

    /// Runs kubectl with `args` and `stdin` as standard input.
    pub(crate) fn run_with_input(&self, args: &[&str], stdin: &str) -> Result<String> {
        run_plain(self.command().args(args), Some(stdin))
    }
}

/// Runs `cmd`, returning stdout, or an error naming the command and its stderr.
pub(crate) fn run_plain(cmd: &mut Command, stdin: Option<&str>) -> Result<String> {
    let shown = format!("{cmd:?}");
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| format!("starting {shown}"))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())
            .with_context(|| format!("writing to {shown}"))?;
    }
    let out = child
        .wait_with_output()
        .with_context(|| format!("waiting for {shown}"))?;
    if !out.status.success() {
        bail!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
