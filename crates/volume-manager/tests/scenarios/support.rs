//! The test bed: a `nodelet-apiserver` on loopback, real kube clients, the object managers and
//! a running volume manager writing under a temporary root directory.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use nodelet_apiserver::{ApiServer, ServerHandle};
use nodelet_core::events::{RecordedEvent, RecordingSink};
use nodelet_core::{AdmittedPod, PodDirs, PodUid};
use nodelet_object_manager::{ConfigMapManager, ManagerConfig, SecretManager, Strategy};
use nodelet_sources::pod_certificate::{KubePodCertificateSource, PodCertificateManager};
use nodelet_sources::{
    KubeTokenSource, KubeTrustBundleSource, Sources, TokenManager, TokenSource, TrustBundleConfig,
    TrustBundleManager,
};
use nodelet_volume_manager::{Config, MemoryMedium, VolumeManager};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

// The workspace's shared fixtures, for every scenario file (`use crate::support::*`).
pub(crate) use nodelet_testutil::{
    ConfigMapBuilder, PATIENCE, PodBuilder, SecretBuilder, TEST_CAS, cluster_trust_bundle,
};

/// Options of [`Env::start_with`].
pub(crate) struct Options {
    pub(crate) strategy: Strategy,
    pub(crate) root: Option<tempfile::TempDir>,
    pub(crate) tokens: Option<Arc<dyn TokenSource>>,
    pub(crate) configure: fn(&mut Config),
    /// Which sources the agent builds besides tokens (its feature gates).
    pub(crate) sources: SourceOptions,
    /// The API server's options (default: `Config::default()`, no authentication).
    pub(crate) server: Option<nodelet_apiserver::Config>,
    /// Talk to the server as `system:node:<name>` instead of as an administrator.
    pub(crate) node: Option<&'static str>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            strategy: Strategy::Watch,
            root: None,
            tokens: None,
            configure: |_| {},
            sources: SourceOptions::default(),
            server: None,
            node: None,
        }
    }
}

/// The sources an agent builds, as its feature gates say.
#[derive(Clone, Copy)]
pub(crate) struct SourceOptions {
    /// A ClusterTrustBundle manager (the `ClusterTrustBundle` gates on; default off).
    pub(crate) trust_bundles: bool,
    /// A pod certificate manager for node `node-1`, with no jitter (the
    /// `PodCertificateRequest` gate on; default off).
    pub(crate) pod_certificates: bool,
    /// The token refresh fraction (default 0.8, PL-10).
    pub(crate) token_refresh_fraction: f64,
}

impl Default for SourceOptions {
    fn default() -> Self {
        Self {
            trust_bundles: false,
            pod_certificates: false,
            token_refresh_fraction: 0.8,
        }
    }
}

pub(crate) struct Env {
    pub(crate) server: ApiServer,
    pub(crate) api: ServerHandle,
    pub(crate) root: tempfile::TempDir,
    pub(crate) vm: VolumeManager,
    pub(crate) events: RecordingSink,
    pub(crate) configmaps: ConfigMapManager,
    pub(crate) secrets: SecretManager,
    shutdown: CancellationToken,
    run: Option<JoinHandle<()>>,
    strategy: Strategy,
    configure: fn(&mut Config),
    sources: SourceOptions,
    tokens: Arc<dyn TokenSource>,
    client: kube::Client,
}

/// The parts an agent (re)start builds.
struct Parts {
    vm: VolumeManager,
    events: RecordingSink,
    configmaps: ConfigMapManager,
    secrets: SecretManager,
    shutdown: CancellationToken,
    run: JoinHandle<()>,
}

impl Parts {
    fn build(
        client: &kube::Client,
        root: &Path,
        strategy: Strategy,
        configure: fn(&mut Config),
        options: SourceOptions,
        tokens: Arc<dyn TokenSource>,
    ) -> Parts {
        let client = client.clone();
        let mut mc = ManagerConfig::default();
        mc.strategy = strategy;
        let configmaps = ConfigMapManager::new(client.clone(), mc.clone()).unwrap();
        let secrets = SecretManager::new(client.clone(), mc).unwrap();
        let mut config = Config::new(root);
        config.memory_medium = MemoryMedium::Disk;
        config.fsync = false;
        configure(&mut config);
        let events = RecordingSink::new();
        let tokens = TokenManager::with_refresh_fraction(tokens, options.token_refresh_fraction);
        let mut sources = Sources::new(tokens);
        if options.trust_bundles {
            // PL-17: read as the node.
            let mut bundles = TrustBundleConfig::default();
            bundles.source = Some(Arc::new(KubeTrustBundleSource::new(client.clone())));
            sources = sources.with_trust_bundles(TrustBundleManager::new(bundles));
        }
        if options.pod_certificates {
            // PL-21: requests name node `node-1` (the node user of `Options::node` in those
            // tests).
            let source = Arc::new(KubePodCertificateSource::new(client, "node-1"));
            let events = Arc::new(events.clone());
            let manager = PodCertificateManager::new(source, events, std::time::Duration::ZERO);
            sources = sources.with_pod_certificates(manager);
        }
        let vm = VolumeManager::new(
            config,
            configmaps.clone(),
            secrets.clone(),
            sources,
            Arc::new(events.clone()),
        )
        .unwrap();
        let shutdown = CancellationToken::new();
        let run = {
            let vm = vm.clone();
            let token = shutdown.clone();
            tokio::spawn(async move { vm.run(token).await })
        };
        Parts {
            vm,
            events,
            configmaps,
            secrets,
            shutdown,
            run,
        }
    }
}

