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
    /// `--client-ca-file`: the cluster's CA, whose client certificates the kubelet API accepts
    /// (a kubeadm or kind API server's kubelet client certificate is signed by it), so that
    /// `kubectl logs` and `kubectl exec` reach the agent's containers (`--keep`).
    pub(crate) client_ca: Option<PathBuf>,
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

/// How long a started agent may take to list its pods for the first time (`/readyz` 200).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Lines of the agent's log an error about its start shows.
const LOG_TAIL_LINES: usize = 15;

/// Starts the agent and waits until it is ready (its `/readyz`, on a free loopback port, says
/// the first pod list is synced). It registers its Node (a control plane garbage-collects pods
/// bound to nodes that do not exist).
///
/// # Errors
/// The agent exited (a port in use, a kubeconfig it cannot use, no root for the process
/// runtime...) or was not ready within [`READY_TIMEOUT`] (an identity that may not list its
/// pods...): the error says which, with the last lines of its log.
pub(crate) fn start_agent(spec: &AgentSpec) -> Result<Managed> {
    let listen = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let mut managed = spawn_agent(spec, listen)?;
    let started = Instant::now();
    loop {
        let exited = match managed.child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(status))) => Some(status.to_string()),
            Some(Err(err)) => Some(err.to_string()),
            _ => None,
        };
        if let Some(status) = exited {
            managed.child = None;
            bail!(
                "the agent exited at start ({status}); the last lines of {}:\n{}",
                spec.log.display(),
                log_tail(&spec.log)
            );
        }
        let last = match http_get(listen, "/readyz") {
            Ok((200, _)) => return Ok(managed),
            Ok((code, body)) => format!("/readyz {code}: {}", body.trim()),
            Err(err) => format!("/readyz: {err}"),
        };
        if started.elapsed() > READY_TIMEOUT {
            managed.stop();
            bail!(
                "the agent was not ready {}s after its start ({last}): it could not list the \
                 pods of node {} (see its log); the last lines of {}:\n{}",
                READY_TIMEOUT.as_secs(),
                spec.node_name,
                spec.log.display(),
                log_tail(&spec.log)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The last [`LOG_TAIL_LINES`] lines of the file at `path`, indented.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..]
        .iter()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A plain HTTP/1.0 GET of `path` on `addr`: the status code and the body.
fn http_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {response:?}")))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}

/// Spawns the agent as `spec` says, with `--listen listen`.
fn spawn_agent(spec: &AgentSpec, listen: std::net::SocketAddr) -> Result<Managed> {
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
        .arg("--listen")
        .arg(listen.to_string())
        .args(
            spec.client_ca
                .iter()
                .flat_map(|ca| [std::ffi::OsStr::new("--client-ca-file"), ca.as_os_str()]),
        )
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
