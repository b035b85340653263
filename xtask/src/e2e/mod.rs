//! `cargo xtask e2e`: run the scenario suite (`nodelet-e2e`, the same one `cargo test` runs)
//! against a kind cluster (default), any cluster (`--kubeconfig`), or the embedded API server
//! (`--embedded`), with the real agent binary running on the host.
//!
//! Flow: scenarios selected (`--filter`; none is refused) → node name (`--node-name`, or the
//! node of `--node-kubeconfig`'s `system:node:` identity; a mismatch is refused before anything
//! starts) → check tools → cluster (create/reuse kind, or the given kubeconfig, or start
//! `nodelet-apiserver --tls --auth`) → the admin identity's rights (every missing one named) →
//! node identity (CSR on kind, `--node-kubeconfig`, a node token from the embedded server, else
//! admin and the report says so) → a Node of that name that another agent renews is refused →
//! build and start the agent, wait for its `/readyz` and its Node (an agent that exits or never
//! gets ready is reported with its log) → run the scenarios → report → teardown (agent, its Node
//! unless it existed before, the kind cluster we created; skipped with `--keep`, also run on
//! failure and Ctrl-C).

mod agent;
mod kind;
mod kubectl;
mod node_identity;
mod preflight;
mod report;
mod tools;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;

use self::agent::{AgentSpec, Managed};
use self::kubectl::Kubectl;
use self::report::{LatencySummary, Report, ScenarioReport};

/// Arguments of `cargo xtask e2e`.
#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask e2e",
    about = "Run the nodelet end-to-end scenarios"
)]
pub(crate) struct Args {
    /// Use this existing cluster instead of creating a kind cluster.
    #[arg(long, value_name = "PATH", conflicts_with = "embedded")]
    kubeconfig: Option<PathBuf>,
    /// Context of --kubeconfig to use (default: its current context).
    #[arg(long, requires = "kubeconfig")]
    context: Option<String>,
    /// Use the embedded API server (nodelet-apiserver) instead of a cluster.
    #[arg(long)]
    embedded: bool,
    /// Name of the kind cluster to create or reuse.
    #[arg(long, default_value = "nodelet-e2e")]
    cluster_name: String,
    /// Node name the agent registers and pods are bound to (default: the name in the
    /// `system:node:<name>` identity of --node-kubeconfig, else nodelet-e2e). A name that
    /// differs from that identity's is refused before anything starts.
    #[arg(long)]
    node_name: Option<String>,
    /// A kubeconfig with a `system:node:<node-name>` identity for the agent (the embedded server
    /// makes its own).
    #[arg(long, value_name = "PATH", conflicts_with = "embedded")]
    node_kubeconfig: Option<PathBuf>,
    /// Create the agent's Node, without nodelet's taint, before the agent starts (as a
    /// previous kubelet or an older nodelet leaves it); the agent must reconcile it without
    /// touching its taints. Deleted at teardown.
    #[arg(long)]
    existing_node: bool,
    /// The agent's `--kubelet-port` (its kubelet API, TLS). Default: 10250, the kubelet's, where
    /// a cluster reaches a node; with --embedded a free port. Another kubelet (or agent) on this
    /// host holding the port makes the agent fail at start.
    #[arg(long, value_name = "PORT")]
    kubelet_port: Option<u16>,
    /// Leave the cluster and the agent running for inspection.
    #[arg(long)]
    keep: bool,
    /// Run only scenarios whose name contains this text (repeatable).
    #[arg(long, value_name = "NAME")]
    filter: Vec<String>,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
}

