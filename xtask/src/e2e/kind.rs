//! The kind cluster of the default mode: create (or reuse) a named cluster, wait until it serves,
//! delete it at teardown.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::kubectl::{Kubectl, run_plain};

/// How long the control plane may take to answer `/readyz` after `kind create` returned.
const READY_TIMEOUT: Duration = Duration::from_secs(180);

/// A kind cluster this run uses.
#[derive(Debug)]
pub(crate) struct KindCluster {
    pub(crate) name: String,
    /// Whether this run created it (and so should delete it).
    pub(crate) created: bool,
    pub(crate) kubeconfig: PathBuf,
}

impl KindCluster {
    /// The kubeconfig context kind writes for the cluster.
    pub(crate) fn context(&self) -> String {
        format!("kind-{}", self.name)
    }

    /// Creates the cluster unless one of that name exists, exports its kubeconfig into
    /// `work_dir`, and waits (bounded) until the API server is ready and the default service
    /// account exists.
    pub(crate) fn ensure(name: &str, work_dir: &Path) -> Result<Self> {
        let existing = run_plain(Command::new("kind").args(["get", "clusters"]), None)
            .context("listing kind clusters")?;
        let created = !existing.lines().any(|l| l.trim() == name);
        if created {
            eprintln!("e2e: creating kind cluster `{name}` (this pulls the node image once)");
            run_plain(
                Command::new("kind").args(["create", "cluster", "--name", name, "--wait", "120s"]),
                None,
            )
            .with_context(|| format!("creating kind cluster `{name}`"))?;
        } else {
            eprintln!("e2e: reusing existing kind cluster `{name}`");
        }
        let kubeconfig = work_dir.join("kind.kubeconfig");
        let text = run_plain(
            Command::new("kind").args(["get", "kubeconfig", "--name", name]),
            None,
        )
        .with_context(|| format!("exporting the kubeconfig of kind cluster `{name}`"))?;
        std::fs::write(&kubeconfig, text)
            .with_context(|| format!("writing {}", kubeconfig.display()))?;
        let cluster = KindCluster {
            name: name.to_string(),
            created,
            kubeconfig,
        };
        let kubectl = Kubectl::new(&cluster.kubeconfig, Some(&cluster.context()))?;
        wait_until_ready(&kubectl, READY_TIMEOUT)?;
        Ok(cluster)
    }

    /// Deletes the cluster.
    pub(crate) fn delete(&self) -> Result<()> {
        run_plain(
            Command::new("kind").args(["delete", "cluster", "--name", &self.name]),
            None,
        )
        .with_context(|| format!("deleting kind cluster `{}`", self.name))?;
        Ok(())
    }
}

/// Polls `/readyz` and the `default` service account until both answer or `timeout` passes.
pub(crate) fn wait_until_ready(kubectl: &Kubectl, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last_error = String::new();
    while Instant::now() < deadline {
        match kubectl.run(&["get", "--raw", "/readyz"]) {
            Ok(body) if body.trim() == "ok" => return Ok(()),
            Ok(body) => last_error = body.trim().to_string(),
            Err(err) => last_error = format!("{err:#}"),
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    bail!(
        "the API server of context `{}` was not ready after {}s: {last_error}",
        kubectl.context,
        timeout.as_secs()
    )
}
