//! The processes an e2e run starts on the host: the `nodelet` agent, and in `--embedded` mode the
//! `nodelet-apiserver` binary. Both are stopped with SIGTERM (then SIGKILL) and their output goes
//! to log files in the run's work directory.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How long a stopped process may take to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// A child process that is stopped when dropped.
#[derive(Debug)]
pub(crate) struct Managed {
    name: &'static str,
    child: Option<Child>,
}

impl Managed {
    /// SIGTERM, wait up to [`STOP_GRACE`], then SIGKILL.
    pub(crate) fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!(
            "e2e: {} did not stop within {}s; killing it",
            self.name,
            STOP_GRACE.as_secs()
        );
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Detaches the process so it outlives the run (`--keep`).
    pub(crate) fn leave_running(&mut self) -> Option<u32> {
        self.child.take().map(|c| c.id())
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Builds the binaries the run starts (`cargo build -p nodelet -p nodelet-apiserver`) and
/// returns the target directory holding them.
pub(crate) fn build_binaries() -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .args([
            "build",
            "--quiet",
            "-p",
            "nodelet",
            "-p",
            "nodelet-apiserver",
        ])
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("cargo build -p nodelet -p nodelet-apiserver failed ({status})");
    }
    let meta = Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .context("running cargo metadata")?;
    let meta: serde_json::Value =
        serde_json::from_slice(&meta.stdout).context("parsing cargo metadata")?;
    let target = meta["target_directory"]
        .as_str()
        .context("cargo metadata has no target_directory")?;
    Ok(Path::new(target).join("debug"))
}

/// How to start the agent.
#[derive(Debug, Clone)]
pub(crate) struct AgentSpec {
    pub(crate) binary: PathBuf,
    pub(crate) kubeconfig: PathBuf,
    pub(crate) node_name: String,
    pub(crate) root_dir: PathBuf,
    pub(crate) log: PathBuf,
    /// The agent's `--config` file, written by [`start_agent`].
    pub(crate) config: PathBuf,
    /// `--kubelet-port`: against the embedded server a free port, so that nothing else on the
    /// machine holding the kubelet's 10250 (a kubelet, a benchmark's agent) fails the run;
    /// `None`: the agent's default (a cluster reaches the node there).
    pub(crate) kubelet_port: Option<u16>,
    /// How it runs containers: `--runtime process` for the scenarios that need processes.
    pub(crate) runtime: nodelet_e2e::AgentRuntime,
}

/// The agent's KubeletConfiguration: the gates of the `clusterTrustBundle` source on (the
/// `cluster-trust-bundle` scenario; harmless where the cluster lacks the API).
const AGENT_CONFIG: &str = "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
featureGates:
  ClusterTrustBundle: true
  ClusterTrustBundleProjection: true
";

/// A TCP port free on every address right now.
pub(crate) fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind(("0.0.0.0", 0)).context("finding a free port")?;
    Ok(listener.local_addr().context("finding a free port")?.port())
}

/// Starts the agent; it registers its Node (a control plane garbage-collects pods bound to
/// nodes that do not exist).
pub(crate) fn start_agent(spec: &AgentSpec) -> Result<Managed> {
    // Appended to, so the log of a restarted agent follows its predecessor's.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log)
        .with_context(|| format!("opening {}", spec.log.display()))?;
    std::fs::write(&spec.config, AGENT_CONFIG)
        .with_context(|| format!("writing {}", spec.config.display()))?;
    let child = Command::new(&spec.binary)
        .arg("--kubeconfig")
        .arg(&spec.kubeconfig)
        .arg("--config")
        .arg(&spec.config)
        .args(["--node-name", &spec.node_name, "--register-node"])
        .arg("--root-dir")
        .arg(&spec.root_dir)
        .args(
            spec.kubelet_port
                .map(|port| ["--kubelet-port".to_owned(), port.to_string()])
                .into_iter()
                .flatten(),
        )
        .args(match spec.runtime {
            nodelet_e2e::AgentRuntime::Process => &["--runtime", "process"][..],
            nodelet_e2e::AgentRuntime::EnvFiles => &[],
        })
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", spec.binary.display()))?;
    Ok(Managed {
        name: "nodelet",
        child: Some(child),
    })
}

/// The embedded API server of `--embedded` runs: TLS, bearer tokens and the Node authorizer on,
/// so the agent runs as `system:node:<node>` exactly as on a real cluster.
pub(crate) struct Embedded {
    pub(crate) process: Managed,
    /// Admin kubeconfig.
    pub(crate) admin_kubeconfig: PathBuf,
    /// Kubeconfig of `system:node:<node>`.
    pub(crate) node_kubeconfig: PathBuf,
}

/// Starts `nodelet-apiserver --tls --auth` on a loopback port, waits for the line announcing its
/// URL, and returns the process with the admin and node kubeconfigs it wrote.
pub(crate) fn start_embedded_apiserver(
    target_dir: &Path,
    work: &Path,
    node: &str,
) -> Result<Embedded> {
    let kubeconfig = work.join("embedded.kubeconfig");
    let node_kubeconfig = work.join("embedded-node.kubeconfig");
    let manifests = work.join("manifests");
    std::fs::create_dir_all(&manifests)?;
    let mut child = Command::new(target_dir.join("nodelet-apiserver"))
        .args(["--listen", "127.0.0.1:0", "--tls", "--auth"])
        // ClusterTrustBundles, for the `cluster-trust-bundle` scenario.
        .args([
            "--runtime-config",
            "certificates.k8s.io/v1beta1=true",
            "--feature-gates",
            "ClusterTrustBundle=true,ClusterTrustBundleProjection=true",
        ])
        .arg("--node-kubeconfig-out")
        .arg(format!("{node}={}", node_kubeconfig.display()))
        .arg("--manifests")
        .arg(&manifests)
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(open_log(&work.join("apiserver.log"))?)
        .spawn()
        .context("starting nodelet-apiserver")?;
    let stdout = child.stdout.take().context("apiserver stdout")?;
    let mut managed = Managed {
        name: "nodelet-apiserver",
        child: Some(child),
    };
    let mut lines = BufReader::new(stdout).lines();
    match lines.next() {
        Some(Ok(line)) if line.starts_with("serving ") => {
            eprintln!("e2e: embedded API server: {}", line.trim());
        }
        other => {
            managed.stop();
            bail!("nodelet-apiserver did not announce its URL (first line: {other:?})");
        }
    }
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Ok(Embedded {
        process: managed,
        admin_kubeconfig: kubeconfig,
        node_kubeconfig,
    })
}

fn open_log(path: &Path) -> Result<File> {
    File::create(path).with_context(|| format!("creating {}", path.display()))
}