impl Env {
    pub(crate) async fn start() -> Env {
        Self::start_with(Options::default()).await
    }

    pub(crate) async fn start_with(options: Options) -> Env {
        let server = ApiServer::start(options.server.unwrap_or_default())
            .await
            .unwrap();
        let client = match options.node {
            Some(node) => node_client(&server, node),
            None => server.client(),
        };
        let root = match options.root {
            Some(r) => r,
            None => tempfile::tempdir().unwrap(),
        };
        let tokens = options
            .tokens
            .unwrap_or_else(|| Arc::new(KubeTokenSource::new(client.clone())));
        let parts = Parts::build(
            &client,
            root.path(),
            options.strategy,
            options.configure,
            options.sources,
            tokens.clone(),
        );
        Env {
            api: server.handle(),
            server,
            root,
            vm: parts.vm,
            events: parts.events,
            configmaps: parts.configmaps,
            secrets: parts.secrets,
            shutdown: parts.shutdown,
            run: Some(parts.run),
            strategy: options.strategy,
            configure: options.configure,
            sources: options.sources,
            tokens,
            client,
        }
    }

    /// An agent restart: the volume manager and the object managers stop and new ones start
    /// on the same root directory and API server.
    pub(crate) async fn restart(&mut self) {
        self.stop_manager().await;
        let parts = Parts::build(
            &self.client,
            self.root.path(),
            self.strategy,
            self.configure,
            self.sources,
            self.tokens.clone(),
        );
        self.vm = parts.vm;
        self.events = parts.events;
        self.configmaps = parts.configmaps;
        self.secrets = parts.secrets;
        self.shutdown = parts.shutdown;
        self.run = Some(parts.run);
    }

    async fn stop_manager(&mut self) {
        self.shutdown.cancel();
        if let Some(run) = self.run.take() {
            run.await.unwrap();
        }
        self.configmaps.shutdown().await;
        self.secrets.shutdown().await;
    }

    /// An administrator's client (whatever identity the volume manager uses).
    pub(crate) fn admin(&self) -> kube::Client {
        self.server.client()
    }

    pub(crate) fn create(&self, obj: Value) -> Value {
        self.api.create(obj).unwrap()
    }

    pub(crate) fn update(&self, obj: Value) -> Value {
        self.api.update(obj).unwrap()
    }

    pub(crate) fn delete(&self, kind: &str, name: &str) {
        self.api.delete("v1", kind, Some("default"), name).unwrap();
    }

    /// Creates the pod in the API server (defaulting applies: defaultMode 0644, uid) and
    /// returns it.
    pub(crate) fn create_pod(&self, name: &str, volumes: Value) -> Arc<Pod> {
        let volumes = volumes.as_array().unwrap();
        let mounts: Vec<Value> = volumes
            .iter()
            .map(|v| json!({"name": v["name"], "mountPath": format!("/mnt/{}", v["name"].as_str().unwrap())}))
            .collect();
        let pod = PodBuilder::new("default", name)
            .label("app", name)
            .container(json!({"name": "c", "image": "busybox", "volumeMounts": mounts}));
        let pod = volumes.iter().cloned().fold(pod, PodBuilder::volume);
        self.create_pod_json(pod.json())
    }

    pub(crate) fn create_pod_json(&self, pod: Value) -> Arc<Pod> {
        let stored = self.create(pod);
        Arc::new(serde_json::from_value(stored).unwrap())
    }

    /// What the pod worker does first (PW-4): register with the managers, then the volumes.
    pub(crate) fn add_pod(&self, pod: &Pod) {
        let pod = admitted(pod);
        self.secrets.register_pod(&pod);
        self.configmaps.register_pod(&pod);
        self.vm.add_pod(&pod);
    }

