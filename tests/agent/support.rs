//! A test world: an API server with auth, an admin client, and an agent with a node identity
//! over a temporary root directory; restartable for the adoption scenario.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use nodelet::{Agent, AgentConfig};
use nodelet_apiserver::{ApiServer, ServerHandle, User};
use nodelet_core::{PodDirs, PodUid};
use tempfile::TempDir;
use tokio::sync::Mutex;

pub(crate) use nodelet_testutil::PATIENCE;

pub(crate) const NODE: &str = "agent-test-node";

/// The feature gates the agent reads from a real `--config` file whose `featureGates` map is
/// `gates` (name, on), parsed by the agent's own command line.
pub(crate) fn gates_from_config_file(gates: &[(&str, bool)]) -> nodelet_core::FeatureGates {
    use clap::Parser as _;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("kubelet.yaml");
    let mut yaml = String::from(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates:\n",
    );
    for (name, on) in gates {
        yaml.push_str(&format!("  {name}: {on}\n"));
    }
    std::fs::write(&file, yaml).unwrap_or_else(|e| panic!("{e}"));
    let cli = nodelet::RunArgs::try_parse_from([
        "nodelet",
        "--node-name",
        NODE,
        "--config",
        file.to_str().unwrap_or_default(),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let settings = cli.settings().unwrap_or_else(|e| panic!("{e}"));
    settings.agent.feature_gates
}

/// The pause between two checks of a condition (a polling interval, never a timing assertion).
pub(crate) async fn poll_pause() {
    tokio::time::sleep(Duration::from_millis(5)).await;
}

pub(crate) struct World {
    pub(crate) server: ApiServer,
    pub(crate) admin: kube::Client,
    pub(crate) root: TempDir,
    pub(crate) agent: Arc<AgentSlot>,
}

/// The running agent, replaceable by a restart.
pub(crate) struct AgentSlot {
    agent: Mutex<Option<Agent>>,
    config: AgentConfig,
    node_client: nodelet::ApiClient,
}

pub(crate) async fn client_for(server: &ApiServer, user: &User) -> kube::Client {
    api_client_for(server, user).await.client
}

/// [`client_for`] with the counters of its transport, as `nodelet::run` gives the agent.
pub(crate) async fn api_client_for(server: &ApiServer, user: &User) -> nodelet::ApiClient {
    let yaml = server.kubeconfig_yaml(user);
    let kc = Kubeconfig::from_yaml(&yaml).unwrap_or_else(|e| panic!("kubeconfig: {e}"));
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("kubeconfig: {e}"));
    nodelet::identify(&mut config);
    // The agent's own transport (HTTP/2 where the server offers it), as `nodelet::run` builds.
    let transport = nodelet_transport::TransportConfig::default();
    nodelet_transport::client(config, transport)
        .map(nodelet::ApiClient::from)
        .unwrap_or_else(|e| panic!("client: {e}"))
}

pub(crate) fn agent_config(root: &std::path::Path) -> AgentConfig {
    let mut config = AgentConfig::new(NODE, root);
    config.volumes_on_disk = true;
    config.fsync = false;
    config
}

impl World {
    pub(crate) async fn start() -> World {
        Self::start_with(|_| {}).await
    }

    pub(crate) async fn start_with(tweak: impl FnOnce(&mut AgentConfig)) -> World {
        Self::start_seeded(|_| {}, tweak).await
    }

    /// Like [`World::start_with`], with `seed` run on the server before the agent starts (for
    /// objects the agent must find already there, such as its Node).
    pub(crate) async fn start_seeded(
        seed: impl FnOnce(&ServerHandle),
        tweak: impl FnOnce(&mut AgentConfig),
    ) -> World {
        Self::start_on(nodelet_apiserver::Config::default(), seed, tweak).await
    }

    /// Like [`World::start_seeded`], on a server with `server` options (authentication is
    /// turned on).
    pub(crate) async fn start_on(
        server: nodelet_apiserver::Config,
        seed: impl FnOnce(&ServerHandle),
        tweak: impl FnOnce(&mut AgentConfig),
    ) -> World {
        Self::start_on_server(server, seed, |c, _| tweak(c)).await
    }

    /// Like [`World::start_on`], with `tweak` shown the started server (its address).
    pub(crate) async fn start_on_server(
        server: nodelet_apiserver::Config,
        seed: impl FnOnce(&ServerHandle),
        tweak: impl FnOnce(&mut AgentConfig, &ApiServer),
    ) -> World {
        let server = ApiServer::start(server.with_auth())
            .await
            .unwrap_or_else(|e| panic!("api server: {e}"));
        seed(&server.handle());
        let admin = client_for(&server, &User::admin()).await;
        let node_client = api_client_for(&server, &User::node(NODE)).await;
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut config = agent_config(root.path());
        tweak(&mut config, &server);
        let agent = Agent::start(config.clone(), node_client.clone())
            .await
            .unwrap_or_else(|e| panic!("agent: {e:#}"));
        tokio::time::timeout(PATIENCE, agent.wait_ready())
            .await
            .unwrap_or_else(|_| panic!("agent never listed its pods"));
        World {
            server,
            admin,
            root,
            agent: Arc::new(AgentSlot {
                agent: Mutex::new(Some(agent)),
                config,
                node_client,
            }),
        }
    }

    pub(crate) fn root_dir(&self) -> PathBuf {
        self.root.path().to_path_buf()
    }

    /// `<root>/pods/<uid>` of a pod as the server returned it.
    pub(crate) fn pod_dir(&self, pod: &serde_json::Value) -> PathBuf {
        pod_dir(self.root.path(), pod)
    }

    pub(crate) fn target(&self) -> nodelet_e2e::Target {
        nodelet_e2e::Target {
            admin: self.admin.clone(),
            node_name: NODE.to_owned(),
            root_dir: self.root_dir(),
            agent: self.agent.clone(),
        }
    }

    /// Runs `f` with the running agent.
    pub(crate) async fn with_agent<T>(&self, f: impl FnOnce(&Agent) -> T) -> T {
        let guard = self.agent.agent.lock().await;
        match guard.as_ref() {
            Some(agent) => f(agent),
            None => panic!("no agent running"),
        }
    }

    /// Stops the agent (volumes stay on disk).
    pub(crate) async fn stop_agent(&self) {
        if let Some(agent) = self.agent.agent.lock().await.take() {
            agent.shutdown().await;
        }
    }

    /// Starts a new agent with the same configuration and waits for its first pod list.
    pub(crate) async fn start_agent(&self) {
        let agent = Agent::start(self.agent.config.clone(), self.agent.node_client.clone())
            .await
            .unwrap_or_else(|e| panic!("agent: {e:#}"));
        tokio::time::timeout(PATIENCE, agent.wait_ready())
            .await
            .unwrap_or_else(|_| panic!("agent never listed its pods"));
        *self.agent.agent.lock().await = Some(agent);
    }

    pub(crate) async fn stop(self) {
        if let Some(agent) = self.agent.agent.lock().await.take() {
            agent.shutdown().await;
        }
        self.server.shutdown().await;
    }
}

/// `..data` targets of every volume under `root` (diagnostics for the restart scenario).
fn data_links(root: &std::path::Path) -> Vec<(PathBuf, PathBuf)> {
    let mut out = Vec::new();
    let pods = std::fs::read_dir(PodDirs::new(root).pods())
        .into_iter()
        .flatten()
        .flatten();
    for pod in pods {
        let plugins = std::fs::read_dir(pod.path().join("volumes"))
            .into_iter()
            .flatten()
            .flatten();
        for plugin in plugins {
            for vol in std::fs::read_dir(plugin.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                if let Ok(target) = std::fs::read_link(vol.path().join("..data")) {
                    out.push((vol.path(), target));
                }
            }
        }
    }
    out.sort();
    out
}

#[async_trait::async_trait]
impl nodelet_e2e::AgentControl for AgentSlot {
    async fn restart(&self) -> Result<(), String> {
        let mut slot = self.agent.lock().await;
        let before = data_links(&self.config.root_dir);
        if let Some(agent) = slot.take() {
            agent.shutdown().await;
        }
        let after = data_links(&self.config.root_dir);
        if before != after {
            // Shown only when a test fails: which volumes the stopping agent still rewrote.
            eprintln!("volumes rewritten while the agent stopped: {before:?} -> {after:?}");
        }
        let agent = Agent::start(self.config.clone(), self.node_client.clone())
            .await
            .map_err(|e| format!("{e:#}"))?;
        *slot = Some(agent);
        Ok(())
    }

    /// The in-process agent keeps the runtime it was started with (`suite.rs` starts each
    /// scenario's agent with the runtime the scenario needs).
    async fn use_runtime(&self, runtime: nodelet_e2e::AgentRuntime) -> Result<(), String> {
        let runs = match self.config.runtime {
            nodelet_config::RuntimeKind::Process => nodelet_e2e::AgentRuntime::Process,
            _ => nodelet_e2e::AgentRuntime::EnvFiles,
        };
        if runs == runtime {
            Ok(())
        } else {
            Err(format!("this test's agent runs {runs:?}"))
        }
    }
}

/// `<root>/pods/<uid>` of a pod as the server returned it.
pub(crate) fn pod_dir(root: &std::path::Path, pod: &serde_json::Value) -> PathBuf {
    let uid = PodUid::new(pod["metadata"]["uid"].as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the server's pod: {e}"));
    PodDirs::new(root).pod(&uid)
}

/// Waits (bounded by [`PATIENCE`]) until the agent's `env.json` for `container` in `pod_dir`
/// has variable `name`; returns its value.
pub(crate) async fn wait_for_env_var(
    pod_dir: &std::path::Path,
    container: &str,
    name: &str,
) -> String {
    let path = pod_dir.join("containers").join(container).join("env.json");
    tokio::time::timeout(PATIENCE, async {
        loop {
            let vars: Option<serde_json::Value> = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            let found = vars.as_ref().and_then(|v| v.as_array()).and_then(|a| {
                a.iter()
                    .find(|v| v["name"] == name)
                    .and_then(|v| v["value"].as_str().map(String::from))
            });
            if let Some(v) = found {
                return v;
            }
            poll_pause().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{} never had {name}", path.display()))
}
