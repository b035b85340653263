//! The nodelet end-to-end scenario suite: one list of conformance-style scenarios (spec E2E-1 …
//! E2E-28 as they apply to files on disk and env files) that both `cargo test` (embedded API
//! server, agent in-process) and `cargo xtask e2e` (kind, any cluster, or the embedded server;
//! agent as a host process) run, so the two cannot drift apart.
//!
//! A scenario talks to the cluster with an admin [`kube::Client`], binds its pods to
//! [`Target::node_name`], and checks what the agent wrote under [`Target::root_dir`]
//! (`pods/<uid>/volumes/<plugin>/<volume>/…`, `pods/<uid>/containers/<name>/env.json`), the
//! events the agent recorded and the pod status it patched. Each scenario works in a namespace
//! of its own, creates the `default` service account when no controller does, and deletes the
//! namespace at the end whatever happened.
//!
//! ```no_run
//! # async fn demo(target: nodelet_e2e::Target) {
//! let outcomes = nodelet_e2e::run_suite(&target, &["configmap".to_string()]).await;
//! for o in &outcomes {
//!     println!("{}: {:?}", o.name, o.result);
//! }
//! # }
//! ```
//!
//! The `follow-*` scenarios (nodelet's own configuration that follows a change) need the agent
//! to run containers as processes ([`AgentRuntime::Process`], root); the runner switches the
//! agent's runtime through [`AgentControl::use_runtime`] before each scenario.
//!
//! Waits are on conditions (a file's content, an event) with a generous safety time-out; no
//! scenario asserts a duration. Update scenarios *measure* propagation latency (API write
//! returned → new content visible through the volume's user-visible path) and report it.

mod ctx;
mod scenarios;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use ctx::{Ctx, PATIENCE, wait_for, wait_for_content};

/// Where the suite runs: the cluster, and the agent under test.
#[derive(Clone)]
pub struct Target {
    /// An admin client for the cluster the agent watches.
    pub admin: kube::Client,
    /// The node the agent runs as; scenario pods are bound to it.
    pub node_name: String,
    /// The agent's root directory (`--root-dir`), readable by the suite.
    pub root_dir: PathBuf,
    /// Controls the agent process (restart, for the adoption scenario).
    pub agent: Arc<dyn AgentControl>,
}

/// What a scenario may do to the agent under test.
#[async_trait::async_trait]
pub trait AgentControl: Send + Sync {
    /// Stops the agent (cleanly, leaving its volumes in place) and starts it again with the same
    /// configuration. Returns once the new agent has been started.
    async fn restart(&self) -> Result<(), String>;

    /// Makes the agent run containers with `runtime` (restarting it with that runtime when it
    /// runs another, else nothing), before a scenario that needs it. An agent that cannot
    /// (one started for another runtime in-process) says so in the `Err`.
    async fn use_runtime(&self, runtime: AgentRuntime) -> Result<(), String>;
}

/// How the agent runs a scenario's containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentRuntime {
    /// The default: each container's resolved environment written to files.
    EnvFiles,
    /// `--runtime process`: each container a local process (needs root); the scenarios of
    /// configuration that follows a change (`follow-*`) read what the process saw from its log.
    Process,
}

/// The runtime scenario `name` needs (`None` for an unknown name).
pub fn scenario_runtime(name: &str) -> Option<AgentRuntime> {
    scenarios::ALL
        .iter()
        .find(|s| s.name == name)
        .map(|s| s.runtime)
}

/// The result of one scenario.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The scenario's name.
    pub name: &'static str,
    /// `Err` carries what failed, in words.
    pub result: Result<(), String>,
    /// Wall time of the scenario, setup and cleanup included.
    pub duration: Duration,
    /// Propagation latencies the scenario measured (update scenarios only).
    pub latencies: Vec<Duration>,
    /// Why the scenario checked nothing, when the cluster lacks what it needs (e.g. an API the
    /// cluster does not serve); `result` is then `Ok`. A skip is not a pass.
    pub skipped: Option<String>,
}

/// The names of every scenario, in run order.
pub fn scenario_names() -> Vec<&'static str> {
    scenarios::ALL.iter().map(|s| s.name).collect()
}

/// The names of the scenarios whose name contains any of `filter` (all when empty), in run
/// order: what [`run_suite`] runs.
pub fn scenarios_matching(filter: &[String]) -> Vec<&'static str> {
    scenarios::ALL
        .iter()
        .map(|s| s.name)
        .filter(|name| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str())))
        .collect()
}

/// Runs the scenarios whose name contains any of `filter` (all when empty), one after the other.
pub async fn run_suite(target: &Target, filter: &[String]) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for name in scenarios_matching(filter) {
        outcomes.push(run_scenario(target, name).await);
    }
    outcomes
}

/// Runs one scenario by exact name; an unknown name is a failed outcome.
pub async fn run_scenario(target: &Target, name: &str) -> Outcome {
    let started = Instant::now();
    let Some(scenario) = scenarios::ALL.iter().find(|s| s.name == name) else {
        return Outcome {
            name: "unknown",
            result: Err(format!("no scenario named {name:?}")),
            duration: Duration::ZERO,
            latencies: Vec::new(),
            skipped: None,
        };
    };
    if let Err(err) = target.agent.use_runtime(scenario.runtime).await {
        return Outcome {
            name: scenario.name,
            result: Err(format!(
                "the agent cannot run {:?}: {err}",
                scenario.runtime
            )),
            duration: started.elapsed(),
            latencies: Vec::new(),
            skipped: None,
        };
    }
    let (result, latencies, skipped) = match Ctx::new(target, scenario.name).await {
        Ok(ctx) => {
            let result = (scenario.run)(&ctx).await;
            let latencies = ctx.latencies();
            let skipped = ctx.skipped();
            let cleanup = ctx.cleanup().await;
            (result.and(cleanup), latencies, skipped)
        }
        Err(err) => (Err(err), Vec::new(), None),
    };
    Outcome {
        name: scenario.name,
        skipped: skipped.filter(|_| result.is_ok()),
        result,
        duration: started.elapsed(),
        latencies,
    }
}

/// A kube client for `context` of the kubeconfig file at `path`.
///
/// # Errors
/// The kubeconfig cannot be read or does not describe a usable cluster.
pub async fn client_from_kubeconfig(path: &Path, context: &str) -> Result<kube::Client, String> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    let options = kube::config::KubeConfigOptions {
        context: Some(context.to_string()),
        ..Default::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| format!("loading {}: {e}", path.display()))?;
    kube::Client::try_from(config).map_err(|e| format!("building a client: {e}"))
}