/// Entry point: parses `args` (everything after `e2e`) and runs.
pub(crate) fn main(args: Vec<String>) -> Result<bool> {
    let args = Args::try_parse_from(std::iter::once("cargo xtask e2e".to_string()).chain(args))
        .map_err(|e| {
            let _ = e.print();
            anyhow::anyhow!("invalid arguments")
        })?;
    if args.list {
        for name in nodelet_e2e::scenario_names() {
            println!("{name}");
        }
        return Ok(true);
    }
    let work = std::env::temp_dir().join(format!("nodelet-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    eprintln!("e2e: work directory {}", work.display());

    let mut teardown = Teardown::default();
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let flag = interrupted.clone();
        ctrlc::set_handler(move || {
            flag.store(true, Ordering::SeqCst);
            eprintln!("e2e: interrupted; tearing down (Ctrl-C again to abort)");
        })
        .context("installing the Ctrl-C handler")?;
    }
    let result = run(&args, &work, &mut teardown, &interrupted);
    if args.keep {
        teardown.keep();
    } else {
        teardown.run();
    }
    result
}

/// What to undo at the end, in reverse order of creation.
#[derive(Default)]
struct Teardown {
    agent: Option<Arc<Mutex<Managed>>>,
    apiserver: Option<Managed>,
    node: Option<(Kubectl, String)>,
    kind: Option<kind::KindCluster>,
}

impl Teardown {
    fn run(&mut self) {
        if let Some(agent) = self.agent.take()
            && let Ok(mut agent) = agent.lock()
        {
            agent.stop();
        }
        if let Some((kubectl, node)) = self.node.take()
            && let Err(err) = kubectl.run(&["delete", "node", &node, "--ignore-not-found"])
        {
            eprintln!("e2e: could not delete node {node}: {err:#}");
        }
        if let Some(mut server) = self.apiserver.take() {
            server.stop();
        }
        if let Some(cluster) = self.kind.take()
            && cluster.created
        {
            eprintln!("e2e: deleting kind cluster `{}`", cluster.name);
            if let Err(err) = cluster.delete() {
                eprintln!("e2e: {err:#}");
            }
        }
    }

    fn keep(&mut self) {
        if let Some(agent) = self.agent.take()
            && let Ok(mut agent) = agent.lock()
            && let Some(pid) = agent.leave_running()
        {
            eprintln!("e2e: --keep: agent left running (pid {pid})");
        }
        if let Some(mut server) = self.apiserver.take()
            && let Some(pid) = server.leave_running()
        {
            eprintln!("e2e: --keep: embedded API server left running (pid {pid})");
        }
        if let Some(cluster) = self.kind.take() {
            eprintln!(
                "e2e: --keep: kind cluster `{}` left running (kubeconfig {})",
                cluster.name,
                cluster.kubeconfig.display()
            );
        }
        self.node = None;
    }
}

fn run(
    args: &Args,
    work: &Path,
    teardown: &mut Teardown,
    interrupted: &AtomicBool,
) -> Result<bool> {
    if nodelet_e2e::scenarios_matching(&args.filter).is_empty() {
        bail!(
            "no scenario matched --filter {:?} (`cargo xtask e2e --list` names them)",
            args.filter
        );
    }
    let (node_name, node_kubeconfig_user) = node_name(args)?;
    eprintln!("e2e: node name {node_name}");
    let cluster = start_cluster(args, work, teardown, &node_name)?;
    if interrupted.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    // The embedded server's admin is its own superuser (and it serves no access reviews).
    if !args.embedded {
        preflight::check_admin_rights(&cluster.admin, args.existing_node)?;
    }
    let identity = agent_identity(args, work, &cluster, &node_name, node_kubeconfig_user)?;
    let (spec, agent) = start_agent(args, work, teardown, &cluster.admin, &node_name, &identity)?;
    let report = run_scenarios(args, &cluster, &node_name, &spec, agent, identity)?;
    println!("{}", report.table());
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(report.failed() == 0)
}

/// The node name: `--node-name`, or the node of `--node-kubeconfig`'s identity (also
/// returned); a mismatch is refused here, before anything starts.
fn node_name(args: &Args) -> Result<(String, Option<String>)> {
    let node_kubeconfig_user = match &args.node_kubeconfig {
        None => None,
        Some(path) => match node_identity::user_of(path) {
            Ok(user) => Some(user),
            Err(err) if args.node_name.is_some() => {
                eprintln!(
                    "e2e: could not check that --node-name matches --node-kubeconfig: {err:#}"
                );
                None
            }
            Err(err) => {
                return Err(err.context(
                    "--node-name not given, and the identity of --node-kubeconfig could not be \
                     read to take the node name from it; pass --node-name",
                ));
            }
        },
    };
    let node_name = node_identity::resolve_node_name(
        args.node_name.as_deref(),
        node_kubeconfig_user.as_deref(),
    )?;
    Ok((node_name, node_kubeconfig_user))
}

/// The cluster the run is against.
struct Cluster {
    /// `embedded`, `kubeconfig` or `kind`.
    mode: &'static str,
    /// Its admin.
    admin: Kubectl,
    /// The node kubeconfig the embedded server made.
    embedded_node_kubeconfig: Option<PathBuf>,
}

/// The embedded API server (`--embedded`), the cluster of `--kubeconfig`, else a kind cluster
/// (created or reused); what the run starts goes on `teardown`.
fn start_cluster(
    args: &Args,
    work: &Path,
    teardown: &mut Teardown,
    node_name: &str,
) -> Result<Cluster> {
    if args.kubeconfig.is_some() || args.embedded {
        let path = std::env::var_os("PATH").unwrap_or_default();
        tools::check(&tools::CLUSTER_MODE, &path)?;
    }
    if args.embedded {
        let target = agent::build_binaries()?;
        let server = agent::start_embedded_apiserver(&target, work, node_name)?;
        teardown.apiserver = Some(server.process);
        return Ok(Cluster {
            mode: "embedded",
            admin: Kubectl::new(&server.admin_kubeconfig, None)?,
            embedded_node_kubeconfig: Some(server.node_kubeconfig),
        });
    }
    let (mode, admin) = if let Some(path) = &args.kubeconfig {
        let kubectl = Kubectl::new(path, args.context.as_deref())?;
        kind::wait_until_ready(&kubectl, Duration::from_secs(60))?;
        ("kubeconfig", kubectl)
    } else {
        let path = std::env::var_os("PATH").unwrap_or_default();
        tools::check(&tools::KIND_MODE, &path)?;
        let cluster = kind::KindCluster::ensure(&args.cluster_name, work)?;
        let kubectl = Kubectl::new(&cluster.kubeconfig, Some(&cluster.context()))?;
        teardown.kind = Some(cluster);
        ("kind", kubectl)
    };
    Ok(Cluster {
        mode,
        admin,
        embedded_node_kubeconfig: None,
    })
}

/// Who the agent is to the cluster.
struct Identity {
    /// Its kubeconfig.
    kubeconfig: PathBuf,
    /// Its user name (`system:node:<name>`, or `admin`).
    user: String,
    /// Why it is not the node's own identity, for the report.
    note: Option<String>,
}

/// The agent's identity: `--node-kubeconfig`, the embedded server's node kubeconfig, a node
/// identity by CSR on kind, else the admin's (and the report says so).
fn agent_identity(
    args: &Args,
    work: &Path,
    cluster: &Cluster,
    node_name: &str,
    node_kubeconfig_user: Option<String>,
) -> Result<Identity> {
    let node_user = format!("system:node:{node_name}");
    let identity = |kubeconfig, user, note| Identity {
        kubeconfig,
        user,
        note,
    };
    Ok(if let Some(path) = &args.node_kubeconfig {
        identity(
            path.clone(),
            node_kubeconfig_user.unwrap_or(node_user),
            None,
        )
    } else if let Some(path) = &cluster.embedded_node_kubeconfig {
        identity(path.clone(), node_user, None)
    } else if cluster.mode == "kind" {
        match node_identity::obtain(&cluster.admin, node_name, work) {
            Ok(path) => identity(path, node_user, None),
            Err(err) => identity(
                cluster.admin.kubeconfig.clone(),
                "admin".to_string(),
                Some(format!(
                    "no node identity ({err:#}); the agent ran with the admin kubeconfig"
                )),
            ),
        }
    } else {
        identity(
            admin_kubeconfig_file(&cluster.admin, work)?,
            "admin".to_string(),
            Some(
                "no --node-kubeconfig given: the agent ran with the admin kubeconfig, so the Node \
                 authorizer was not exercised"
                    .to_string(),
            ),
        )
    })
}

/// Builds and starts the agent as `identity`; its Node (unless it existed before the run) and
/// the agent go on `teardown`. With `--existing-node`, the Node is created first, without
/// nodelet's taint, and checked after.
fn start_agent(
    args: &Args,
    work: &Path,
    teardown: &mut Teardown,
    admin: &Kubectl,
    node_name: &str,
    identity: &Identity,
) -> Result<(AgentSpec, Arc<Mutex<Managed>>)> {
    let target = agent::build_binaries()?;
    let spec = AgentSpec {
        binary: target.join("nodelet"),
        kubeconfig: identity.kubeconfig.clone(),
        node_name: node_name.to_owned(),
        root_dir: work.join("root"),
        log: work.join("agent.log"),
        config: work.join("kubelet-config.yaml"),
        kubelet_port: match args.kubelet_port {
            Some(port) => Some(port),
            None if args.embedded => Some(agent::free_port()?),
            None => None,
        },
        runtime: nodelet_e2e::AgentRuntime::EnvFiles,
        client_ca: if args.embedded {
            None
        } else {
            cluster_ca_file(admin, work)?
        },
    };
    // A Node that was there before the run (a real node's, or one left on purpose) is not ours
    // to delete at teardown.
    let node_existed = !admin
        .run(&["get", "node", node_name, "--ignore-not-found", "-o", "name"])?
        .trim()
        .is_empty();
    if node_existed {
        preflight::check_node_not_in_use(admin, node_name)?;
    }
    if args.existing_node && !node_existed {
        let node = serde_json::json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node_name, "labels": {"kubernetes.io/hostname": node_name}}});
        admin
            .run_with_input(&["create", "-f", "-"], &node.to_string())
            .context("creating the agent's Node for --existing-node")?;
        teardown.node = Some((admin.clone(), node_name.to_owned()));
        eprintln!("e2e: --existing-node: created node {node_name} without nodelet's taint");
    }
    let agent = Arc::new(Mutex::new(agent::start_agent(&spec)?));
    teardown.agent = Some(agent.clone());
    if node_existed {
        eprintln!("e2e: node {node_name} existed before the run; teardown leaves it in place");
    } else {
        teardown.node = Some((admin.clone(), node_name.to_owned()));
    }
    if args.existing_node {
        check_existing_node(admin, node_name)?;
    } else {
        wait_for_node(admin, node_name, &spec.log)?;
    }
    eprintln!("e2e: agent started (log {})", spec.log.display());
    Ok((spec, agent))
}

