//! A scenario's context: its namespace, the admin client, and the helpers scenarios share
//! (objects, pods, waiting for files, events and status).

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Pod, Secret, ServiceAccount};
use k8s_openapi::api::events::v1::Event as EventV1;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

use crate::Target;

/// The safety bound of every wait of the scenarios (and of [`wait_for_content`] wherever it is
/// used). Not an assertion of speed: a healthy run is far below it. It is twice the in-process
/// tests' `nodelet_testutil::PATIENCE` (60 s) because these scenarios also run
/// against real clusters (`cargo xtask e2e`): there the API server, the scheduler-free pod
/// binding and the agent's process start add latency, and a Cache-strategy agent may need the
/// TTL on top (the upstream E2E common fixtures poll for 240 s + TTL).
pub const PATIENCE: Duration = Duration::from_secs(120);

/// How long cleanup waits for the agent to finish deleting a scenario's pods before it
/// force-deletes them.
const CLEANUP_GRACE: Duration = Duration::from_secs(30);

/// Pause between checks of a condition. Short, so latency measurements stay fine-grained.
const POLL: Duration = Duration::from_millis(2);

/// The image of scenario pods. nodelet never runs containers; a real kubelet never sees these
/// pods (they are bound to the agent's node).
pub(crate) const IMAGE: &str = "registry.k8s.io/pause:3.10";

/// One scenario's world.
pub struct Ctx {
    /// Admin client.
    pub client: kube::Client,
    /// The scenario's own namespace.
    pub namespace: String,
    /// The agent's node.
    pub node_name: String,
    /// The agent's root directory.
    pub root_dir: PathBuf,
    target: Target,
    latencies: Mutex<Vec<Duration>>,
    extra_namespaces: Mutex<Vec<String>>,
    skipped: Mutex<Option<String>>,
}

impl Ctx {
    /// Creates the scenario's namespace (and its `default` service account if needed).
    pub(crate) async fn new(target: &Target, scenario: &str) -> Result<Ctx, String> {
        let namespace = format!("e2e-{scenario}-{:06}", rand::random::<u32>() % 1_000_000);
        let ctx = Ctx {
            client: target.admin.clone(),
            namespace: namespace.clone(),
            node_name: target.node_name.clone(),
            root_dir: target.root_dir.clone(),
            target: target.clone(),
            latencies: Mutex::new(Vec::new()),
            extra_namespaces: Mutex::new(Vec::new()),
            skipped: Mutex::new(None),
        };
        ctx.create_namespace(&namespace).await?;
        Ok(ctx)
    }

    /// Creates another namespace, deleted with the scenario's.
    pub async fn extra_namespace(&self, suffix: &str) -> Result<String, String> {
        let name = format!("{}-{suffix}", self.namespace);
        self.create_namespace(&name).await?;
        if let Ok(mut extra) = self.extra_namespaces.lock() {
            extra.push(name.clone());
        }
        Ok(name)
    }

