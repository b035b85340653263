//! [`Agent`]: builds its parts (`parts.rs`) and wires them together: the object managers, the
//! volume manager, the pod workers, the pod source (`pod_source.rs`), events, status, node
//! registration and the HTTP endpoints.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use nodelet_core::{NodeAllocatable, PodDirs};
use nodelet_object_manager::{ServiceLister, ServiceListerConfig};
use nodelet_podworker::follow::{AnnotationCheck, EnvFollow, EnvFollowParts};
use nodelet_podworker::{EnvSources, SyncerParts};
use nodelet_reporting::{EventConfig, EventPublisher, StatusConfig, StatusWriter};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info_span, warn};

use crate::api_client::ApiClient;
use crate::parts::{Gates, Tasks};
use crate::pods_view::PodsView;
use crate::state::AgentState;
use crate::views::{metrics_text, pods_view};
use nodelet_config::AgentConfig;
use nodelet_metrics::Metrics;

/// A running agent. Stop it with [`Agent::shutdown`]: volumes and env files stay on disk and a
/// new agent with the same root directory adopts them.
pub struct Agent {
    pub(crate) state: Arc<AgentState>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    http_addr: Option<SocketAddr>,
    kubelet_addr: Option<SocketAddr>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("node", &self.state.config.node_name)
            .field("root_dir", &self.state.config.root_dir)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Starts the agent against the API server behind `client`. Returns once every task runs
    /// (the HTTP listener is bound); use [`wait_ready`](Self::wait_ready) to wait for the
    /// first pod list.
    ///
    /// # Errors
    /// The root directory cannot be created, or the listen address cannot be bound.
    pub async fn start(config: AgentConfig, client: impl Into<ApiClient>) -> anyhow::Result<Agent> {
        let ApiClient { client, counters } = client.into();
        std::fs::create_dir_all(PodDirs::new(&config.root_dir).pods())
            .with_context(|| format!("creating root directory {}", config.root_dir.display()))?;
        let tasks = Tasks::default();
        let gates = Gates::read(&config.feature_gates);
        // Requests, retries and connections are counted by the transport under `client`.
        let metrics = Metrics::for_transport(counters, config.allocator);
        let paced = nodelet_object_manager::paced::clients(&client, config.first_reads);
        let node = paced.node;
        let (configmaps, secrets) =
            crate::parts::object_managers(&config, &client, paced.first_reads)?;
        let events = EventPublisher::start(
            EventConfig::new(&config.node_name),
            paced.events,
            metrics.reporting(),
            tasks.shutdown.clone(),
            &tasks.tracker,
        );
        // One detection for env vars, volumes and the Node status' quantities.
        let allocatable = NodeAllocatable::detect(&config.root_dir);
        // Set once the process runtime's configuration-following exists (FC-3).
        let follow_hook = Arc::new(std::sync::OnceLock::new());
        let volumes = crate::parts::volume_manager(
            &config,
            allocatable,
            &node,
            (&configmaps, &secrets),
            &events,
            &tasks,
            &follow_hook,
        )?;
        let status = StatusWriter::start(
            StatusConfig::default(),
            node.clone(),
            metrics.reporting(),
            tasks.shutdown.clone(),
            &tasks.tracker,
        );
        let (runtime, processes) = crate::parts::container_runtime(&config, &tasks)?;
        let services = service_lister(&node, &tasks);
        let probes = processes
            .as_ref()
            .map(|p| crate::parts::probe_manager(&config, p, &events, &tasks));
        let sources = EnvSources {
            configmaps: configmaps.clone(),
            secrets: secrets.clone(),
            services: Some(services.clone()),
        };
        let mut env = gates.env_options(allocatable);
        env.kubernetes_service = config.kubernetes_service.clone();
        let syncer_config = crate::parts::syncer_config(&config, env);
        let env_follow = EnvFollow::new(EnvFollowParts {
            sandbox: processes.is_some(),
            ..crate::parts::env_follow(&config, &sources, &syncer_config, &runtime, &events)
        });
        let follow = crate::parts::follow_change(
            &config,
            processes.as_ref(),
            &events,
            &follow_hook,
            &env_follow,
        );
        let parts = SyncerParts {
            sources,
            volumes: Arc::new(volumes.clone()),
            runtime,
            events: Arc::new(events.clone()),
            status: Arc::new(status.clone()),
            probes: probes.clone(),
            follow: follow.clone(),
            env_follow: Some(env_follow.clone()),
        };
        let workers = crate::parts::pod_workers(syncer_config, &config, parts);
        let (ready_tx, ready) = watch::channel(false);
        let annotations = AnnotationCheck::new(Arc::new(events.clone()), config.follow.clone());
        let state = Arc::new(AgentState {
            config: config.clone(),
            workers,
            volumes,
            configmaps,
            secrets,
            services,
            metrics,
            ready,
            pod_watch: crate::pod_watch::PodWatchHealth::default(),
            status,
            paced: paced.buckets,
            sysctls: nodelet_podworker::SysctlPolicy::new(
                &config.allowed_unsafe_sysctls,
                processes
                    .as_ref()
                    .is_some_and(nodelet_runtime::ProcessRuntime::pod_ipc_namespaces),
            )?,
            follow,
            env_follow,
            follow_annotations: annotations,
            processes,
            probes,
            known_pods: parking_lot::RwLock::default(),
        });
        let (kubelet_addr, http_addr) = start_tasks(
            &state,
            [node, client],
            gates.admission,
            events,
            ready_tx,
            &tasks,
        )
        .await?;
        let Tasks { shutdown, tracker } = tasks;
        Ok(Agent {
            state,
            shutdown,
            tracker,
            http_addr,
            kubelet_addr,
        })
    }