/// Runs the scenarios `--filter` selects against the running agent; their report.
fn run_scenarios(
    args: &Args,
    cluster: &Cluster,
    node_name: &str,
    spec: &AgentSpec,
    agent: Arc<Mutex<Managed>>,
    identity: Identity,
) -> Result<Report> {
    let admin = &cluster.admin;
    let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    let outcomes = runtime.block_on(async {
        let client = nodelet_e2e::client_from_kubeconfig(&admin.kubeconfig, &admin.context)
            .await
            .map_err(|e| anyhow::anyhow!("building the admin kube client: {e}"))?;
        let target = nodelet_e2e::Target {
            admin: client,
            node_name: node_name.to_owned(),
            root_dir: spec.root_dir.clone(),
            agent: Arc::new(ProcessAgent {
                spec: Mutex::new(spec.clone()),
                process: agent,
            }),
        };
        anyhow::Ok(nodelet_e2e::run_suite(&target, &args.filter).await)
    })?;
    Ok(Report {
        mode: cluster.mode.to_string(),
        agent_identity: identity.user,
        identity_note: identity.note,
        scenarios: outcomes
            .into_iter()
            .map(|o| ScenarioReport {
                name: o.name.to_string(),
                passed: o.result.is_ok(),
                error: o.result.err(),
                skipped: o.skipped,
                duration_ms: o.duration.as_secs_f64() * 1e3,
                latency: LatencySummary::of(&o.latencies),
            })
            .collect(),
    })
}