    async fn create_namespace(&self, name: &str) -> Result<(), String> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns: Namespace = from_json(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": { "name": name, "labels": { "app.kubernetes.io/created-by": "nodelet-e2e" } }
        }))?;
        api.create(&PostParams::default(), &ns)
            .await
            .map_err(|e| format!("creating namespace {name}: {e}"))?;
        self.ensure_default_service_account(name).await?;
        self.ensure_root_ca(name).await
    }

    /// On a real API server the ServiceAccount admission plugin gives every pod a
    /// `kube-api-access-*` projected volume whose sources include ConfigMap `kube-root-ca.crt`,
    /// which the controller manager publishes in every namespace. Without a controller manager
    /// (a bare API server) that ConfigMap never appears and no pod could mount; so, after a
    /// short wait, the suite creates a stand-in (its `ca.crt` says so instead of holding a CA).
    /// A cluster whose `default` namespace has none runs no publisher: no wait there.
    async fn ensure_root_ca(&self, namespace: &str) -> Result<(), String> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let default: Api<ConfigMap> = Api::namespaced(self.client.clone(), "default");
        let published = matches!(default.get_opt("kube-root-ca.crt").await, Ok(Some(_)));
        let deadline = Instant::now() + Duration::from_secs(if published { 10 } else { 0 });
        while Instant::now() < deadline {
            if let Ok(Some(_)) = api.get_opt("kube-root-ca.crt").await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let cm: ConfigMap = from_json(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "kube-root-ca.crt",
                "labels": { "app.kubernetes.io/created-by": "nodelet-e2e" } },
            "data": { "ca.crt": "# stand-in created by nodelet-e2e: no root-CA publisher runs in this cluster\n" }
        }))?;
        match api.create(&PostParams::default(), &cm).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(format!(
                "creating configmap {namespace}/kube-root-ca.crt: {e}"
            )),
        }
    }

    /// Waits briefly for a service-account controller to create `default`; creates it when no
    /// controller does (a bare API server, the embedded one with auto-creation off).
    async fn ensure_default_service_account(&self, namespace: &str) -> Result<(), String> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = api.get_opt("default").await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let sa: ServiceAccount = from_json(json!({
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": { "name": "default" }
        }))?;
        match api.create(&PostParams::default(), &sa).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(format!("creating service account {namespace}/default: {e}")),
        }
    }

    /// Deletes the scenario's pods (the agent finishes their graceful deletion, as a kubelet
    /// does; stragglers are force-deleted), then its namespaces. Pods go first because a bare
    /// API server without a controller manager never empties a deleted namespace.
    pub(crate) async fn cleanup(&self) -> Result<(), String> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let mut names = vec![self.namespace.clone()];
        if let Ok(extra) = self.extra_namespaces.lock() {
            names.extend(extra.iter().cloned());
        }
        for name in &names {
            self.delete_pods_in(name).await?;
        }
        for name in names {
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(format!("deleting namespace {name}: {e}")),
            }
        }
        Ok(())
    }

    async fn delete_pods_in(&self, namespace: &str) -> Result<(), String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let list = |pods: Api<Pod>| async move {
            pods.list(&ListParams::default())
                .await
                .map(|l| l.items)
                .map_err(|e| format!("listing pods in {namespace}: {e}"))
        };
        for pod in list(pods.clone()).await? {
            let name = pod.metadata.name.unwrap_or_default();
            match pods.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                // A pod a scenario deleted already may be finished by the agent between the
                // list and this call: gone is what the cleanup wants.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(format!("deleting pod {namespace}/{name}: {e}")),
            }
        }
        let deadline = Instant::now() + CLEANUP_GRACE;
        loop {
            let left = list(pods.clone()).await?;
            if left.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                for pod in left {
                    let name = pod.metadata.name.unwrap_or_default();
                    let _ = pods
                        .delete(&name, &DeleteParams::default().grace_period(0))
                        .await;
                }
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Restarts the agent under test.
    pub async fn restart_agent(&self) -> Result<(), String> {
        self.target.agent.restart().await
    }

    /// Records one propagation latency.
    pub fn record_latency(&self, latency: Duration) {
        if let Ok(mut l) = self.latencies.lock() {
            l.push(latency);
        }
    }

    pub(crate) fn latencies(&self) -> Vec<Duration> {
        self.latencies.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Marks the scenario skipped: the cluster lacks what it checks (`reason` says what). The
    /// scenario then returns `Ok(())`, and its outcome says skipped, not passed.
    pub fn skip(&self, reason: impl Into<String>) {
        if let Ok(mut skipped) = self.skipped.lock() {
            *skipped = Some(reason.into());
        }
    }

    pub(crate) fn skipped(&self) -> Option<String> {
        self.skipped.lock().ok().and_then(|s| s.clone())
    }

    // ----- objects -----

    /// ConfigMaps of the scenario's namespace.
    pub fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Secrets of the scenario's namespace.
    pub fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Pods of the scenario's namespace.
    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates a ConfigMap from `data` (string values) in `namespace`.
    pub async fn create_config_map_in(
        &self,
        namespace: &str,
        name: &str,
        data: Value,
    ) -> Result<ConfigMap, String> {
        let cm: ConfigMap = from_json(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": name }, "data": data
        }))?;
        Api::<ConfigMap>::namespaced(self.client.clone(), namespace)
            .create(&PostParams::default(), &cm)
            .await
            .map_err(|e| format!("creating configmap {namespace}/{name}: {e}"))
    }

    /// Creates a ConfigMap from a full JSON object (metadata.name included).
    pub async fn create_config_map_json(&self, object: Value) -> Result<ConfigMap, String> {
        let cm: ConfigMap = from_json(object)?;
        self.config_maps()
            .create(&PostParams::default(), &cm)
            .await
            .map_err(|e| format!("creating configmap: {e}"))
    }

    /// Creates a ConfigMap in the scenario's namespace.
    pub async fn create_config_map(&self, name: &str, data: Value) -> Result<ConfigMap, String> {
        self.create_config_map_in(&self.namespace, name, data).await
    }

    /// Creates a Secret from `string_data` in `namespace`.
    pub async fn create_secret_in(
        &self,
        namespace: &str,
        name: &str,
        string_data: Value,
    ) -> Result<Secret, String> {
        let secret: Secret = from_json(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": { "name": name },
            "type": "Opaque", "stringData": string_data
        }))?;
        Api::<Secret>::namespaced(self.client.clone(), namespace)
            .create(&PostParams::default(), &secret)
            .await
            .map_err(|e| format!("creating secret {namespace}/{name}: {e}"))
    }

    /// Creates a Secret in the scenario's namespace.
    pub async fn create_secret(&self, name: &str, string_data: Value) -> Result<Secret, String> {
        self.create_secret_in(&self.namespace, name, string_data)
            .await
    }

    /// Replaces a ConfigMap's `data` (a read-modify-write, retried on conflict).
    pub async fn set_config_map_data(&self, name: &str, data: Value) -> Result<(), String> {
        let api = self.config_maps();
        for _ in 0..5 {
            let mut cm = api
                .get(name)
                .await
                .map_err(|e| format!("reading configmap {name}: {e}"))?;
            cm.data = serde_json::from_value(data.clone()).map_err(|e| e.to_string())?;
            match api.replace(name, &PostParams::default(), &cm).await {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => return Err(format!("updating configmap {name}: {e}")),
            }
        }
        Err(format!("updating configmap {name}: conflicts persisted"))
    }

    // ----- pods -----

    /// Creates a pod bound to the agent's node from `spec` (containers get the scenario image
    /// when they name none) and returns it with its UID.
    pub async fn create_pod(&self, name: &str, spec: Value) -> Result<Pod, String> {
        self.create_annotated_pod(name, json!({}), spec).await
    }

    /// [`create_pod`](Self::create_pod) with `annotations` (a JSON object of strings).
    pub async fn create_annotated_pod(
        &self,
        name: &str,
        annotations: Value,
        mut spec: Value,
    ) -> Result<Pod, String> {
        spec["nodeName"] = json!(self.node_name);
        if let Some(containers) = spec["containers"].as_array_mut() {
            for c in containers {
                if c.get("image").is_none() {
                    c["image"] = json!(IMAGE);
                }
            }
        }
        let pod: Pod = from_json(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name, "labels": { "app": name }, "annotations": annotations },
            "spec": spec
        }))?;
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .map_err(|e| format!("creating pod {name}: {e}"))
    }

    /// Creates a pod like [`create_pod`](Self::create_pod), with `annotations`.
    pub async fn create_pod_annotated(
        &self,
        name: &str,
        annotations: Value,
        mut spec: Value,
    ) -> Result<Pod, String> {
        spec["nodeName"] = json!(self.node_name);
        let pod: Pod = from_json(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name, "labels": { "app": name }, "annotations": annotations },
            "spec": spec
        }))?;
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .map_err(|e| format!("creating pod {name}: {e}"))
    }

    /// The log the process runtime keeps of `container`'s first instance in `pod`
    /// (`<root>/logs/pods/<namespace>_<name>_<uid>/<container>/0.log`, CRI lines).
    pub fn log_path(&self, pod: &Pod, container: &str) -> Result<PathBuf, String> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        Ok(self
            .root_dir
            .join("logs/pods")
            .join(format!("{}_{name}_{}", self.namespace, Self::uid(pod)?))
            .join(container)
            .join("0.log"))
    }

    /// Waits until the log of `container` in `pod` holds `needle`; returns the log.
    pub async fn wait_for_log(
        &self,
        pod: &Pod,
        container: &str,
        needle: &str,
    ) -> Result<String, String> {
        let path = self.log_path(pod, container)?;
        wait_for(
            &format!("{} to show {needle:?}", path.display()),
            || async {
                let log = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
                if log.contains(needle) {
                    Ok(log)
                } else {
                    Err(log.lines().last().unwrap_or_default().to_owned())
                }
            },
        )
        .await
    }

    /// The UID of a pod.
    pub fn uid(pod: &Pod) -> Result<String, String> {
        pod.metadata
            .uid
            .clone()
            .ok_or_else(|| "created pod has no uid".to_string())
    }

    /// `<root>/pods/<uid>/volumes/kubernetes.io~<plugin>/<volume>`, `plugin` being e.g.
    /// `configmap`, `secret`, `projected`, `downward-api`, `empty-dir` (spec PL-1).
    pub fn volume_dir(&self, pod: &Pod, plugin: &str, volume: &str) -> Result<PathBuf, String> {
        Ok(self
            .root_dir
            .join("pods")
            .join(Self::uid(pod)?)
            .join("volumes")
            .join(format!("kubernetes.io~{plugin}"))
            .join(volume))
    }

    /// `<root>/pods/<uid>`.
    pub fn pod_dir(&self, pod: &Pod) -> Result<PathBuf, String> {
        Ok(self.root_dir.join("pods").join(Self::uid(pod)?))
    }

    /// Deletes a pod (default grace period: the agent finishes the deletion).
    pub async fn delete_pod(&self, name: &str) -> Result<(), String> {
        self.pods()
            .delete(name, &DeleteParams::default())
            .await
            .map(|_| ())
            .map_err(|e| format!("deleting pod {name}: {e}"))
    }

    // ----- waiting -----

    /// Waits until `path` does not exist (not even as a dangling symlink).
    pub async fn wait_for_absent(&self, path: &Path) -> Result<(), String> {
        wait_for(&format!("{} to disappear", path.display()), || async {
            match std::fs::symlink_metadata(path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e.to_string()),
                Ok(_) => Err("still present".to_string()),
            }
        })
        .await
    }

    /// Runs `write` (an API update), then measures until `path` reads as `expected` and records
    /// the latency (API write returned → content visible).
    pub async fn measure_update<Fut>(
        &self,
        path: &Path,
        expected: &[u8],
        write: Fut,
    ) -> Result<Duration, String>
    where
        Fut: Future<Output = Result<(), String>>,
    {
        write.await?;
        let written = Instant::now();
        wait_for_content(path, expected).await?;
        let latency = written.elapsed();
        self.record_latency(latency);
        Ok(latency)
    }

    /// Waits for an event about `pod` with `reason` whose message contains `text`, in either
    /// events API (the agent may record through events.k8s.io/v1 or core/v1).
    pub async fn wait_for_event(
        &self,
        pod: &str,
        reason: &str,
        text: &str,
    ) -> Result<String, String> {
        let core: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let v1: Api<EventV1> = Api::namespaced(self.client.clone(), &self.namespace);
        wait_for(
            &format!("a {reason} event on pod {pod} containing {text:?}"),
            || async {
                let mut seen = Vec::new();
                if let Ok(list) = core.list(&ListParams::default()).await {
                    for e in list.items {
                        if e.involved_object.name.as_deref() == Some(pod) {
                            let msg = e.message.unwrap_or_default();
                            if e.reason.as_deref() == Some(reason) && msg.contains(text) {
                                return Ok(msg);
                            }
                            seen.push(format!("{}: {msg}", e.reason.unwrap_or_default()));
                        }
                    }
                }
                if let Ok(list) = v1.list(&ListParams::default()).await {
                    for e in list.items {
                        if e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod) {
                            let msg = e.note.unwrap_or_default();
                            if e.reason.as_deref() == Some(reason) && msg.contains(text) {
                                return Ok(msg);
                            }
                            seen.push(format!("{}: {msg}", e.reason.unwrap_or_default()));
                        }
                    }
                }
                Err(format!("events {seen:?}"))
            },
        )
        .await
    }

    /// Waits until the agent reports a container of `pod` waiting with `reason`.
    pub async fn wait_for_waiting_reason(&self, pod: &str, reason: &str) -> Result<(), String> {
        let api = self.pods();
        wait_for(
            &format!("a container of {pod} waiting with reason {reason}"),
            || async {
                let p = api.get(pod).await.map_err(|e| e.to_string())?;
                let statuses = p
                    .status
                    .and_then(|s| s.container_statuses)
                    .unwrap_or_default();
                let reasons: Vec<String> = statuses
                    .iter()
                    .filter_map(|s| s.state.as_ref()?.waiting.as_ref()?.reason.clone())
                    .collect();
                if reasons.iter().any(|r| r == reason) {
                    Ok(())
                } else {
                    Err(format!("waiting reasons {reasons:?}"))
                }
            },
        )
        .await
    }

    /// Waits until the pod's condition `type_` has `status` (`"True"`/`"False"`).
    pub async fn wait_for_condition(
        &self,
        pod: &str,
        type_: &str,
        status: &str,
    ) -> Result<(), String> {
        let api = self.pods();
        wait_for(&format!("condition {type_}={status} on {pod}"), || async {
            let p = api.get(pod).await.map_err(|e| e.to_string())?;
            let conditions = p.status.and_then(|s| s.conditions).unwrap_or_default();
            if conditions
                .iter()
                .any(|c| c.type_ == type_ && c.status == status)
            {
                Ok(())
            } else {
                Err(format!(
                    "conditions {:?}",
                    conditions
                        .iter()
                        .map(|c| format!("{}={}", c.type_, c.status))
                        .collect::<Vec<_>>()
                ))
            }
        })
        .await
    }

    /// The resolved environment the agent wrote for a container (`env.json`: name → value).
    pub async fn wait_for_env(
        &self,
        pod: &Pod,
        container: &str,
    ) -> Result<serde_json::Map<String, Value>, String> {
        let path = self
            .pod_dir(pod)?
            .join("containers")
            .join(container)
            .join("env.json");
        wait_for(&format!("{}", path.display()), || async {
            let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
            let value: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
            env_map(&value).ok_or_else(|| format!("unexpected env.json shape: {value}"))
        })
        .await
    }
}