    /// The address the kubelet API is served on, if any (the bound port when port 0 was
    /// asked).
    pub fn kubelet_addr(&self) -> Option<SocketAddr> {
        self.kubelet_addr
    }

    /// The address `/healthz` etc. are served on, if any (the bound port when `:0` was asked).
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// The configuration the agent runs with.
    pub fn config(&self) -> &AgentConfig {
        &self.state.config
    }

    /// Waits until the first pod list has been handed to the pod workers.
    pub async fn wait_ready(&self) {
        let mut ready = self.state.ready.clone();
        let _ = ready.wait_for(|r| *r).await;
    }

    /// The `/pods` document: every pod with its worker state and volumes.
    pub fn pods_view(&self) -> PodsView {
        pods_view(&self.state)
    }

    /// [`pods_view`](Self::pods_view) as JSON, as `/pods` serves it.
    pub fn pods_json(&self) -> Value {
        serde_json::to_value(self.pods_view()).unwrap_or_default()
    }

    /// The `/metrics` text.
    pub fn metrics_text(&self) -> String {
        metrics_text(&self.state)
    }

    /// Stops every task (in-flight syncs are dropped, volumes stay in place) and waits for
    /// them, at most `shutdown_timeout` (default 5 s).
    pub async fn shutdown(self) {
        let timeout = self.state.config.shutdown_timeout;
        let stop = async {
            self.shutdown.cancel();
            self.state.workers.shutdown().await;
            // Containers do not outlive the agent that follows them (half the time allowed
            // for SIGTERM, the rest for SIGKILL).
            if let Some(processes) = &self.state.processes {
                processes.stop_all(timeout / 2).await;
            }
            self.tracker.close();
            self.tracker.wait().await;
            self.state.configmaps.shutdown().await;
            self.state.secrets.shutdown().await;
        };
        if tokio::time::timeout(timeout, stop).await.is_err() {
            warn!(?timeout, "agent tasks did not stop in time");
        }
    }
}

/// Starts what runs beside the pod workers: the kubelet API (before the Node publishes its
/// port), the pod source, the propagation tracker, the configuration following, node
/// registration and the HTTP endpoints. Returns the kubelet API's and the endpoints' addresses.
/// `clients`: the node's paced client (the pod source) and the unpaced one (the kubelet API's
/// upgrades, the Node and its Lease: heartbeats are never paced, OM-33).
async fn start_tasks(
    state: &Arc<AgentState>,
    [node, client]: [kube::Client; 2],
    admission: crate::pod_source::Admission,
    events: EventPublisher,
    ready: watch::Sender<bool>,
    tasks: &Tasks,
) -> anyhow::Result<(Option<SocketAddr>, Option<SocketAddr>)> {
    let config = &state.config;
    // The kubelet's API (logs through the API server), before the Node publishes its port.
    let kubelet_addr = crate::parts::kubelet_api(state, &client, tasks).await?;
    tasks.spawn_in(
        crate::pod_source::run(
            state.clone(),
            node,
            admission,
            events,
            ready,
            tasks.shutdown.clone(),
        ),
        info_span!("pod source", node = %config.node_name),
    );
    tasks.tracker.spawn(crate::propagation::track(
        state.clone(),
        tasks.shutdown.clone(),
    ));
    tasks
        .tracker
        .spawn(crate::follow::run(state.clone(), tasks.shutdown.clone()));
    tasks.tracker.spawn(crate::follow::run_env(
        state.clone(),
        tasks.shutdown.clone(),
    ));
    if config.register_node {
        let port = kubelet_addr.map(|a| a.port());
        crate::parts::register_node(config, port, client, state, tasks);
    }
    let http_addr = match config.listen {
        Some(addr) => Some(
            crate::http::serve(addr, state.clone(), tasks.shutdown.clone(), &tasks.tracker).await?,
        ),
        None => None,
    };
    Ok((kubelet_addr, http_addr))
}

/// The node's one Service watch (PW-15), started by the first environment built and stopped
/// with the agent.
fn service_lister(node: &kube::Client, tasks: &Tasks) -> ServiceLister {
    let services = ServiceLister::new(node.clone(), ServiceListerConfig::default(), &tasks.tracker);
    tasks.tracker.spawn({
        let (services, stop) = (services.clone(), tasks.shutdown.clone());
        async move {
            stop.cancelled().await;
            services.shutdown();
        }
    });
    services
}