/// Waits until the agent's Node exists: pods are bound to it, and a control plane
/// garbage-collects pods bound to a node that does not exist.
fn wait_for_node(admin: &Kubectl, node: &str, log: &Path) -> Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let found = admin.run(&["get", "node", node, "--ignore-not-found", "-o", "name"])?;
        if !found.trim().is_empty() {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            bail!(
                "the agent registered no Node {node} in 60 s: its identity may not create it \
                 (NodeRestriction lets system:node:<name> create only its own Node); see {}",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `--existing-node`: waits until the agent has renewed its Lease and posted Ready on the Node
/// created before it started, and checks it left the Node's taints alone (NodeRestriction
/// refuses a node's taint change after creation, so touching them would stall registration).
fn check_existing_node(admin: &Kubectl, node: &str) -> Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let lease = admin.run(&[
            "get",
            "lease",
            node,
            "-n",
            "kube-node-lease",
            "--ignore-not-found",
            "-o",
            "name",
        ])?;
        let ready = admin.run(&[
            "get",
            "node",
            node,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ])?;
        if !lease.trim().is_empty() && ready.trim() == "True" {
            break;
        }
        if std::time::Instant::now() > deadline {
            bail!("--existing-node: the agent renewed no Lease or posted no Ready status in 60 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let taints = admin.run(&["get", "node", node, "-o", "jsonpath={.spec.taints}"])?;
    if !taints.trim().is_empty() {
        bail!("--existing-node: the agent changed the taints of the existing Node: {taints}");
    }
    eprintln!("e2e: --existing-node: Lease renewed and Ready posted; taints untouched");
    Ok(())
}

/// The admin kubeconfig flattened into one file for the agent (the user's file may reference
/// certificate files by relative path, or hold several contexts).
fn admin_kubeconfig_file(admin: &Kubectl, work: &Path) -> Result<PathBuf> {
    let flat = admin.run(&["config", "view", "--raw", "--minify", "--flatten"])?;
    let path = work.join("admin.kubeconfig");
    std::fs::write(&path, flat).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// The CA of the admin context's cluster, written to a file for the agent's
/// `--client-ca-file`; `None` when the kubeconfig names no CA (a publicly trusted server).
fn cluster_ca_file(admin: &Kubectl, work: &Path) -> Result<Option<PathBuf>> {
    let data = admin.run(&[
        "config",
        "view",
        "--raw",
        "--minify",
        "--flatten",
        "-o",
        "jsonpath={.clusters[0].cluster.certificate-authority-data}",
    ])?;
    if data.trim().is_empty() {
        return Ok(None);
    }
    use base64::Engine as _;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .context("decoding the kubeconfig's certificate-authority-data")?;
    let path = work.join("cluster-ca.crt");
    std::fs::write(&path, pem).with_context(|| format!("writing {}", path.display()))?;
    Ok(Some(path))
}

/// Restarts the agent process for the adoption scenario, and with another runtime for the
/// scenarios that need one.
struct ProcessAgent {
    /// How the agent runs now.
    spec: Mutex<AgentSpec>,
    process: Arc<Mutex<Managed>>,
}

#[async_trait::async_trait]
impl nodelet_e2e::AgentControl for ProcessAgent {
    async fn restart(&self) -> Result<(), String> {
        let spec = self
            .spec
            .lock()
            .map_err(|_| "agent lock poisoned".to_string())?
            .clone();
        self.start(spec).await
    }

    async fn use_runtime(&self, runtime: nodelet_e2e::AgentRuntime) -> Result<(), String> {
        let spec = {
            let mut spec = self
                .spec
                .lock()
                .map_err(|_| "agent lock poisoned".to_string())?;
            if spec.runtime == runtime {
                return Ok(());
            }
            spec.runtime = runtime;
            spec.clone()
        };
        eprintln!("e2e: restarting the agent with the {runtime:?} runtime");
        self.start(spec).await
    }
}

impl ProcessAgent {
    /// Stops the agent and starts it as `spec` says.
    async fn start(&self, spec: AgentSpec) -> Result<(), String> {
        let process = self.process.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = process
                .lock()
                .map_err(|_| "agent lock poisoned".to_string())?;
            guard.stop();
            *guard = agent::start_agent(&spec).map_err(|e| format!("{e:#}"))?;
            Ok(())
        })
        .await
        .map_err(|e| e.to_string())?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("e2e").chain(args.iter().copied()))
    }

    #[test]
    fn the_node_name_is_optional_so_a_node_identity_can_supply_it() {
        let args = parse(&["--kubeconfig", "a", "--node-kubeconfig", "n"]).unwrap();
        assert_eq!(args.node_name, None);
        let args = parse(&["--node-name", "dev-1"]).unwrap();
        assert_eq!(args.node_name.as_deref(), Some("dev-1"));
    }

    #[test]
    fn a_node_kubeconfig_does_not_go_with_the_embedded_server() {
        assert!(parse(&["--embedded", "--node-kubeconfig", "n"]).is_err());
    }
}
