//! Checks that the external tools a mode needs are installed, naming what is missing and how to
//! get it.

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// An external program the e2e run shells out to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tool {
    /// Executable name looked up on `PATH`.
    pub(crate) name: &'static str,
    /// What the run needs it for.
    pub(crate) purpose: &'static str,
    /// How to get it.
    pub(crate) install: &'static str,
}

pub(crate) const DOCKER: Tool = Tool {
    name: "docker",
    purpose: "runs the kind node containers",
    install: "install Docker Engine (https://docs.docker.com/engine/install/) and start its daemon",
};

pub(crate) const KIND: Tool = Tool {
    name: "kind",
    purpose: "creates the throw-away cluster",
    install: "`go install sigs.k8s.io/kind@latest`, or a release binary from \
              https://kind.sigs.k8s.io/docs/user/quick-start/#installation",
};

pub(crate) const KUBECTL: Tool = Tool {
    name: "kubectl",
    purpose: "talks to the cluster (namespaces, CSR approval, cleanup)",
    install: "https://kubernetes.io/docs/tasks/tools/#kubectl (or `apt-get install kubectl` \
              from the Kubernetes apt repository)",
};

/// Tools the default (kind) mode needs, in the order they are reported.
pub(crate) const KIND_MODE: [Tool; 3] = [DOCKER, KIND, KUBECTL];

/// Tools `--kubeconfig` and `--embedded` need.
pub(crate) const CLUSTER_MODE: [Tool; 1] = [KUBECTL];

/// The tools that are missing, with the reason each is needed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Missing {
    /// Tools not found on `PATH`.
    pub(crate) tools: Vec<Tool>,
    /// Set when `docker` exists but its daemon does not answer: the `docker info` output.
    pub(crate) docker_daemon: Option<String>,
    /// Whether the kind mode asked (the other modes are the way out then).
    pub(crate) kind_mode: bool,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kind_mode {
            writeln!(f, "cargo xtask e2e (kind mode) cannot run on this machine:")?;
        } else {
            writeln!(f, "cargo xtask e2e cannot run on this machine:")?;
        }
        for tool in &self.tools {
            writeln!(
                f,
                "  - `{}` is not on PATH ({}); get it: {}",
                tool.name, tool.purpose, tool.install
            )?;
        }
        if let Some(detail) = &self.docker_daemon {
            writeln!(
                f,
                "  - `docker` is installed but its daemon does not answer (`docker info`: {detail}); \
                 start the Docker daemon"
            )?;
        }
        if self.kind_mode {
            write!(
                f,
                "Or use an existing cluster with `--kubeconfig PATH`, or the embedded API server \
                 with `--embedded`."
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for Missing {}

/// Looks `name` up in a `PATH`-style list of directories.
pub(crate) fn find_in_path(name: &str, path_var: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path_var)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Checks `tools` against `path_var`; when docker is among them and present, also checks that
/// its daemon answers.
pub(crate) fn check(tools: &[Tool], path_var: &OsStr) -> Result<(), Missing> {
    let mut missing = Missing {
        tools: Vec::new(),
        docker_daemon: None,
        kind_mode: tools.contains(&KIND),
    };
    for tool in tools {
        match find_in_path(tool.name, path_var) {
            None => missing.tools.push(*tool),
            Some(path) if tool.name == DOCKER.name => {
                missing.docker_daemon = docker_daemon_problem(&path);
            }
            Some(_) => {}
        }
    }
    if missing.tools.is_empty() && missing.docker_daemon.is_none() {
        Ok(())
    } else {
        Err(missing)
    }
}

/// `None` when `docker info` succeeds, else a one-line summary of why it failed.
fn docker_daemon_problem(docker: &Path) -> Option<String> {
    match Command::new(docker)
        .args(["info", "--format", "{{.ServerVersion}}"])
        .output()
    {
        Ok(out) if out.status.success() => None,
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stderr);
            let line = text
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("exited with an error");
            Some(line.to_string())
        }
        Err(err) => Some(err.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn fake_tool(dir: &Path, name: &str, script: &str) {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn an_empty_path_reports_every_tool_with_how_to_get_it() {
        let dir = tempfile::tempdir().unwrap();
        let err = check(&KIND_MODE, dir.path().as_os_str()).unwrap_err();
        assert_eq!(err.tools, KIND_MODE.to_vec());
        let text = err.to_string();
        for tool in KIND_MODE {
            assert!(
                text.contains(&format!("`{}` is not on PATH", tool.name)),
                "{text}"
            );
            assert!(text.contains(tool.install), "{text}");
        }
        assert!(text.contains("--kubeconfig PATH"), "{text}");
        assert!(text.contains("--embedded"), "{text}");
    }

    #[test]
    fn only_the_missing_tool_is_named() {
        let dir = tempfile::tempdir().unwrap();
        fake_tool(dir.path(), "docker", "exit 0");
        fake_tool(dir.path(), "kubectl", "exit 0");
        let err = check(&KIND_MODE, dir.path().as_os_str()).unwrap_err();
        assert_eq!(err.tools, vec![KIND]);
        assert_eq!(err.docker_daemon, None);
    }

    #[test]
    fn a_docker_client_without_a_daemon_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        fake_tool(
            dir.path(),
            "docker",
            "echo 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock.' >&2; exit 1",
        );
        fake_tool(dir.path(), "kind", "exit 0");
        fake_tool(dir.path(), "kubectl", "exit 0");
        let err = check(&KIND_MODE, dir.path().as_os_str()).unwrap_err();
        assert!(err.tools.is_empty());
        let detail = err.docker_daemon.clone().unwrap();
        assert!(
            detail.contains("Cannot connect to the Docker daemon"),
            "{detail}"
        );
        assert!(err.to_string().contains("start the Docker daemon"));
    }

    #[test]
    fn all_tools_present_and_a_live_daemon_pass() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["docker", "kind", "kubectl"] {
            fake_tool(dir.path(), name, "exit 0");
        }
        assert_eq!(check(&KIND_MODE, dir.path().as_os_str()), Ok(()));
    }

    #[test]
    fn the_other_modes_name_a_missing_kubectl_without_pointing_to_themselves() {
        let dir = tempfile::tempdir().unwrap();
        let err = check(&CLUSTER_MODE, dir.path().as_os_str()).unwrap_err();
        assert_eq!(err.tools, vec![KUBECTL]);
        let text = err.to_string();
        assert!(text.starts_with("cargo xtask e2e cannot run"), "{text}");
        assert!(text.contains("`kubectl` is not on PATH"), "{text}");
        assert!(text.contains(KUBECTL.install), "{text}");
        assert!(!text.contains("--embedded"), "{text}");
        fake_tool(dir.path(), "kubectl", "exit 0");
        assert_eq!(check(&CLUSTER_MODE, dir.path().as_os_str()), Ok(()));
    }

    #[test]
    fn a_non_executable_file_does_not_count_as_installed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("kind"), "not a program").unwrap();
        assert_eq!(find_in_path("kind", dir.path().as_os_str()), None);
    }
}