    pub(crate) async fn add_and_mount(&self, pod: &Pod) {
        self.add_pod(pod);
        within(self.vm.wait_for_attach_and_mount(&admitted(pod)))
            .await
            .unwrap();
    }

    /// SyncTerminatedPod (PW-6): volumes gone, then unregister.
    pub(crate) async fn remove_pod(&self, pod: &Pod) {
        let uid = PodUid::from_pod(pod).unwrap();
        self.vm.remove_pod(&uid);
        within(self.vm.wait_for_unmount(&uid)).await.unwrap();
        self.secrets.unregister_pod(&uid);
        self.configmaps.unregister_pod(&uid);
    }

    pub(crate) fn dir(&self, pod: &Pod, plugin: &str, volume: &str) -> PathBuf {
        volume_dir(self.root.path(), pod, plugin, volume)
    }

    /// Waits (woken by the manager's change counter) until `cond` holds.
    pub(crate) async fn until(&self, what: &str, mut cond: impl FnMut() -> bool) {
        let mut rx = self.vm.subscribe();
        let wait = async {
            loop {
                rx.borrow_and_update();
                if cond() {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        };
        if tokio::time::timeout(PATIENCE, wait).await.is_err() {
            panic!("condition never reached: {what}");
        }
        assert!(cond(), "manager stopped before: {what}");
    }

    pub(crate) async fn event(&self, pred: impl Fn(&RecordedEvent) -> bool) -> RecordedEvent {
        within(self.events.wait_for(pred)).await
    }
}

/// A client authenticated as `system:node:<node>` (the server must have authentication on).
pub(crate) fn node_client(server: &ApiServer, node: &str) -> kube::Client {
    let mut config = server.kube_config();
    let token = server.token_for(&nodelet_apiserver::User::node(node));
    config.auth_info = serde_json::from_value(json!({ "token": token })).unwrap();
    kube::Client::try_from(config).unwrap()
}

pub(crate) fn volume_dir(root: &Path, pod: &Pod, plugin: &str, volume: &str) -> PathBuf {
    PodDirs::new(root).volume(admitted(pod).uid(), plugin, volume)
}

/// Awaits `f` with the safety net.
pub(crate) async fn within<F: Future>(f: F) -> F::Output {
    match tokio::time::timeout(PATIENCE, f).await {
        Ok(v) => v,
        Err(_) => panic!("operation did not finish within the safety net"),
    }
}

/// The visible files of a volume (path → text), `..` entries hidden.
pub(crate) fn files(dir: &Path) -> BTreeMap<String, String> {
    nodelet_atomic_writer::read_visible(dir)
        .unwrap_or_default()
        .into_iter()
        .map(|(k, (data, _))| (k, String::from_utf8_lossy(&data).into_owned()))
        .collect()
}

/// The visible files with their modes.
pub(crate) fn modes(dir: &Path) -> BTreeMap<String, u32> {
    nodelet_atomic_writer::read_visible(dir)
        .unwrap_or_default()
        .into_iter()
        .map(|(k, (_, mode))| (k, mode))
        .collect()
}

pub(crate) fn text(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// ConfigMap `default/<name>` with `data` (a JSON object of strings), as its manifest.
pub(crate) fn config_map(name: &str, data: Value) -> Value {
    let data = data.as_object().unwrap();
    data.iter()
        .fold(ConfigMapBuilder::new("default", name), |cm, (k, v)| {
            cm.data(k, v.as_str().unwrap())
        })
        .json()
}

/// Secret `default/<name>` with `data` (key, text), as its manifest.
pub(crate) fn secret(name: &str, data: &[(&str, &str)]) -> Value {
    data.iter()
        .fold(SecretBuilder::new("default", name), |s, (k, v)| {
            s.data(k, v)
        })
        .json()
}

/// The E2E fixture: `data-1..3 = value-1..3`.
pub(crate) fn fixture_data() -> Value {
    json!({"data-1": "value-1", "data-2": "value-2", "data-3": "value-3"})
}

pub(crate) const CM: &str = "kubernetes.io/configmap";
pub(crate) const SECRET: &str = "kubernetes.io/secret";
pub(crate) const PROJECTED: &str = "kubernetes.io/projected";
pub(crate) const DOWNWARD: &str = "kubernetes.io/downward-api";

/// `pod` as the agent's pod source admits it (the fixtures always carry a UID).
pub(crate) fn admitted(pod: &Pod) -> AdmittedPod {
    AdmittedPod::new(pod.clone()).unwrap()
}