/// Accepts `{"NAME": "value"}` or `[{"name": "NAME", "value": "value"}]`.
fn env_map(value: &Value) -> Option<serde_json::Map<String, Value>> {
    match value {
        Value::Object(map) if map.values().all(Value::is_string) => Some(map.clone()),
        Value::Object(map) => map.get("env").and_then(env_map),
        Value::Array(items) => items
            .iter()
            .map(|item| {
                Some((
                    item.get("name")?.as_str()?.to_string(),
                    item.get("value").cloned().unwrap_or(json!("")),
                ))
            })
            .collect(),
        _ => None,
    }
}

/// Polls `check` (every 2 ms) until it returns `Ok`, or fails after [`PATIENCE`] with `what`
/// and the last state `check` described in its `Err`.
pub async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        let last = match check().await {
            Ok(value) => return Ok(value),
            Err(state) => state,
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "timed out after {}s waiting for {what}; last seen: {last}",
                PATIENCE.as_secs()
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until `path` reads as `expected` (polling, bounded by [`PATIENCE`]); the error names
/// the path, the expected content and the last content or read error seen.
pub async fn wait_for_content(path: &Path, expected: &[u8]) -> Result<(), String> {
    wait_for(
        &format!("{} to contain {:?}", path.display(), show(expected)),
        || async {
            match std::fs::read(path) {
                Ok(data) if data == expected => Ok(()),
                Ok(data) => Err(format!("content {:?}", show(&data))),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await
}

/// The permission bits of the file `path` resolves to.
pub(crate) fn mode_of(path: &Path) -> Result<u32, String> {
    std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Reads a file through its visible path.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Fails with `what` unless `cond`.
pub(crate) fn ensure(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if cond { Ok(()) } else { Err(what()) }
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_json::from_value(value).map_err(|e| format!("building an object: {e}"))
}
